//! The crash driver: seed -> workload -> power cut -> crash image -> fsck -> remount ->
//! check against the model.
//!
//! Owns the definition of a crash case ([`Case`]) and the three ways of running cases:
//! one ([`run_case`], what `replay` runs), a budget of sampled cut points over a range of
//! seeds ([`run_sampled`], CI and `run`), and every cut point of one seed's trace
//! ([`run_exhaustive`], littlefs style).
//!
//! Invariants: a case depends on nothing but its fields (base image pinned, no timer thread,
//! ChaCha8 seeded from the case); every [`Failure`] prints the command that replays it.
//! A seed's trace (the device requests of its workload run without a cut) is what cut points
//! index; each case re-runs the workload from scratch up to its cut.

use crate::check::{check_live, check_recovered};
use crate::image::{base_image_mlogs, sim_mount_options};
use crate::lanes::{Lanes, LANES};
use crate::model::Model;
use crate::workload::{
    apply, remap_after, remap_rng, reuse_name_after, reuse_name_ops, write_and_fsync, Op, Outcome,
    Workload,
};
use flashlog_core::{fsck, Fs, GcPolicy, Ino, MlogMap, ROOT_INO};
use flashlog_dev::{BlockDevice, CrashMode, RamDevice, SimDevice, SimOp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Operations per workload: short, so that each crash point is cheap, long enough to mix
/// every kind of operation with a few durable points.
pub const OPS_MIN: u64 = 12;
pub const OPS_SPREAD: u64 = 24;

pub fn ops_for(seed: u64) -> usize {
    (OPS_MIN + seed % OPS_SPREAD) as usize
}

pub fn mode_name(m: CrashMode) -> &'static str {
    match m {
        CrashMode::DropUnflushed => "drop",
        CrashMode::KeepRandomSubset => "subset",
        CrashMode::TearOne => "tear",
    }
}

pub fn parse_mode(s: &str) -> Result<CrashMode, String> {
    match s {
        "drop" => Ok(CrashMode::DropUnflushed),
        "subset" => Ok(CrashMode::KeepRandomSubset),
        "tear" => Ok(CrashMode::TearOne),
        _ => Err(format!(
            "unknown kill mode {s:?} (expected drop, subset or tear)"
        )),
    }
}

/// One crash case: everything needed to replay it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    pub seed: u64,
    pub mode: CrashMode,
    /// Device request (0-based: writes, discards, flushes) at which power is cut.
    pub cut: u64,
    /// Blocks of a multi-block write at the cut that still land.
    pub partial: u64,
    pub policy: GcPolicy,
    /// Log partitions the base image was made with (mkfs `mlogs`).
    pub mlogs: u32,
    /// Mount option `mlog=`: with `thread`, the driver runs each operation on one of
    /// [`LANES`] threads of known slots (drawn from the seed), so work spreads over mlogs.
    pub mlog_map: MlogMap,
    /// Mount option `inode_cache_max` (0: the default). A small cache makes the cap relief
    /// evict cells between checkpoints, so fsync meets files loaded back from disk.
    pub inode_cache: usize,
    /// A second cut, in the recovery mount of the crash image: at its request `r` (0-based,
    /// as `cut`; past its last request the mount completes and is abandoned), whose crash
    /// image (same mode) is what is checked. Until its checkpoint is durable the recovery
    /// mount may write nothing the next one needs again (the fsync chains).
    pub recut: Option<u64>,
}

/// Sampled cases get a second cut in the recovery mount one time in this many
/// ([`Case::recut`]), at one of its first [`RECUT_SPAN`] requests.
pub const RECUT_ONE_IN: u32 = 4;
/// The requests a recut is drawn from (a recovery mount makes ~30-40 on the base image).
pub const RECUT_SPAN: u64 = 48;

impl Case {
    /// The command that replays this case.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run -p flashlog-sim --release -- replay --seed {} --mode {} --cut {} --partial {} --policy {}{}{}{}{}",
            self.seed,
            mode_name(self.mode),
            self.cut,
            self.partial,
            crate::policy_name(self.policy),
            if self.mlogs == 1 {
                String::new()
            } else {
                format!(" --mlogs {}", self.mlogs)
            },
            if self.mlog_map == MlogMap::Ino {
                String::new()
            } else {
                format!(" --mlog-map {}", self.mlog_map.name())
            },
            if self.inode_cache == 0 {
                String::new()
            } else {
                format!(" --inode-cache {}", self.inode_cache)
            },
            match self.recut {
                None => String::new(),
                Some(r) => format!(" --recut {r}"),
            }
        )
    }

    pub fn mount_kind(&self) -> MountKind {
        MountKind {
            map: self.mlog_map,
            inode_cache: self.inode_cache,
        }
    }

    /// Seed of the crash image's choice of surviving writes (distinct per cut point).
    fn image_seed(&self) -> u64 {
        self.seed.rotate_left(17) ^ self.cut.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.partial
    }
}

/// A failed case: what broke, the operations up to the cut, and how to replay it.
#[derive(Debug)]
pub struct Failure {
    pub case: Option<Case>,
    pub seed: u64,
    pub what: Vec<String>,
    pub ops: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.case {
            Some(c) => writeln!(
                f,
                "crash case FAILED: seed {} mode {} cut {} partial {}",
                c.seed,
                mode_name(c.mode),
                c.cut,
                c.partial
            )?,
            None => writeln!(
                f,
                "seed {} FAILED before any crash (model check of the live volume)",
                self.seed
            )?,
        }
        for w in &self.what {
            writeln!(f, "  - {w}")?;
        }
        writeln!(f, "  operations ({}):", self.ops.len())?;
        for (i, o) in self.ops.iter().enumerate() {
            writeln!(f, "    {i:3}: {o}")?;
        }
        match &self.case {
            Some(c) => write!(f, "  replay: {}", c.replay_command()),
            None => write!(
                f,
                "  replay: cargo run -p flashlog-sim --release -- trace --seed {}",
                self.seed
            ),
        }
    }
}

/// The device requests of one seed's workload, run without a cut.
pub struct Trace {
    pub ops: Vec<SimOp>,
    pub log: Vec<String>,
}

/// How the simulation mounts: `mlog=` and the inode cache (0: the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountKind {
    pub map: MlogMap,
    pub inode_cache: usize,
}

impl From<MlogMap> for MountKind {
    fn from(map: MlogMap) -> Self {
        MountKind {
            map,
            inode_cache: 0,
        }
    }
}

fn mount(
    dev: Arc<dyn BlockDevice>,
    policy: GcPolicy,
    kind: MountKind,
) -> flashlog_core::Result<Fs> {
    let base = sim_mount_options(policy);
    Fs::mount(
        dev,
        flashlog_core::MountOptions {
            mlog_map: kind.map,
            inode_cache_max: match kind.inode_cache {
                0 => base.inode_cache_max,
                n => n,
            },
            ..base
        },
    )
}

/// Salt of the stream that draws each operation's lane under `mlog=thread` (a stream of its
/// own: the workload's draws stay those of `mlog=ino`).
const LANE_SALT: u64 = 0x1a4e_5000_0000_0012;

/// Run `seed`'s workload on `dev` until it ends or power is cut. Returns the model and the
/// log of operations (the one in flight at the cut included, marked).
type Driven = Result<(Model, Vec<String>, bool), (String, Vec<String>)>;

/// Where a run's operations come from.
#[derive(Clone, Copy, Debug)]
pub enum Script<'a> {
    /// Drawn by the seed's workload from the model (what every case runs).
    Seed(u64),
    /// A fixed list (regression tests replay a failing sequence this way, independent of
    /// how the workload draws operations). Inode numbers in the list are placeholders: the
    /// k-th create or mkdir of the list makes inode `ROOT_INO + 1 + k` (what a fresh volume
    /// hands out from the first nid region), and the driver maps each placeholder to the
    /// number the file system actually handed out (the nid allocator's region depends on
    /// the calling thread).
    Ops(&'a [Op]),
}

/// `op` with every inode number passed through `f`.
fn map_inos(op: &Op, f: impl Fn(Ino) -> Ino) -> Op {
    let mut op = op.clone();
    match &mut op {
        Op::Create { parent, .. } => *parent = f(*parent),
        Op::Mkdir { .. } | Op::Sync | Op::Rmdir { .. } | Op::Remap { .. } => {}
        Op::Write { ino, .. }
        | Op::Truncate { ino, .. }
        | Op::PunchHole { ino, .. }
        | Op::Fsync { ino, .. }
        | Op::FsyncDir { ino }
        | Op::SetXattr { ino, .. }
        | Op::RemoveXattr { ino, .. }
        | Op::Chmod { ino, .. }
        | Op::Chown { ino, .. }
        | Op::SetTimes { ino, .. } => *ino = f(*ino),
        Op::Rename {
            parent, new_parent, ..
        } => {
            *parent = f(*parent);
            *new_parent = f(*new_parent);
        }
        Op::Link { ino, parent, .. } => {
            *ino = f(*ino);
            *parent = f(*parent);
        }
        Op::Unlink { parent, .. } => *parent = f(*parent),
    }
    op
}

fn drive(fs: &Fs, script: Script) -> Driven {
    drive_observed(fs, script, &mut |_, _, _| {})
}

/// [`drive`], calling `obs` after every operation the file system accepted, with the model
/// as it left it (the multi-mlog coverage test counts what the workloads exercise). Under
/// `mlog=thread` every operation runs on a lane ([`Lanes`]) drawn from the seed; `obs` runs
/// on the calling thread.
pub fn drive_observed(fs: &Fs, script: Script, obs: &mut dyn FnMut(&Fs, &Op, &Model)) -> Driven {
    if fs.inner().opts.mlog_map == MlogMap::Thread {
        std::thread::scope(|s| match Lanes::spawn(s) {
            Ok(l) => drive_on(fs, script, obs, Some(&l)),
            Err(e) => Err((e, Vec::new())),
        })
    } else {
        drive_on(fs, script, obs, None)
    }
}

fn drive_on<'env>(
    fs: &'env Fs,
    script: Script,
    obs: &mut dyn FnMut(&Fs, &Op, &Model),
    lanes: Option<&Lanes<'env>>,
) -> Driven {
    let mut m = Model::new();
    let mut log = Vec::new();
    let mut lane_rng = ChaCha8Rng::seed_from_u64(
        LANE_SALT
            ^ match script {
                Script::Seed(s) => s,
                Script::Ops(_) => 0,
            },
    );
    let mut step = |m: &mut Model, op: &Op| -> Option<Driven> {
        let outcome = match lanes {
            None => {
                log.push(op.to_string());
                apply(fs, m, op)
            }
            Some(l) => {
                let lane = lane_rng.random_range(0..LANES);
                log.push(format!("{op}   [lane {lane}]"));
                let (mm, op) = (std::mem::take(m), op.clone());
                let (mm, out) = l.run(lane, move || {
                    let mut mm = mm;
                    let out = apply(fs, &mut mm, &op);
                    (mm, out)
                });
                *m = mm;
                out
            }
        };
        match outcome {
            Outcome::Done => {
                obs(fs, op, m);
                None
            }
            Outcome::Cut(e) => {
                if let Some(l) = log.last_mut() {
                    l.push_str(&format!("   <- power cut here ({e})"));
                }
                Some(Ok((m.clone(), log.clone(), true)))
            }
            Outcome::Mismatch(msg) => Some(Err((msg, log.clone()))),
        }
    };
    match script {
        Script::Seed(seed) => {
            let mut w = Workload::new(seed);
            let mlogs = fs.inner().geo().mlogs;
            let mut extra = remap_rng(seed);
            for _ in 0..ops_for(seed) {
                let op: Op = w.next_op(&m);
                if let Some(r) = step(&mut m, &op) {
                    return r;
                }
                // Several mlogs: files also move between them (one file's nodes spread
                // over several chains), and a new file just fsync'd sometimes gives its
                // name to a newer one on another chain (the DENT conflict the version
                // merge resolves). Drawn from a stream of their own: one mlog runs exactly
                // the seed's operations.
                if mlogs > 1 {
                    if let Some(r) = remap_after(&mut extra, mlogs) {
                        if let Some(r) = step(&mut m, &r) {
                            return r;
                        }
                    }
                    if let Some(key) = reuse_name_after(&mut extra, &m, &op) {
                        for op in reuse_name_ops(&mut extra, &key, mlogs) {
                            if let Some(r) = step(&mut m, &op) {
                                return r;
                            }
                        }
                        // The new file's inode number is known now: its data and fsync.
                        if let Some(ino) = m.lookup(key.0, &key.1) {
                            for op in write_and_fsync(&mut extra, ino) {
                                if let Some(r) = step(&mut m, &op) {
                                    return r;
                                }
                            }
                        }
                    }
                }
            }
        }
        Script::Ops(ops) => {
            let mut real: BTreeMap<Ino, Ino> = BTreeMap::new();
            let mut created = 0;
            for op in ops {
                let op = map_inos(op, |i| real.get(&i).copied().unwrap_or(i));
                let before: BTreeSet<Ino> = m.inodes.keys().copied().collect();
                if let Some(r) = step(&mut m, &op) {
                    return r;
                }
                if matches!(op, Op::Create { .. } | Op::Mkdir { .. }) {
                    let placeholder = ROOT_INO + 1 + created;
                    created += 1;
                    if let Some(&new) = m.inodes.keys().find(|i| !before.contains(i)) {
                        real.insert(placeholder, new);
                    }
                }
            }
        }
    }
    Ok((m, log, false))
}

/// Run `seed` without a crash: record its trace, and check the live volume and a clean
/// unmount against the model.
pub fn trace(seed: u64, policy: GcPolicy) -> Result<Trace, Failure> {
    trace_script(Script::Seed(seed), policy, 1)
}

/// [`trace_script`] with mount option `mlog=ino` (the default).
pub fn trace_script(script: Script, policy: GcPolicy, mlogs: u32) -> Result<Trace, Failure> {
    trace_script_map(script, policy, mlogs, MlogMap::Ino)
}

/// [`trace`] of any script on a base image with `mlogs` log partitions (a fixed list
/// reports seed 0).
pub fn trace_script_map(
    script: Script,
    policy: GcPolicy,
    mlogs: u32,
    map: impl Into<MountKind>,
) -> Result<Trace, Failure> {
    let map = map.into();
    let seed = match script {
        Script::Seed(s) => s,
        Script::Ops(_) => 0,
    };
    let fail = |what: Vec<String>, ops: Vec<String>| Failure {
        case: None,
        seed,
        what,
        ops,
    };
    let base = base_image_mlogs(mlogs).map_err(|e| fail(vec![e], vec![]))?;
    let dev = Arc::new(SimDevice::from_image(base));
    dev.record_trace(true);
    let fs = mount(dev.clone(), policy, map)
        .map_err(|e| fail(vec![format!("mount of the base image: {e}")], vec![]))?;
    let (m, log, _) = drive(&fs, script).map_err(|(msg, log)| fail(vec![msg], log.clone()))?;
    let bad = check_live(&fs, &m);
    if !bad.is_empty() {
        return Err(fail(bad, log));
    }
    let ops = dev.trace();
    fs.abandon();
    // A clean shutdown of the same run must also check out.
    let img = dev.clean_image();
    let fs2 = mount(Arc::new(img.deep_clone()), policy, map)
        .map_err(|e| fail(vec![format!("remount after a clean run: {e}")], log.clone()))?;
    let bad = check_recovered(&fs2, &m);
    if let Err(e) = fs2.unmount() {
        return Err(fail(vec![format!("unmount after a clean run: {e}")], log));
    }
    if !bad.is_empty() {
        return Err(fail(bad, log));
    }
    Ok(Trace { ops, log })
}

/// Run one crash case.
pub fn run_case(case: &Case) -> Result<(), Failure> {
    run_script_case(Script::Seed(case.seed), case)
}

/// Run one crash case of any script (`case.seed` is ignored for a fixed list).
pub fn run_script_case(script: Script, case: &Case) -> Result<(), Failure> {
    let fail = |what: Vec<String>, ops: &[String]| Failure {
        case: Some(*case),
        seed: case.seed,
        what,
        ops: ops.to_vec(),
    };
    let base = base_image_mlogs(case.mlogs).map_err(|e| fail(vec![e], &[]))?;
    let dev = Arc::new(SimDevice::from_image(base));
    dev.cut_at(case.cut, case.partial);
    let (model, log) = match mount(dev.clone(), case.policy, case.mount_kind()) {
        Ok(fs) => {
            let r = drive(&fs, script);
            fs.abandon();
            match r {
                Ok((m, log, _)) => (m, log),
                Err((msg, log)) => return Err(fail(vec![msg], &log)),
            }
        }
        // Power cut during the first mount (its recovery checkpoint): nothing was done yet.
        Err(_) if dev.is_cut() => (Model::new(), vec!["mount   <- power cut here".into()]),
        Err(e) => return Err(fail(vec![format!("first mount: {e}")], &[])),
    };
    dev.cut_now();
    let mut img = dev.crash_image(case.mode, case.image_seed());
    if let Some(r) = case.recut {
        let dev = Arc::new(SimDevice::from_image(img));
        dev.cut_at(r, 0);
        if let Ok(fs) = mount(dev.clone(), case.policy, case.mount_kind()) {
            fs.abandon();
        }
        dev.cut_now();
        img = dev.crash_image(case.mode, case.image_seed().rotate_left(7) ^ r);
    }
    check_image_map(img, &model, case.policy, case.mount_kind()).map_err(|what| fail(what, &log))
}

/// fsck, remount, compare, unmount, fsck again, remount again, compare again.
pub fn check_image(img: RamDevice, model: &Model, policy: GcPolicy) -> Result<(), Vec<String>> {
    check_image_map(img, model, policy, MlogMap::Ino)
}

/// [`check_image`], remounting with mount option `mlog=map`.
pub fn check_image_map(
    img: RamDevice,
    model: &Model,
    policy: GcPolicy,
    map: impl Into<MountKind>,
) -> Result<(), Vec<String>> {
    let map = map.into();
    let img = Arc::new(img);
    let fsck_clean = |when: &str| -> Result<(), Vec<String>> {
        match fsck(&*img) {
            Ok(r) if r.is_clean() => Ok(()),
            Ok(r) => Err(vec![format!("fsck {when} is not clean:\n{r}")]),
            Err(e) => Err(vec![format!("fsck {when} failed: {e}")]),
        }
    };
    fsck_clean("of the crash image (before recovery)")?;
    for round in ["first", "second"] {
        let fs = mount(img.clone(), policy, map)
            .map_err(|e| vec![format!("{round} remount after the crash failed: {e}")])?;
        let bad = check_recovered(&fs, model);
        if !bad.is_empty() {
            fs.abandon();
            return Err(bad
                .into_iter()
                .map(|b| format!("after the {round} remount: {b}"))
                .collect());
        }
        fs.unmount()
            .map_err(|e| vec![format!("unmount after the {round} remount: {e}")])?;
        fsck_clean(&format!("after the {round} remount and unmount"))?;
    }
    Ok(())
}

/// Pick the partial-block count for a cut at `cut` in `trace`.
fn partial_for(trace: &[SimOp], cut: u64, rng: &mut ChaCha8Rng) -> u64 {
    match trace.get(cut as usize) {
        Some(SimOp::Write { count, .. }) if *count > 1 => rng.random_range(0..*count),
        _ => 0,
    }
}

/// Totals of a run.
#[derive(Debug, Default)]
pub struct Summary {
    pub seeds: u64,
    pub cases: u64,
    pub per_mode: [u64; 3],
    /// Cases per mount option `mlog=`: ino, thread.
    pub per_map: [u64; 2],
    pub failures: Vec<String>,
}

fn mode_index(m: CrashMode) -> usize {
    match m {
        CrashMode::DropUnflushed => 0,
        CrashMode::KeepRandomSubset => 1,
        CrashMode::TearOne => 2,
    }
}

/// Options of a sampled run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub seeds: std::ops::Range<u64>,
    pub modes: Vec<CrashMode>,
    /// Cut points sampled per seed and mode.
    pub cuts_per_mode: u64,
    pub policies: Vec<GcPolicy>,
    /// Mlog counts of the base images (each policy runs on each).
    pub mlogs: Vec<u32>,
    /// Mount options `mlog=` (each policy and mlog count runs with each).
    pub mlog_maps: Vec<MlogMap>,
    /// Mount options `inode_cache_max` (0: the default; each setup above runs with each).
    pub inode_caches: Vec<usize>,
    pub threads: usize,
    /// Stop after this many failures.
    pub max_failures: usize,
    /// Print a progress line every this many seeds (0: never).
    pub progress_every: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seeds: 0..100,
            modes: CrashMode::ALL.to_vec(),
            cuts_per_mode: 4,
            policies: crate::POLICIES.to_vec(),
            mlogs: vec![1],
            mlog_maps: vec![MlogMap::Ino],
            inode_caches: vec![0],
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_failures: 10,
            progress_every: 0,
        }
    }
}

/// Cases of one seed: `cuts_per_mode` cut points per mode, drawn from the seed.
pub fn sampled_cases(
    seed: u64,
    trace: &[SimOp],
    o: &RunOptions,
    policy: GcPolicy,
    mlogs: u32,
) -> Vec<Case> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc0ff_ee00_dead_beef);
    let n = trace.len() as u64;
    let mut out = Vec::new();
    for &mode in &o.modes {
        for _ in 0..o.cuts_per_mode {
            // Cut points past the trace (n) crash after the last request.
            let cut = rng.random_range(0..=n);
            let partial = partial_for(trace, cut, &mut rng);
            let recut =
                (rng.random_range(0..RECUT_ONE_IN) == 0).then(|| rng.random_range(0..RECUT_SPAN));
            out.push(Case {
                seed,
                mode,
                cut,
                partial,
                policy,
                mlogs,
                mlog_map: MlogMap::Ino,
                inode_cache: 0,
                recut,
            });
        }
    }
    out
}

/// Every cut point of the seed's trace under every mode; multi-block writes are cut before
/// their first block, after their first, and before their last.
pub fn exhaustive_cases(
    seed: u64,
    trace: &[SimOp],
    modes: &[CrashMode],
    policy: GcPolicy,
    mlogs: u32,
) -> Vec<Case> {
    let mut out = Vec::new();
    for cut in 0..=trace.len() as u64 {
        let mut partials = vec![0];
        if let Some(SimOp::Write { count, .. }) = trace.get(cut as usize) {
            for p in [1, count - 1] {
                if p > 0 && p < *count && !partials.contains(&p) {
                    partials.push(p);
                }
            }
        }
        for &mode in modes {
            for &partial in &partials {
                out.push(Case {
                    seed,
                    mode,
                    cut,
                    partial,
                    policy,
                    mlogs,
                    mlog_map: MlogMap::Ino,
                    inode_cache: 0,
                    recut: None,
                });
            }
        }
    }
    out
}

/// Run cases for a range of seeds on `o.threads` threads.
pub fn run_sampled(o: &RunOptions) -> Summary {
    run_seeds(o, |seed, trace, policy, mlogs| {
        sampled_cases(seed, trace, o, policy, mlogs)
    })
}

/// Exhaustive run of the seeds in `o.seeds`.
pub fn run_exhaustive(o: &RunOptions) -> Summary {
    run_seeds(o, |seed, trace, policy, mlogs| {
        exhaustive_cases(seed, trace, &o.modes, policy, mlogs)
    })
}

fn run_seeds(
    o: &RunOptions,
    cases_of: impl Fn(u64, &[SimOp], GcPolicy, u32) -> Vec<Case> + Sync,
) -> Summary {
    let next = AtomicU64::new(o.seeds.start);
    let cases = AtomicU64::new(0);
    let done_seeds = AtomicU64::new(0);
    let failed = AtomicUsize::new(0);
    let per_mode: [AtomicU64; 3] = Default::default();
    let per_map: [AtomicU64; 2] = Default::default();
    let failures = Mutex::new(Vec::new());
    let record = |f: Failure| {
        eprintln!("{f}");
        failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut v) = failures.lock() {
            v.push(f.to_string());
        }
    };
    let kinds: Vec<MountKind> = o
        .mlog_maps
        .iter()
        .flat_map(|&map| {
            o.inode_caches
                .iter()
                .map(move |&inode_cache| MountKind { map, inode_cache })
        })
        .collect();
    let kinds = &kinds;
    std::thread::scope(|s| {
        for _ in 0..o.threads.max(1) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= o.seeds.end || failed.load(Ordering::Relaxed) >= o.max_failures {
                    return;
                }
                let setups = o.policies.iter().flat_map(|&p| {
                    o.mlogs
                        .iter()
                        .flat_map(move |&m| kinds.iter().map(move |&k| (p, m, k)))
                });
                for (policy, mlogs, kind) in setups {
                    let map = kind.map;
                    let t = match trace_script_map(Script::Seed(seed), policy, mlogs, kind) {
                        Ok(t) => t,
                        Err(f) => {
                            record(f);
                            continue;
                        }
                    };
                    for mut case in cases_of(seed, &t.ops, policy, mlogs) {
                        case.mlog_map = map;
                        case.inode_cache = kind.inode_cache;
                        cases.fetch_add(1, Ordering::Relaxed);
                        per_mode[mode_index(case.mode)].fetch_add(1, Ordering::Relaxed);
                        per_map[usize::from(map == MlogMap::Thread)]
                            .fetch_add(1, Ordering::Relaxed);
                        if let Err(f) = run_case(&case) {
                            record(f);
                            if failed.load(Ordering::Relaxed) >= o.max_failures {
                                return;
                            }
                        }
                    }
                }
                let d = done_seeds.fetch_add(1, Ordering::Relaxed) + 1;
                if o.progress_every > 0 && d.is_multiple_of(o.progress_every) {
                    eprintln!(
                        "  {d} seeds, {} crash points, {} failures",
                        cases.load(Ordering::Relaxed),
                        failed.load(Ordering::Relaxed)
                    );
                }
            });
        }
    });
    Summary {
        seeds: done_seeds.into_inner(),
        cases: cases.into_inner(),
        per_mode: per_mode.map(|a| a.into_inner()),
        per_map: per_map.map(|a| a.into_inner()),
        failures: failures.into_inner().unwrap_or_default(),
    }
}
