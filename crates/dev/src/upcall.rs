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
//! the handler skips ids it already applied); other events stay on their completion.
//!
//! Lock order: `queue` is a leaf (never held while calling the inner device).

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{BlockDevice, Capabilities, Completion, DevResult, DeviceEvent, MigrationPair};

/// One migration upcall as the host received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upcall {
    pub id: u64,
    pub first_record: u64,
    pub pairs: Vec<MigrationPair>,
}

/// Limit on queued upcalls before completions stop being drained into the queue: 2048
/// batches (the artifact's DMA pool, 8 MiB of pairs). Past it the upcalls stay on their
/// completions' events, and the device re-sends them on request, so none is lost.
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

    /// Every queued upcall, oldest first, without waiting.
    pub fn take(&self) -> Vec<Upcall> {
        self.queue.lock().drain(..).collect()
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

    /// Move the upcalls of a completion to the queue.
    fn tap(&self, mut c: Completion) -> Completion {
        if c.events.is_empty() {
            return c;
        }
        let mut q = self.queue.lock();
        let mut woke = false;
        c.events.retain(|e| match e {
            DeviceEvent::Migrated {
                upcall,
                first_record,
                pairs,
            } if q.len() < MAX_QUEUED_UPCALLS => {
                q.push_back(Upcall {
                    id: *upcall,
                    first_record: *first_record,
                    pairs: pairs.clone(),
                });
                woke = true;
                false
            }
            _ => true,
        });
        drop(q);
        if woke {
            self.cv.notify_all();
        }
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
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.inner.discard(addr, count).map(|c| self.tap(c))
    }
    fn flush(&self) -> DevResult<Completion> {
        self.inner.flush().map(|c| self.tap(c))
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        self.inner.read_many(reqs).map(|c| self.tap(c))
    }
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        self.inner.ack_migrations(upto)
    }
    fn resend_migrations(&self) -> DevResult<()> {
        self.inner.resend_migrations()
    }
}
