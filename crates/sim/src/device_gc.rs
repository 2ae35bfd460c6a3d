//! Crash runs for `gc=device` (D2FS) on the emulated coupled-GC SSD.
//!
//! Owns: [`DeviceCase`] (seed, cut point, whether the cut request still ran on the device),
//! the device wrapper [`CutSsd`] that cuts power at a request index, the seeded workload
//! (files filling 60 % of statfs, random 4 KiB overwrites of twice the device, an fsync of
//! every file every [`FSYNC_EVERY`] writes), and the check after the cut.
//!
//! Why not the RAM images of `crash`: `gc=device` mounts only on a device that moves blocks
//! itself and reports the moves (the emulator's `ftl=coupled`). Its records of moves live in
//! the SSD's capacitor-backed memory: a power cut ([`SsdDevice::power_cycle`]) keeps every
//! accepted write and every unacknowledged record, loses upcalls not yet delivered on a
//! completion, and re-sends the unacknowledged ones at the next mount. So a case here is a
//! fresh emulated SSD, the workload up to the cut, a power cycle, and a remount on the same
//! SSD (there is no crash image to cut: the device keeps its state).
//!
//! Cut points (what `run_seed` picks from a trace of the uncut workload): the request right
//! after each step of the protocol (docs/DESIGN.md "D2FS host side", its case table):
//! `checkpoint:before-apply` with upcalls sent past the last applied id (received or in
//! transit, not applied); `discards:batch`, after each request by which a checkpoint
//! finishes the previous pack's discards (or a writer issues them, once the queue holds
//! half the device's slack: `gc_device::urgent_discard_blocks`); `checkpoint:discarded`, all of them issued;
//! `checkpoint:applied` with upcalls this checkpoint applied (in memory only); and, while the
//! device has upcalls outstanding, `checkpoint:durable` (pack durable, the previous one not
//! yet acknowledged), `checkpoint:acked` (acknowledged, the sections emptied before the
//! previous pack not freed yet), `checkpoint:released` (freed; this pack's discards not yet
//! issued, which a mount without threads leaves to the next checkpoint); a request whose
//! completion carried an upcall, cut so that the device ran it (the migration happened) but
//! the completion never reached the host (the upcall is lost in transit); and random
//! requests after the setup, the unmount included (a cut there is a cut).
//!
//! Invariants: a case is a pure function of its fields (virtual clock, `io_threads` 0, no
//! timer or handler thread: `ensure_space` applies batches of upcalls); after the cut every
//! fsync'd byte reads back (a block written since the last fsync holds its fsync'd bytes or
//! one of the later writes), fsck is clean, and after the clean unmount the device holds
//! valid exactly the blocks the volume references.
//!
//! Lock order: `CutSsd` has no locks (atomics only).

use crate::image::sim_mount_options;
use flashlog_core::{fsck, Fs, GcPolicy, MkfsOptions};
use flashlog_dev::{
    BlockDevice, Capabilities, Completion, DevError, DevResult, DeviceEvent, WriteHint,
};
use flashlog_ssd::{SsdConfig, SsdDevice, StoreKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Capacity of the emulated SSD of every case (the partition is ~2.4x this: regular region
/// 1.4x plus the GC region).
pub const CAPACITY: u64 = 256 << 20;
/// Size of each file of the workload.
pub const FILE: u64 = 4 << 20;
/// Random writes between two fsyncs of every file.
pub const FSYNC_EVERY: u64 = 2048;
/// The protocol steps the core marks with test points (checkpoint.rs).
pub const POINTS: [&str; 7] = [
    "checkpoint:before-apply",
    "checkpoint:applied",
    "checkpoint:durable",
    "checkpoint:acked",
    "checkpoint:released",
    "discards:batch",
    "checkpoint:discarded",
];

/// One crash case of `gc=device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCase {
    pub seed: u64,
    /// Index (0-based) of the device request at which power is cut: writes, discards,
    /// flushes, acknowledgements and re-send requests count.
    pub cut: u64,
    /// The cut request still runs on the device; only its completion (and any upcall on it)
    /// is lost. Otherwise the device never sees it.
    pub landed: bool,
}

impl DeviceCase {
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run -p flashlog-sim --release -- device --seed {} --cut {}{}",
            self.seed,
            self.cut,
            if self.landed { " --landed" } else { "" }
        )
    }
}

/// The emulated SSD behind a power switch: request `cut_at` and everything after fail as
/// after a power cut (the SSD itself keeps what it accepted).
pub struct CutSsd {
    inner: Arc<SsdDevice>,
    ops: AtomicU64,
    cut_at: u64,
    landed: bool,
    cut: AtomicBool,
    /// Trace runs: indices of requests whose completion carried an upcall.
    upcall_ops: Mutex<Vec<u64>>,
    /// Trace runs ([`CutSsd::log_requests`]): every counted request, in order.
    requests: Mutex<Option<Vec<Request>>>,
}

/// A request [`CutSsd`] counted: its kind and the blocks it names (the first range of a
/// batched discard, and the number of ranges as `count`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Write { addr: u64, count: u64 },
    Discard { addr: u64, ranges: u64 },
    Flush,
    Other,
}

impl CutSsd {
    pub fn new(inner: Arc<SsdDevice>, cut_at: Option<u64>, landed: bool) -> Self {
        CutSsd {
            inner,
            ops: AtomicU64::new(0),
            cut_at: cut_at.unwrap_or(u64::MAX),
            landed,
            cut: AtomicBool::new(false),
            upcall_ops: Mutex::new(Vec::new()),
            requests: Mutex::new(None),
        }
    }

    /// Record every request from now on (trace runs).
    pub fn log_requests(&self) {
        *self.requests.lock().expect("request log") = Some(Vec::new());
    }

    /// The requests recorded since [`CutSsd::log_requests`] (index = request number).
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .expect("request log")
            .clone()
            .unwrap_or_default()
    }

    /// Requests counted so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Acquire)
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Count one request and run it unless power is off.
    fn counted(
        &self,
        req: Request,
        f: impl FnOnce() -> DevResult<Completion>,
    ) -> DevResult<Completion> {
        if self.is_cut() {
            return Err(DevError::PowerCut);
        }
        let i = self.ops.fetch_add(1, Ordering::AcqRel);
        if let Some(log) = self.requests.lock().expect("request log").as_mut() {
            log.push(req);
        }
        if i >= self.cut_at {
            self.cut.store(true, Ordering::Release);
            if self.landed {
                // The device ran it; the completion (and what rode on it) never arrived.
                let _ = f();
            }
            return Err(DevError::PowerCut);
        }
        let c = f()?;
        if c.events
            .iter()
            .any(|e| matches!(e, DeviceEvent::Migrated { .. }))
        {
            self.upcall_ops.lock().expect("upcall op list").push(i);
        }
        Ok(c)
    }

    fn counted_unit(&self, f: impl FnOnce() -> DevResult<()>) -> DevResult<()> {
        self.counted(Request::Other, || f().map(|_| Completion::empty()))
            .map(|_| ())
    }
}

impl BlockDevice for CutSsd {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        if self.is_cut() {
            return Err(DevError::PowerCut);
        }
        self.inner.read(addr, buf)
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        if self.is_cut() {
            return Err(DevError::PowerCut);
        }
        self.inner.read_many(reqs)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.write_hinted(addr, buf, WriteHint::None)
    }
    fn write_hinted(&self, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Completion> {
        let count = (buf.len() / 4096) as u64;
        self.counted(Request::Write { addr, count }, || {
            self.inner.write_hinted(addr, buf, hint)
        })
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.counted(Request::Discard { addr, ranges: 1 }, || {
            self.inner.discard(addr, count)
        })
    }
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        let req = Request::Discard {
            addr: ranges.first().map_or(0, |r| r.0),
            ranges: ranges.len() as u64,
        };
        self.counted(req, || self.inner.discard_many(ranges))
    }
    fn flush(&self) -> DevResult<Completion> {
        self.counted(Request::Flush, || self.inner.flush())
    }
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        self.counted_unit(|| self.inner.ack_migrations(upto))
    }
    fn resend_migrations(&self) -> DevResult<()> {
        self.counted_unit(|| self.inner.resend_migrations())
    }
}

/// A fresh emulated coupled-GC SSD (virtual clock, contents in RAM).
pub fn coupled_ssd() -> Result<Arc<SsdDevice>, String> {
    let mut c = SsdConfig::preset("970pro-like")
        .and_then(|c| c.with_capacity(CAPACITY))
        .map_err(|e| e.to_string())?;
    c.set("ftl", "coupled").map_err(|e| e.to_string())?;
    c.set("clock", "virtual").map_err(|e| e.to_string())?;
    c.store = StoreKind::Ram;
    SsdDevice::new(c).map(Arc::new).map_err(|e| e.to_string())
}

/// Per protocol point, the request indices right after it.
type PointHits = Vec<(&'static str, Vec<u64>)>;

/// A seed's cases: those that passed (with what they saw) and those that failed (with the
/// findings).
pub type SeedResult = (Vec<(DeviceCase, DeviceOutcome)>, Vec<(DeviceCase, String)>);

/// What the uncut workload did: where each protocol step happened with upcalls outstanding.
#[derive(Clone, Debug, Default)]
pub struct DeviceTrace {
    /// Requests of the whole run, and of the setup (mkfs excluded; files written, synced).
    pub ops: u64,
    pub setup_ops: u64,
    /// Per point of [`POINTS`], the request index right after it (first occurrences).
    pub points: PointHits,
    /// Requests whose completion carried an upcall.
    pub upcall_ops: Vec<u64>,
    pub upcalls_applied: u64,
}

/// What a case saw after its cut.
#[derive(Clone, Debug, Default)]
pub struct DeviceOutcome {
    /// The cut happened (the workload reached the request).
    pub cut: bool,
    /// After the remount: upcalls the device re-sent that were applied, and skipped as
    /// already covered by the durable checkpoint.
    pub reapplied: u64,
    pub skipped: u64,
}

/// The workload's state: contents as of the last fsync, and per block the bytes written
/// since.
struct Files {
    inos: Vec<flashlog_core::Ino>,
    durable: Vec<Vec<u8>>,
    since: HashMap<(usize, usize), Vec<u8>>,
}

/// Run the seed's workload on `dev` until it ends or a request fails. Returns the files'
/// state, or None if the setup did not finish (the cut came before the first sync).
fn workload(fs: &Fs, seed: u64, dev: &CutSsd, setup_ops: &mut u64) -> Option<Files> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let nfiles = (fs.statfs().blocks * 4096 * 6 / 10 / FILE) as usize;
    let mut f = Files {
        inos: Vec::new(),
        durable: Vec::new(),
        since: HashMap::new(),
    };
    for i in 0..nfiles {
        let data: Vec<u8> = (0..FILE)
            .map(|k| (k as usize * 3 + i + seed as usize) as u8)
            .collect();
        f.inos.push(fs.write_file(&format!("/f{i}"), &data).ok()?);
        f.durable.push(data);
    }
    fs.sync().ok()?;
    *setup_ops = dev.ops();
    let mut current = f.durable.clone();
    for n in 1..=2 * CAPACITY / 4096 {
        let i = rng.random_range(0..f.inos.len());
        let blk = rng.random_range(0..FILE / 4096) as usize;
        let byte = rng.random::<u8>();
        f.since.entry((i, blk)).or_default().push(byte);
        if fs
            .write(f.inos[i], (blk * 4096) as u64, &[byte; 4096])
            .is_err()
        {
            return Some(f);
        }
        current[i][blk * 4096..(blk + 1) * 4096].fill(byte);
        if n % FSYNC_EVERY == 0 {
            for &ino in &f.inos {
                if fs.fsync(ino, false).is_err() {
                    return Some(f);
                }
            }
            f.durable = current.clone();
            f.since.clear();
        }
    }
    Some(f)
}

/// Make and mount the seed's volume on a fresh SSD behind `cut`.
fn fresh(
    seed: u64,
    cut: Option<u64>,
    landed: bool,
) -> Result<(Arc<SsdDevice>, Arc<CutSsd>, Fs), String> {
    let ssd = coupled_ssd()?;
    Fs::mkfs(
        ssd.clone(),
        &MkfsOptions {
            seed: Some(seed),
            ..Default::default()
        },
    )
    .map_err(|e| format!("mkfs: {e}"))?;
    let dev = Arc::new(CutSsd::new(ssd.clone(), cut, landed));
    let fs = Fs::mount(dev.clone(), sim_mount_options(GcPolicy::Device))
        .map_err(|e| format!("mount: {e}"))?;
    Ok((ssd, dev, fs))
}

/// The seed's workload without a cut, recording where the protocol steps happened.
pub fn trace(seed: u64) -> Result<DeviceTrace, String> {
    let (ssd, dev, fs) = fresh(seed, None, false)?;
    let seen: Arc<Mutex<PointHits>> = Arc::new(Mutex::new(
        POINTS.iter().map(|p| (*p, Vec::new())).collect(),
    ));
    {
        let (seen, dev, ssd) = (seen.clone(), dev.clone(), ssd.clone());
        let inner = Arc::downgrade(fs.inner());
        let pre = Arc::new(AtomicU64::new(0));
        fs.set_test_hook(Some(Arc::new(move |what| {
            let Some(k) = POINTS.iter().position(|p| *p == what) else {
                return;
            };
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let last = inner.collector.last_upcall();
            if what == "checkpoint:before-apply" {
                pre.store(last, Ordering::Relaxed);
            }
            // The acknowledgement trails the pack by a checkpoint, so upcalls are nearly
            // always outstanding; before the apply, want some the host has not applied
            // (sent past its last applied id), after it, some applied in memory only.
            let st = ssd.ftl_stats();
            let wanted = match what {
                "checkpoint:before-apply" => st.upcalls_sent > last,
                "checkpoint:applied" => last > pre.load(Ordering::Relaxed),
                _ => st.upcalls_sent > st.upcalls_acked,
            };
            if wanted {
                let mut s = seen.lock().expect("trace points");
                if s[k].1.len() < 8 {
                    s[k].1.push(dev.ops());
                }
            }
        })));
    }
    let mut setup_ops = 0;
    workload(&fs, seed, &dev, &mut setup_ops).ok_or("the uncut workload failed")?;
    fs.set_test_hook(None);
    let applied = fs.stats().upcalls_applied;
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    let points = seen.lock().expect("trace points").clone();
    let upcall_ops = dev.upcall_ops.lock().expect("upcall op list").clone();
    Ok(DeviceTrace {
        ops: dev.ops(),
        setup_ops,
        points,
        upcall_ops,
        upcalls_applied: applied,
    })
}

/// After a clean unmount the device holds valid exactly the blocks the volume references
/// (`reachable`, ascending): a dead block the device keeps valid is capacity lost for good
/// (its discard missed it, or went out after the device forgot the move that would have
/// redirected it), and a referenced block valid only at another address is a move the
/// unmount left unapplied (`Collector::unsettled`: the unmount takes in what the device
/// moved while its checkpoint wrote; before that, 247 blocks at `--seed 13 --cut 2528`).
/// None if so, else what differs.
fn dead_on_flash(ssd: &SsdDevice, reachable: &[u64]) -> Option<String> {
    let caps = ssd.capabilities();
    let d = ssd.valid_against(caps.conventional_blocks, reachable);
    if d.unreferenced.is_empty() && d.missing == 0 {
        return None;
    }
    let gc_from = caps.block_count - caps.gc_region_blocks;
    Some(format!(
        "after the clean unmount the device keeps {} valid blocks for {} the volume \
         references: {} unreferenced ({} of them in the GC region from {gc_from:#x}; first \
         {:x?}), {} referenced ones moved and not yet remapped",
        d.valid,
        reachable.len(),
        d.unreferenced.len(),
        d.unreferenced.iter().filter(|&&l| l >= gc_from).count(),
        &d.unreferenced[..d.unreferenced.len().min(8)],
        d.missing
    ))
}

/// Run one case: the workload up to the cut, a power cycle of the SSD, a remount, and the
/// checks. Err carries every finding.
pub fn run_case(case: &DeviceCase) -> Result<DeviceOutcome, String> {
    let (ssd, dev, fs) = fresh(case.seed, Some(case.cut), case.landed)?;
    let mut setup_ops = 0;
    let files = workload(&fs, case.seed, &dev, &mut setup_ops);
    if dev.is_cut() {
        fs.abandon();
    } else if let Err(e) = fs.unmount() {
        // A cut point of the trace can fall in the unmount (its checkpoint, the discards
        // it finishes, its acknowledgement): that is a cut like any other.
        if !dev.is_cut() {
            return Err(format!("unmount: {e}"));
        }
    }
    let cut = dev.is_cut();
    ssd.power_cycle();
    let fs = Fs::mount(ssd.clone(), sim_mount_options(GcPolicy::Device))
        .map_err(|e| format!("remount after the cut: {e}"))?;
    let c = fs.stats();
    let mut out = DeviceOutcome {
        cut,
        reapplied: c.upcalls_applied,
        skipped: c.upcalls_skipped,
    };
    let mut bad = Vec::new();
    if let Some(f) = &files {
        for (i, d) in f.durable.iter().enumerate() {
            let got = match fs.read_file(&format!("/f{i}")) {
                Ok(g) => g,
                Err(e) => {
                    bad.push(format!("file {i}: {e}"));
                    continue;
                }
            };
            if got.len() != d.len() {
                bad.push(format!(
                    "file {i}: {} bytes, fsync'd {}",
                    got.len(),
                    d.len()
                ));
                continue;
            }
            for (b, chunk) in got.chunks(4096).enumerate() {
                if chunk == &d[b * 4096..(b + 1) * 4096] {
                    continue;
                }
                let later = f.since.get(&(i, b)).map(|v| v.as_slice()).unwrap_or(&[]);
                if !(chunk.iter().all(|&x| x == chunk[0]) && later.contains(&chunk[0])) {
                    bad.push(format!("file {i} block {b}: fsync'd bytes lost"));
                }
            }
        }
    }
    fs.unmount()
        .map_err(|e| format!("unmount after the check: {e}"))?;
    match fsck(&*ssd) {
        Ok(r) if r.is_clean() => {
            if let Some(m) = dead_on_flash(&ssd, &r.reachable.to_vec()) {
                bad.push(m);
            }
        }
        Ok(r) => bad.push(format!("fsck: {r}")),
        Err(e) => bad.push(format!("fsck: {e}")),
    }
    bad.truncate(10);
    if bad.is_empty() {
        out.cut = cut;
        Ok(out)
    } else {
        Err(bad.join("; "))
    }
}

/// The cases `run_seed` runs for a trace: the first request after each protocol step (and
/// after its second occurrence), two requests that delivered an upcall (cut after the
/// device ran them), and `random` requests after the setup.
pub fn cases_of(seed: u64, t: &DeviceTrace, random: u64) -> Vec<DeviceCase> {
    let mut v = Vec::new();
    for (_, idx) in &t.points {
        for &i in idx.iter().take(2) {
            v.push(DeviceCase {
                seed,
                cut: i,
                landed: false,
            });
        }
    }
    let ups: Vec<u64> = t
        .upcall_ops
        .iter()
        .copied()
        .filter(|&i| i >= t.setup_ops)
        .collect();
    for k in [ups.len() / 3, 2 * ups.len() / 3] {
        if let Some(&i) = ups.get(k) {
            v.push(DeviceCase {
                seed,
                cut: i,
                landed: true,
            });
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd2f5);
    for _ in 0..random {
        if t.ops > t.setup_ops {
            v.push(DeviceCase {
                seed,
                cut: rng.random_range(t.setup_ops..t.ops),
                landed: rng.random(),
            });
        }
    }
    v.sort_by_key(|c| (c.cut, c.landed));
    v.dedup();
    v
}

/// Every case of one seed. Returns (cases run, failures as (case, findings)); Err if the
/// trace itself failed.
pub fn run_seed(seed: u64, random: u64) -> Result<SeedResult, String> {
    let t = trace(seed)?;
    if t.upcalls_applied == 0 {
        return Err(format!(
            "seed {seed}: the device never sent an upcall: the workload does not reach device GC"
        ));
    }
    for (p, idx) in &t.points {
        if idx.is_empty() {
            return Err(format!(
                "seed {seed}: {p} never reached with upcalls outstanding"
            ));
        }
    }
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for c in cases_of(seed, &t, random) {
        match run_case(&c) {
            Ok(o) => ok.push((c, o)),
            Err(e) => failed.push((c, e)),
        }
    }
    Ok((ok, failed))
}
