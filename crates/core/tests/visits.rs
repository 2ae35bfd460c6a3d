//! Write-back with pages in flight (`FsInner::writeback_pages_released`), forced
//! interleavings found in review (2026-11-27): two visits of one file at once (a flusher's
//! and a checkpoint pre-pass's) with rewrites, a truncate and refill and a punch between
//! them; and a visit that dies outside the flusher (a pre-pass's), which left its pages
//! marked with no poison: fsync waited for good and the unmount returned Ok without them
//! (both failed 3 of 3 runs before the visit's unwind guard).

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

const BS: u64 = BLOCK_SIZE as u64;
const MIB: usize = 1 << 20;

fn opts(dirty_cap: u64) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        dirty_cap_bytes: dirty_cap,
        ..Default::default()
    }
}

fn fresh(mib: u64, o: MountOptions) -> (Arc<dyn BlockDevice>, Arc<Fs>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((mib << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), o).unwrap());
    (dev, fs)
}

fn chunk(i: usize) -> Vec<u8> {
    (0..MIB)
        .map(|k| (k as u64 / 4096 * 7 + 13 + i as u64) as u8)
        .collect()
}

fn file_of_chunks(fs: &Fs, mib: usize) -> (Ino, Vec<u8>) {
    let ino = fs.create(ROOT_INO, b"w", 0o644, 0, 0).unwrap().ino;
    let mut model = Vec::new();
    for i in 0..mib {
        let c = chunk(i);
        assert_eq!(fs.write(ino, (i * MIB) as u64, &c).unwrap(), MIB);
        model.extend_from_slice(&c);
    }
    (ino, model)
}

fn in_flight(fs: &Fs, ino: Ino) -> u32 {
    fs.inner()
        .cells
        .get(ino)
        .expect("cached")
        .lock()
        .wb_in_flight
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn write_model(fs: &Fs, ino: Ino, model: &mut Vec<u8>, off: u64, data: &[u8]) {
    assert_eq!(fs.write(ino, off, data).unwrap(), data.len());
    let end = off as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].copy_from_slice(data);
}

fn remount_and_check(dev: Arc<dyn BlockDevice>, fs: Arc<Fs>, model: &[u8], what: &str) {
    fs.set_test_hook(None);
    Arc::into_inner(fs).expect("last handle").unmount().unwrap();
    let fs = Fs::mount(dev.clone(), opts(64 << 20)).unwrap();
    let got = fs.read_file("/w").unwrap();
    if got != model {
        let lost = (0..model.len().div_ceil(BS as usize))
            .filter(|&i| {
                let r = i * BS as usize..((i + 1) * BS as usize).min(model.len());
                got.get(r.clone()) != Some(&model[r])
            })
            .collect::<Vec<_>>();
        panic!(
            "{what}: /w differs after remount: {} blocks wrong (len {} vs {}), first {:?}",
            lost.len(),
            got.len(),
            model.len(),
            &lost[..lost.len().min(8)]
        );
    }
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{what}: {r}");
}

/// Parks the first visit of each named kind at `flush:copying` (pages marked, cell
/// released, copies not yet written): "flusher" (a lane thread) and "prepass" (a thread
/// named `review-prepass`).
struct Parks {
    flusher: Receiver<()>,
    flusher_go: Sender<()>,
    prepass: Receiver<()>,
    prepass_go: Sender<()>,
}

fn install_parks(fs: &Fs) -> Parks {
    let (ftx, frx) = channel();
    let (fgo, fgo_rx) = channel::<()>();
    let (ptx, prx) = channel();
    let (pgo, pgo_rx) = channel::<()>();
    let f_once = Mutex::new(Some((ftx, fgo_rx)));
    let p_once = Mutex::new(Some((ptx, pgo_rx)));
    fs.set_test_hook(Some(Arc::new(move |at: &str| {
        if at != "flush:copying" {
            return;
        }
        let name = std::thread::current().name().unwrap_or("").to_string();
        let slot = if name.starts_with("flashlog-flush") {
            &f_once
        } else if name == "review-prepass" {
            &p_once
        } else {
            return;
        };
        let first = slot.lock().unwrap().take();
        if let Some((tx, go)) = first {
            tx.send(()).unwrap();
            let _ = go.recv_timeout(Duration::from_secs(30));
        }
    })));
    Parks {
        flusher: frx,
        flusher_go: fgo,
        prepass: prx,
        prepass_go: pgo,
    }
}

/// Two visits of one file at once (a flusher lane's and the checkpoint pre-pass's), with
/// a page rewritten under each, pages truncated under the flusher's and refilled and then
/// marked by the pre-pass's, and a page rewritten twice under one visit. Every copy is
/// mapped or orphaned once: contents exact, budget exact.
#[test]
fn overlapping_visits_with_rewrites_truncates_and_refills_stay_exact() {
    let (dev, fs) = fresh(256, opts(4 << 20));
    let parks = install_parks(&fs);
    let (ino, mut model) = file_of_chunks(&fs, 3);
    parks
        .flusher
        .recv_timeout(Duration::from_secs(30))
        .expect("the flusher never parked");
    // The flusher has pages 0..63 in flight.
    assert_eq!(in_flight(&fs, ino), 1);
    // Page 5: rewritten (the flusher's copy orphaned), later marked by the pre-pass too.
    write_model(&fs, ino, &mut model, 5 * BS, &[0xA1; BS as usize]);
    // Page 7: rewritten twice under the flusher's visit (one orphan, paid once).
    write_model(&fs, ino, &mut model, 7 * BS, &[0xD4; BS as usize]);
    write_model(&fs, ino, &mut model, 7 * BS + 100, &[0xE5; 50]);
    // Pages 40..63 (in flight) dropped by a truncate, 40..50 refilled.
    let attr = SetAttr {
        size: Some(40 * BS),
        ..Default::default()
    };
    fs.setattr(ino, &attr).unwrap();
    model.truncate(40 * BS as usize);
    for i in 40..51u64 {
        write_model(&fs, ino, &mut model, i * BS, &[0xB0 + i as u8; BS as usize]);
    }
    // The pre-pass marks what is dirty and not in flight: 5, 7 and 40..50; it parks.
    let prepass = {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("review-prepass".into())
            .spawn(move || fs.inner().writeback_before_checkpoint())
            .unwrap()
    };
    parks
        .prepass
        .recv_timeout(Duration::from_secs(30))
        .expect("the pre-pass never parked");
    assert_eq!(in_flight(&fs, ino), 2);
    // Under both visits: page 5 rewritten again (both copies orphaned), page 45 dropped
    // and refilled (the pre-pass's copy orphaned), page 46 punched.
    write_model(&fs, ino, &mut model, 5 * BS + 7, &[0xC3; 9]);
    let attr = SetAttr {
        size: Some(45 * BS),
        ..Default::default()
    };
    fs.setattr(ino, &attr).unwrap();
    model.truncate(45 * BS as usize);
    write_model(&fs, ino, &mut model, 45 * BS, &[0x5F; BS as usize]);
    fs.fallocate(ino, FallocMode::PunchHole, 3 * BS, BS)
        .unwrap();
    model[3 * BS as usize..4 * BS as usize].fill(0);
    // The flusher maps first, then the pre-pass.
    parks.flusher_go.send(()).unwrap();
    wait_until("the flusher's visit never ended", || {
        in_flight(&fs, ino) <= 1
    });
    parks.prepass_go.send(()).unwrap();
    prepass.join().unwrap().unwrap();
    wait_until("visits never ended", || in_flight(&fs, ino) == 0);
    assert!(fs.read_file("/w").unwrap() == model, "contents before sync");
    common::assert_budget_exact(&fs, "overlapping visits");
    assert!(fs.read_file("/w").unwrap() == model, "contents after sync");
    remount_and_check(dev, fs, &model, "overlapping visits");
}

/// Run the checkpoint pre-pass on a thread of its own and kill its visit at
/// `flush:copying` (pages marked, copies not mapped), as the flusher test does.
fn kill_a_prepass_visit(fs: &Arc<Fs>) {
    fs.set_test_hook(Some(Arc::new(|at: &str| {
        if at == "flush:copying" && std::thread::current().name() == Some("review-prepass") {
            panic!("the test kills the pre-pass's visit");
        }
    })));
    let fs2 = fs.clone();
    let r = std::thread::Builder::new()
        .name("review-prepass".into())
        .spawn(move || fs2.inner().writeback_before_checkpoint())
        .unwrap()
        .join();
    assert!(r.is_err(), "the visit was to die");
    fs.set_test_hook(None);
}

/// A visit that is not the flusher's (here the checkpoint pre-pass of `sync`, run on a
/// caller's thread) dies between marking its pages and mapping them. Unlike the flusher,
/// whose panics are caught and poison the mount, nothing poisons the mount: the marks and
/// `wb_in_flight` stay. DESIGN.md ("fsync ... a visit that died, which poisons the mount,
/// makes the fsync fail") promises the fsync fails; it waits for good instead.
#[test]
fn fsync_after_a_prepass_visit_died_does_not_wait_for_good() {
    let (_dev, fs) = fresh(256, opts(64 << 20));
    fs.set_flusher_paused(true);
    let (ino, _model) = file_of_chunks(&fs, 1);
    kill_a_prepass_visit(&fs);
    eprintln!(
        "after the dead visit: poisoned {}, wb_in_flight {}",
        fs.inner().poisoned.load(Ordering::Acquire),
        in_flight(&fs, ino)
    );
    let (tx, rx) = channel();
    let fs2 = fs.clone();
    std::thread::spawn(move || tx.send(fs2.fsync(ino, false)).unwrap());
    let r = rx.recv_timeout(Duration::from_secs(10));
    assert!(
        r.is_ok(),
        "fsync waited > 10 s for a pre-pass visit that died (mount poisoned: {}, \
         wb_in_flight {})",
        fs.inner().poisoned.load(Ordering::Acquire),
        in_flight(&fs, ino)
    );
}

/// The same dead pre-pass visit, then an unmount: its final checkpoint writes back every
/// dirty page but the marked ones (`pages_to_write_back` skips `Page::wb`) and succeeds, so
/// the pages are lost without an error.
#[test]
fn unmount_after_a_prepass_visit_died_keeps_or_refuses_the_pages() {
    let (dev, fs) = fresh(256, opts(64 << 20));
    fs.set_flusher_paused(true);
    let (_ino, model) = file_of_chunks(&fs, 1);
    kill_a_prepass_visit(&fs);
    let dirty = fs.inner().dirty_pages.load(Ordering::Relaxed);
    match Arc::into_inner(fs).expect("last handle").unmount() {
        Err(e) => eprintln!("unmount refused: {e} (acceptable)"),
        Ok(()) => {
            eprintln!("unmount succeeded with {dirty} pages dirty before it");
            let fs = Arc::new(Fs::mount(dev.clone(), opts(64 << 20)).unwrap());
            remount_and_check(dev, fs, &model, "unmount after a dead pre-pass visit");
        }
    }
}
