//! The lock between file-system operations (shared) and the checkpoint (exclusive).
//!
//! Max's RPS idea in user space: readers touch only their own cache-padded shard, so many
//! operations on different cores never share a cache line; the checkpoint takes every shard.
//! Each shard is a `parking_lot::RwLock<()>`; a reader picks its shard from a per-thread
//! slot id, so the shared side costs one uncontended atomic in the common case.
//!
//! Lock order: this lock is taken before every other lock of the core (file cells, log heads,
//! ...). The exclusive side takes shards in index order.

use crossbeam_utils::CachePadded;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Shards of the op lock: enough that threads rarely share one; 64 covers any machine this
/// user-space file system is likely to meet without wasting much memory (64 x 128 B).
pub const OP_LOCK_SHARDS: usize = 64;

pub struct OpLock {
    shards: Box<[CachePadded<RwLock<()>>]>,
}

pub struct OpGuard<'a> {
    _g: RwLockReadGuard<'a, ()>,
}

pub struct CpGuard<'a> {
    _g: Vec<RwLockWriteGuard<'a, ()>>,
}

/// This thread's slot: a number handed out in the order threads first ask, the "core" of
/// Max's per-core structures (op-lock shard, nid cursor, `mlog=thread`).
pub fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}

impl Default for OpLock {
    fn default() -> Self {
        Self::new()
    }
}

impl OpLock {
    pub fn new() -> Self {
        OpLock {
            shards: (0..OP_LOCK_SHARDS)
                .map(|_| CachePadded::new(RwLock::new(())))
                .collect(),
        }
    }

    /// Shared side: one file-system operation.
    pub fn op(&self) -> OpGuard<'_> {
        OpGuard {
            _g: self.shards[thread_slot() % OP_LOCK_SHARDS].read(),
        }
    }

    /// Exclusive side: the checkpoint. Waits for every running operation to finish.
    pub fn checkpoint(&self) -> CpGuard<'_> {
        CpGuard {
            _g: self.shards.iter().map(|s| s.write()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn checkpoint_excludes_ops() {
        let l = Arc::new(OpLock::new());
        let in_cp = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (l, in_cp) = (l.clone(), in_cp.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let _g = l.op();
                        assert!(!in_cp.load(Ordering::SeqCst));
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            let _g = l.checkpoint();
            in_cp.store(true, Ordering::SeqCst);
            std::thread::yield_now();
            in_cp.store(false, Ordering::SeqCst);
        }
        for t in threads {
            t.join().unwrap();
        }
    }
}
