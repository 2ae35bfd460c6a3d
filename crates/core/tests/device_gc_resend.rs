//! The D2FS host side (`gc=device`) applies upcalls in id order, across a re-send that
//! arrives late (found in review, 2026-11-27; the test failed 3 of 3 runs before the fix).
//!
//! `DeviceCollector::ordered_upcalls` (gc_device.rs) repairs a hole in the upcall ids by
//! asking the device to re-send what is outstanding and flushing, assuming the flush's
//! completion carries the re-sent upcalls. But the device attaches pending events to the
//! next completion it finishes, whoever's it is: an I/O-pool write of a log buffer queued
//! before the checkpoint (those are still in flight while `before_checkpoint` applies), or
//! an upcall left on a completion while the tap was full. If that completion reaches the
//! tap after `ordered_upcalls` took the queue, the hole is still there. The host applied
//! k + 1... anyway and set `last` past k; k arrived later and was skipped as "already
//! applied", the next acknowledgement made the device forget k's records, and the blocks
//! they moved read back as something else. Now the upcalls past the hole go back to the
//! tap until the re-sent k arrives.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, Completion, DevResult, DeviceEvent, WriteHint};
use flashlog_ssd::SsdDevice;
use std::sync::{Arc, Mutex};

mod common;

const CAP: u64 = 512 << 20;
const FILE: u64 = 8 << 20;

fn opts() -> MountOptions {
    MountOptions {
        gc: "device".parse().unwrap(),
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        ..MountOptions::default()
    }
}

#[derive(Default)]
struct St {
    /// Migration upcalls seen on completions.
    seen: u32,
    /// The third upcall was taken off its completion (its completion is still on its way).
    dropped: bool,
    /// A re-send was asked for after the drop: the next completion's upcalls go to another
    /// completion that reaches the tap later.
    divert_next: bool,
    diverted: Vec<DeviceEvent>,
    /// Diverted upcalls handed to the tap (late).
    delivered: bool,
    resends: u32,
}

/// The emulated coupled SSD with (1) the third upcall's completion late (as
/// device_gc.rs's `Late::Never`), and (2) the upcalls the first re-send after it puts on the
/// device's event queue taken by another request's completion, which reaches the tap only
/// after the flush of `ordered_upcalls` returned (an I/O thread's write that completed
/// between the re-send and the flush). They are not lost: the next completion delivers
/// them.
struct StolenResend {
    inner: Arc<SsdDevice>,
    st: Mutex<St>,
}

impl StolenResend {
    fn hook(&self, mut c: Completion) -> Completion {
        let mut st = self.st.lock().unwrap();
        if st.divert_next {
            // This completion (the flush right after the re-send) would carry them: another
            // request's completion took them instead.
            st.divert_next = false;
            let (mig, rest): (Vec<_>, Vec<_>) = c
                .events
                .into_iter()
                .partition(|e| matches!(e, DeviceEvent::Migrated { .. }));
            c.events = rest;
            st.diverted = mig;
            return c;
        }
        if !st.diverted.is_empty() {
            // The other completion reaches the tap now.
            let d = std::mem::take(&mut st.diverted);
            c.events.extend(d);
            st.delivered = true;
            return c;
        }
        if !st.dropped {
            let mut drop_at = None;
            // Every event is an upcall (`DeviceEvent::Migrated`, the only kind).
            for i in 0..c.events.len() {
                st.seen += 1;
                if st.seen == 3 {
                    drop_at = Some(i);
                    break;
                }
            }
            if let Some(i) = drop_at {
                c.events.remove(i);
                st.dropped = true;
            }
        }
        c
    }
}

impl BlockDevice for StolenResend {
    fn capabilities(&self) -> &flashlog_dev::Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, a: u64, b: &mut [u8]) -> DevResult<Completion> {
        self.inner.read(a, b).map(|c| self.hook(c))
    }
    fn write(&self, a: u64, b: &[u8]) -> DevResult<Completion> {
        self.inner.write(a, b).map(|c| self.hook(c))
    }
    fn write_hinted(&self, a: u64, b: &[u8], hint: WriteHint) -> DevResult<Completion> {
        self.inner.write_hinted(a, b, hint).map(|c| self.hook(c))
    }
    fn discard(&self, a: u64, n: u64) -> DevResult<Completion> {
        self.inner.discard(a, n).map(|c| self.hook(c))
    }
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        self.inner.discard_many(ranges).map(|c| self.hook(c))
    }
    fn flush(&self) -> DevResult<Completion> {
        self.inner.flush().map(|c| self.hook(c))
    }
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        self.inner.ack_migrations(upto)
    }
    fn resend_migrations(&self) -> DevResult<()> {
        let mut st = self.st.lock().unwrap();
        if st.dropped && st.resends == 0 {
            st.divert_next = true;
        }
        if st.dropped {
            st.resends += 1;
        }
        drop(st);
        self.inner.resend_migrations()
    }
}

/// Upcall k's completion is late; the host finds the hole and asks for a re-send, but the
/// re-sent copies ride on a completion that reaches the tap after the flush returned (not
/// lost: one request later). Every byte must still read back as written.
#[test]
fn a_re_send_that_reaches_the_tap_after_the_flush_loses_no_upcall() {
    let ssd = common::emulated_ssd("coupled", CAP);
    let dev = Arc::new(StolenResend {
        inner: ssd.clone(),
        st: Mutex::new(St::default()),
    });
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let model = common::device_overwrites(&fs, CAP, FILE, || dev.st.lock().unwrap().delivered);
    {
        let st = dev.st.lock().unwrap();
        assert!(
            st.dropped && st.resends >= 1 && st.delivered,
            "the interleaving was not reached: dropped {} resends {} delivered {}",
            st.dropped,
            st.resends,
            st.delivered
        );
    }
    fs.sync().unwrap();
    let c = fs.stats();
    eprintln!(
        "upcalls applied {} skipped {} resends {}; pairs applied {} skipped {}",
        c.upcalls_applied,
        c.upcalls_skipped,
        c.upcall_resends,
        c.upcall_pairs_applied,
        c.upcall_pairs_skipped
    );
    let bad_files = common::files_differing(&fs, &model);
    assert!(
        bad_files.is_empty(),
        "blocks lost after a re-send reached the tap late: (file, blocks differing) {bad_files:?}; \
         upcalls skipped {} (an upcall past the hole was applied first, the late one skipped \
         as already applied, then acknowledged)",
        c.upcalls_skipped
    );
    fs.unmount().unwrap();
}
