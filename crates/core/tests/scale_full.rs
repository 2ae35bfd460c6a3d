//! `gc=scale` on a full 4-mlog volume whose headroom is below one victim's need with the
//! recovery reserve fully held and nothing owed: the state a mount after a crash at 96 %
//! full came up in (found 2026-11-28 through the FUSE mount, `--fill 96 -o gc=scale -o
//! mlog=thread --mkfs-arg=--mlogs=4`: every create, mkdir, unlink and fsync answered
//! ENOSPC for good, also after a clean remount; 25 log heads with one collector stream
//! make the reserve 37 sections, exactly the free sections the mount found). The first
//! collector could use the held reserve only while some of it was owed, so with nothing
//! owed no victim got a reservation, nothing was cleaned and nothing ever freed.
//!
//! The test builds the state through the library: a volume filled to its user limit by
//! three writers with garbage left by deletes, then the budget's reserve set to every
//! whole section of headroom (as the mount's `set_recovery_reserve` does when the free
//! sections cover the reserve with less than one victim's need to spare). A power cut and
//! roll-forward after the space came back checks that the loan of the reserve was paid back.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::Arc;

fn opts() -> MountOptions {
    MountOptions {
        gc: GcPolicy::Scale,
        gc_workers: 2,
        mlog_map: MlogMap::Thread,
        cp_interval: None,
        gc_interval: None,
        ..MountOptions::default()
    }
}

/// Three writers fill `/d0`..`/d2` with 96 KiB files until ENOSPC (the user space full);
/// then every third file is deleted. Returns the files left per directory.
fn fill(fs: &Arc<Fs>) -> Vec<Vec<String>> {
    let data = vec![7u8; 96 << 10];
    let hs: Vec<_> = (0..3)
        .map(|t| {
            let fs = fs.clone();
            let data = data.clone();
            std::thread::spawn(move || {
                let dir = fs
                    .mkdir(fs.root(), format!("d{t}").as_bytes(), 0o755, 0, 0)
                    .unwrap()
                    .ino;
                let mut names = Vec::new();
                loop {
                    let name = format!("f{}", names.len());
                    let a = match fs.create(dir, name.as_bytes(), 0o644, 0, 0) {
                        Ok(a) => a,
                        Err(Error::NoSpace) => break,
                        Err(e) => panic!("create: {e}"),
                    };
                    names.push(name);
                    match fs.write(a.ino, 0, &data) {
                        Ok(_) => {}
                        Err(Error::NoSpace) => break,
                        Err(e) => panic!("write: {e}"),
                    }
                }
                (dir, names)
            })
        })
        .collect();
    let written: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let inner = fs.inner();
    let used = inner.alloc_blocks.used();
    assert!(
        used * 100 >= inner.sb.geo.user_blocks * 96,
        "filled: {used} of {} user blocks",
        inner.sb.geo.user_blocks
    );
    written
        .into_iter()
        .map(|(dir, names)| {
            let mut kept = Vec::new();
            for (i, name) in names.into_iter().enumerate() {
                if i % 3 == 0 {
                    fs.unlink(dir, name.as_bytes()).unwrap();
                } else {
                    kept.push(name);
                }
            }
            kept
        })
        .collect()
}

#[test]
fn full_scale_volume_with_the_reserve_held_and_nothing_owed_still_cleans() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((384 << 20) / 4096));
    Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            mlogs: 4,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let kept = fill(&fs);
    fs.sync().unwrap(); // nothing to roll forward from here
    let inner = fs.inner();
    let space = &inner.seg.space;
    let bps = 512 * inner.sb.geo.segs_per_sec as u64;
    assert!(
        (0..inner.sb.geo.sections()).any(|s| {
            let v = inner.seg.section_valid(s);
            v > 0 && v < bps && !inner.seg.is_current_section(s)
        }),
        "deletes left garbage to clean"
    );
    // The mount's state: the reserve holds every free block the heads do not use, nothing
    // owed, headroom 0 (the image: 37 free sections, 37 reserved, 25 fresh heads). The
    // reserve is counted in whole sections; the part of a section left over is charged as a
    // block the checkpoint never gets back would be (in this mount only).
    let (held, _) = space.recovery_reserve();
    let total = space.headroom() as u64 + held;
    space.set_recovery_reserve(total / bps);
    space.charge(space.headroom() as u64);
    let (held, owed) = space.recovery_reserve();
    eprintln!(
        "reserve {held} held, {owed} owed, headroom {}, {} free sections",
        space.headroom(),
        inner.seg.free_sections()
    );
    assert_eq!((owed, space.headroom()), (0, 0), "not the state");

    // Deleting files must work: the collectors clean with the reserve (nothing can be
    // rolled forward), the checkpoint frees the sections.
    let d0 = fs.resolve("/d0").unwrap();
    for name in kept[0].iter().take(10) {
        fs.unlink(d0, name.as_bytes())
            .unwrap_or_else(|e| panic!("unlink /d0/{name}: {e} (headroom {})", space.headroom()));
    }
    fs.mkdir(fs.root(), b"after", 0o755, 0, 0).unwrap();
    let f = fs.create(fs.root(), b"fsynced", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"survives the cut").unwrap();
    fs.fsync(f, false).unwrap();
    let s = fs.stats();
    assert!(s.gc_sections_freed > 0, "the collectors cleaned: {s:?}");
    assert_eq!(s.space_overcommit_blocks, 0);
    // A power cut after the fsync: roll-forward finds its sections (the reserve is whole).
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.abandon();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    assert_eq!(fs.read_file("/fsynced").unwrap(), b"survives the cut");
    assert!(
        fs.stats().roll_forward_nodes > 0,
        "the fsync was rolled forward"
    );
    for name in kept[1].iter().take(5) {
        fs.unlink(fs.resolve("/d1").unwrap(), name.as_bytes())
            .unwrap();
    }
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
}
