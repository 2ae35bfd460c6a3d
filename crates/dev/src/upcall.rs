//! [`UpcallTap`]: the host end of D2FS migration upcalls (paper §5.2).
//!
//! Owns: the host's migration queue. Wrapped around a device, it takes every
//! [`DeviceEvent::Migrated`] off the completions of ordinary requests (whoever issued them:
//! writers, readers, the checkpoint) and queues it for the upcall handler, waking the handler
//! if it sleeps. No thread polls: the handler blocks in [`UpcallTap::wait`] until a
//! completion delivered something, as the paper's driver wakes its upcall thread from the
//! completion path.
//!
//! Invariants: upcalls are queued in the order their completions returned (the device sends
//! them in id order, so ids increase, except that a restart re-delivers unacknowledged ones:
//! the handler skips ids it already applied); every upcall is queued, none left on its
//! completion.
//!
//! Lock order: `queue` is a leaf (never held while calling the inner device).

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{
    BlockDevice, Capabilities, Completion, DevResult, DeviceEvent, MigrationPair, WriteHint,
};

/// One migration upcall as the host received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upcall {
    pub id: u64,
    pub first_record: u64,
    pub pairs: Vec<MigrationPair>,
}

/// The artifact's DMA pool for upcalls: 2048 batches (8 MiB of pairs). `gc=device` sizes
/// its handler's batches below it. The tap itself queues every upcall: one left on a
/// completion's events (as a cap here once did) would come back only when the device
/// re-sends it, and meanwhile `any_queued_old` could not see its old address, so the host
/// could reuse that address's section before the pair was applied. The queue is bounded by
/// the device's unacknowledged records (at most its GC region's blocks), not by this.
pub const MAX_QUEUED_UPCALLS: usize = 2048;

/// A device wrapper that collects migration upcalls from completions.
pub struct UpcallTap<D: BlockDevice> {
    inner: D,
    queue: Mutex<VecDeque<Upcall>>,
    cv: Condvar,
}

impl<D: BlockDevice> UpcallTap<D> {
    pub fn new(inner: D) -> Self {
        UpcallTap {
            inner,
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Upcalls waiting for the handler.
    pub fn pending(&self) -> usize {
        self.queue.lock().len()
    }

    /// Whether a queued (not yet taken) upcall has a pair whose old address satisfies `f`,
    /// without taking any. `gc=device` keeps a section back while one does: the pair must
    /// be applied (and found stale) before the section's addresses can be written again.
    pub fn any_queued_old(&self, mut f: impl FnMut(u64) -> bool) -> bool {
        self.queue
            .lock()
            .iter()
            .any(|u| u.pairs.iter().any(|p| f(p.old)))
    }

    /// Every queued upcall, oldest first, without waiting.
    pub fn take(&self) -> Vec<Upcall> {
        self.queue.lock().drain(..).collect()
    }

    /// Queue again upcalls taken with `take` and not handled (those past a hole in the
    /// ids: `gc=device` applies upcalls in id order only). They were in the queue before,
    /// so the cap does not apply; `any_queued_old` sees them again.
    pub fn put_back(&self, ups: Vec<Upcall>) {
        if ups.is_empty() {
            return;
        }
        let mut q = self.queue.lock();
        for u in ups.into_iter().rev() {
            q.push_front(u);
        }
        drop(q);
        self.cv.notify_all();
    }

    /// Wait until at least one upcall is queued or `timeout` passed; returns the queue.
    pub fn wait(&self, timeout: Duration) -> Vec<Upcall> {
        let mut q = self.queue.lock();
        if q.is_empty() {
            self.cv.wait_for(&mut q, timeout);
        }
        q.drain(..).collect()
    }

    /// Wait until at least one upcall is queued or `timeout` passed, without taking any;
    /// returns how many are queued. A handler that must apply what it takes atomically with
    /// respect to other users of its state waits here, then takes the lock, then `take`s.
    pub fn wait_ready(&self, timeout: Duration) -> usize {
        let mut q = self.queue.lock();
        if q.is_empty() {
            self.cv.wait_for(&mut q, timeout);
        }
        q.len()
    }

    /// Wait until at least `n` upcalls are queued or `timeout` passed, without taking any;
    /// returns how many are queued. Lets a handler gather a batch (one checkpoint for many
    /// upcalls) without polling: every queued upcall wakes it to recount.
    pub fn wait_at_least(&self, n: usize, timeout: Duration) -> usize {
        let deadline = std::time::Instant::now() + timeout;
        let mut q = self.queue.lock();
        while q.len() < n.max(1) {
            if self.cv.wait_until(&mut q, deadline).timed_out() {
                break;
            }
        }
        q.len()
    }

    /// Move the upcalls of a completion to the queue (every event is one; a new kind of
    /// event must decide here whether it stays on the completion).
    fn tap(&self, mut c: Completion) -> Completion {
        if c.events.is_empty() {
            return c;
        }
        let mut q = self.queue.lock();
        for e in c.events.drain(..) {
            let DeviceEvent::Migrated {
                upcall,
                first_record,
                pairs,
            } = e;
            q.push_back(Upcall {
                id: upcall,
                first_record,
                pairs,
            });
        }
        drop(q);
        self.cv.notify_all();
        c
    }
}

impl<D: BlockDevice> BlockDevice for UpcallTap<D> {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        self.inner.read(addr, buf).map(|c| self.tap(c))
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.inner.write(addr, buf).map(|c| self.tap(c))
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
        self.inner
            .write_hinted_ordered(addr, buf, hint, accepted)
            .map(|c| self.tap(c))
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.inner.discard(addr, count).map(|c| self.tap(c))
    }
    fn flush(&self) -> DevResult<Completion> {
        self.inner.flush().map(|c| self.tap(c))
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        self.inner.read_many(reqs).map(|c| self.tap(c))
    }
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        self.inner.discard_many(ranges).map(|c| self.tap(c))
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
    use crate::RamDevice;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    /// A RAM device whose every write completion carries one upcall.
    struct Migrating {
        ram: RamDevice,
        next: AtomicU64,
    }

    impl BlockDevice for Migrating {
        fn capabilities(&self) -> &Capabilities {
            self.ram.capabilities()
        }
        fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
            self.ram.read(addr, buf)
        }
        fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
            self.ram.write(addr, buf)?;
            let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
            Ok(Completion {
                events: vec![DeviceEvent::Migrated {
                    upcall: id,
                    first_record: id,
                    pairs: vec![MigrationPair {
                        old: id,
                        new: id + 100,
                    }],
                }],
            })
        }
        fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
            self.ram.discard(addr, count)
        }
        fn flush(&self) -> DevResult<Completion> {
            self.ram.flush()
        }
    }

    /// More upcalls than the artifact's DMA pool holds, none taken yet: every one is queued
    /// (none left on a completion, where nothing would apply it until a re-send) and the
    /// newest pair's old address is visible to `any_queued_old`, which holds its section.
    #[test]
    fn every_upcall_is_queued_past_the_dma_pool_size() {
        let tap = UpcallTap::new(Migrating {
            ram: RamDevice::new(16),
            next: AtomicU64::new(0),
        });
        let b = vec![0u8; crate::BLOCK_SIZE];
        let n = MAX_QUEUED_UPCALLS as u64 + 100;
        for _ in 0..n {
            assert!(tap.write(0, &b).unwrap().events.is_empty());
        }
        assert_eq!(tap.pending() as u64, n);
        assert!(tap.any_queued_old(|old| old == n));
        let ids: Vec<u64> = tap.take().iter().map(|u| u.id).collect();
        assert_eq!(ids, (1..=n).collect::<Vec<_>>());
    }

    /// A handler waiting for a batch of three sleeps through the first two upcalls and wakes
    /// on the third; a partial batch comes back when the timeout passes.
    #[test]
    fn wait_at_least_gathers_a_batch() {
        let tap = Arc::new(UpcallTap::new(Migrating {
            ram: RamDevice::new(16),
            next: AtomicU64::new(0),
        }));
        let woke = Arc::new(AtomicBool::new(false));
        let h = {
            let (tap, woke) = (tap.clone(), woke.clone());
            std::thread::spawn(move || {
                let n = tap.wait_at_least(3, Duration::from_secs(30));
                woke.store(true, Ordering::Release);
                n
            })
        };
        let b = vec![0u8; crate::BLOCK_SIZE];
        for _ in 0..2 {
            assert!(tap.write(0, &b).unwrap().events.is_empty());
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !woke.load(Ordering::Acquire),
            "woke before the batch was full"
        );
        tap.write(0, &b).unwrap();
        assert_eq!(h.join().unwrap(), 3);
        let ids: Vec<u64> = tap.take().iter().map(|u| u.id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        // A partial batch after the timeout.
        tap.write(0, &b).unwrap();
        assert_eq!(tap.wait_at_least(8, Duration::from_millis(20)), 1);
    }
}
