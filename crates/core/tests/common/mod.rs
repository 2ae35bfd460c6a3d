//! Helpers shared by integration tests (`mod common;`).
#![allow(dead_code)] // each test file uses what it needs

use flashlog_core::Fs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The delay at a test point: a yield one time in four, a sleep of 20-300 us one time in
/// sixteen, from a shared counter hashed with the seed (cheap, and different per call).
fn delay(seed: u64, hits: &AtomicU64) {
    let n = hits.fetch_add(1, Ordering::Relaxed);
    let mut x = (n ^ seed.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    match x % 16 {
        0 => std::thread::sleep(Duration::from_micros(20 + (x >> 8) % 280)),
        1..=4 => std::thread::yield_now(),
        _ => {}
    }
}

/// Widen the race windows: every thread that reaches one of the file system's or the
/// segment manager's test points (a flusher visit copying with the cell released, a
/// collector between its check and its remap, each checkpoint step, a cell load, a log
/// head taken, a block appended, a section claimed) may yield or sleep there. On 2 cores
/// this gives the interleavings that many cores give without it: a thread preempted inside
/// a window that another thread then enters. Returns the count of points reached.
pub fn widen_races(fs: &Fs, seed: u64) -> Arc<AtomicU64> {
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    fs.set_test_hook(Some(Arc::new(move |_: &str| delay(seed, &h))));
    let h = hits.clone();
    fs.inner()
        .seg
        .set_test_hook(Some(Arc::new(move |_: &str, _| delay(seed, &h))));
    hits
}

/// Remove the hooks `widen_races` installed.
pub fn narrow_races(fs: &Fs) {
    fs.set_test_hook(None);
    fs.inner().seg.set_test_hook(None);
}
