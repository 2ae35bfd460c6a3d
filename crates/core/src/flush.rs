//! Background write-back (the flusher): one thread per writable mount (or `flushers=N`
//! lanes, below) writes dirty pages back, so that request threads stop doing it themselves (issue 13 item 4: write-back in the
//! FUSE request thread was 30 % of the daemon's CPU in sequential write, on the request's
//! latency). The model is the kernel's `balance_dirty_pages` with its flusher threads:
//!
//! | dirty pages (cap = `FsInner::dirty_cap_pages`) | a writer, after its operation (`Fs::balance`) |
//! |---|---|
//! | <= cap/2 (background threshold, `dirty_background_pages`; cap/16 on `gc=none`) | nothing |
//! | background .. cap | wakes the flusher, goes on |
//! | > cap (hard cap) | wakes the flusher and waits for its rounds until <= cap |
//! | > cap and two waits of `PROGRESS_WAIT` saw no page written | writes back itself (the old inline path, last resort) |
//!
//! Once woken, the flusher writes back down to half the background threshold (`floor`:
//! cap/4, or cap/32 on `gc=none`), a file at a time, at most
//! `FLUSH_CHUNK` pages of one file per visit, then sleeps until woken again.
//!
//! Lanes (`flushers=N`, default 1): N threads, lane k writing back the files whose inode
//! number is k modulo N. With `mlog=ino` and N equal to the mlogs, a lane's files write
//! through its own mlog's log heads, so lanes share neither cells nor heads. One thread was
//! the bound of appending writers on 16 cores (fxmark DWAL 1.6x from 1 to 16 threads on a
//! RAM device, writers waiting at the dirty cap for its rounds). On 16 cores (2026-11-26,
//! docs/BENCHMARKS.md) 16 appending threads wrote 730 k blocks/s with one lane, 1.26 M with
//! 4 and 1.82 M with 16; then each file's writer and its lane took turns on the file's cell
//! (35 % of thread time at 16 lanes), which a visit now holds only to pick and mark its
//! pages and to map their copies, not while it copies them
//! (`FsInner::writeback_pages_released`, docs/DESIGN.md "Pages in flight"). A wake-up wakes every lane; a writer at the hard
//! cap waits for a round of any lane that writes pages back, and counts the flusher idle
//! only when every lane has ended a round with none (`wait_round`).
//!
//! Owns: the flusher's wake-up and progress state and its counters (`WritebackStats`). The
//! dirty-page count itself is `FsInner::dirty_pages`; what a page's write-back does (space
//! debt, node updates) is `FsInner::writeback_pages_released` (a regular file's visit, the
//! cell released while the pages are copied) and `writeback_pages_max` (a directory's).
//!
//! Invariants: the flusher never answers an operation: its errors are logged and the
//! waiting writers fall back to the inline path, which reports them as before (ENOSPC never
//! from contention: `Fs::balance`). A writer never waits without a timeout, so a stopped,
//! stalled or poisoned flusher cannot hang it. With `io_threads == 0` (the crash simulator's
//! deterministic mode) there is no flusher at all and `balance` writes back inline.
//!
//! Lock order: `state` is a leaf lock (never held while taking another). The flusher thread
//! takes the op lock (shared) and then one cell, per file visited, as an operation does
//! (twice per visit, with the op lock held across both and the log heads taken between
//! them with no cell held); it holds neither while it sleeps, cleans (`ensure_space` takes
//! its own locks) or waits for room in the log-write queue (the visit's appends defer that
//! wait to its end, `IoPool::defer_throttle`). A lane's visit may overlap another visit of
//! the same file (the checkpoint pre-pass's): each marks only pages no visit has in
//! flight and maps only its own.

use crate::error::{Error, Result};
use crate::inner::FsInner;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Pages a writer's inline write-back takes from one file before it moves to the next (and
/// checks free space again).
pub const WRITEBACK_CHUNK: u64 = 512;
/// Pages the flusher writes back from one file per visit: one log buffer
/// (`WRITE_BATCH_BLOCKS`). The file's cell was held meanwhile and the file's own writer
/// waited for it (now only while the pages are picked and mapped): with 512 pages a visit, the writers of one `flashlog bench fio` run waited 6.6 s
/// on their cells (236 waits) behind the flusher, most of it while the flusher waited for
/// the device. The flusher now waits for room in the log-write queue after the visit, with
/// the cell released (`IoPool::defer_throttle`; issue 15: `gc=none`'s writers waited
/// 2-3 s per 10 s bench run on their cells while the flusher sat in that wait); the visit's
/// length still bounds how far the queue can overshoot its bound (two buffers).
pub const FLUSH_CHUNK: u64 = crate::config::WRITE_BATCH_BLOCKS as u64;
/// How long a writer over the hard cap waits for one flusher round before it counts the
/// round as missing.
pub const PROGRESS_WAIT: Duration = Duration::from_millis(100);
/// Waits in a row without a page written after which a writer writes back itself.
pub const MAX_IDLE_WAITS: u32 = 2;
/// Cleaning attempts in a row (the flusher's write-back ran out of space and cleaning gave
/// none back) after which the flusher ends its pass and leaves it to the writers' inline path.
const MAX_NO_SPACE_ROUNDS: u32 = 2;

#[derive(Default)]
struct State {
    stop: bool,
    /// Wake-ups so far: every lane sleeps until this moves past what it last saw.
    wakes: u64,
    /// Rounds finished by each lane (a round visits every file of the lane once).
    lane_rounds: Vec<u64>,
    /// Pages the finished rounds of every lane wrote back.
    round_pages: u64,
}

/// Where the flusher's rounds stood when a writer began to wait (`Flusher::mark`).
pub struct RoundMark {
    lane_rounds: Vec<u64>,
    round_pages: u64,
}

/// Counters of the write-back paths (`Fs::writeback_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WritebackStats {
    /// Pages the flusher wrote back.
    pub background_pages: u64,
    /// Passes the flusher ran (one per wake-up that found work).
    pub background_passes: u64,
    /// Writers that waited at the hard cap, and how long in all.
    pub throttled: u64,
    pub throttled_ns: u64,
    /// Pages writers wrote back themselves (the last resort).
    pub inline_pages: u64,
    /// Times a writer took the last resort although a flusher runs.
    pub inline_fallbacks: u64,
}

pub struct Flusher {
    /// Threads (lanes); lane k writes back the files with `ino % lanes == k`.
    lanes: usize,
    state: Mutex<State>,
    /// The flusher sleeps here until `pending`.
    wake: Condvar,
    /// Writers over the hard cap wait here for the end of a round.
    progress: Condvar,
    /// A wake-up is due: set by writers without the lock (one swap per write over the
    /// background threshold), cleared by the flusher when it starts a pass.
    pending: AtomicBool,
    /// Tests only: the flusher starts no round (a stalled flusher, for the last resort).
    paused: AtomicBool,
    background_pages: AtomicU64,
    background_passes: AtomicU64,
    throttled: AtomicU64,
    throttled_ns: AtomicU64,
    pub(crate) inline_pages: AtomicU64,
    inline_fallbacks: AtomicU64,
}

impl Flusher {
    /// A flusher of `lanes` threads (at least one).
    pub fn new(lanes: usize) -> Arc<Flusher> {
        let lanes = lanes.max(1);
        Arc::new(Flusher {
            lanes,
            state: Mutex::new(State {
                lane_rounds: vec![0; lanes],
                ..State::default()
            }),
            wake: Condvar::new(),
            progress: Condvar::new(),
            pending: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            background_pages: AtomicU64::new(0),
            background_passes: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            inline_pages: AtomicU64::new(0),
            inline_fallbacks: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> WritebackStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WritebackStats {
            background_pages: l(&self.background_pages),
            background_passes: l(&self.background_passes),
            throttled: l(&self.throttled),
            throttled_ns: l(&self.throttled_ns),
            inline_pages: l(&self.inline_pages),
            inline_fallbacks: l(&self.inline_fallbacks),
        }
    }

    /// Wake the flusher (cheap when a wake-up is already due).
    pub fn kick(&self) {
        // Tested first: every write over half the cap kicks, and a swap on every one moved
        // this line between the writers' cores.
        if !self.pending.load(Ordering::Acquire) && !self.pending.swap(true, Ordering::AcqRel) {
            // Under the lock: the flusher checks `pending` under it before it sleeps, so
            // the wake-up cannot fall between its check and its wait.
            let mut s = self.state.lock();
            s.wakes += 1;
            self.wake.notify_all();
        }
    }

    /// Tests only: stop starting rounds (or start again).
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        if !paused {
            self.kick();
        }
    }

    /// The rounds finished so far (pass to `wait_round`).
    pub fn mark(&self) -> RoundMark {
        let s = self.state.lock();
        RoundMark {
            lane_rounds: s.lane_rounds.clone(),
            round_pages: s.round_pages,
        }
    }

    /// Wait up to `PROGRESS_WAIT` for progress after `seen`: true as soon as a round of
    /// any lane ends having written pages back; false once every lane has ended a round
    /// without, or at the deadline. A lane whose files are clean ends its rounds at once
    /// with nothing written: only when all lanes did is the flusher idle. (A round of any
    /// lane used to end the wait, and one that wrote nothing counted as idle, so writers
    /// of a mount with lanes to spare wrote back themselves; `tests/flusher.rs`
    /// `empty_lanes_do_not_send_writers_to_write_back_themselves`.)
    pub fn wait_round(&self, seen: &RoundMark) -> bool {
        let deadline = Instant::now() + PROGRESS_WAIT;
        let mut s = self.state.lock();
        loop {
            if s.round_pages != seen.round_pages {
                return true;
            }
            let every_lane_ended = s
                .lane_rounds
                .iter()
                .zip(&seen.lane_rounds)
                .all(|(now, then)| now != then);
            if s.stop || every_lane_ended || self.progress.wait_until(&mut s, deadline).timed_out()
            {
                return s.round_pages != seen.round_pages;
            }
        }
    }

    /// Count one writer's wait at the hard cap.
    pub fn note_throttled(&self, since: Instant, fell_back: bool) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
        self.throttled_ns
            .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if fell_back {
            self.inline_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn end_round(&self, lane: usize, pages: u64) {
        let mut s = self.state.lock();
        s.lane_rounds[lane] += 1;
        s.round_pages += pages;
        self.progress.notify_all();
    }

    /// Start the lanes' threads; they hold the volume only weakly and only while they work.
    pub fn spawn(self: &Arc<Self>, weak: Weak<FsInner>) -> Vec<JoinHandle<()>> {
        (0..self.lanes)
            .map(|lane| {
                let (me, weak) = (self.clone(), weak.clone());
                std::thread::Builder::new()
                    .name(format!("flashlog-flush-{lane}"))
                    .spawn(move || me.run(lane, weak))
                    .expect("spawn flusher thread")
            })
            .collect()
    }

    /// Stop the thread (after its current file) and release every waiting writer.
    pub fn stop(&self) {
        let mut s = self.state.lock();
        s.stop = true;
        self.wake.notify_all();
        self.progress.notify_all();
    }

    fn stopped(&self) -> bool {
        self.state.lock().stop
    }

    fn run(&self, lane: usize, weak: Weak<FsInner>) {
        let _role = crate::waits::as_role(crate::waits::Role::Flusher);
        let mut seen = 0;
        loop {
            {
                let mut s = self.state.lock();
                while s.wakes == seen && !self.pending.load(Ordering::Acquire) && !s.stop {
                    self.wake.wait(&mut s);
                }
                if s.stop {
                    return;
                }
                seen = s.wakes;
            }
            self.pending.store(false, Ordering::Release);
            let Some(inner) = weak.upgrade() else { return };
            if inner.poisoned.load(Ordering::Acquire) {
                self.stop();
                return;
            }
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.pass(&inner, lane)));
            match r {
                Err(_) => {
                    inner.poison_with("the flusher thread panicked".into());
                    self.stop();
                    return;
                }
                Ok(Err(e)) => tracing::warn!("background write-back: {e}"),
                Ok(Ok(())) => {}
            }
        }
    }

    /// Write back until the dirty pages are at the floor: rounds over every cached file.
    fn pass(&self, inner: &FsInner, lane: usize) -> Result<()> {
        let floor = inner.dirty_background_pages() / 2;
        if inner.dirty_pages.load(Ordering::Relaxed) <= floor || self.paused.load(Ordering::Acquire)
        {
            return Ok(());
        }
        self.background_passes.fetch_add(1, Ordering::Relaxed);
        let mut no_space_rounds = 0;
        let mut wait = false;
        while inner.dirty_pages.load(Ordering::Relaxed) > floor && !self.stopped() {
            if self.paused.load(Ordering::Acquire) {
                return Ok(());
            }
            let r = self.round(inner, lane, floor, wait);
            let (pages, no_space) = match r {
                Ok(x) => x,
                Err(e) => {
                    self.end_round(lane, 0);
                    return Err(e);
                }
            };
            self.background_pages.fetch_add(pages, Ordering::Relaxed);
            self.end_round(lane, pages);
            if no_space {
                // Write-back needs free segments: clean (as the inline path does), but give
                // up after rounds that got nothing back; writers then take the last resort.
                no_space_rounds += 1;
                if no_space_rounds > MAX_NO_SPACE_ROUNDS {
                    return Err(Error::NoSpace);
                }
                inner.ensure_space(true)?;
            } else if pages == 0 && wait {
                // Nothing written although the count is over the floor, even waiting for
                // busy files: the pages belong to files being freed, or the count moved
                // meanwhile. Sleep until woken.
                return Ok(());
            } else {
                wait = pages == 0;
                no_space_rounds = 0;
            }
        }
        Ok(())
    }

    /// One visit of every cached file of `lane`, at most `FLUSH_CHUNK` pages each. Returns the
    /// pages written and whether write-back ran out of space. A busy file (its own writer
    /// holds it) is skipped unless `wait`: the pass waits for busy files only after a round
    /// that wrote nothing.
    fn round(&self, inner: &FsInner, lane: usize, floor: u64, wait: bool) -> Result<(u64, bool)> {
        let mut pages = 0;
        for c in inner.cells.lane(lane, self.lanes) {
            if inner.dirty_pages.load(Ordering::Relaxed) <= floor || self.stopped() {
                break;
            }
            // Declared first, dropped last: the wait for room in the log-write queue comes
            // after the cell and the op lock are released (`IoPool::defer_throttle`).
            let _bp = inner.seg.defer_throttle();
            let _g = inner.oplock.op();
            if inner.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned("the mount was poisoned".into()));
            }
            let st = match c.try_lock() {
                Some(st) => st,
                None if wait => c.lock(),
                None => continue,
            };
            if st.freed || st.dirty_pages == 0 {
                continue;
            }
            match inner.writeback_pages_released(&c, st, FLUSH_CHUNK) {
                Ok(n) => pages += n,
                Err(Error::NoSpace) => return Ok((pages, true)),
                Err(e) => return inner.guard(Err(e)),
            }
        }
        Ok((pages, false))
    }
}
