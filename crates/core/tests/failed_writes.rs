//! What a reader sees after a log write failed (io.rs: "a buffer stays readable through
//! `read_inflight` until the device accepted it, and for good if it never did"). A failed
//! buffer, and every queued buffer the poisoned pool then skips, used to leave the
//! in-flight list although the device never took it; reads are still served on a
//! poisoned mount, so they returned what the device had before (zeros on a fresh volume)
//! as data. Found in review, 2026-11-27; both tests failed 4 of 4 runs before the fix.

use flashlog_core::io::IoPool;
use flashlog_core::*;
use flashlog_dev::{
    BlockDevice, Capabilities, Completion, DevError, DevResult, RamDevice, WriteHint, BLOCK_SIZE,
};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Duration;

/// A RAM device whose first write of a `Data` buffer after `arm` waits until `release`,
/// then fails; every other write passes straight through.
struct FailFirstData {
    inner: RamDevice,
    /// 0: off; 1: armed (the next Data write is held, then fails); 2: released.
    state: Mutex<u8>,
    cv: Condvar,
    held: Mutex<bool>,
}

impl FailFirstData {
    fn new(blocks: u64) -> Arc<Self> {
        Arc::new(FailFirstData {
            inner: RamDevice::new(blocks),
            state: Mutex::new(0),
            cv: Condvar::new(),
            held: Mutex::new(false),
        })
    }
    fn arm(&self) {
        *self.state.lock() = 1;
    }
    fn release(&self) {
        *self.state.lock() = 2;
        self.cv.notify_all();
    }
    fn holding(&self) -> bool {
        *self.held.lock()
    }
}

impl BlockDevice for FailFirstData {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, a: u64, b: &mut [u8]) -> DevResult<Completion> {
        self.inner.read(a, b)
    }
    fn write(&self, a: u64, b: &[u8]) -> DevResult<Completion> {
        self.write_hinted(a, b, WriteHint::None)
    }
    fn write_hinted(&self, a: u64, b: &[u8], hint: WriteHint) -> DevResult<Completion> {
        if hint == WriteHint::Data {
            let mut st = self.state.lock();
            if *st == 1 {
                // This is the write to fail: hold it until released.
                *self.held.lock() = true;
                while *st == 1 {
                    self.cv.wait(&mut st);
                }
                *st = 0;
                return Err(DevError::Injected(format!("write at {a}")));
            }
        }
        self.inner.write_hinted(a, b, hint)
    }
    fn discard(&self, a: u64, n: u64) -> DevResult<Completion> {
        self.inner.discard(a, n)
    }
    fn flush(&self) -> DevResult<Completion> {
        self.inner.flush()
    }
}

fn filled(byte: u8, blocks: usize) -> flashlog_core::io::LogBuf {
    let mut b = flashlog_core::io::log_buf();
    b.extend_from_slice(&vec![byte; blocks * BLOCK_SIZE]);
    b
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Pool level: buffer A (blocks 100..104) fails in the device; buffer B (blocks
/// 200..204), queued behind it and never attempted, is skipped. Neither is readable from
/// the pool any more, and neither is on the device: a read of B's block gets zeros.
#[test]
fn a_skipped_buffer_stays_readable_until_written() {
    let dev = FailFirstData::new(4096);
    let pool = IoPool::new(dev.clone(), 1);
    dev.arm();
    pool.submit(100, filled(0xA1, 4), WriteHint::Data).unwrap();
    wait_until("A held in the device", || dev.holding());
    pool.submit(200, filled(0xB2, 4), WriteHint::Data).unwrap();
    let mut b = vec![0u8; BLOCK_SIZE];
    assert!(pool.read_inflight(202, &mut b), "B queued: readable");
    assert_eq!(b[0], 0xB2);
    dev.release();
    assert!(pool.wait_idle().is_err(), "the failure is reported");
    // B was never given to the device (the device is healthy: it would have taken it).
    let in_pool = pool.read_inflight(202, &mut b);
    if !in_pool {
        dev.inner.read(202, &mut b).unwrap();
    }
    pool.stop();
    assert_eq!(
        b[0], 0xB2,
        "block 202 of the skipped buffer is neither in the pool (read_inflight: {in_pool}) \
         nor on the device: a read gets {:#x}",
        b[0]
    );
}

/// File system level: a file's data went into a log buffer whose write failed. The fsync
/// reports it, and the mount is poisoned; a later read of the file must give the bytes or
/// an error, never zeros with success.
#[test]
fn a_read_after_a_failed_log_write_never_returns_zeros_as_data() {
    let dev = FailFirstData::new((64 << 20) / 4096);
    let d: Arc<dyn BlockDevice> = dev.clone();
    Fs::mkfs(d.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(
        d,
        MountOptions {
            cp_interval: None,
            gc_interval: None,
            ..Default::default()
        },
    )
    .unwrap();
    let data = vec![0x5Au8; 16 * BLOCK_SIZE];
    let ino = fs.write_file("/f", &data).unwrap();
    dev.arm();
    let fsync = {
        let fs = &fs;
        std::thread::scope(|s| {
            let t = s.spawn(move || fs.fsync(ino, false));
            wait_until("the data write held in the device", || dev.holding());
            dev.release();
            t.join().unwrap()
        })
    };
    assert!(fsync.is_err(), "fsync reports the failed write");
    let mut got = vec![0u8; data.len()];
    match fs.read(ino, 0, &mut got) {
        Err(_) => {} // an error is a fine answer
        Ok(n) => {
            let zero_blocks = got[..n]
                .chunks(BLOCK_SIZE)
                .filter(|c| c.iter().all(|&x| x == 0))
                .count();
            assert!(
                got[..n] == data[..n],
                "read returned Ok({n}) with {zero_blocks} of {} blocks zeros: data of a failed \
                 log buffer vanished from reads",
                n / BLOCK_SIZE
            );
        }
    }
}
