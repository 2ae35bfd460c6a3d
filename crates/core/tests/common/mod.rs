//! Helpers shared by integration tests (`mod common;`).
#![allow(dead_code)] // each test file uses what it needs

use flashlog_core::{Error, FallocMode, Fs, Ino, SetAttr, ROOT_INO};
use flashlog_dev::DevError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
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

/// After a sync, nothing is dirty and nothing reserved: the space budget must equal what
/// its definition gives (`SegManager::headroom_at_rest`), with no overcommit. A copy in
/// flight whose page was taken meanwhile must have been paid exactly once.
pub fn assert_budget_exact(fs: &Fs, what: &str) {
    fs.sync().unwrap();
    let seg = &fs.inner().seg;
    assert_eq!(
        seg.space.overcommit_blocks.load(Ordering::Relaxed),
        0,
        "{what}: space overcommitted"
    );
    assert_eq!(
        seg.space.headroom(),
        seg.headroom_at_rest(),
        "{what}: the space budget drifted from the volume's state"
    );
}

/// A file's history for a power-cut check: per block, the byte its last fsync made durable
/// and every byte written to it since.
pub type BlockHistory = (Vec<u8>, Vec<Vec<u8>>);

/// Thread `t` of `threads` writes whole blocks of its files `my` (`blocks` blocks each,
/// all holding 1 at the start) and fsyncs one of them one time in `fsync_one_in`, for
/// `ops` operations or until the power is cut. Returns each file's history. A write
/// counts as a possible state before the call: one in flight at the cut may be durable
/// though it fails (a checkpoint after it can complete before its thread sees the cut).
pub fn write_and_fsync_until_cut(
    fs: &Fs,
    my: &[Ino],
    blocks: usize,
    (t, threads): (usize, usize),
    (ops, fsync_one_in): (u32, u32),
    seed: u64,
) -> Vec<BlockHistory> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed * 100 + t as u64);
    let mut cur: Vec<Vec<u8>> = vec![vec![1u8; blocks]; my.len()];
    let mut hist: Vec<BlockHistory> = (0..my.len())
        .map(|_| (vec![1u8; blocks], vec![Vec::new(); blocks]))
        .collect();
    for i in 0..ops {
        let f = rng.random_range(0..my.len());
        let r = if rng.random_range(0..fsync_one_in) == 0 {
            fs.fsync(my[f], false).map(|_| {
                hist[f].0 = cur[f].clone();
                hist[f].1.iter_mut().for_each(|v| v.clear());
            })
        } else {
            let b = rng.random_range(0..blocks);
            let byte = 2 + ((i as usize * threads + t) % 250) as u8;
            hist[f].1[b].push(byte);
            fs.write(my[f], b as u64 * 4096, &[byte; 4096])
                .map(|_| cur[f][b] = byte)
        };
        match r {
            Ok(()) => {}
            Err(Error::Device(DevError::PowerCut)) | Err(Error::Poisoned(_)) => break,
            Err(e) => panic!("seed {seed}: thread {t}: {e}"),
        }
    }
    hist
}

/// After the cut and a remount: every block of file `ino` is uniform and holds its last
/// fsync'd byte or one written since (`what` names the case in a failure).
pub fn assert_blocks_hold_history(fs: &Fs, ino: Ino, h: &BlockHistory, what: &str) {
    let (durable, since) = h;
    let mut got = vec![0u8; 4096];
    for b in 0..durable.len() {
        fs.read(ino, b as u64 * 4096, &mut got).unwrap();
        let ok = got.iter().all(|&x| x == got[0])
            && (got[0] == durable[b] || since[b].contains(&got[0]));
        assert!(
            ok,
            "{what}: block {b} holds {}, durable {}, written since {:?}",
            got[0], durable[b], since[b]
        );
    }
}

/// The root's file `name`, created if it does not exist.
pub fn open_or_create(fs: &Fs, name: &str) -> Ino {
    match fs.lookup(ROOT_INO, name.as_bytes()) {
        Ok(a) => a.ino,
        Err(Error::NotFound) => {
            fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        }
        Err(e) => panic!("lookup {name}: {e}"),
    }
}

/// Write `len` bytes of `byte` at `off` into file `ino` and into its model `m`.
pub fn write_both(fs: &Fs, ino: Ino, m: &mut Vec<u8>, off: u64, len: usize, byte: u8) {
    fs.write(ino, off, &vec![byte; len]).unwrap_or_else(|e| {
        panic!(
            "write of {len} bytes at {off} into {ino}: {e}; {:?}",
            fs.statfs()
        )
    });
    let end = off as usize + len;
    if m.len() < end {
        m.resize(end, 0);
    }
    m[off as usize..end].fill(byte);
}

/// Truncate (or extend) file `ino` and its model `m` to `size`.
pub fn truncate_both(fs: &Fs, ino: Ino, m: &mut Vec<u8>, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &set).unwrap();
    m.resize(size as usize, 0);
}

/// Punch a hole of `len` bytes at `off` into file `ino` and its model `m`.
pub fn punch_both(fs: &Fs, ino: Ino, m: &mut [u8], off: u64, len: u64) {
    fs.fallocate(ino, FallocMode::PunchHole, off, len).unwrap();
    let s = (off as usize).min(m.len());
    let e = ((off + len) as usize).min(m.len());
    m[s..e].fill(0);
}

/// `threads` threads, thread t owning files `inos[t * files .. (t + 1) * files]`, each
/// running `write_and_fsync_until_cut` with `(ops, fsync_one_in)`; their histories.
pub fn threads_until_cut(
    fs: &Fs,
    inos: &[Ino],
    blocks: usize,
    threads: usize,
    ops: (u32, u32),
    seed: u64,
) -> Vec<Vec<BlockHistory>> {
    let files = inos.len() / threads;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let my = &inos[t * files..(t + 1) * files];
                s.spawn(move || write_and_fsync_until_cut(fs, my, blocks, (t, threads), ops, seed))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// `n` new files in the root, file k named `name(k)` and `blocks` blocks of 1s long (the
/// starting state `write_and_fsync_until_cut` assumes).
pub fn files_of_ones(fs: &Fs, n: usize, blocks: usize, name: impl Fn(usize) -> String) -> Vec<Ino> {
    (0..n)
        .map(|k| {
            let ino = fs
                .create(ROOT_INO, name(k).as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, &vec![1u8; blocks * 4096]).unwrap();
            ino
        })
        .collect()
}

/// The emulated SSD behind a switch: once `cut` is set (by a test, or by `arm`'s countdown
/// reaching its request) every request fails as after a power cut (the host poisons itself
/// and stops); the SSD itself keeps what it accepted (`SsdDevice::power_cycle`).
pub struct Cut {
    pub inner: Arc<flashlog_ssd::SsdDevice>,
    pub cut: std::sync::atomic::AtomicBool,
    /// Requests left before the cut; negative: not armed.
    left: std::sync::atomic::AtomicI64,
    /// Reads count towards the cut too (`arm_past_reads` clears it).
    reads_count: std::sync::atomic::AtomicBool,
}

impl Cut {
    pub fn new(inner: Arc<flashlog_ssd::SsdDevice>) -> Self {
        Cut {
            inner,
            cut: std::sync::atomic::AtomicBool::new(false),
            left: std::sync::atomic::AtomicI64::new(-1),
            reads_count: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Cut the power at the `n`th request from now (that request never reaches the SSD).
    pub fn arm(&self, n: u64) {
        self.left.store(n as i64, Ordering::Release);
    }

    /// Cut the power at the `n`th request from now that changes something (writes,
    /// discards, flushes, acknowledgements and re-sends; reads pass and do not count).
    pub fn arm_past_reads(&self, n: u64) {
        self.reads_count.store(false, Ordering::Release);
        self.arm(n);
    }

    /// Requests left before an armed cut (counting down from `arm`'s `n`).
    pub fn left(&self) -> i64 {
        self.left.load(Ordering::Acquire)
    }

    fn check(&self) -> flashlog_dev::DevResult<()> {
        if !self.cut.load(Ordering::Acquire)
            && self.left.load(Ordering::Relaxed) >= 0
            && self.left.fetch_sub(1, Ordering::AcqRel) == 0
        {
            self.cut.store(true, Ordering::Release);
        }
        if self.cut.load(Ordering::Acquire) {
            Err(DevError::PowerCut)
        } else {
            Ok(())
        }
    }
}

impl flashlog_dev::BlockDevice for Cut {
    fn capabilities(&self) -> &flashlog_dev::Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, a: u64, b: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        if self.reads_count.load(Ordering::Acquire) {
            self.check()?;
        } else if self.cut.load(Ordering::Acquire) {
            return Err(DevError::PowerCut);
        }
        self.inner.read(a, b)
    }
    fn write(&self, a: u64, b: &[u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.check()?;
        self.inner.write(a, b)
    }
    fn write_hinted(
        &self,
        a: u64,
        b: &[u8],
        hint: flashlog_dev::WriteHint,
    ) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.check()?;
        self.inner.write_hinted(a, b, hint)
    }
    fn discard(&self, a: u64, n: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.check()?;
        self.inner.discard(a, n)
    }
    fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.check()?;
        self.inner.flush()
    }
    fn ack_migrations(&self, upto: u64) -> flashlog_dev::DevResult<()> {
        self.check()?;
        self.inner.ack_migrations(upto)
    }
    fn resend_migrations(&self) -> flashlog_dev::DevResult<()> {
        self.check()?;
        self.inner.resend_migrations()
    }
}

/// After an SSD power cut under `fs` (a `Cut` in front of `ssd`): stop the host, power-cycle
/// the SSD, check the volume with fsck, mount it with `opts`, check every file of `inos`
/// against its history (`results`, per thread, in file order), and unmount cleanly. Returns
/// fsck's report after the unmount (asserted clean).
pub fn remount_after_ssd_cut(
    fs: Arc<Fs>,
    ssd: &Arc<flashlog_ssd::SsdDevice>,
    opts: flashlog_core::MountOptions,
    inos: &[Ino],
    results: &[Vec<BlockHistory>],
    what: &str,
) -> flashlog_core::fsck::FsckReport {
    let fsck_clean = |when: &str| {
        let r = flashlog_core::fsck::fsck(&**ssd).unwrap();
        assert!(r.is_clean(), "{what}, {when}: fsck: {:?}", r.findings);
        r
    };
    let fs = Arc::try_unwrap(fs).ok().expect("threads are done");
    fs.abandon();
    ssd.power_cycle();
    fsck_clean("after the cut");
    let fs = Fs::mount(ssd.clone(), opts).unwrap();
    for (k, h) in results.iter().flatten().enumerate() {
        assert_blocks_hold_history(&fs, inos[k], h, &format!("{what}: f{k}"));
    }
    fs.unmount().unwrap();
    fsck_clean("after a clean unmount")
}

/// Threads and files of the multithreaded power-cut tests: thread t owns files
/// `t * CUT_FILES .. (t + 1) * CUT_FILES`.
pub const CUT_THREADS: usize = 3;
pub const CUT_FILES: usize = 2;

/// A fresh volume on `dev` for a multithreaded power-cut test: made, mounted with `opts`
/// plus 2 flusher lanes under a 512 KiB dirty cap (the flusher's visits in the race too),
/// `CUT_THREADS * CUT_FILES` files of 1s filling `fill_pct` % of it (`files_of_ones`),
/// synced, and the races widened. Returns the volume, its files and their length in blocks.
pub fn cut_race_volume(
    dev: Arc<dyn flashlog_dev::BlockDevice>,
    opts: flashlog_core::MountOptions,
    fill_pct: u64,
    seed: u64,
) -> (Arc<Fs>, Vec<Ino>, usize) {
    Fs::mkfs(dev.clone(), &flashlog_core::MkfsOptions::default()).unwrap();
    let opts = flashlog_core::MountOptions {
        flushers: 2,
        dirty_cap_bytes: 512 << 10,
        ..opts
    };
    let fs = Arc::new(Fs::mount(dev, opts).unwrap());
    let n = CUT_THREADS * CUT_FILES;
    let blocks = (fs.statfs().blocks * fill_pct / 100) as usize / n;
    let inos = files_of_ones(&fs, n, blocks, |k| format!("f{k}"));
    fs.sync().unwrap();
    widen_races(&fs, seed);
    (fs, inos, blocks)
}

/// The emulated 970pro-like SSD of `bytes` with FTL `ftl` (`interval`, `coupled`, ...),
/// contents kept in RAM.
pub fn emulated_ssd(ftl: &str, bytes: u64) -> Arc<flashlog_ssd::SsdDevice> {
    let mut c = flashlog_ssd::SsdConfig::preset("970pro-like")
        .unwrap()
        .with_capacity(bytes)
        .unwrap();
    c.set("ftl", ftl).unwrap();
    c.store = flashlog_ssd::StoreKind::Ram;
    Arc::new(flashlog_ssd::SsdDevice::new(c).unwrap())
}

/// Every file `name -> bytes` of `models` is in the root with exactly that size and those
/// bytes (`when` names the moment in a failure, which gives the first differing byte).
pub fn assert_files_hold(fs: &Fs, models: &std::collections::HashMap<String, Vec<u8>>, when: &str) {
    for (name, want) in models {
        let a = fs
            .lookup(ROOT_INO, name.as_bytes())
            .unwrap_or_else(|e| panic!("{when}: {name}: {e}"));
        assert_eq!(a.size, want.len() as u64, "{when}: size of {name}");
        let mut got = vec![0u8; want.len()];
        let mut off = 0;
        while off < got.len() {
            off += fs.read(a.ino, off as u64, &mut got[off..]).unwrap();
        }
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{when}: {name} differs first at byte {i} (block {}): {} instead of {}",
                i / 4096,
                got[i],
                want[i]
            );
        }
    }
}

/// Long fsync chains with no checkpoint between: 4 files `/f0..` of 64 blocks written and
/// synced, then `fsyncs` single-block overwrites each fsync'd (so the warm node log holds
/// version after version of the same few nodes, most of them superseded: the chain's
/// early sections hold nothing roll-forward keeps), with a new 1-block file created and
/// fsync'd every 10 of the last 100 (the recovery mount puts its name back, so its
/// checkpoint writes a dentry block and the directory's node). Returns the durable model,
/// name -> bytes, for `assert_files_hold`.
pub fn fsync_chains(
    fs: &Fs,
    seed: u64,
    fsyncs: usize,
) -> std::collections::HashMap<String, Vec<u8>> {
    const FILES: usize = 4;
    const BLOCKS: usize = 64;
    let mut model = std::collections::HashMap::new();
    let mut inos = Vec::new();
    for i in 0..FILES {
        let data = vec![i as u8 + 1; BLOCKS * 4096];
        inos.push(fs.write_file(&format!("/f{i}"), &data).unwrap());
        model.insert(format!("f{i}"), data);
    }
    fs.sync().unwrap();
    let cps = fs.stats().checkpoints;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for n in 0..fsyncs {
        if n + 100 > fsyncs && n % 10 == 9 {
            let name = format!("n{n}");
            let ino = fs
                .write_file(&format!("/{name}"), &[n as u8; 4096])
                .unwrap();
            fs.fsync(ino, false).unwrap();
            model.insert(name, vec![n as u8; 4096]);
        }
        let f = rng.random_range(0..FILES);
        let b = rng.random_range(0..BLOCKS);
        let byte = 10 + (n % 240) as u8;
        fs.write(inos[f], (b * 4096) as u64, &[byte; 4096]).unwrap();
        fs.fsync(inos[f], false).unwrap();
        model.get_mut(&format!("f{f}")).unwrap()[b * 4096..(b + 1) * 4096].fill(byte);
    }
    assert_eq!(
        fs.stats().checkpoints,
        cps,
        "a checkpoint cut the chains short"
    );
    model
}

/// The `gc=device` upcall-order workload: files of `file` bytes filling 60 % of statfs,
/// then random 4 KiB overwrites of up to three times `cap` (a sync every 20,000), ending
/// 60,000 writes after `reached()` first returned true. Returns every file's contents.
pub fn device_overwrites(
    fs: &Fs,
    cap: u64,
    file: u64,
    mut reached: impl FnMut() -> bool,
) -> Vec<Vec<u8>> {
    let nfiles = (fs.statfs().blocks * 4096 * 6 / 10 / file) as usize;
    let mut model: Vec<Vec<u8>> = Vec::new();
    let mut inos = Vec::new();
    for i in 0..nfiles {
        let data: Vec<u8> = (0..file).map(|k| (k as usize * 5 + i) as u8).collect();
        inos.push(fs.write_file(&format!("/f{i}"), &data).unwrap());
        model.push(data);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(71);
    let mut after = 0;
    for n in 0..3 * cap / 4096 {
        let f = rng.random_range(0..nfiles);
        let blk = rng.random_range(0..file / 4096) as usize;
        let byte: u8 = rng.random();
        fs.write(inos[f], (blk * 4096) as u64, &[byte; 4096])
            .unwrap();
        model[f][blk * 4096..(blk + 1) * 4096].fill(byte);
        if n % 20000 == 0 {
            fs.sync().unwrap();
        }
        if reached() {
            after += 1;
            if after == 60_000 {
                break;
            }
        }
    }
    model
}

/// (file index, 4 KiB blocks differing) for each file `/f{i}` that differs from `model`.
pub fn files_differing(fs: &Fs, model: &[Vec<u8>]) -> Vec<(usize, usize)> {
    let mut bad_files = Vec::new();
    for (i, m) in model.iter().enumerate() {
        let got = fs.read_file(&format!("/f{i}")).unwrap();
        let bad = (0..got.len() / 4096)
            .filter(|&b| got[b * 4096..(b + 1) * 4096] != m[b * 4096..(b + 1) * 4096])
            .count();
        if bad > 0 {
            bad_files.push((i, bad));
        }
    }
    bad_files
}

/// glibc's `struct mallinfo2`.
#[repr(C)]
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

extern "C" {
    fn mallinfo2() -> MallInfo2;
}

/// This process's resident memory in bytes (`VmRSS` of /proc/self/status).
pub fn resident_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib << 10
}

/// Heap bytes in use by the whole process (glibc: small/medium chunks plus mmapped ones).
pub fn heap_in_use() -> u64 {
    let m = unsafe { mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}
