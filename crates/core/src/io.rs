//! Asynchronous log writes: a small pool of I/O threads writes full log-head buffers while
//! writers go on filling the next ones, so that copying and device time overlap.
//!
//! Owns: the queue of submitted buffers and the list of buffers not yet written (queued or
//! being written), from which reads of those blocks are served.
//!
//! Invariants: a buffer stays readable through `read_inflight` until the device accepted
//! it; `wait_idle` returns only when every submitted buffer is on the device (so a flush
//! after it covers them) or reports the first write error; after an error no further
//! queued buffer is written (the mount is poisoned; nothing is written over an unknown
//! state). With zero threads every submission is a synchronous write (deterministic order
//! for the crash simulator).
//!
//! Lock order: `state` and `spare` are leaf locks (never held together); the I/O threads
//! take nothing else.

use crate::config::WRITE_BATCH_BLOCKS;
use crate::error::{Error, Result};
use flashlog_dev::{BlockDevice, BLOCK_SIZE};
use flashlog_format::BlkAddr;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Buffers queued or being written before submitters wait (32 x 256 KiB = 8 MiB).
pub const MAX_INFLIGHT: usize = 32;

struct Buf {
    id: u64,
    addr: BlkAddr,
    data: Arc<Vec<u8>>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<u64>,
    /// Every buffer not yet written (queued or in progress).
    bufs: Vec<Buf>,
    next_id: u64,
    error: Option<String>,
    stop: bool,
}

pub struct IoPool {
    dev: Arc<dyn BlockDevice>,
    threads: usize,
    state: Mutex<State>,
    cv: Condvar,
    /// `state.bufs.len()`, readable without the lock (fast path of reads).
    inflight: AtomicUsize,
    /// Written buffers kept for reuse: a fresh 256 KiB buffer per write costs page faults
    /// and allocator work comparable to the copy itself. A leaf lock.
    spare: Mutex<Vec<Vec<u8>>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl IoPool {
    pub fn new(dev: Arc<dyn BlockDevice>, threads: usize) -> Arc<IoPool> {
        let pool = Arc::new(IoPool {
            dev,
            threads,
            state: Mutex::default(),
            cv: Condvar::new(),
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
    pub fn buffer(&self) -> Vec<u8> {
        crate::waits::lock(crate::waits::Point::IoPool, &self.spare)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(WRITE_BATCH_BLOCKS * BLOCK_SIZE))
    }

    /// Keep a written buffer for `buffer` (up to what the queue can hold).
    fn recycle(&self, mut v: Vec<u8>) {
        let mut spare = self.spare.lock();
        if spare.len() < MAX_INFLIGHT {
            v.clear();
            spare.push(v);
        }
    }

    /// Write `data` at `addr`, now (no threads) or soon (queued). Never waits for room in
    /// the queue (callers hold a log head): `throttle` does, once the head is released.
    pub fn submit(&self, addr: BlkAddr, data: Vec<u8>) -> Result<()> {
        if self.threads == 0 {
            let r = self.dev.write(addr, &data).map(|_| ());
            self.recycle(data);
            return Ok(r?);
        }
        let mut st = crate::waits::lock(crate::waits::Point::IoPool, &self.state);
        if let Some(e) = &st.error {
            return Err(Error::Poisoned(e.clone()));
        }
        let id = st.next_id;
        st.next_id += 1;
        st.bufs.push(Buf {
            id,
            addr,
            data: Arc::new(data),
        });
        st.queue.push_back(id);
        self.inflight.store(st.bufs.len(), Ordering::Release);
        self.cv.notify_all();
        Ok(())
    }

    /// Back-pressure: wait while `MAX_INFLIGHT` or more buffers are queued or being
    /// written (or until a write failed; the error surfaces at the next submit or wait).
    /// Called with no log-head lock held, so that a writer waiting for the device never
    /// holds up others of its mlog (issue 12: the head lock was held through this wait).
    /// The queue can exceed the bound by one buffer per thread between its submit and
    /// this call.
    pub fn throttle(&self) {
        if self.threads == 0 || self.inflight.load(Ordering::Acquire) < MAX_INFLIGHT {
            return;
        }
        let t0 = std::time::Instant::now();
        let mut st = self.state.lock();
        while st.bufs.len() >= MAX_INFLIGHT && st.error.is_none() {
            self.cv.wait(&mut st);
        }
        drop(st);
        crate::waits::record(crate::waits::Point::IoQueue, t0);
    }

    /// Wait until every submitted buffer is on the device.
    pub fn wait_idle(&self) -> Result<()> {
        let mut st = self.state.lock();
        while !st.bufs.is_empty() && st.error.is_none() {
            self.cv.wait(&mut st);
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

    fn worker(&self) {
        loop {
            let (id, addr, data) = {
                let mut st = self.state.lock();
                loop {
                    if let Some(id) = st.queue.pop_front() {
                        let b = st
                            .bufs
                            .iter()
                            .find(|b| b.id == id)
                            .expect("queued buffer is listed");
                        break (id, b.addr, b.data.clone());
                    }
                    if st.stop {
                        return;
                    }
                    self.cv.wait(&mut st);
                }
            };
            let skip = self.state.lock().error.is_some();
            let r = if skip {
                Ok(())
            } else {
                self.dev.write(addr, &data).map(|_| ())
            };
            let mut st = self.state.lock();
            if let Err(e) = r {
                st.error
                    .get_or_insert_with(|| format!("log write at block {addr} failed: {e}"));
            }
            st.bufs.retain(|b| b.id != id);
            self.inflight.store(st.bufs.len(), Ordering::Release);
            self.cv.notify_all();
            drop(st);
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
            self.cv.notify_all();
        }
        for h in self.handles.lock().drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashlog_dev::RamDevice;

    #[test]
    fn queued_writes_are_readable_then_durable() {
        let dev = Arc::new(RamDevice::new(1024));
        let pool = IoPool::new(dev.clone(), 2);
        for i in 0..32u64 {
            pool.submit(i * 4, vec![i as u8 + 1; 4 * BLOCK_SIZE])
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

    /// A RAM device whose writes wait until the gate opens.
    struct Gated {
        inner: RamDevice,
        open: Mutex<bool>,
        cv: Condvar,
    }

    impl BlockDevice for Gated {
        fn capabilities(&self) -> &flashlog_dev::Capabilities {
            self.inner.capabilities()
        }
        fn read(&self, a: u64, b: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.inner.read(a, b)
        }
        fn write(&self, a: u64, b: &[u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            let mut o = self.open.lock();
            while !*o {
                self.cv.wait(&mut o);
            }
            drop(o);
            self.inner.write(a, b)
        }
        fn discard(&self, a: u64, n: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.inner.discard(a, n)
        }
        fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
            self.inner.flush()
        }
    }

    /// Submitting never waits for the device (a log head is held then); `throttle`, called
    /// with the head released, waits until the queue is below its bound. The device is
    /// stalled: before, the 33rd submit blocked right there.
    #[test]
    fn submit_never_waits_and_throttle_applies_back_pressure() {
        let dev = Arc::new(Gated {
            inner: RamDevice::new(4096),
            open: Mutex::new(false),
            cv: Condvar::new(),
        });
        let pool = IoPool::new(dev.clone(), 1);
        for i in 0..MAX_INFLIGHT as u64 + 8 {
            pool.submit(i, vec![i as u8; BLOCK_SIZE]).unwrap();
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
        *dev.open.lock() = true;
        dev.cv.notify_all();
        t.join().unwrap();
        assert!(pool.inflight.load(Ordering::Acquire) < MAX_INFLIGHT);
        pool.wait_idle().unwrap();
        let mut b = vec![0u8; BLOCK_SIZE];
        dev.read(MAX_INFLIGHT as u64 + 7, &mut b).unwrap();
        assert_eq!(b[0], MAX_INFLIGHT as u8 + 7);
        pool.stop();
    }

    #[test]
    fn a_failed_write_is_reported_and_stops_later_writes() {
        let dev = Arc::new(RamDevice::new(8));
        let pool = IoPool::new(dev.clone(), 1);
        pool.submit(100, vec![1; BLOCK_SIZE]).unwrap(); // past the end: fails
        assert!(matches!(pool.wait_idle(), Err(Error::Poisoned(_))));
        assert!(pool.submit(0, vec![2; BLOCK_SIZE]).is_err());
        pool.stop();
    }
}
