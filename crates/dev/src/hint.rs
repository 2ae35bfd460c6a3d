//! [`HintLog`]: a wrapper that records the [`WriteHint`] of every write it passes on, so that
//! a test can check what a layer above sends (the core's log heads, each wrapper device's
//! forwarding).
//!
//! Owns: the list of writes seen (address, blocks, hint), in arrival order.
//!
//! Invariants: every request goes to the inner device unchanged (a plain `write` goes on as a
//! plain `write` and is listed with [`WriteHint::None`]); the log grows without bound, so it
//! is for tests and short runs only.
//!
//! Lock order: `log` is a leaf (never held while calling the inner device).

use parking_lot::Mutex;

use crate::{BlockDevice, Capabilities, Completion, DevResult, WriteHint, BLOCK_SIZE};

/// One write as a [`HintLog`] saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HintedWrite {
    pub addr: u64,
    pub blocks: u64,
    pub hint: WriteHint,
}

/// A device wrapper that lists every write with its hint.
pub struct HintLog<D: BlockDevice> {
    inner: D,
    log: Mutex<Vec<HintedWrite>>,
}

impl<D: BlockDevice> HintLog<D> {
    pub fn new(inner: D) -> Self {
        HintLog {
            inner,
            log: Mutex::new(Vec::new()),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Every write seen so far, oldest first.
    pub fn writes(&self) -> Vec<HintedWrite> {
        self.log.lock().clone()
    }

    /// Forget the writes seen so far.
    pub fn clear(&self) {
        self.log.lock().clear();
    }

    fn note(&self, addr: u64, buf: &[u8], hint: WriteHint) {
        let blocks = (buf.len() / BLOCK_SIZE) as u64;
        self.log.lock().push(HintedWrite { addr, blocks, hint });
    }
}

impl<D: BlockDevice> BlockDevice for HintLog<D> {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        let c = self.inner.write(addr, buf)?;
        self.note(addr, buf, WriteHint::None);
        Ok(c)
    }
    fn write_hinted(&self, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Completion> {
        self.write_hinted_ordered(addr, buf, hint, &mut || {})
    }
    fn write_hinted_ordered(
        &self,
        addr: u64,
        buf: &[u8],
        hint: WriteHint,
        accepted: &mut dyn FnMut(),
    ) -> DevResult<Completion> {
        let c = self.inner.write_hinted_ordered(addr, buf, hint, accepted)?;
        self.note(addr, buf, hint);
        Ok(c)
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.inner.discard(addr, count)
    }
    fn flush(&self) -> DevResult<Completion> {
        self.inner.flush()
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        self.inner.read_many(reqs)
    }
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        self.inner.discard_many(ranges)
    }
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        self.inner.ack_migrations(upto)
    }
    fn resend_migrations(&self) -> DevResult<()> {
        self.inner.resend_migrations()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RamDevice, UpcallTap};
    use std::sync::Arc;

    /// Write one block with each hint through `dev` and return what the log under it saw.
    fn through(dev: &dyn BlockDevice, log: &HintLog<RamDevice>) -> Vec<WriteHint> {
        log.clear();
        let b = vec![7u8; BLOCK_SIZE];
        for (i, h) in WriteHint::ALL.into_iter().enumerate() {
            dev.write_hinted(i as u64, &b, h).unwrap();
        }
        dev.write(9, &b).unwrap();
        log.writes().iter().map(|w| w.hint).collect()
    }

    /// Every wrapper in this crate passes the hint through unchanged: `Arc<T>`, `Arc<dyn>`,
    /// `UpcallTap`, and `HintLog` itself (stacked).
    #[test]
    fn wrappers_forward_the_hint() {
        let mut want: Vec<WriteHint> = WriteHint::ALL.to_vec();
        want.push(WriteHint::None);
        let log = Arc::new(HintLog::new(RamDevice::new(16)));
        assert_eq!(through(&log.clone(), &log), want, "Arc<HintLog>");
        let dyn_dev: Arc<dyn BlockDevice> = log.clone();
        assert_eq!(through(&dyn_dev, &log), want, "Arc<dyn BlockDevice>");
        let tap = UpcallTap::new(log.clone());
        assert_eq!(through(&tap, &log), want, "UpcallTap");
        let stacked = HintLog::new(UpcallTap::new(dyn_dev.clone()));
        assert_eq!(through(&stacked, &log), want, "HintLog over UpcallTap");
        let hints: Vec<WriteHint> = stacked.writes().iter().map(|w| w.hint).collect();
        assert_eq!(hints, want, "the outer log");
        // Stream ids are dense and round-trip.
        for h in WriteHint::ALL {
            assert_eq!(WriteHint::from_stream_id(h.stream_id()), Some(h));
        }
        assert_eq!(WriteHint::from_stream_id(WriteHint::ALL.len() as u8), None);
    }

    /// A device that takes ordered writes early: it calls `accepted` before it returns and
    /// counts the ordered writes it got (a plain `write_hinted` is not counted).
    struct Early {
        inner: RamDevice,
        ordered: std::sync::atomic::AtomicUsize,
    }

    impl BlockDevice for Early {
        fn capabilities(&self) -> &Capabilities {
            self.inner.capabilities()
        }
        fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
            self.inner.read(addr, buf)
        }
        fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
            self.inner.write(addr, buf)
        }
        fn write_hinted_ordered(
            &self,
            addr: u64,
            buf: &[u8],
            _: WriteHint,
            accepted: &mut dyn FnMut(),
        ) -> DevResult<Completion> {
            self.ordered
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            accepted();
            self.inner.write(addr, buf)
        }
        fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
            self.inner.discard(addr, count)
        }
        fn flush(&self) -> DevResult<Completion> {
            self.inner.flush()
        }
    }

    /// Every wrapper in this crate passes an ordered write on as one (the I/O pool's early
    /// start of a zone's next buffer depends on it: `gc=device` writes through `UpcallTap`),
    /// and `accepted` is called once.
    #[test]
    fn wrappers_forward_ordered_writes() {
        let early = Arc::new(Early {
            inner: RamDevice::new(16),
            ordered: Default::default(),
        });
        let dyn_dev: Arc<dyn BlockDevice> = early.clone();
        let tap = UpcallTap::new(dyn_dev.clone());
        let log = HintLog::new(UpcallTap::new(dyn_dev.clone()));
        let gated = crate::Gated::new(dyn_dev.clone(), true);
        let wrappers: [(&str, &dyn BlockDevice); 5] = [
            ("Arc<T>", &early),
            ("Arc<dyn>", &dyn_dev),
            ("UpcallTap", &tap),
            ("HintLog over UpcallTap", &log),
            ("Gated", &gated),
        ];
        let b = vec![3u8; BLOCK_SIZE];
        for (i, (name, w)) in wrappers.into_iter().enumerate() {
            let before = early.ordered.load(std::sync::atomic::Ordering::SeqCst);
            let mut calls = 0;
            w.write_hinted_ordered(i as u64, &b, WriteHint::Data, &mut || calls += 1)
                .unwrap();
            let after = early.ordered.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(
                after,
                before + 1,
                "{name} did not forward the ordered write"
            );
            assert_eq!(calls, 1, "{name}: accepted called {calls} times");
        }
    }
}
