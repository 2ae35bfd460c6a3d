//! Filling the volume to ENOSPC, and many threads at once.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::Arc;

mod common;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

#[test]
fn fill_to_enospc_is_clean() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((96 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let chunk = vec![0x5au8; 256 << 10];
    let mut written = Vec::new();
    'fill: for i in 0.. {
        let ino = match fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0) {
            Ok(a) => a.ino,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create: {e}"),
        };
        let mut size = 0u64;
        for _ in 0..4 {
            match fs.write(ino, size, &chunk) {
                Ok(n) => size += n as u64,
                Err(Error::NoSpace) => {
                    written.push((ino, size));
                    break 'fill;
                }
                Err(e) => panic!("write: {e}"),
            }
        }
        written.push((ino, size));
    }
    assert!(written.len() > 10);
    // Space is really used up (within the reserve kept for metadata).
    let st = fs.statfs();
    assert!(st.blocks_free < st.blocks / 20, "{st:?}");
    // Further writes fail cleanly, and so does fsync-free metadata work.
    assert!(matches!(
        fs.write(written[0].0, 10 << 20, &chunk),
        Err(Error::NoSpace)
    ));
    fs.sync().unwrap();
    for &(ino, size) in &written {
        assert_eq!(fs.getattr(ino).unwrap().size, size);
        let mut b = vec![0u8; 4096];
        if size > 0 {
            fs.read(ino, size - 4096, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == 0x5a));
        }
    }
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    // Deleting frees the space for new metadata after a remount.
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    for i in 0..written.len() / 2 {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    assert!(fs.statfs().blocks_free > st.blocks / 3);
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn many_threads_on_shared_and_private_files() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((256 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(
        Fs::mount(
            dev.clone(),
            MountOptions {
                cp_interval: Some(std::time::Duration::from_millis(50)),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let shared = fs.create(ROOT_INO, b"shared", 0o644, 0, 0).unwrap().ino;
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let threads: Vec<_> = (0..6u8)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..150u32 {
                    let name = format!("t{t}-{i}");
                    let a = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap();
                    let data = vec![t ^ i as u8; 1000 + (i as usize * 37) % 9000];
                    fs.write(a.ino, 0, &data).unwrap();
                    // Each thread owns a 64 KiB stripe of the shared file.
                    fs.write(
                        shared,
                        (t as u64 * 16 + (i as u64 % 16)) * 4096,
                        &[t + 1; 4096],
                    )
                    .unwrap();
                    if i % 50 == 0 {
                        fs.fsync(a.ino, false).unwrap();
                    }
                    if i % 3 == 0 {
                        fs.rename(
                            dir,
                            name.as_bytes(),
                            dir,
                            format!("r{t}-{i}").as_bytes(),
                            RenameFlags::default(),
                        )
                        .unwrap();
                    } else if i % 3 == 1 {
                        fs.unlink(dir, name.as_bytes()).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let check = |fs: &Fs| {
        for t in 0..6u8 {
            for i in 0..150u32 {
                let (name, present) = match i % 3 {
                    0 => (format!("r{t}-{i}"), true),
                    1 => (format!("t{t}-{i}"), false),
                    _ => (format!("t{t}-{i}"), true),
                };
                let r = fs.lookup(dir, name.as_bytes());
                assert_eq!(r.is_ok(), present, "{name}");
                if let Ok(a) = r {
                    let mut b = vec![0u8; a.size as usize];
                    fs.read(a.ino, 0, &mut b).unwrap();
                    assert_eq!(b.len(), 1000 + (i as usize * 37) % 9000);
                    assert!(b.iter().all(|&x| x == t ^ i as u8));
                }
            }
            let mut b = vec![0u8; 65536];
            fs.read(shared, t as u64 * 65536, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == t + 1));
        }
    };
    check(&fs);
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    check(&fs);
    fs.unmount().unwrap();
}

/// statfs counts what the files hold, not what threads' slot caches of user blocks hold
/// (issue 12 item 4): on a volume large enough for the caches to be in use, eight threads
/// fill and then truncate their files, and every block comes back; a remount agrees.
#[test]
fn statfs_is_exact_after_many_threads_write_and_truncate() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((768 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let mut files = Vec::new();
    for t in 0..8 {
        files.push(
            (0..40)
                .map(|i| {
                    let name = format!("t{t}-{i}");
                    fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
                        .unwrap()
                        .ino
                })
                .collect::<Vec<_>>(),
        );
    }
    fs.sync().unwrap();
    let empty = fs.statfs();
    let fill = |files: &[Ino], t: usize| {
        let data = vec![t as u8 + 1; 12 << 10];
        for (i, &ino) in files.iter().enumerate() {
            let i = i as u64;
            for k in 0..(i % 7 + 1) {
                fs.write(ino, k * (12 << 10) + (i % 3) * 4096, &data)
                    .unwrap();
            }
        }
    };
    std::thread::scope(|sc| {
        for (t, f) in files.iter().enumerate() {
            sc.spawn(move || fill(f, t));
        }
    });
    fs.sync().unwrap();
    let full = fs.statfs();
    assert!(
        full.blocks_free < empty.blocks_free - 8 * 40 * 3,
        "{full:?}"
    );
    std::thread::scope(|sc| {
        for f in &files {
            let fs = &fs;
            sc.spawn(move || {
                for &ino in f {
                    let a = SetAttr {
                        size: Some(0),
                        ..Default::default()
                    };
                    fs.setattr(ino, &a).unwrap();
                }
            });
        }
    });
    fs.sync().unwrap();
    let after = fs.statfs();
    assert_eq!(
        after.blocks_free, empty.blocks_free,
        "every block is free again"
    );
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    assert_eq!(
        fs.statfs().blocks_free,
        after.blocks_free,
        "a remount agrees"
    );
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// A power cut on a full small volume: one mlog, 64 MiB (too small for mkfs to add the
/// recovery reserve, docs/TESTING.md "Known failures"), per policy. Files are created and
/// fsync'd until the first ENOSPC, then whole blocks of them are overwritten and fsync'd
/// (ENOSPC allowed) until a cut at a random operation; the crash image (unflushed writes
/// dropped, or a random subset of them kept) must mount, roll forward what was fsync'd,
/// and every block hold its last fsync'd byte or one written since; fsck clean after the
/// unmount. The remount's roll-forward moves every log head to a fresh section, so it
/// needs free sections on a volume the workload filled.
#[test]
fn a_power_cut_on_a_full_small_volume_remounts_with_every_fsynced_byte() {
    use flashlog_dev::{CrashMode, SimDevice};
    use rand::{Rng, SeedableRng};
    let mut recovered = 0;
    for seed in 0..8u64 {
        for (policy, lfs) in [("f2fs", false), ("f2fs", true), ("scale", false)] {
            let what = format!("{policy} lfs={lfs} seed {seed}");
            let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
            Fs::mkfs(sim.clone(), &MkfsOptions::default()).unwrap();
            let o = MountOptions {
                gc: policy.parse().unwrap(),
                alloc_mode: if lfs {
                    AllocMode::Lfs
                } else {
                    AllocMode::Adaptive
                },
                ..opts()
            };
            let fs = Fs::mount(sim.clone(), o.clone()).unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            // Per file: its inode and, per block, the last fsync'd byte and those since.
            let mut files: Vec<(Ino, common::BlockHistory)> = Vec::new();
            // Per file and block: the byte written last (what an fsync makes durable).
            let mut cur: Vec<Vec<u8>> = Vec::new();
            loop {
                let blocks = rng.random_range(1..64usize);
                let byte = 1 + (files.len() % 200) as u8;
                let name = format!("/f{}", files.len());
                let Ok(ino) = fs.write_file(&name, &vec![byte; blocks * 4096]) else {
                    break;
                };
                if fs.fsync(ino, false).is_err() {
                    break;
                }
                files.push((ino, (vec![byte; blocks], vec![Vec::new(); blocks])));
                cur.push(vec![byte; blocks]);
            }
            let st = fs.statfs();
            assert!(
                files.len() > 20 && st.blocks_free < st.blocks / 50,
                "{what}: {} files, then ENOSPC with {st:?}",
                files.len()
            );
            let ops = rng.random_range(50..400);
            for i in 0..ops {
                let f = rng.random_range(0..files.len());
                let (ino, (durable, since)) = &mut files[f];
                if rng.random_range(0..4) == 0 {
                    match fs.fsync(*ino, false) {
                        Ok(()) => {
                            durable.clone_from(&cur[f]);
                            since.iter_mut().for_each(|s| s.clear());
                        }
                        Err(Error::NoSpace) => {}
                        Err(e) => panic!("{what}: fsync: {e}"),
                    }
                } else {
                    let b = rng.random_range(0..durable.len());
                    let byte = 201 + (i % 50) as u8;
                    since[b].push(byte);
                    match fs.write(*ino, b as u64 * 4096, &[byte; 4096]) {
                        Ok(_) => cur[f][b] = byte,
                        Err(Error::NoSpace) => {}
                        Err(e) => panic!("{what}: write: {e}"),
                    }
                }
            }
            sim.cut_now();
            fs.abandon();
            let mode = if seed % 2 == 0 {
                CrashMode::DropUnflushed
            } else {
                CrashMode::KeepRandomSubset
            };
            let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
            let fs = Fs::mount(img.clone(), o)
                .unwrap_or_else(|e| panic!("{what}: remount after the cut: {e}"));
            recovered += fs.stats().roll_forward_nodes;
            for (i, (ino, h)) in files.iter().enumerate() {
                common::assert_blocks_hold_history(&fs, *ino, h, &format!("{what}: file {i}"));
            }
            fs.unmount().unwrap();
            let r = fsck(&*img).unwrap();
            assert!(r.is_clean(), "{what}: {r}");
        }
    }
    assert!(recovered > 0, "no cut left anything to roll forward");
}
