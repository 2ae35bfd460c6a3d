//! Thread lanes: run a case's operations on a small fixed set of threads, each with a known
//! thread slot, so that `mlog=thread` (which sends an operation's data, and an inode's
//! nodes, to the calling thread's mlog: `lock::thread_slot() % mlogs`) is exercised across
//! mlogs deterministically.
//!
//! Owns [`Lanes`]: [`LANES`] scoped threads; lane `r` is a thread whose slot is `r` modulo
//! [`SLOT_PERIOD`] (slots are handed out process-wide in the order threads first ask, so
//! the lanes are found by spawning threads until each residue has one; the others exit at
//! once). The residue fixes everything the core derives from the slot: the mlog (`% mlogs`
//! for 1, 2 or 4 mlogs), the nid-allocation hint (`% 16`), the op-lock and counter shards.
//! So a case's device requests depend on which lane ran each operation, never on which
//! threads the process happened to start before.
//!
//! Invariants: [`Lanes::run`] blocks until its operation finished, so operations run one at
//! a time, in the driver's order, whichever lanes they run on.
//!
//! Lock order: none (channels only).

use std::sync::mpsc;
use std::thread::Scope;

/// Lanes per case.
pub const LANES: usize = 4;
/// The period lanes' slots are fixed modulo: a multiple of every mlog count the simulator
/// mounts and of the core's nid-hint count (16).
pub const SLOT_PERIOD: usize = 16;
/// Threads tried before giving up on finding a slot residue.
const MAX_SPAWNS: usize = 64 * SLOT_PERIOD;

type Job<'env> = Box<dyn FnOnce() + Send + 'env>;

/// [`LANES`] threads of known slot residues (see the module header).
pub struct Lanes<'env> {
    tx: Vec<mpsc::Sender<Job<'env>>>,
}

impl<'env> Lanes<'env> {
    /// Spawn the lanes in `s` (they exit when the returned value is dropped).
    pub fn spawn<'scope>(s: &'scope Scope<'scope, 'env>) -> Result<Lanes<'env>, String> {
        let mut tx: Vec<Option<mpsc::Sender<Job<'env>>>> = (0..LANES).map(|_| None).collect();
        let mut spawned = 0;
        while tx.iter().any(Option::is_none) {
            spawned += 1;
            if spawned > MAX_SPAWNS {
                return Err(format!(
                    "no thread with every slot residue below {LANES} after {MAX_SPAWNS} threads"
                ));
            }
            let (jtx, jrx) = mpsc::channel::<Job<'env>>();
            let (stx, srx) = mpsc::channel();
            s.spawn(move || {
                let _ = stx.send(flashlog_core::lock::thread_slot());
                while let Ok(job) = jrx.recv() {
                    job();
                }
            });
            let slot = srx
                .recv()
                .map_err(|_| "a lane thread died before telling its slot".to_string())?;
            if let Some(t) = tx.get_mut(slot % SLOT_PERIOD) {
                if t.is_none() {
                    *t = Some(jtx);
                }
            }
        }
        Ok(Lanes {
            tx: tx.into_iter().flatten().collect(),
        })
    }

    /// Run `f` on lane `lane % LANES` and wait for its result.
    pub fn run<R: Send + 'env>(&self, lane: usize, f: impl FnOnce() -> R + Send + 'env) -> R {
        let (rtx, rrx) = mpsc::channel();
        self.tx[lane % LANES]
            .send(Box::new(move || {
                let _ = rtx.send(f());
            }))
            .expect("lane thread gone");
        rrx.recv().expect("lane thread panicked")
    }
}
