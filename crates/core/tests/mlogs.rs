//! Max's mlogs (issue 12 item 2): independent log partitions on the write path.
//!
//! - `thread_mapped_writers_share_no_log_head_and_no_allocator`: writers on different mlogs
//!   (`mlog=thread`) never lock the same log head and never claim a section from the same
//!   part of the main area (hooks in `seg.rs` record both);
//! - `many_thread_mapped_writers_on_a_small_volume`: 16 writers over 4 mlogs with cleaning,
//!   on a small volume: no error, no space overcommit, contents and fsck right, remount;
//! - `an_inode_keeps_its_node_mlog_until_the_checkpoint`: two fsyncs of one file from
//!   threads on different mlogs, then a power cut: roll-forward gets the later one back.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, RamDevice, SimDevice};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc;
use std::sync::Arc;

const BS: u64 = 4096;
const MLOGS: u32 = 4;

fn opts(gc: GcPolicy) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        alloc_mode: AllocMode::Lfs,
        gc,
        gc_workers: 2,
        mlog_map: MlogMap::Thread,
        ..Default::default()
    }
}

/// Files `/f0`..`/f{MLOGS-1}`, created in that order (consecutive inode numbers).
fn one_file_per_mlog(fs: &Fs) -> Vec<Ino> {
    (0..MLOGS)
        .map(|m| {
            fs.create(ROOT_INO, format!("f{m}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect()
}

/// A RAM volume of `mib` MiB made with `MLOGS` mlogs.
fn volume(mib: u64) -> Arc<dyn BlockDevice> {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((mib << 20) / BS));
    let o = MkfsOptions {
        mlogs: MLOGS,
        ..Default::default()
    };
    Fs::mkfs(dev.clone(), &o).unwrap();
    dev
}

/// Contents of block `b` of file `f` at version `v`.
fn block(f: u64, b: u64, v: u64) -> Vec<u8> {
    let mut d = vec![(f as u8) ^ (b as u8) ^ (v as u8); BS as usize];
    d[..8].copy_from_slice(&f.to_le_bytes());
    d[8..16].copy_from_slice(&b.to_le_bytes());
    d[16..24].copy_from_slice(&v.to_le_bytes());
    d
}

type Job<'a> = Box<dyn FnOnce() -> u64 + Send + 'a>;

/// A thread that runs jobs one at a time, so that a job runs on a thread whose slot (and
/// so its `mlog=thread` mlog) is known.
struct Worker<'a> {
    tx: mpsc::Sender<Job<'a>>,
    rx: mpsc::Receiver<u64>,
}

impl<'a> Worker<'a> {
    fn spawn<'s>(s: &'s std::thread::Scope<'s, 'a>) -> Worker<'a> {
        let (tx, jobs) = mpsc::channel::<Job<'a>>();
        let (done, rx) = mpsc::channel();
        s.spawn(move || {
            for job in jobs {
                if done.send(job()).is_err() {
                    return;
                }
            }
        });
        Worker { tx, rx }
    }

    fn run(&self, job: impl FnOnce() -> u64 + Send + 'a) -> u64 {
        self.tx.send(Box::new(job)).expect("worker alive");
        self.rx.recv().expect("worker answered")
    }

    /// The mlog this worker's writes go to under `mlog=thread`.
    fn mlog(&self) -> u16 {
        self.run(|| (flashlog_core::lock::thread_slot() % MLOGS as usize) as u64) as u16
    }
}

/// One worker per mlog (thread slots are handed out process-wide, so spawn until each
/// mlog has one; the extra workers stay idle).
fn one_worker_per_mlog<'s, 'a>(s: &'s std::thread::Scope<'s, 'a>) -> Vec<Worker<'a>> {
    let mut by_mlog: HashMap<u16, Worker<'a>> = HashMap::new();
    for _ in 0..64 {
        let w = Worker::spawn(s);
        by_mlog.entry(w.mlog()).or_insert(w);
        if by_mlog.len() == MLOGS as usize {
            break;
        }
    }
    assert_eq!(by_mlog.len(), MLOGS as usize, "no worker for some mlog");
    let mut v: Vec<(u16, Worker<'a>)> = by_mlog.into_iter().collect();
    v.sort_by_key(|(m, _)| *m);
    v.into_iter().map(|(_, w)| w).collect()
}

/// What each thread did, as the segment manager's hooks saw it.
#[derive(Default)]
struct Seen {
    heads: BTreeSet<usize>,
    claimed: Vec<u64>,
}

/// Four writers, one per mlog, each writing its own file and overwriting it once, with an
/// fsync every 32 writes (no checkpoint, no cleaning: the write path alone; a checkpoint
/// excludes every operation and writes every file's nodes to each file's mlog, so the
/// test checks that none ran). The hooks record, per
/// thread, every log head it locks (`head_locked`) and every section it claims
/// (`claimed`). Each writer must lock only the six heads of its own mlog and claim only
/// from its own part; no part steals. With `mlog=ino` the four files' heads depend on
/// their inode numbers, and before per-mlog supplies every claim went through one count.
#[test]
fn thread_mapped_writers_share_no_log_head_and_no_allocator() {
    let dev = volume(256);
    let fs = Arc::new(Fs::mount(dev, opts(GcPolicy::F2fs)).unwrap());
    let seg = &fs.inner().seg;
    let claims0: Vec<u64> = seg.part_stats().iter().map(|p| p.claims).collect();
    let seen: Arc<Mutex<HashMap<std::thread::ThreadId, Seen>>> = Arc::default();
    let s2 = seen.clone();
    seg.set_test_hook(Some(Arc::new(move |what, v| {
        let mut s = s2.lock();
        let e = s.entry(std::thread::current().id()).or_default();
        match what {
            "head_locked" => {
                e.heads.insert(v as usize);
            }
            "claimed" => e.claimed.push(v),
            _ => {}
        }
    })));
    const BLOCKS: u64 = 1024; // 4 MiB per file
    std::thread::scope(|s| {
        let workers = one_worker_per_mlog(s);
        let inos = one_file_per_mlog(&fs);
        // The files exist; the checkpoint starts an interval in which no node of them
        // was written yet, so each file's nodes go to its writer's mlog.
        fs.sync().unwrap();
        let cps = fs.stats().checkpoints;
        let (tx, rx) = mpsc::channel();
        for (m, w) in workers.iter().enumerate() {
            let (fs, ino, tx) = (fs.clone(), inos[m], tx.clone());
            w.tx.send(Box::new(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(m as u64);
                for i in 0..2 * BLOCKS {
                    let b = if i < BLOCKS {
                        i
                    } else {
                        rng.random_range(0..BLOCKS)
                    };
                    fs.write(ino, b * BS, &block(m as u64, b, i)).unwrap();
                    if i % 32 == 31 {
                        fs.fsync(ino, false).unwrap();
                    }
                }
                tx.send((m, std::thread::current().id())).unwrap();
                0
            }))
            .unwrap();
        }
        drop(tx);
        let ids: Vec<(usize, std::thread::ThreadId)> = rx.iter().collect();
        assert_eq!(ids.len(), MLOGS as usize);
        seg.set_test_hook(None);
        assert_eq!(
            fs.stats().checkpoints,
            cps,
            "a checkpoint ran among the writers"
        );
        let seen = seen.lock();
        let parts = seg.part_stats();
        for (m, id) in ids {
            let s = &seen[&id];
            let theirs: Vec<usize> = s.heads.iter().copied().filter(|h| h / 6 != m).collect();
            assert!(
                theirs.is_empty(),
                "the writer on mlog {m} locked heads {theirs:?} of other mlogs"
            );
            assert!(
                !s.claimed.is_empty(),
                "the writer on mlog {m} claimed nothing"
            );
            for &sec in &s.claimed {
                assert_eq!(
                    seg.part_of(sec),
                    m,
                    "the writer on mlog {m} claimed section {sec} of another part"
                );
            }
            assert!(parts[m].claims > claims0[m]);
            assert_eq!(parts[m].steals, 0, "mlog {m} stole: {parts:?}");
        }
        for w in &workers {
            // Keep the workers (and their slots) alive until here.
            let _ = w;
        }
    });
    let fs = Arc::try_unwrap(fs).ok().expect("one owner");
    fs.unmount().unwrap();
}

/// 16 writers over 4 mlogs (`mlog=thread`) on a 256 MiB volume filled to ~70 %, with
/// random overwrites of twice the volume, fsyncs, checkpoints from the dirty-node limit
/// and cleaning: every write succeeds, the space budget never overcommits, every file
/// reads back its last version before and after a remount, fsck is clean, and every
/// mlog's part was used. Threads outnumber mlogs, so writers share mlogs, write back each
/// other's files, and collectors move blocks between them: the mapping must stay right
/// across all of that (a file's nodes on one chain per checkpoint interval).
#[test]
fn many_thread_mapped_writers_on_a_small_volume() {
    for gc in [GcPolicy::Scale, GcPolicy::F2fs] {
        let dev = volume(256);
        let mut o = opts(gc);
        o.dirty_nodes_max = 2048;
        let fs = Arc::new(Fs::mount(dev.clone(), o.clone()).unwrap());
        const THREADS: u64 = 16;
        let user = fs.statfs().blocks;
        let per = user * 7 / 10 / THREADS;
        let files: Vec<(Ino, Vec<u64>)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let fs = fs.clone();
                    s.spawn(move || {
                        let ino = fs
                            .create(ROOT_INO, format!("t{t}").as_bytes(), 0o644, 0, 0)
                            .unwrap()
                            .ino;
                        let mut ver = vec![0u64; per as usize];
                        for b in 0..per {
                            fs.write(ino, b * BS, &block(t, b, 0))
                                .unwrap_or_else(|e| panic!("{gc:?}: fill: {e}"));
                        }
                        let mut rng = ChaCha8Rng::seed_from_u64(t);
                        for i in 1..=2 * per {
                            let b = rng.random_range(0..per);
                            fs.write(ino, b * BS, &block(t, b, i))
                                .unwrap_or_else(|e| panic!("{gc:?}: overwrite: {e}"));
                            ver[b as usize] = i;
                            if i % 256 == 0 {
                                fs.fsync(ino, false)
                                    .unwrap_or_else(|e| panic!("{gc:?}: fsync: {e}"));
                            }
                        }
                        (ino, ver)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let c = fs.stats();
        assert_eq!(
            c.space_overcommit_blocks, 0,
            "{gc:?}: the budget overcommitted"
        );
        assert!(c.gc_sections_freed > 0, "{gc:?}: no cleaning happened");
        let parts = fs.inner().seg.part_stats();
        assert!(
            parts.iter().all(|p| p.claims > 0),
            "{gc:?}: an mlog claimed nothing: {parts:?}"
        );
        let check = |fs: &Fs| {
            let mut buf = vec![0u8; BS as usize];
            for (t, (ino, ver)) in files.iter().enumerate() {
                for (b, &v) in ver.iter().enumerate() {
                    fs.read(*ino, b as u64 * BS, &mut buf).unwrap();
                    assert!(
                        buf == block(t as u64, b as u64, v),
                        "{gc:?}: file {t} block {b} is not version {v}"
                    );
                }
            }
        };
        check(&fs);
        let fs = Arc::try_unwrap(fs).ok().expect("one owner");
        fs.unmount().unwrap();
        let r = fsck(&*dev).unwrap();
        assert!(r.is_clean(), "{gc:?}: fsck: {r}");
        let fs = Fs::mount(dev.clone(), o).unwrap();
        check(&fs);
        fs.unmount().unwrap();
    }
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut v = vec![0u8; size];
    let mut off = 0;
    while off < size {
        let n = fs.read(ino, off as u64, &mut v[off..]).unwrap();
        assert!(n > 0);
        off += n;
    }
    v
}

/// Forced interleaving: a file is written and fsync'd by the worker on the highest mlog
/// (its nodes go to that mlog's warm node chain), then overwritten and fsync'd again by
/// the worker on mlog 0, then the power is cut. Roll-forward walks the chains in mlog
/// order, so had the second fsync's nodes followed its thread to mlog 0, the walk would
/// meet them first and the first fsync's inode last, and recovery would bring back the
/// first contents. The inode keeps its mlog until the next checkpoint, so both fsyncs are
/// on one chain and the later one wins.
#[test]
fn an_inode_keeps_its_node_mlog_until_the_checkpoint() {
    let sim = Arc::new(SimDevice::new((256 << 20) / BS));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    let mk = MkfsOptions {
        mlogs: MLOGS,
        ..Default::default()
    };
    Fs::mkfs(dev.clone(), &mk).unwrap();
    let mut o = opts(GcPolicy::F2fs);
    o.io_threads = 0;
    let fs = Fs::mount(dev, o.clone()).unwrap();
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    std::thread::scope(|s| {
        let workers = one_worker_per_mlog(s);
        let (first, second) = (&workers[MLOGS as usize - 1], &workers[0]);
        let fs = &fs;
        first.run(move || {
            fs.write(ino, 0, &[1u8; 3 * BS as usize]).unwrap();
            fs.fsync(ino, false).unwrap();
            0
        });
        second.run(move || {
            fs.write(ino, 0, &[2u8; 3 * BS as usize]).unwrap();
            fs.fsync(ino, false).unwrap();
            0
        });
    });
    sim.cut_now();
    fs.abandon();
    for mode in CrashMode::ALL {
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, 5));
        let fs = Fs::mount(img.clone(), o.clone()).unwrap();
        let got = read_all(&fs, ino);
        assert!(
            got == vec![2u8; 3 * BS as usize],
            "{mode:?}: roll-forward brought back {} bytes of {:?}, not the later fsync's 2s",
            got.len(),
            got.first()
        );
        fs.unmount().unwrap();
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck after recovery: {r}");
    }
}

/// Flusher lanes (`flushers=N`, `flush.rs`): with `mlog=ino` and as many lanes as mlogs,
/// each lane writes back only its own files, so each flusher thread appends to the log
/// heads of one mlog, no two lanes to the same one, and every lane works. Four writers
/// stream 6 MiB each (files of consecutive inodes: one per lane) through a 1 MiB dirty cap;
/// the files read back exactly after a remount, fsck clean.
#[test]
fn flusher_lanes_write_back_through_their_own_mlogs() {
    let dev = volume(256);
    let o = MountOptions {
        mlog_map: MlogMap::Ino,
        flushers: MLOGS as usize,
        dirty_cap_bytes: 1 << 20,
        ..opts(GcPolicy::F2fs)
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o.clone()).unwrap());
    let seen: Arc<Mutex<HashMap<String, BTreeSet<usize>>>> = Arc::default();
    let s2 = seen.clone();
    fs.inner().seg.set_test_hook(Some(Arc::new(move |what, v| {
        let t = std::thread::current();
        let name = t.name().unwrap_or("");
        if what == "head_locked" && name.starts_with("flashlog-flush-") {
            s2.lock()
                .entry(name.to_string())
                .or_default()
                .insert(v as usize / 6);
        }
    })));
    const BLOCKS: u64 = 1536; // 6 MiB per file
    let inos = one_file_per_mlog(&fs);
    std::thread::scope(|s| {
        for (m, &ino) in inos.iter().enumerate() {
            let fs = fs.clone();
            s.spawn(move || {
                for b in 0..BLOCKS {
                    fs.write(ino, b * BS, &block(m as u64, b, 0)).unwrap();
                }
            });
        }
    });
    fs.inner().seg.set_test_hook(None);
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), MLOGS as usize, "lanes that wrote: {seen:?}");
    let mut mlogs_used = BTreeSet::new();
    for (lane, mlogs) in &seen {
        assert_eq!(
            mlogs.len(),
            1,
            "{lane} appended to the heads of mlogs {mlogs:?}"
        );
        assert!(
            mlogs_used.insert(*mlogs.first().unwrap()),
            "two lanes on one mlog: {seen:?}"
        );
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = Fs::mount(dev.clone(), o).unwrap();
    for (m, &ino) in inos.iter().enumerate() {
        let mut buf = vec![0u8; BS as usize];
        for b in (0..BLOCKS).step_by(97) {
            fs.read(ino, b * BS, &mut buf).unwrap();
            assert!(buf == block(m as u64, b, 0), "file {m} block {b}");
        }
    }
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}
