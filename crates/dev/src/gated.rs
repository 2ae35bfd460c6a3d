//! `Gated`: a device whose writes wait while its gate is closed, for tests that need a
//! stalled device at a point of their choosing (the log-write queue filling up, a writer
//! that must not wait behind a thread stuck on the device). Reads, discards and flushes pass
//! straight through. Owns nothing but the gate; lock order: the gate is a leaf lock, never
//! held across the inner device's call.

use crate::{BlockDevice, Capabilities, Completion, DevResult, WriteHint};
use parking_lot::{Condvar, Mutex};

pub struct Gated<D> {
    inner: D,
    open: Mutex<bool>,
    cv: Condvar,
}

impl<D: BlockDevice> Gated<D> {
    /// `inner` behind a gate that is `open` or closed.
    pub fn new(inner: D, open: bool) -> Self {
        Gated {
            inner,
            open: Mutex::new(open),
            cv: Condvar::new(),
        }
    }

    /// Open or close the gate; opening releases every waiting write.
    pub fn set_open(&self, open: bool) {
        *self.open.lock() = open;
        self.cv.notify_all();
    }
}

impl<D: BlockDevice> BlockDevice for Gated<D> {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.write_hinted(addr, buf, WriteHint::None)
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
        let mut open = self.open.lock();
        while !*open {
            self.cv.wait(&mut open);
        }
        drop(open);
        self.inner.write_hinted_ordered(addr, buf, hint, accepted)
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.inner.discard(addr, count)
    }
    fn flush(&self) -> DevResult<Completion> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RamDevice;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_write_waits_until_the_gate_opens_and_forwards_its_hint() {
        let log = Arc::new(Gated::new(crate::HintLog::new(RamDevice::new(16)), false));
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = {
            let log = log.clone();
            std::thread::spawn(move || {
                log.write_hinted(3, &[7u8; 4096], WriteHint::Node).unwrap();
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "waits"
        );
        let mut b = [0u8; 4096];
        log.read(3, &mut b).unwrap();
        assert_eq!(b[0], 0, "not written while the gate is closed");
        log.set_open(true);
        rx.recv_timeout(Duration::from_secs(10)).expect("released");
        writer.join().unwrap();
        log.read(3, &mut b).unwrap();
        assert_eq!(b[0], 7);
        assert_eq!(
            log.inner.writes().last().map(|w| w.hint),
            Some(WriteHint::Node)
        );
    }
}
