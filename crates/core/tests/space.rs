//! The space budget (issue 12 item 1): a checkpoint always finds the space it needs,
//! ENOSPC comes from write()/create() and only when valid data fills the volume, and
//! parallel writers and collectors never poison the mount.
//!
//! - `full_user_space_never_fails_a_checkpoint`: the deterministic hole (one thread);
//! - `parallel_overwrites_with_yielding_device`: the race, forced by a test hook that
//!   lines the collectors up (see the test for the interleaving);
//! - `brim_under_parallel_writers`: fill to ENOSPC with parallel writers, delete, write
//!   again, fsck, remount;
//! - `writeback_contention_is_not_enospc`: write-back that finds every cell busy is not a
//!   full volume.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, Capabilities, Completion, DevResult, RamDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const BS: u64 = 4096;

fn opts(gc: GcPolicy, workers: usize) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        alloc_mode: AllocMode::Lfs,
        gc,
        gc_workers: workers,
        ..Default::default()
    }
}

/// Contents of block `b` of file `f` at version `v`.
fn block(f: u64, b: u64, v: u64) -> Vec<u8> {
    let mut d = vec![(f as u8) ^ (b as u8) ^ (v as u8); BS as usize];
    d[..8].copy_from_slice(&f.to_le_bytes());
    d[8..16].copy_from_slice(&b.to_le_bytes());
    d[16..24].copy_from_slice(&v.to_le_bytes());
    d
}

fn assert_not_poisoned(r: &Result<()>, what: &str) {
    assert!(
        !matches!(r, Err(Error::Poisoned(_))),
        "{what}: the mount was poisoned: {r:?}"
    );
}

/// A RAM device that gives up the CPU before every request, so that on a machine with
/// few cores the threads of the file system interleave at every device access, as they
/// do on their own with real parallelism.
struct YieldDevice {
    inner: RamDevice,
    requests: AtomicU64,
}

impl BlockDevice for YieldDevice {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        std::thread::yield_now();
        self.inner.read(addr, buf)
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        std::thread::yield_now();
        for (addr, buf) in reqs.iter_mut() {
            self.inner.read(*addr, buf)?;
        }
        Ok(Completion::empty())
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.write_hinted(addr, buf, flashlog_dev::WriteHint::None)
    }
    fn write_hinted(
        &self,
        addr: u64,
        buf: &[u8],
        hint: flashlog_dev::WriteHint,
    ) -> DevResult<Completion> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        std::thread::yield_now();
        self.inner.write_hinted(addr, buf, hint)
    }
    fn flush(&self) -> DevResult<Completion> {
        std::thread::yield_now();
        self.inner.flush()
    }
    fn discard(&self, addr: u64, blocks: u64) -> DevResult<Completion> {
        self.inner.discard(addr, blocks)
    }
}

/// A test hook that holds each collector at "collector-decided" (it found the volume short
/// of its cleaning target and is about to take a victim and the space to move it) until
/// `n` collectors are there at once, or 20 ms have passed: so that they all decide before
/// any of them has taken anything.
fn gate(n: usize) -> flashlog_core::inner::TestHook {
    let state = Arc::new((
        std::sync::Mutex::new((0usize, 0u64)),
        std::sync::Condvar::new(),
    ));
    Arc::new(move |what| {
        if what != "collector-decided" {
            return;
        }
        let (m, cv) = &*state;
        let mut g = m.lock().unwrap();
        let gen = g.1;
        g.0 += 1;
        if g.0 >= n {
            g.0 = 0;
            g.1 += 1;
            cv.notify_all();
            return;
        }
        let _ = cv
            .wait_timeout_while(g, std::time::Duration::from_millis(20), |g| g.1 == gen)
            .unwrap();
    })
}

/// The checkpoint's own writes once needed space nobody had reserved: a page dirtied over
/// a hole reserved its data block, but the direct node that maps it was only created when
/// the page was written back, by the checkpoint, which then found the user space full and
/// poisoned the mount. Now the write creates (and reserves) the node, so the write gets
/// ENOSPC and the checkpoint has nothing to allocate.
#[test]
fn full_user_space_never_fails_a_checkpoint() {
    for gc in [GcPolicy::F2fs, GcPolicy::Scale] {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / BS));
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let fs = Fs::mount(dev.clone(), opts(gc, 2)).unwrap();
        let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
        let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
        // Fill the user space with file a.
        let mut n = 0u64;
        loop {
            match fs.write(a, n * BS, &block(0, n, 0)) {
                Ok(_) => n += 1,
                Err(Error::NoSpace) => break,
                Err(e) => panic!("{gc:?}: filling: {e}"),
            }
        }
        assert_eq!(
            fs.statfs().blocks_free,
            0,
            "{gc:?}: ENOSPC before the user space was full (wrote {n} blocks)"
        );
        // Give back exactly one block.
        let mut size = n * BS;
        while fs.statfs().blocks_free == 0 {
            size -= BS;
            let set = SetAttr {
                size: Some(size),
                ..Default::default()
            };
            fs.setattr(a, &set).unwrap();
        }
        assert_eq!(fs.statfs().blocks_free, 1, "{gc:?}");
        // A page of b past the blocks the inode maps itself: it needs a new direct node
        // as well as its data block, two blocks where one is left.
        let idx = flashlog_format::node::ADDRS_PER_INODE as u64;
        let w = fs.write(b, idx * BS, &block(1, idx, 0));
        let s = fs.sync();
        assert_not_poisoned(&s, "sync after the write");
        assert!(s.is_ok(), "{gc:?}: sync failed: {s:?}");
        assert!(
            matches!(w, Err(Error::NoSpace)),
            "{gc:?}: a write needing 2 blocks where 1 is free must fail: {w:?}"
        );
        fs.unmount().unwrap();
        let r = fsck(&*dev).unwrap();
        assert!(r.is_clean(), "{gc:?}: {r}");
    }
}

/// Random overwrites by 12 threads on a small (96 MiB), 90 % full volume with 8
/// collectors (`scale`) or the F2FS cleaner, each in `lfs` and `adaptive` (SSR) mode, every
/// device request preceded by a yield.
///
/// Interleaving forced (the schedule 16 cores produce on their own, which 2 cores almost
/// never do): the test hook holds every collector at "collector-decided", after it found
/// the volume short of its cleaning target and before it takes a victim and the space to
/// move it, until all 8 are there (or 20 ms pass). So all collectors decide on the same
/// view of free space before any of them has moved a block. Before the space budget the
/// decision was a check against a floor (`free > dirty + collectors at work + 1`) that
/// the others had not yet raised: 8 victims' moves took the sections the next checkpoint
/// needed, and the mount was poisoned with "checkpoint failed: no space left on the
/// volume" within seconds (3 of 3 runs on the unfixed code). Now each collector reserves
/// its victim's blocks with one compare-and-swap that leaves the checkpoint's debt, so
/// those that do not fit give their victim back.
#[test]
fn parallel_overwrites_with_yielding_device() {
    // Every policy: scale and f2fs, each in lfs and adaptive (SSR) mode.
    for (gc, workers, mode) in [
        (GcPolicy::Scale, 8, AllocMode::Lfs),
        (GcPolicy::Scale, 8, AllocMode::Adaptive),
        (GcPolicy::F2fs, 1, AllocMode::Lfs),
        (GcPolicy::F2fs, 1, AllocMode::Adaptive),
    ] {
        let opts = |gc, workers| MountOptions {
            alloc_mode: mode,
            ..opts(gc, workers)
        };
        let raw = YieldDevice {
            inner: RamDevice::new((96 << 20) / BS),
            requests: AtomicU64::new(0),
        };
        let dev: Arc<dyn BlockDevice> = Arc::new(raw);
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let fs = Arc::new(Fs::mount(dev.clone(), opts(gc, workers)).unwrap());
        if gc == GcPolicy::Scale {
            fs.set_test_hook(Some(gate(workers)));
        }
        const THREADS: u64 = 12;
        let per_file = fs.statfs().blocks * 90 / 100 / THREADS;
        let inos: Vec<Ino> = (0..THREADS)
            .map(|t| {
                let ino = fs
                    .create(ROOT_INO, format!("f{t}").as_bytes(), 0o644, 0, 0)
                    .unwrap()
                    .ino;
                for b in 0..per_file {
                    fs.write(ino, b * BS, &block(t, b, 0)).unwrap();
                }
                ino
            })
            .collect();
        fs.sync().unwrap();
        let versions: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let fs = fs.clone();
                    let ino = inos[t as usize];
                    s.spawn(move || {
                        let mut rng = ChaCha8Rng::seed_from_u64(t);
                        let mut v = vec![0u64; per_file as usize];
                        for i in 0..per_file * 3 {
                            let b = rng.random_range(0..per_file);
                            v[b as usize] += 1;
                            if let Err(e) = fs.write(ino, b * BS, &block(t, b, v[b as usize])) {
                                panic!("{gc:?}: thread {t} write {i}: {e} ({:?})", fs.stats());
                            }
                            if i % 997 == 0 {
                                if let Err(e) = fs.fsync(ino, false) {
                                    panic!("{gc:?}: thread {t} fsync: {e}");
                                }
                            }
                        }
                        v
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let st = fs.stats();
        assert!(st.gc_moved_blocks > 0, "{gc:?}: never cleaned: {st:?}");
        let fs = Arc::into_inner(fs).unwrap();
        fs.unmount().unwrap();
        let r = fsck(&*dev).unwrap();
        assert!(r.is_clean(), "{gc:?}: {r}");
        let fs = Fs::mount(dev.clone(), opts(gc, workers)).unwrap();
        let mut buf = vec![0u8; BS as usize];
        for (t, v) in versions.iter().enumerate() {
            for (b, &ver) in v.iter().enumerate() {
                fs.read(inos[t], b as u64 * BS, &mut buf).unwrap();
                assert!(
                    buf == block(t as u64, b as u64, ver),
                    "{gc:?}: file {t} block {b} is not version {ver}"
                );
            }
        }
        fs.unmount().unwrap();
    }
}

/// Parallel writers fill the volume to the brim with new files: every error is ENOSPC from
/// write() or create(), never a poisoned mount, and it comes only when valid data fills
/// the user space; after deleting files, writing works again; fsck and a remount are clean.
#[test]
fn brim_under_parallel_writers() {
    for (gc, workers) in [(GcPolicy::Scale, 4), (GcPolicy::F2fs, 1)] {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / BS));
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let fs = Arc::new(Fs::mount(dev.clone(), opts(gc, workers)).unwrap());
        const THREADS: u64 = 8;
        // Each thread: files of 1..64 blocks, written in 16 KiB requests, until ENOSPC.
        let files: Vec<Vec<(Ino, u64, u64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let fs = fs.clone();
                    s.spawn(move || {
                        let mut rng = ChaCha8Rng::seed_from_u64(1000 + t);
                        let mut done = Vec::new();
                        for k in 0u64.. {
                            let id = t << 32 | k;
                            let ino = match fs.create(
                                ROOT_INO,
                                format!("t{t}-{k}").as_bytes(),
                                0o644,
                                0,
                                0,
                            ) {
                                Ok(a) => a.ino,
                                Err(Error::NoSpace) => return done,
                                Err(e) => panic!("{gc:?}: create: {e}"),
                            };
                            let blocks = rng.random_range(1..=64u64);
                            let mut written = 0;
                            while written < blocks {
                                let n = (blocks - written).min(4);
                                let data: Vec<u8> = (written..written + n)
                                    .flat_map(|b| block(id, b, 0))
                                    .collect();
                                match fs.write(ino, written * BS, &data) {
                                    Ok(w) => written += w as u64 / BS,
                                    Err(Error::NoSpace) => {
                                        done.push((ino, id, written));
                                        return done;
                                    }
                                    Err(e) => panic!("{gc:?}: write: {e}"),
                                }
                            }
                            done.push((ino, id, written));
                        }
                        done
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let sf = fs.statfs();
        // ENOSPC only when valid data fills the user space: what is left is at most what
        // the threads' last, refused requests could not fit, and the blocks of the nodes
        // and reservations around them.
        assert!(
            sf.blocks_free * 100 <= sf.blocks,
            "{gc:?}: ENOSPC with {} of {} user blocks free",
            sf.blocks_free,
            sf.blocks
        );
        let s = fs.sync();
        assert_not_poisoned(&s, "sync at the brim");
        s.unwrap();
        // Delete every other file, then write again.
        let all: Vec<(Ino, u64, u64)> = files.into_iter().flatten().collect();
        let mut kept = Vec::new();
        for (i, &(ino, id, n)) in all.iter().enumerate() {
            let t = id >> 32;
            let k = id & 0xffff_ffff;
            if i % 2 == 0 {
                fs.unlink(ROOT_INO, format!("t{t}-{k}").as_bytes()).unwrap();
            } else {
                kept.push((ino, id, n));
            }
        }
        let again = fs.create(ROOT_INO, b"again", 0o644, 0, 0).unwrap().ino;
        for b in 0..256u64 {
            fs.write(again, b * BS, &block(7, b, 1))
                .unwrap_or_else(|e| panic!("{gc:?}: write after deleting: {e}"));
        }
        fs.sync().unwrap();
        let fs = Arc::into_inner(fs).unwrap();
        fs.unmount().unwrap();
        let r = fsck(&*dev).unwrap();
        assert!(r.is_clean(), "{gc:?}: {r}");
        let fs = Fs::mount(dev.clone(), opts(gc, workers)).unwrap();
        let mut buf = vec![0u8; BS as usize];
        for &(ino, id, n) in &kept {
            for b in 0..n {
                fs.read(ino, b * BS, &mut buf).unwrap();
                assert!(buf == block(id, b, 0), "{gc:?}: file {id:#x} block {b}");
            }
        }
        for b in 0..256u64 {
            fs.read(again, b * BS, &mut buf).unwrap();
            assert!(buf == block(7, b, 1), "{gc:?}: file again block {b}");
        }
        fs.unmount().unwrap();
    }
}

/// Write-back contention is not a full volume. 16 threads on a 1 GiB RAM volume, each
/// writing its own file in 256 KiB writes up to a quarter of the volume in all, with a
/// dirty cap of 1 MiB: `balance` after each write finds most cells locked by their own
/// writers (it only try-locks), so its rounds write back little, while the other threads
/// keep dirtying pages. It used to give up after three such rounds with ENOSPC once the
/// dirty pages exceeded twice the cap, returned from a write that had succeeded (the bench's
/// fill saw "create sustained.15: no space left" at 16 threads with 2 MiB sections).
#[test]
fn writeback_contention_is_not_enospc() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((1u64 << 30) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        dirty_cap_bytes: 1 << 20,
        ..opts(GcPolicy::F2fs, 1)
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o).unwrap());
    let per_thread = (1u64 << 30) / 4 / 16;
    let chunk = vec![0x5au8; 256 << 10];
    let ts: Vec<_> = (0..16u64)
        .map(|t| {
            let fs = fs.clone();
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let ino = fs
                    .create(ROOT_INO, format!("f{t}").as_bytes(), 0o644, 0, 0)
                    .unwrap_or_else(|e| panic!("create f{t}: {e}"))
                    .ino;
                let mut off = 0;
                while off < per_thread {
                    fs.write(ino, off, &chunk)
                        .unwrap_or_else(|e| panic!("thread {t}: write at {off}: {e}"));
                    off += chunk.len() as u64;
                }
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    fs.sync().unwrap();
}
