//! Races in the code written since the concurrent-code reviews of 2026-11-27 (the cap
//! relief, pages in flight, the checkpoint's tail, `gc=device`'s dead-block limits, zero
//! range), each forced at a test point (`Fs::set_test_hook`): every test here failed
//! before the fix its doc comment names.

use flashlog_core::*;
use flashlog_dev::BlockDevice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

mod common;

const BS: u64 = 4096;

fn fsck_clean(dev: &dyn BlockDevice, what: &str) {
    let r = fsck(dev).unwrap();
    assert!(r.is_clean(), "{what}: fsck: {r}");
}

/// Write `blocks` blocks of `byte` from offset 0 of `ino`, or until the volume is full;
/// returns the blocks written.
fn fill(fs: &Fs, ino: Ino, byte: u8, blocks: u64) -> u64 {
    let chunk = vec![byte; 64 << 10];
    let mut size = 0u64;
    while size < blocks * BS {
        let n = chunk.len().min((blocks * BS - size) as usize);
        match fs.write(ino, size, &chunk[..n]) {
            Ok(w) if w == n => size += w as u64,
            Ok(w) => {
                size += w as u64 / BS * BS;
                break;
            }
            Err(Error::NoSpace) => break,
            Err(e) => panic!("fill of {ino}: {e}"),
        }
    }
    size / BS
}

fn truncate(fs: &Fs, ino: Ino, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &set).unwrap();
}

/// `gc=device`, no background threads: a writer whose queue of discards grew past the
/// urgent limit issues it itself (`DeviceCollector::space_low`), then notes the queue as
/// empty. The interleaving forced: between that writer's last issue and its note, another
/// thread truncates a file that fills most of the volume and checkpoints (as another
/// writer's discard checkpoint does: the writer holds no lock there), which queues the
/// truncated blocks' discards and records their count. The writer's note then wiped that
/// count (a plain store of 0): no writer issued the new queue, the rewrite of the file
/// killed nothing, so no checkpoint came to issue it either, and the device filled with
/// the truncated blocks (a refused log write, the mount poisoned). Fixed: the note takes
/// back only what this writer saw queued.
#[test]
fn a_checkpoint_between_a_writers_urgent_issue_and_its_note_keeps_its_count() {
    let dev = common::emulated_ssd("coupled", 256 << 20);
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc: GcPolicy::Device,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o.clone()).unwrap());
    let small = fs.create(ROOT_INO, b"small", 0o644, 0, 0).unwrap().ino;
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap().ino;
    let cap = fs.statfs().blocks;
    // A quarter of the volume, well past the urgent limit (half of the device's 5 %
    // slack); the big file takes the rest.
    let small_blocks = fill(&fs, small, 1, cap / 4);
    let big_blocks = fill(&fs, big, 2, u64::MAX / BS);
    assert!(
        big_blocks > cap / 2,
        "big file {big_blocks} of {cap} blocks"
    );
    fs.sync().unwrap();
    // The small file's blocks die; the next operation's discard checkpoint queues them,
    // past the urgent limit, and its `space_low` issues them.
    truncate(&fs, small, 0);
    let weak: Weak<Fs> = Arc::downgrade(&fs);
    let fired = Arc::new(AtomicBool::new(false));
    let f = fired.clone();
    fs.set_test_hook(Some(Arc::new(move |what: &str| {
        if what != "discards:issued-by-writer" || f.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = weak.clone();
        std::thread::spawn(move || {
            let fs = weak.upgrade().expect("mounted");
            truncate(&fs, big, 0);
            let inner = fs.inner();
            let _g = inner.oplock.checkpoint();
            inner.write_checkpoint(false).unwrap();
        })
        .join()
        .unwrap();
    })));
    fs.write(small, 0, &[3u8; BS as usize]).unwrap();
    assert!(
        fired.load(Ordering::SeqCst),
        "the writer never issued the queue"
    );
    fs.set_test_hook(None);
    // Write the big file back: it kills nothing, so only a writer's urgent issue sends
    // the truncated blocks' discards before the device fills with them.
    let chunk = vec![4u8; 64 << 10];
    let mut off = 0;
    while off < big_blocks * BS {
        let n = chunk.len().min((big_blocks * BS - off) as usize);
        if let Err(e) = fs.write(big, off, &chunk[..n]) {
            panic!(
                "rewrite at block {} of {big_blocks} (small file {small_blocks}): {e}",
                off / BS
            );
        }
        off += n as u64;
    }
    fs.sync().unwrap();
    let mut buf = vec![0u8; BS as usize];
    for b in [0, big_blocks / 2, big_blocks - 1] {
        fs.read(big, b * BS, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 4), "big file block {b}");
    }
    let fs = Arc::into_inner(fs).unwrap();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after the rewrite");
}

/// `gc=none` writes a room-making or timer checkpoint's pack beside the operations
/// (`checkpoint_beside_ops`). Its snapshot takes the nids freed in the interval
/// (`NatTable::take_prefree`), and its tail gives them back once the pack is durable. The
/// interleaving forced: nids are short (the free ones just above `NID_LOW`, the rest
/// freed by unlinks and waiting for a checkpoint) when such a checkpoint takes them; while
/// its tail writes the pack, another thread creates files. `short_of_nids` counted the
/// waiting nids only until the snapshot took them, so the creates saw none waiting, did
/// not wait for the pack, and got ENOSPC when the free ones ran out, on an empty volume.
/// Fixed: nids taken by a snapshot count as waiting until their tail releases them.
#[test]
fn creates_beside_a_checkpoint_tail_wait_for_the_nids_it_gives_back() {
    let dev = common::emulated_ssd("interval", 64 << 20);
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc: GcPolicy::None,
        ..MountOptions::default()
    };
    assert!(o.cp_tail);
    let fs = Arc::new(Fs::mount(dev.clone(), o).unwrap());
    let nat = &fs.inner().nat;
    let free = || u64::from(nat.max_nid()) - nat.used_count();
    let low = flashlog_core::nat::NID_LOW;
    // Create and unlink until the free nids are short: the next operation would
    // checkpoint first.
    loop {
        fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        if nat.short_of_nids() {
            break;
        }
        fs.unlink(ROOT_INO, b"f").unwrap();
        if nat.short_of_nids() {
            break;
        }
    }
    let waiting = u64::from(nat.max_nid()) - free();
    // More creates than free nids, far fewer than those waiting.
    let creates = free() + 100;
    assert!(
        free() < 2 * low && waiting > 4 * creates,
        "{} free, {waiting} waiting",
        free()
    );
    let fired = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Mutex::new(done_rx);
    let weak: Weak<Fs> = Arc::downgrade(&fs);
    let creator = Arc::new(std::sync::Mutex::new(None));
    let (f, errs, c) = (fired.clone(), errors.clone(), creator.clone());
    fs.set_test_hook(Some(Arc::new(move |what: &str| {
        if what != "checkpoint:tail" || f.swap(true, Ordering::SeqCst) {
            return;
        }
        // The tail is between its snapshot and its pack: create beside it.
        let fs = weak.upgrade().expect("mounted");
        let (tx, errs) = (done_tx.clone(), errs.clone());
        *c.lock().unwrap() = Some(std::thread::spawn(move || {
            for i in 0..creates {
                if let Err(e) = fs.create(ROOT_INO, format!("c{i}").as_bytes(), 0o644, 0, 0) {
                    errs.lock().unwrap().push(format!("create #{i}: {e}"));
                    break;
                }
            }
            let _ = tx.send(());
        }));
        // Wait for the creates, or until they wait for this tail (then they end after it).
        let _ = done_rx
            .lock()
            .unwrap()
            .recv_timeout(std::time::Duration::from_secs(3));
    })));
    let t = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.inner().checkpoint_beside_ops())
    };
    t.join().unwrap().unwrap();
    fs.set_test_hook(None);
    assert!(
        fired.load(Ordering::SeqCst),
        "no tail beside the operations"
    );
    // The creates that waited for the tail end after it.
    let creator = creator.lock().unwrap().take().expect("creator started");
    creator.join().unwrap();
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{creates} creates beside the tail of a checkpoint that took {waiting} freed nids: \
         {errors:?}"
    );
    let fs = Arc::into_inner(fs).unwrap();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after the creates");
}

/// A collector meets the copies of a write-back visit that has written them (with the
/// file's cell released) and not yet mapped them: valid blocks their slots do not point
/// at. It passed them over, so their section stayed used; greedy then picked that same
/// section again, and again, for as long as the visit's thread was off the CPU (CI of
/// eab328c, `tests/gc.rs` at 80 % in lfs mode: 26,620 of 285,903 blocks read by the
/// cleaner were not moved). The interleaving forced: a visit of 64 dirty pages copies
/// 63 of them into the tail of the warm data section (the 64th opens the next one, so
/// the section is no longer current) and stops before it maps them; the collector then
/// cleans that section. Fixed: the collector waits for the visit (F2FS waits on a page
/// under writeback), after which every block of the section has moved or died, and the
/// visit's stop ends as soon as the collector waits. Without the fix the collector
/// skipped the 63 copies and the section kept them.
#[test]
fn a_collector_waits_for_a_visits_copies_instead_of_passing_them_over() {
    use flashlog_core::gc::{clean_section, Migration};
    use std::time::{Duration, Instant};
    let dev: Arc<dyn BlockDevice> = Arc::new(flashlog_dev::RamDevice::new((64 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..MountOptions::default()
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o.clone()).unwrap());
    let inner = fs.inner().clone();
    let geo = inner.geo().clone();
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let c = inner.cell(ino).unwrap();
    let addr_of = |i: u64| inner.block_addr(&mut c.lock(), i).unwrap();
    // One block first, to learn where the warm data head stands, then the file again
    // from its start, as many blocks as leave 63 of the segment (one section:
    // `segs_per_sec` 1 by default).
    assert_eq!(fill(&fs, ino, 1, 1), 1);
    fs.sync().unwrap();
    let seg = geo.seg_of(addr_of(0)).unwrap();
    let used = addr_of(0) - geo.seg_start(seg) + 1;
    let blocks = BLOCKS_PER_SEG - 63 - used;
    assert!(blocks >= 64, "the head stands at {used} of its segment");
    assert_eq!(fill(&fs, ino, 1, blocks), blocks);
    fs.sync().unwrap();
    let last = addr_of(blocks - 1);
    assert_eq!(geo.seg_of(last), Some(seg));
    assert_eq!(last - geo.seg_start(seg), BLOCKS_PER_SEG - 64);
    let sec = seg / geo.segs_per_sec as u64;
    let valid = inner.seg.section_valid(sec);
    // 64 dirty pages: one visit (`FLUSH_CHUNK`).
    fs.write(ino, 0, &vec![2u8; 64 * BS as usize]).unwrap();
    let copied = Arc::new(AtomicBool::new(false));
    let waited = Arc::new(AtomicBool::new(false));
    {
        let (copied, waited) = (copied.clone(), waited.clone());
        fs.set_test_hook(Some(Arc::new(move |what| match what {
            "flush:copied" => {
                copied.store(true, Ordering::SeqCst);
                let t0 = Instant::now();
                while !waited.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            "fsync:waits-for-writeback" => waited.store(true, Ordering::SeqCst),
            _ => {}
        })));
    }
    let visit = {
        let (inner, c) = (inner.clone(), c.clone());
        std::thread::spawn(move || inner.write_back_in_visits(&c, true, |_, _| false))
    };
    while !copied.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(inner.seg.section_valid(sec), valid + 63, "63 copies in it");
    assert!(!inner.seg.is_current_section(sec));
    let empty = {
        let _op = inner.oplock.op();
        clean_section(&inner, sec, Migration::Eager).unwrap()
    };
    let left = inner.seg.section_valid(sec);
    visit.join().unwrap().unwrap();
    fs.set_test_hook(None);
    let c = fs.stats();
    assert!(
        empty && left == 0,
        "the section kept {left} blocks: the collector passed over {} of a visit's copies",
        c.gc_skipped_blocks
    );
    assert_eq!(c.gc_skipped_blocks, 0);
    let mut buf = vec![0u8; BS as usize];
    for i in 0..blocks {
        fs.read(ino, i * BS, &mut buf).unwrap();
        let want = if i < 64 { 2 } else { 1 };
        assert!(buf.iter().all(|&b| b == want), "block {i}");
    }
    drop(fs);
    let fs = Fs::mount(dev.clone(), o).unwrap();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after the move");
}
