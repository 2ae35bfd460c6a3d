//! The lock between file-system operations (shared) and the checkpoint (exclusive).
//!
//! Max's RPS idea in user space: readers touch only their own cache-padded shard, so many
//! operations on different cores never share a cache line; the checkpoint takes every shard.
//! Each shard is a `parking_lot::RwLock<()>`; a reader picks its shard from a per-thread
//! slot id, so the shared side costs one uncontended atomic in the common case.
//!
//! The exclusive side holds a gate while it takes the shards, as Linux's percpu_rw_semaphore
//! makes its readers take the slow path: a new operation that finds the gate held waits for
//! it, whatever its shard, and only the operations already inside hold the checkpoint up.
//! Taken in index order
//! alone, each shard kept admitting operations until the checkpoint reached it: with 16
//! creators on 2 cores the exclusive side took 100-170 ms to get every shard, and fxmark
//! MWCL made 20,000 more inodes meanwhile, for the checkpoint to write with everything
//! stopped (issue 12).
//!
//! Lock order: this lock is taken before the core's locks of operations (the rename lock,
//! file cells, node locks, log heads, ...); only the locks that serialise whole passes are
//! taken before it, with no lock held: the cap relief, the `gc=device` discard
//! checkpoint, the cleaning lock and the checkpoint pre-pass (docs/DESIGN.md,
//! "Concurrency", level 0). The exclusive side takes the gate, then the shards in index order. Not reentrant:
//! a thread that holds the shared side must not take it again, for a checkpoint that
//! starts in between holds the gate and waits for the first hold, and the second take
//! waits at the gate (`gc=scale`'s background pass did, until 2026-11-27:
//! `tests/op_lock_nesting.rs`).

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Shards of the op lock: enough that threads rarely share one; 64 covers any machine this
/// user-space file system is likely to meet without wasting much memory (64 x 128 B).
pub const OP_LOCK_SHARDS: usize = 64;

pub struct OpLock {
    shards: Box<[CachePadded<RwLock<()>>]>,
    /// Held by a checkpoint while it takes the shards: an operation that finds it held
    /// waits for it before its shard. Its state is read on every operation and written
    /// only by checkpoints (and the operations that wait), so it has a line of its own.
    gate: CachePadded<Mutex<()>>,
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
            gate: CachePadded::new(Mutex::new(())),
        }
    }

    /// Shared side: one file-system operation.
    #[inline]
    pub fn op(&self) -> OpGuard<'_> {
        if self.gate.is_locked() {
            self.wait_at_gate();
        }
        OpGuard {
            _g: self.shards[thread_slot() % OP_LOCK_SHARDS].read(),
        }
    }

    /// A checkpoint is taking the shards: wait until it has them all (then at the shard,
    /// until it ends), rather than slip in on a shard it has not reached yet.
    #[cold]
    #[inline(never)]
    fn wait_at_gate(&self) {
        drop(self.gate.lock());
    }

    /// Exclusive side: the checkpoint. Waits for every running operation to finish.
    pub fn checkpoint(&self) -> CpGuard<'_> {
        let _gate = self.gate.lock();
        // Once every shard is held and the gate released, operations wait at theirs.
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

    /// The interleaving forced: an operation holds shard `a`; the checkpoint starts and
    /// waits for it; then an operation starts on a shard after `a`, which the checkpoint
    /// has not reached. It must wait for the checkpoint (without the gate it ran at once:
    /// shards are taken in index order).
    #[test]
    fn a_waiting_checkpoint_admits_no_new_operation_on_any_shard() {
        let l = Arc::new(OpLock::new());
        // The holder needs a shard with one after it. Thread slots are handed out
        // process-wide, to the other tests of this binary too, so the holder's may be any;
        // one on the last shard gives way to another thread.
        let (holder, a, release_tx) = loop {
            let (held_tx, held_rx) = std::sync::mpsc::channel();
            let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
            let l = l.clone();
            let h = std::thread::spawn(move || {
                let shard = thread_slot() % OP_LOCK_SHARDS;
                if shard == OP_LOCK_SHARDS - 1 {
                    held_tx.send(None).unwrap();
                    return;
                }
                let _g = l.op();
                held_tx.send(Some(shard)).unwrap();
                let _ = release_rx.recv();
            });
            match held_rx.recv().unwrap() {
                Some(a) => break (h, a, release_tx),
                None => h.join().unwrap(),
            }
        };
        let in_cp = Arc::new(AtomicBool::new(false));
        let cp = {
            let (l, in_cp) = (l.clone(), in_cp.clone());
            std::thread::spawn(move || {
                let _g = l.checkpoint();
                in_cp.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                in_cp.store(false, Ordering::SeqCst);
            })
        };
        // Wait until the checkpoint is under way (it holds the gate).
        while l.gate.try_lock().is_some() {
            std::thread::yield_now();
        }
        // An operation on a later shard than `a`: a new thread until one has one. Each says
        // which before it asks for the lock, so a thread on an earlier shard that a loaded
        // machine runs late is not taken for one waiting at the gate.
        let ran = Arc::new(AtomicBool::new(false));
        let mut late = None;
        for _ in 0..100 * OP_LOCK_SHARDS {
            let (said_tx, said_rx) = std::sync::mpsc::channel();
            let (l, ran) = (l.clone(), ran.clone());
            let t = std::thread::spawn(move || {
                let later = thread_slot() % OP_LOCK_SHARDS > a;
                said_tx.send(later).unwrap();
                if later {
                    let _g = l.op();
                    ran.store(true, Ordering::SeqCst);
                }
            });
            if said_rx.recv().unwrap() {
                late = Some(t);
                break;
            }
            t.join().unwrap();
        }
        let late = late.expect("a thread on a later shard");
        // Time for it to get in, had the gate let it.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !ran.load(Ordering::SeqCst),
            "an operation started while a checkpoint waited for another"
        );
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        cp.join().unwrap();
        late.join().unwrap();
        assert!(ran.load(Ordering::SeqCst));
    }
}
