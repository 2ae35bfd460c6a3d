//! Asynchronous log writes: a small pool of I/O threads writes full log-head buffers while
//! writers go on filling the next ones, so that copying and device time overlap.
//!
//! Owns: the queue of submitted buffers and the list of buffers not yet written (queued or
//! being written), from which reads of those blocks are served. Each buffer carries the
//! block type of the log head that filled it ([`WriteHint`]: node heads `Node`, data heads
//! `Data`), sent with its write (D2FS: the coupled FTL's GC keeps node and data apart).
//!
//! Invariants: a buffer stays readable through `read_inflight` until the device accepted
//! it, and for good if the device never took it (its write failed, it was skipped after a
//! failure, or it was refused on a poisoned pool: reads on the poisoned mount still find
//! the blocks, not what the device held before); `wait_idle` returns only when every
//! submitted buffer is on the device (so a flush after it covers them) or reports the
//! first write error, and `wait_upto` the same for the buffers submitted before its mark
//! (ids grow in submission order); after an error no further queued buffer is written
//! (the mount is poisoned; nothing is written over an unknown state). With zero threads every submission is a synchronous write (deterministic order
//! for the crash simulator). On a zoned device (`Capabilities::zone_blocks`, the zoned and
//! the D2FS coupled FTL) the buffers of one zone reach the device in submission order (a
//! zone's write pointer and the coupled FTL's "last slot seals the line" rule need it): the
//! next one starts once the device has accepted the previous one in order
//! (`BlockDevice::write_hinted_ordered`; the emulated SSD accepts before the write's time
//! has passed, other devices when it completes); buffers of different zones go in parallel,
//! and so do those of its conventional region (the metadata), which has no order rule.
//!
//! Wake-ups are targeted (issue 13 item 4): a submit wakes one I/O thread (`work`), a
//! finished write wakes the threads waiting for room or for the pool to drain (`done`).
//! One condition variable for both used to wake every I/O thread, throttled writer and
//! fsync on every submit and every write; they then queued on `state` and parking_lot's
//! spinning turned that into `sched_yield` (42 % of the FUSE daemon's samples in
//! sequential write).
//!
//! Lock order: `state` and `spare` are leaf locks (never held together); the I/O threads
//! take nothing else.

use crate::config::WRITE_BATCH_BLOCKS;
use crate::error::{Error, Result};
use flashlog_dev::{BlockDevice, DevError, WriteHint, BLOCK_SIZE, DIRECT_ALIGN};
use flashlog_format::BlkAddr;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A log buffer: aligned to 4 KiB in memory, so that a device writing with `O_DIRECT`
/// (`flashlog_dev::FileDevice`) sends it as it is instead of copying it to an aligned
/// buffer first.
pub type LogBuf = aligned_vec::AVec<u8, aligned_vec::ConstAlign<DIRECT_ALIGN>>;

/// An empty log buffer with room for one log write.
pub fn log_buf() -> LogBuf {
    LogBuf::with_capacity(DIRECT_ALIGN, WRITE_BATCH_BLOCKS * BLOCK_SIZE)
}

/// Buffers queued or being written before submitters wait (32 x 256 KiB = 8 MiB).
pub const MAX_INFLIGHT: usize = 32;

thread_local! {
    /// The calling thread is inside a `defer_throttle` scope.
    static DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A scope of deferred back-pressure (`IoPool::defer_throttle`): throttles on drop.
pub struct DeferredThrottle<'a> {
    pool: &'a IoPool,
    /// The outermost scope of the thread: it ends the deferral and throttles.
    outer: bool,
}

impl Drop for DeferredThrottle<'_> {
    fn drop(&mut self) {
        if self.outer {
            DEFERRED.with(|d| d.set(false));
            self.pool.throttle();
        }
    }
}

struct Buf {
    id: u64,
    addr: BlkAddr,
    data: Arc<LogBuf>,
    hint: WriteHint,
}

#[derive(Default)]
struct State {
    queue: VecDeque<u64>,
    /// Every buffer not yet written (queued or in progress).
    bufs: Vec<Buf>,
    next_id: u64,
    error: Option<String>,
    stop: bool,
    /// Zoned devices: zones with a buffer being written.
    busy_zones: Vec<u64>,
}

pub struct IoPool {
    dev: Arc<dyn BlockDevice>,
    threads: usize,
    /// Blocks per zone on a zoned device (writes in a zone go in order), else 0.
    zone_blocks: u64,
    /// Blocks at the start of the device written in any order on a zoned device too (its
    /// conventional region, where the metadata lives: `Capabilities::conventional_blocks`).
    conventional_blocks: u64,
    state: Mutex<State>,
    /// I/O threads wait here for a buffer to write (or `stop`).
    work: Condvar,
    /// Submitters wait here for room (`throttle`) or for the queue to drain (`wait_idle`).
    done: Condvar,
    /// `state.bufs.len()`, readable without the lock (fast path of reads).
    inflight: AtomicUsize,
    /// Written buffers kept for reuse: a fresh 256 KiB buffer per write costs page faults
    /// and allocator work comparable to the copy itself. A leaf lock.
    spare: Mutex<Vec<LogBuf>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl IoPool {
    pub fn new(dev: Arc<dyn BlockDevice>, threads: usize) -> Arc<IoPool> {
        let caps = dev.capabilities();
        // A zoned device whose capabilities call every block conventional (the default of
        // `Capabilities::plain`) declares no conventional region.
        let (zone_blocks, conventional_blocks) = match caps.zone_blocks {
            0 => (0, 0),
            z if caps.conventional_blocks >= caps.block_count => (z, 0),
            z => (z, caps.conventional_blocks),
        };
        let pool = Arc::new(IoPool {
            dev,
            threads,
            zone_blocks,
            conventional_blocks,
            state: Mutex::default(),
            work: Condvar::new(),
            done: Condvar::new(),
            inflight: AtomicUsize::new(0),
            spare: Mutex::new(Vec::new()),
            handles: Mutex::new(Vec::new()),
        });
        for i in 0..threads {
            let p = pool.clone();
            let h = std::thread::Builder::new()
                .name(format!("flashlog-io-{i}"))
                .spawn(move || p.worker())
                .expect("spawn I/O thread");
            pool.handles.lock().push(h);
        }
        pool
    }

    /// An empty buffer with room for one log write, reused if one is spare.
    pub fn buffer(&self) -> LogBuf {
        crate::waits::lock(crate::waits::Point::IoPool, &self.spare)
            .pop()
            .unwrap_or_else(log_buf)
    }

    /// Keep a written buffer for `buffer` (up to what the queue can hold).
    fn recycle(&self, mut v: LogBuf) {
        // A metadata block's one-block buffer is not kept: a log head would grow it.
        if v.capacity() < WRITE_BATCH_BLOCKS * BLOCK_SIZE {
            return;
        }
        let mut spare = self.spare.lock();
        if spare.len() < MAX_INFLIGHT {
            v.clear();
            spare.push(v);
        }
    }

    /// Write `data` at `addr` with `hint` (the block type of the head that filled it), now
    /// (no threads) or soon (queued). Never waits for room in the queue (callers hold a log
    /// head): `throttle` does, once the head is released.
    pub fn submit(&self, addr: BlkAddr, data: LogBuf, hint: WriteHint) -> Result<()> {
        if self.threads == 0 {
            if let Err(e) = self.dev.write_hinted(addr, &data, hint) {
                let mut st = self.state.lock();
                st.error
                    .get_or_insert_with(|| format!("log write at block {addr} failed: {e}"));
                self.list(&mut st, addr, data, hint);
                return Err(e.into());
            }
            self.recycle(data);
            return Ok(());
        }
        let mut st = crate::waits::lock(crate::waits::Point::IoPool, &self.state);
        if let Some(e) = &st.error {
            let e = Error::Poisoned(e.clone());
            self.list(&mut st, addr, data, hint);
            return Err(e);
        }
        let id = self.list(&mut st, addr, data, hint);
        st.queue.push_back(id);
        drop(st);
        self.work.notify_one();
        Ok(())
    }

    /// List a buffer (readable through `read_inflight` from now on) under the next id,
    /// which the caller queues. A buffer the device never took after a write failed
    /// (refused, or its own synchronous write failed) is listed and never queued, so that
    /// reads still find its blocks on the poisoned mount instead of what the device held
    /// before (zeros on a fresh volume); waits return at the error, so none waits for it.
    fn list(&self, st: &mut State, addr: BlkAddr, data: LogBuf, hint: WriteHint) -> u64 {
        let id = st.next_id;
        st.next_id += 1;
        st.bufs.push(Buf {
            id,
            addr,
            data: Arc::new(data),
            hint,
        });
        self.inflight.store(st.bufs.len(), Ordering::Release);
        id
    }

    /// Back-pressure: wait while `MAX_INFLIGHT` or more buffers are queued or being
    /// written (or until a write failed; the error surfaces at the next submit or wait).
    /// Called with no log-head lock held, so that a writer waiting for the device never
    /// holds up others of its mlog (issue 12: the head lock was held through this wait).
    /// The queue can exceed the bound by one buffer per thread between its submit and
    /// this call, and by what a thread submits inside a `defer_throttle` scope.
    pub fn throttle(&self) {
        if self.threads == 0
            || DEFERRED.with(|d| d.get())
            || self.inflight.load(Ordering::Acquire) < MAX_INFLIGHT
        {
            return;
        }
        let t0 = std::time::Instant::now();
        let mut st = self.state.lock();
        while st.bufs.len() >= MAX_INFLIGHT && st.error.is_none() {
            self.done.wait(&mut st);
        }
        drop(st);
        crate::waits::record(crate::waits::Point::IoQueue, t0);
    }

    /// Put off the calling thread's back-pressure until the guard drops: `throttle` returns
    /// at once meanwhile, and the guard's drop throttles once. For a thread that holds a
    /// file cell while it appends (the flusher's visit): it waits for the device after
    /// releasing the cell, so the file's own writer does not wait for the device behind it
    /// (issue 15: writers of `gc=none` waited 2-3 s per 10 s run on their cells while the
    /// flusher sat in this wait). Take the guard before the cell (and the op lock), so that
    /// it drops after them. Nested scopes throttle once, at the outermost drop. The queue
    /// then exceeds its bound by at most what the scope submitted: keep scopes to a bounded
    /// number of blocks (the flusher's are `FLUSH_CHUNK` pages: at most two buffers, three
    /// where a segment ends in between).
    pub fn defer_throttle(&self) -> DeferredThrottle<'_> {
        DeferredThrottle {
            pool: self,
            outer: !DEFERRED.with(|d| d.replace(true)),
        }
    }

    /// Buffers queued or being written (tests: a full queue is `MAX_INFLIGHT`).
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Wait until every submitted buffer is on the device.
    pub fn wait_idle(&self) -> Result<()> {
        let mut st = self.state.lock();
        while !st.bufs.is_empty() && st.error.is_none() {
            self.done.wait(&mut st);
        }
        match &st.error {
            Some(e) => Err(Error::Poisoned(e.clone())),
            None => Ok(()),
        }
    }

    /// Write one metadata block (`WriteHint::Meta`) asynchronously, as a log buffer of its
    /// own, if this pool writes in parallel (threads; on a zoned device, a block of its
    /// conventional region, which has no order rule); returns false, having written
    /// nothing, otherwise (the caller writes it itself). A checkpoint's SIT, SSA and NAT
    /// blocks went one synchronous write at a time: 300-600 of them per checkpoint of a
    /// nearly full 8 GiB volume, 16 ms of every `f2fs` checkpoint (docs/BENCHMARKS.md).
    pub fn submit_meta(&self, addr: BlkAddr, block: &[u8]) -> Result<bool> {
        if self.threads == 0 || self.zone_of(addr).is_some() {
            return Ok(false);
        }
        let mut b = LogBuf::with_capacity(DIRECT_ALIGN, block.len());
        b.extend_from_slice(block);
        self.submit(addr, b, WriteHint::Meta)?;
        Ok(true)
    }

    /// A mark for `wait_upto`: every buffer submitted before this call is below it.
    pub fn mark(&self) -> u64 {
        self.state.lock().next_id
    }

    /// Wait until every buffer submitted before `mark` (`IoPool::mark`) is on the device,
    /// not for those submitted since (a checkpoint's tail: writers go on submitting).
    pub fn wait_upto(&self, mark: u64) -> Result<()> {
        let mut st = self.state.lock();
        while st.error.is_none() && st.bufs.iter().any(|b| b.id < mark) {
            self.done.wait(&mut st);
        }
        match &st.error {
            Some(e) => Err(Error::Poisoned(e.clone())),
            None => Ok(()),
        }
    }

    /// Copy block `addr` out of a buffer not yet written, if there is one.
    pub fn read_inflight(&self, addr: BlkAddr, out: &mut [u8]) -> bool {
        if self.inflight.load(Ordering::Acquire) == 0 {
            return false;
        }
        let st = self.state.lock();
        // Newest first: a later buffer supersedes an earlier one at the same address.
        for b in st.bufs.iter().rev() {
            let n = (b.data.len() / BLOCK_SIZE) as u64;
            if addr >= b.addr && addr < b.addr + n {
                let off = (addr - b.addr) as usize * BLOCK_SIZE;
                out.copy_from_slice(&b.data[off..off + BLOCK_SIZE]);
                return true;
            }
        }
        false
    }

    /// Take the next buffer to write: the oldest queued one, except that on a zoned device
    /// a buffer waits while its zone has one being written; then the zone is marked busy.
    /// Buffers of a zone are queued in address order (one log head fills a section), so the
    /// first queued buffer of an idle zone is the next one its write pointer expects.
    fn pick(&self, st: &mut State) -> Option<u64> {
        if self.zone_blocks == 0 {
            return st.queue.pop_front();
        }
        let i = st.queue.iter().position(|id| {
            let b = st.bufs.iter().find(|b| b.id == *id);
            b.is_some_and(|b| {
                self.zone_of(b.addr)
                    .is_none_or(|z| !st.busy_zones.contains(&z))
            })
        })?;
        let id = st.queue.remove(i)?;
        if let Some(z) = st
            .bufs
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| self.zone_of(b.addr))
        {
            st.busy_zones.push(z);
        }
        Some(id)
    }

    /// The zone whose order rule a buffer at `addr` follows: none on a device without
    /// zones or in a zoned device's conventional region.
    fn zone_of(&self, addr: BlkAddr) -> Option<u64> {
        if addr < self.conventional_blocks {
            return None;
        }
        addr.checked_div(self.zone_blocks)
    }

    fn worker(&self) {
        loop {
            let (id, addr, data, hint, skip) = {
                let mut st = self.state.lock();
                loop {
                    if let Some(id) = self.pick(&mut st) {
                        let b = st
                            .bufs
                            .iter()
                            .find(|b| b.id == id)
                            .expect("queued buffer is listed");
                        break (id, b.addr, b.data.clone(), b.hint, st.error.is_some());
                    }
                    if st.stop {
                        return;
                    }
                    self.work.wait(&mut st);
                }
            };
            let zone = self.zone_of(addr);
            let mut released = false;
            // A device that panics (one of a caller's, through the public `BlockDevice`
            // trait) fails this write like an error: an unwinding worker would leave its
            // buffer listed and every wait for the queue (fsync, sync, unmount) waiting
            // for good.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if skip {
                    Ok(())
                } else if let Some(z) = zone {
                    // The zone's next buffer may go once the device has taken this one in
                    // order, not only once it completed: one zone's buffers one at a time
                    // held `gc=device`'s appends at the emulated SSD's queue-depth-1 rate
                    // (1.5 of 2.2 GiB/s, docs/BENCHMARKS.md).
                    let mut accepted = || {
                        self.state.lock().busy_zones.retain(|&b| b != z);
                        released = true;
                        self.work.notify_one();
                    };
                    self.dev
                        .write_hinted_ordered(addr, &data, hint, &mut accepted)
                        .map(|_| ())
                } else {
                    self.dev.write_hinted(addr, &data, hint).map(|_| ())
                }
            }))
            .unwrap_or_else(|_| Err(DevError::Refused("the device panicked in a write".into())));
            let mut st = self.state.lock();
            let written = !skip && r.is_ok();
            if let Err(e) = r {
                st.error
                    .get_or_insert_with(|| format!("log write at block {addr} failed: {e}"));
            }
            // A buffer the device did not take (its write failed, or it was skipped after
            // an earlier failure) stays listed, so that reads keep finding its blocks on
            // the poisoned mount; waits return at the error.
            if written {
                st.bufs.retain(|b| b.id != id);
            }
            if let Some(z) = zone.filter(|_| !released) {
                st.busy_zones.retain(|&b| b != z);
            }
            self.inflight.store(st.bufs.len(), Ordering::Release);
            // On a zoned device this write may let a queued buffer of its zone go.
            let more = self.zone_blocks != 0 && !st.queue.is_empty();
            drop(st);
            self.done.notify_all();
            if more {
                self.work.notify_one();
            }
            // The list held the only other reference, and it is gone.
            if let Ok(v) = Arc::try_unwrap(data) {
                self.recycle(v);
            }
        }
    }

    /// Write what is queued, then stop the threads.
    pub fn stop(&self) {
        {
            let mut st = self.state.lock();
            st.stop = true;
            self.work.notify_all();
            self.done.notify_all();
        }
        for h in self.handles.lock().drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log buffer of `len` bytes of `byte`.
    fn filled(byte: u8, len: usize) -> LogBuf {
        LogBuf::from_slice(DIRECT_ALIGN, &vec![byte; len])
    }
    use flashlog_dev::RamDevice;

    #[test]
    fn queued_writes_are_readable_then_durable() {
        let dev = Arc::new(RamDevice::new(1024));
        let pool = IoPool::new(dev.clone(), 2);
        for i in 0..32u64 {
            pool.submit(i * 4, filled(i as u8 + 1, 4 * BLOCK_SIZE), WriteHint::Data)
                .unwrap();
            let mut b = vec![0u8; BLOCK_SIZE];
            // Either still in flight or already written: the value is the same.
            if !pool.read_inflight(i * 4 + 3, &mut b) {
                dev.read(i * 4 + 3, &mut b).unwrap();
            }
            assert_eq!(b[0], i as u8 + 1);
        }
        pool.wait_idle().unwrap();
        let mut b = vec![0u8; BLOCK_SIZE];
        dev.read(31 * 4, &mut b).unwrap();
        assert_eq!(b[0], 32);
        pool.stop();
    }

    /// Submitting never waits for the device (a log head is held then); `throttle`, called
    /// with the head released, waits until the queue is below its bound. The device is
    /// stalled: before, the 33rd submit blocked right there.
    #[test]
    fn submit_never_waits_and_throttle_applies_back_pressure() {
        let dev = Arc::new(flashlog_dev::Gated::new(RamDevice::new(4096), false));
        let pool = IoPool::new(dev.clone(), 1);
        for i in 0..MAX_INFLIGHT as u64 + 8 {
            pool.submit(i, filled(i as u8, BLOCK_SIZE), WriteHint::Data)
                .unwrap();
        }
        assert_eq!(pool.inflight.load(Ordering::Acquire), MAX_INFLIGHT + 8);
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p2, r2) = (pool.clone(), released.clone());
        let t = std::thread::spawn(move || {
            p2.throttle();
            assert!(
                r2.load(Ordering::SeqCst),
                "throttle returned with the device stalled"
            );
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        released.store(true, Ordering::SeqCst);
        dev.set_open(true);
        t.join().unwrap();
        assert!(pool.inflight.load(Ordering::Acquire) < MAX_INFLIGHT);
        pool.wait_idle().unwrap();
        let mut b = vec![0u8; BLOCK_SIZE];
        dev.read(MAX_INFLIGHT as u64 + 7, &mut b).unwrap();
        assert_eq!(b[0], MAX_INFLIGHT as u8 + 7);
        pool.stop();
    }

    /// A device whose writes at block 100 and up wait until `open` is set.
    struct HighStalled {
        inner: RamDevice,
        open: std::sync::atomic::AtomicBool,
    }

    impl BlockDevice for HighStalled {
        fn capabilities(&self) -> &flashlog_dev::Capabilities {
            self.inner.capabilities()
        }
        fn read(&self, a: u64, b: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.inner.read(a, b)
        }
        fn write(&self, a: u64, b: &[u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            while a >= 100 && !self.open.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.inner.write(a, b)
        }
        fn discard(&self, a: u64, n: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.inner.discard(a, n)
        }
        fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.inner.flush()
        }
    }

    /// A checkpoint's tail waits for the log writes submitted before its snapshot, not for
    /// the writers' later ones: with a later buffer stalled in the device, `wait_upto` the
    /// earlier mark returns (and the earlier buffer is on the device), `wait_idle` would not.
    #[test]
    fn wait_upto_waits_for_the_buffers_before_the_mark_only() {
        let dev = Arc::new(HighStalled {
            inner: RamDevice::new(4096),
            open: std::sync::atomic::AtomicBool::new(false),
        });
        let pool = IoPool::new(dev.clone(), 2);
        pool.submit(7, filled(7, BLOCK_SIZE), WriteHint::Data)
            .unwrap();
        let mark = pool.mark();
        pool.submit(200, filled(9, BLOCK_SIZE), WriteHint::Data)
            .unwrap();
        pool.wait_upto(mark).unwrap();
        let mut b = vec![0u8; BLOCK_SIZE];
        dev.inner.read(7, &mut b).unwrap();
        assert_eq!(
            b[0], 7,
            "wait_upto returned before the earlier buffer landed"
        );
        assert_eq!(
            pool.inflight(),
            1,
            "the later buffer should still be stalled"
        );
        let later = pool.mark();
        let (p2, d2) = (pool.clone(), dev.clone());
        let t = std::thread::spawn(move || {
            p2.wait_upto(later).unwrap();
            assert!(
                d2.open.load(Ordering::SeqCst),
                "returned with its buffer stalled"
            );
        });
        std::thread::sleep(std::time::Duration::from_millis(30));
        dev.open.store(true, Ordering::SeqCst);
        t.join().unwrap();
        pool.stop();
    }

    /// A zoned device whose earlier writes take longer (20 ms down to 2 ms) and that applies
    /// a write when it completes: with free reordering, four I/O threads would take four
    /// buffers of a zone at once and the later, shorter ones would land first.
    struct SlowZoned {
        caps: flashlog_dev::Capabilities,
        landed: Mutex<Vec<u64>>,
        active: AtomicUsize,
        max_active: AtomicUsize,
    }

    impl SlowZoned {
        fn new(caps: flashlog_dev::Capabilities) -> Arc<Self> {
            Arc::new(SlowZoned {
                caps,
                landed: Mutex::new(Vec::new()),
                active: AtomicUsize::new(0),
                max_active: AtomicUsize::new(0),
            })
        }
    }

    impl BlockDevice for SlowZoned {
        fn capabilities(&self) -> &flashlog_dev::Capabilities {
            &self.caps
        }
        fn read(&self, _: u64, _: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            Ok(flashlog_dev::Completion::empty())
        }
        fn write(&self, addr: u64, _: &[u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_active.fetch_max(now, Ordering::SeqCst);
            let step = addr % 64 / 8; // 0..8 within a zone of 64 blocks
            std::thread::sleep(std::time::Duration::from_millis(20 - 2 * step));
            self.landed.lock().push(addr);
            self.active.fetch_sub(1, Ordering::SeqCst);
            Ok(flashlog_dev::Completion::empty())
        }
        fn discard(&self, _: u64, _: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            Ok(flashlog_dev::Completion::empty())
        }
        fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            Ok(flashlog_dev::Completion::empty())
        }
    }

    #[test]
    fn zoned_device_gets_each_zones_buffers_in_order() {
        // The zones' order holds in every round; their overlap needs a second I/O thread
        // to take a buffer while the first sleeps in the device, which a loaded machine may
        // not run in time: up to 5 rounds, each on a fresh pool (never, were the zones
        // serialised).
        let mut max_active = 0;
        for _ in 0..5 {
            let mut caps = flashlog_dev::Capabilities::plain("slow-zoned", 1024);
            caps.zone_blocks = 64;
            let dev = SlowZoned::new(caps);
            let pool = IoPool::new(dev.clone(), 4);
            // Two zones, eight 8-block buffers each, interleaved as two log heads would.
            for i in 0..8u64 {
                for zone in [0u64, 5] {
                    pool.submit(
                        zone * 64 + i * 8,
                        filled(1, 8 * BLOCK_SIZE),
                        WriteHint::Data,
                    )
                    .unwrap();
                }
            }
            pool.wait_idle().unwrap();
            pool.stop();
            let landed = dev.landed.lock().clone();
            for zone in [0u64, 5] {
                let z: Vec<u64> = landed.iter().copied().filter(|a| a / 64 == zone).collect();
                let want: Vec<u64> = (0..8).map(|i| zone * 64 + i * 8).collect();
                assert_eq!(z, want, "zone {zone} written out of order: {landed:?}");
            }
            max_active = dev.max_active.load(Ordering::SeqCst);
            if max_active >= 2 {
                break;
            }
        }
        // Different zones still overlap.
        assert!(max_active >= 2);
    }

    /// A zoned device's conventional region (its metadata) has no order rule: metadata
    /// blocks there go through the pool (`submit_meta` takes them) and several are written
    /// at once, while a block past it is the caller's to write and the zones' buffers
    /// still land in order. Before, every metadata block of `zf2fs` and `device` was one
    /// synchronous write.
    #[test]
    fn a_zoned_devices_conventional_region_is_written_in_parallel() {
        let mut caps = flashlog_dev::Capabilities::plain("slow-zoned", 1024);
        caps.zone_blocks = 64;
        caps.conventional_blocks = 128;
        let dev = SlowZoned::new(caps);
        let pool = IoPool::new(dev.clone(), 4);
        let block = vec![7u8; BLOCK_SIZE];
        // Two writes at once need a second I/O thread to take a block while the first
        // sleeps in the device, which a loaded machine may not run in time: up to 5 rounds
        // (never, were each block written synchronously).
        for _ in 0..5 {
            for addr in 0..8u64 {
                assert!(
                    pool.submit_meta(addr * 8, &block).unwrap(),
                    "block {addr} in the region"
                );
            }
            assert!(!pool.submit_meta(128, &block).unwrap(), "a zone's block");
            pool.wait_idle().unwrap();
            if dev.max_active.load(Ordering::SeqCst) >= 2 {
                break;
            }
        }
        assert!(
            dev.max_active.load(Ordering::SeqCst) >= 2,
            "conventional blocks written one at a time"
        );
        dev.max_active.store(0, Ordering::SeqCst);
        dev.landed.lock().clear();
        for i in 0..8u64 {
            pool.submit(256 + i * 8, filled(1, 8 * BLOCK_SIZE), WriteHint::Data)
                .unwrap();
        }
        pool.wait_idle().unwrap();
        pool.stop();
        let landed = dev.landed.lock().clone();
        let zone: Vec<u64> = landed.iter().copied().filter(|&a| a >= 128).collect();
        let want: Vec<u64> = (0..8).map(|i| 256 + i * 8).collect();
        assert_eq!(zone, want, "a zone written out of order");
    }

    /// A zoned device that takes each write in order at once and completes it 5 ms later
    /// (as the emulated SSD on the wall clock): one zone's buffers must reach it in address
    /// order, and more than one of them may be in flight, since the next one goes once the
    /// device accepted the previous one. Before, a zone had one buffer in flight at a time
    /// (the device's queue-depth-1 rate for `gc=device`'s one data zone).
    struct QueuingZoned {
        caps: flashlog_dev::Capabilities,
        accepted: Mutex<Vec<u64>>,
        active: AtomicUsize,
        max_active: AtomicUsize,
    }

    impl BlockDevice for QueuingZoned {
        fn capabilities(&self) -> &flashlog_dev::Capabilities {
            &self.caps
        }
        fn read(&self, _: u64, _: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            Ok(flashlog_dev::Completion::empty())
        }
        fn write(
            &self,
            addr: u64,
            buf: &[u8],
        ) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.write_hinted_ordered(addr, buf, WriteHint::None, &mut || {})
        }
        fn write_hinted_ordered(
            &self,
            addr: u64,
            _: &[u8],
            _: WriteHint,
            accepted: &mut dyn FnMut(),
        ) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.accepted.lock().push(addr);
            accepted();
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_active.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(5));
            self.active.fetch_sub(1, Ordering::SeqCst);
            Ok(flashlog_dev::Completion::empty())
        }
        fn discard(&self, _: u64, _: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            Ok(flashlog_dev::Completion::empty())
        }
        fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            Ok(flashlog_dev::Completion::empty())
        }
    }

    #[test]
    fn a_zones_next_buffer_goes_once_the_device_accepted_the_last() {
        // The order holds in every round; two in flight need a second I/O thread to take
        // the next buffer within the 5 ms, which a loaded machine may not run in time: up
        // to 5 rounds, each on a fresh pool (never, with one buffer of a zone at a time).
        let mut max_active = 0;
        for _ in 0..5 {
            let mut caps = flashlog_dev::Capabilities::plain("queuing-zoned", 1024);
            caps.zone_blocks = 256;
            let dev = Arc::new(QueuingZoned {
                caps,
                accepted: Mutex::new(Vec::new()),
                active: AtomicUsize::new(0),
                max_active: AtomicUsize::new(0),
            });
            let pool = IoPool::new(dev.clone(), 4);
            // One zone (one log head), sixteen 8-block buffers.
            for i in 0..16u64 {
                pool.submit(i * 8, filled(1, 8 * BLOCK_SIZE), WriteHint::Data)
                    .unwrap();
            }
            pool.wait_idle().unwrap();
            pool.stop();
            let accepted = dev.accepted.lock().clone();
            let want: Vec<u64> = (0..16).map(|i| i * 8).collect();
            assert_eq!(accepted, want, "accepted out of order");
            max_active = dev.max_active.load(Ordering::SeqCst);
            if max_active >= 2 {
                break;
            }
        }
        assert!(
            max_active >= 2,
            "one zone's buffers were written one at a time"
        );
    }

    /// Targeted wake-ups (one I/O thread per submit, waiters on their own condition
    /// variable) must never lose one: four submitters with throttle and wait_idle between
    /// submits, three I/O threads, a small device. A lost wake-up hangs a waiter; the test
    /// gives it 60 s (a run takes well under one).
    #[test]
    fn targeted_wakeups_lose_none() {
        let dev = Arc::new(RamDevice::new(4096));
        let pool = IoPool::new(dev.clone(), 3);
        let (tx, rx) = std::sync::mpsc::channel();
        let ts: Vec<_> = (0..4u64)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        let addr = t * 1024 + i % 1024;
                        pool.submit(addr, filled((i % 251) as u8, BLOCK_SIZE), WriteHint::Data)
                            .unwrap();
                        pool.throttle();
                        if i % 50 == 49 {
                            pool.wait_idle().unwrap();
                        }
                    }
                })
            })
            .collect();
        std::thread::spawn(move || {
            for t in ts {
                t.join().unwrap();
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("a submitter hung: a wake-up was lost");
        pool.wait_idle().unwrap();
        assert_eq!(pool.inflight.load(Ordering::Acquire), 0);
        let mut b = vec![0u8; BLOCK_SIZE];
        dev.read(3 * 1024 + 499, &mut b).unwrap();
        assert_eq!(b[0], (499 % 251) as u8);
        pool.stop();
    }

    #[test]
    fn a_failed_write_is_reported_and_stops_later_writes() {
        let dev = Arc::new(RamDevice::new(8));
        let pool = IoPool::new(dev.clone(), 1);
        pool.submit(100, filled(1, BLOCK_SIZE), WriteHint::Data)
            .unwrap(); // past the end: fails
        assert!(matches!(pool.wait_idle(), Err(Error::Poisoned(_))));
        assert!(pool
            .submit(0, filled(2, BLOCK_SIZE), WriteHint::Data)
            .is_err());
        pool.stop();
    }
}
