//! Crash runs for `gc=none` (IPLFS) on the emulated interval-mapping SSD.
//!
//! Owns: [`NoneCase`] (seed, cut point, whether the cut request still ran on the device),
//! the seeded workload (the model's namespace operations, with renames, links, unlinks and
//! fsyncs, interleaved with random 4 KiB overwrites of a ballast file outside the model, its
//! fsyncs, checkpoints and deterministic discard-dispatch rounds), the cut points picked
//! from a trace of the uncut run, and the check after the cut.
//!
//! Why not the RAM images of `crash`: `gc=none` mounts only on a device with an infinite
//! logical space (the emulator's `ftl=interval`), and what matters here is what that device
//! still maps after a cut: the discard log, its re-issue at mount and the residue discard
//! of the intervals the heads skip (`core/src/gc_none.rs`, `alloc_none.rs`). So, as in
//! [`crate::device_gc`], a case is a fresh emulated SSD, the workload up to the cut (the
//! [`CutSsd`] wrapper), a power cycle, and remounts on the same SSD.
//!
//! Cut points (what [`cases_of`] picks from a [`NoneTrace`]): the checkpoint pack writes of
//! checkpoints with a non-empty discard log (not run, and run with the completion lost);
//! the request right after a checkpoint that queued discards (queued, not issued); discard
//! requests (not run, and run with the completion lost); the request right after a
//! dispatch round (issued, next checkpoint not written yet); requests inside fsyncs (the
//! model's and the ballast's: what roll-forward recovers); random requests, one in four in
//! the mount and the setup (before the first checkpoint after the mount's own: the window
//! in which a cut once looked clean to the next mount), the others after the setup.
//!
//! Also [`run_fault`] (a read, write or flush failing, through `fault::FaultDevice`) and
//! [`run_enospc`] (the device's capacity filled), with the same checks after a restart.
//!
//! The check after the cut, on each of two remounts: every fsync'd byte reads back (the
//! model's [`check_recovered_except`], and per ballast block its fsync'd bytes or a later
//! write); the device maps every reachable block; every mapped block of the main area that
//! is not reachable is in a queued discard (so in the newest durable discard log); after
//! one dispatch round of everything queued, the device maps exactly the reachable blocks;
//! and fsck is clean after each unmount.
//!
//! Invariants: a case is a pure function of its fields (virtual clock, `io_threads` 0, no
//! timer thread, no discard dispatcher thread: `gc_interval` None, so the workload runs the
//! dispatch rounds itself at fixed points, issuing everything queued as the dispatcher's
//! urgent path does).
//!
//! Lock order: none of its own (the trace hook takes the core's leaf locks `dead` and
//! `discards` one at a time).

use crate::check::{check_live_except, check_recovered_except};
use crate::crash::ops_for;
use crate::device_gc::{CutSsd, Request};
use crate::fault::{FaultDevice, FaultKind};
use crate::image::sim_mount_options;
use crate::model::Model;
use crate::workload::{apply, Op, Outcome, Workload};
use flashlog_core::{fsck, Error, Fs, GcPolicy, MkfsOptions, ROOT_INO};
use flashlog_ssd::{SsdConfig, SsdDevice, StoreKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Capacity of the emulated SSD of every case.
pub const CAPACITY: u64 = 64 << 20;
/// Name of the ballast file in the root (outside the model's name pools).
pub const BALLAST: &[u8] = b"big";
/// The ballast takes this share of the volume's blocks (percent).
const BALLAST_PERCENT: u64 = 30;

/// One crash case of `gc=none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoneCase {
    pub seed: u64,
    /// Index (0-based) of the device request at which power is cut (writes, discards,
    /// flushes count; reads do not).
    pub cut: u64,
    /// The cut request still runs on the device; only its completion is lost.
    pub landed: bool,
    /// A second cut, in the first mount after the first (its re-issue of the discard log,
    /// roll-forward, recovery checkpoint, residue discard): the index of its request,
    /// counted from that mount's first.
    pub recut: Option<u64>,
}

impl NoneCase {
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run -p flashlog-sim --release -- none --seed {} --cut {}{}{}",
            self.seed,
            self.cut,
            if self.landed { " --landed" } else { "" },
            self.recut
                .map(|r| format!(" --recut {r}"))
                .unwrap_or_default()
        )
    }
}

/// A fresh emulated interval-mapping SSD (virtual clock, contents in RAM).
pub fn interval_ssd() -> Result<Arc<SsdDevice>, String> {
    let mut c = SsdConfig::preset("970pro-like")
        .and_then(|c| c.with_capacity(CAPACITY))
        .map_err(|e| e.to_string())?;
    c.set("ftl", "interval").map_err(|e| e.to_string())?;
    c.set("clock", "virtual").map_err(|e| e.to_string())?;
    c.store = StoreKind::Ram;
    SsdDevice::new(c).map(Arc::new).map_err(|e| e.to_string())
}

/// The kinds of cut points a trace yields (names as reported).
pub const KINDS: [&str; 7] = [
    "checkpoint-log",
    "queued",
    "discard",
    "issued",
    "fsync",
    "random",
    "recovery",
];

/// What the uncut workload did, as request indices.
#[derive(Clone, Debug, Default)]
pub struct NoneTrace {
    /// Requests of the whole run, and of the setup (mkfs excluded; ballast written, synced).
    pub ops: u64,
    pub setup_ops: u64,
    /// Pack writes (body and footer) of checkpoints whose discard log was not empty.
    pub pack_writes: Vec<u64>,
    /// The request right after a checkpoint that left discards queued.
    pub queued: Vec<u64>,
    /// Discard requests.
    pub discards: Vec<u64>,
    /// The request right after a dispatch round that issued something.
    pub issued: Vec<u64>,
    /// [start, end) of every fsync (model files and ballast).
    pub fsyncs: Vec<(u64, u64)>,
    /// Blocks the run discarded, and checkpoints with a discard log.
    pub discarded_blocks: u64,
    pub logged_checkpoints: u64,
}

/// What a case saw after its cut.
#[derive(Clone, Debug, Default)]
pub struct NoneOutcome {
    /// The cut happened (the workload reached the request).
    pub cut: bool,
    /// Blocks the first remount re-issued from the discard log.
    pub reissued: u64,
    /// Dead blocks still mapped after the remount (all of them queued for discard).
    pub mapped_dead: u64,
    /// The second cut (`recut`) came inside the recovery mount.
    pub recut: bool,
}

/// The ballast: per block, the byte of its durable contents and the bytes written since.
struct Ballast {
    ino: flashlog_core::Ino,
    durable: Vec<u8>,
    current: Vec<u8>,
    since: HashMap<usize, Vec<u8>>,
}

/// A workload run up to its end or the cut.
struct Run {
    model: Model,
    log: Vec<String>,
    ballast: Option<Ballast>,
}

/// Trace-run bookkeeping filled by the workload and the checkpoint hook.
#[derive(Default)]
struct Marks {
    fsyncs: Vec<(u64, u64)>,
    issued: Vec<u64>,
    /// Per checkpoint: (first request, request after it, discard log expected).
    checkpoints: Vec<(u64, u64, bool)>,
    open: Option<(u64, bool)>,
    queued: Vec<u64>,
}

fn is_cut(e: &Error) -> bool {
    matches!(e, Error::Device(_) | Error::Poisoned(_))
}

/// The seed's volume on a fresh SSD behind `cut`, and its mount (which writes a
/// checkpoint: the cut may come inside it).
type Fresh = (Arc<SsdDevice>, Arc<CutSsd>, flashlog_core::Result<Fs>);

/// Make and mount the seed's volume on a fresh SSD behind `cut`.
fn fresh(seed: u64, cut: Option<u64>, landed: bool) -> Result<Fresh, String> {
    let ssd = interval_ssd()?;
    mkfs(&ssd, seed)?;
    let dev = Arc::new(CutSsd::new(ssd.clone(), cut, landed));
    let fs = Fs::mount(dev.clone(), sim_mount_options(GcPolicy::None));
    Ok((ssd, dev, fs))
}

/// One dispatch round: everything queued, issued now (what the dispatcher's urgent path
/// does; its 50 ms rounds of 16 commands would tie the case to a wall clock).
fn dispatch(fs: &Fs) -> flashlog_core::Result<u64> {
    flashlog_core::gc_none::dispatch_all(fs.inner())
}

/// Run the seed's workload on `fs` until it ends or a request fails. Err: the file system
/// refused something valid (a failure of the case).
fn workload(
    fs: &Fs,
    seed: u64,
    ops: &dyn Fn() -> u64,
    setup_ops: &mut u64,
    marks: Option<&Mutex<Marks>>,
) -> Result<Run, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0019_15f5);
    let mut run = Run {
        model: Model::new(),
        log: Vec::new(),
        ballast: None,
    };
    // Setup: the ballast, written and checkpointed.
    let blocks = (fs.statfs().blocks * BALLAST_PERCENT / 100) as usize;
    let durable: Vec<u8> = (0..blocks)
        .map(|b| (b as u64).wrapping_mul(7).wrapping_add(seed) as u8)
        .collect();
    let ino = match fs.create(ROOT_INO, BALLAST, 0o644, 0, 0) {
        Ok(a) => a.ino,
        Err(e) if is_cut(&e) => return Ok(run),
        Err(e) => return Err(format!("create of the ballast: {e}")),
    };
    for (i, part) in durable.chunks(256).enumerate() {
        let mut data = Vec::with_capacity(part.len() * 4096);
        for &b in part {
            data.extend_from_slice(&[b; 4096]);
        }
        match fs.write(ino, (i * 256 * 4096) as u64, &data) {
            Ok(_) => {}
            Err(e) if is_cut(&e) => return Ok(run),
            Err(e) => return Err(format!("write of the ballast: {e}")),
        }
    }
    match apply(fs, &mut run.model, &Op::Sync) {
        Outcome::Done => {}
        Outcome::Cut(_) => return Ok(run),
        Outcome::Mismatch(m) => return Err(m),
    }
    *setup_ops = ops();
    let mut b = Ballast {
        ino,
        current: durable.clone(),
        durable,
        since: HashMap::new(),
    };
    // Per seed: how often a dispatch round runs (never: only the space path issues), how
    // many overwrites follow each operation, how often the ballast is fsync'd and synced.
    let dispatch_every = [0u64, 1, 2, 4][(seed % 4) as usize];
    let writes_per_op = rng.random_range(blocks as u64 / 8..blocks as u64 / 2);
    let mut w = Workload::new(seed);
    let mark = |f: &mut dyn FnMut(&mut Marks)| {
        if let Some(m) = marks {
            f(&mut m.lock().expect("marks"));
        }
    };
    for k in 0..ops_for(seed) as u64 {
        let op = w.next_op(&run.model);
        run.log.push(op.to_string());
        let before = ops();
        match apply(fs, &mut run.model, &op) {
            Outcome::Done => {}
            Outcome::Cut(e) => {
                run.log.push(format!("   <- power cut here ({e})"));
                run.ballast = Some(b);
                return Ok(run);
            }
            Outcome::Mismatch(m) => return Err(m),
        }
        if matches!(op, Op::Fsync { .. }) {
            let end = ops();
            mark(&mut |m| m.fsyncs.push((before, end)));
        }
        // The ballast's overwrites.
        let n = rng.random_range(writes_per_op / 2..=writes_per_op);
        run.log.push(format!("ballast: {n} overwrites"));
        for _ in 0..n {
            let blk = rng.random_range(0..blocks);
            let byte = rng.random::<u8>();
            b.since.entry(blk).or_default().push(byte);
            match fs.write(b.ino, (blk * 4096) as u64, &[byte; 4096]) {
                Ok(_) => b.current[blk] = byte,
                Err(e) if is_cut(&e) => {
                    run.log.push(format!("   <- power cut here ({e})"));
                    run.ballast = Some(b);
                    return Ok(run);
                }
                Err(e) => return Err(format!("ballast overwrite of block {blk}: {e}")),
            }
        }
        if rng.random_ratio(1, 2) {
            run.log.push("ballast: fsync".into());
            let before = ops();
            let cps = fs.stats().fsync_checkpoints;
            match fs.fsync(b.ino, false) {
                Ok(()) => {
                    b.durable = b.current.clone();
                    b.since.clear();
                    if fs.stats().fsync_checkpoints > cps {
                        run.model.checkpoint();
                    }
                    let end = ops();
                    mark(&mut |m| m.fsyncs.push((before, end)));
                }
                Err(e) if is_cut(&e) => {
                    run.log.push(format!("   <- power cut here ({e})"));
                    run.ballast = Some(b);
                    return Ok(run);
                }
                Err(e) => return Err(format!("ballast fsync: {e}")),
            }
        }
        if rng.random_ratio(1, 4) {
            run.log.push(Op::Sync.to_string());
            match apply(fs, &mut run.model, &Op::Sync) {
                Outcome::Done => {
                    b.durable = b.current.clone();
                    b.since.clear();
                }
                Outcome::Cut(e) => {
                    run.log.push(format!("   <- power cut here ({e})"));
                    run.ballast = Some(b);
                    return Ok(run);
                }
                Outcome::Mismatch(m) => return Err(m),
            }
        }
        if dispatch_every > 0 && (k + 1) % dispatch_every == 0 {
            run.log.push("dispatch round".into());
            match dispatch(fs) {
                Ok(n) => {
                    if n > 0 {
                        let at = ops();
                        mark(&mut |m| m.issued.push(at));
                    }
                }
                Err(e) if is_cut(&e) => {
                    run.log.push(format!("   <- power cut here ({e})"));
                    run.ballast = Some(b);
                    return Ok(run);
                }
                Err(e) => return Err(format!("dispatch round: {e}")),
            }
        }
    }
    run.ballast = Some(b);
    Ok(run)
}

/// The seed's workload without a cut, recording where the cut-point kinds happen; the live
/// volume is checked against the model and the ballast before the clean unmount.
pub fn trace(seed: u64) -> Result<NoneTrace, String> {
    let (ssd, dev, fs) = fresh(seed, None, false)?;
    let fs = fs.map_err(|e| format!("mount: {e}"))?;
    let marks = Arc::new(Mutex::new(Marks::default()));
    {
        let (marks, dev, inner) = (marks.clone(), dev.clone(), Arc::downgrade(fs.inner()));
        fs.set_test_hook(Some(Arc::new(move |what| {
            let Some(inner) = inner.upgrade() else { return };
            let mut m = marks.lock().expect("marks");
            match what {
                "checkpoint:before-apply" => {
                    let logs =
                        inner.seg.dead_pending() > 0 || !inner.seg.discards.lock().is_empty();
                    m.open = Some((dev.ops(), logs));
                }
                "checkpoint:durable" => {
                    if let Some((start, logs)) = m.open.take() {
                        m.checkpoints.push((start, dev.ops(), logs));
                    }
                    if !inner.seg.discards.lock().is_empty() {
                        m.queued.push(dev.ops());
                    }
                }
                _ => {}
            }
        })));
    }
    dev.log_requests();
    let mut setup_ops = 0;
    let run = workload(&fs, seed, &|| dev.ops(), &mut setup_ops, Some(&marks))?;
    fs.set_test_hook(None);
    if dev.is_cut() {
        return Err("the uncut workload hit a power cut".into());
    }
    let mut bad = check_live_except(&fs, &run.model, &[BALLAST]);
    if let Some(b) = &run.ballast {
        bad.extend(check_ballast(&fs, b, true));
    }
    if !bad.is_empty() {
        return Err(format!("live volume: {}", bad.join("; ")));
    }
    let discarded = fs.stats().discarded_blocks;
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    match fsck(&*ssd) {
        Ok(r) if r.is_clean() => {}
        Ok(r) => return Err(format!("fsck after the uncut run: {r}")),
        Err(e) => return Err(format!("fsck after the uncut run: {e}")),
    }
    let geo = flashlog_core::checkpoint::read_superblock(&*ssd)
        .map_err(|e| e.to_string())?
        .geo;
    let packs: Vec<(u64, u64)> = (0..2u8)
        .map(|p| {
            let a = geo.cp_pack_addr(p);
            (a, a + geo.cp_pack_blocks)
        })
        .collect();
    let reqs = dev.requests();
    let m = marks.lock().expect("marks");
    let mut t = NoneTrace {
        ops: dev.ops(),
        setup_ops,
        queued: m.queued.clone(),
        issued: m.issued.clone(),
        fsyncs: m.fsyncs.clone(),
        discarded_blocks: discarded,
        ..Default::default()
    };
    for &(start, end, logs) in &m.checkpoints {
        if !logs || start < setup_ops {
            continue;
        }
        t.logged_checkpoints += 1;
        for i in start..end.min(reqs.len() as u64) {
            if let Request::Write { addr, .. } = reqs[i as usize] {
                if packs.iter().any(|&(a, z)| addr >= a && addr < z) {
                    t.pack_writes.push(i);
                }
            }
        }
    }
    t.discards = reqs
        .iter()
        .enumerate()
        .filter(|(i, r)| *i as u64 >= setup_ops && matches!(r, Request::Discard { .. }))
        .map(|(i, _)| i as u64)
        .collect();
    Ok(t)
}

/// The ballast against what was fsync'd (`live`: exactly its current contents).
fn check_ballast(fs: &Fs, b: &Ballast, live: bool) -> Vec<String> {
    let mut bad = Vec::new();
    let ino = match fs.lookup(ROOT_INO, BALLAST) {
        Ok(a) => a.ino,
        Err(e) => return vec![format!("the ballast (synced at setup) is gone: {e}")],
    };
    if ino != b.ino {
        bad.push(format!("the ballast is ino {ino}, was {}", b.ino));
    }
    let size = (b.durable.len() * 4096) as u64;
    match fs.getattr(ino) {
        Ok(a) if a.size == size => {}
        Ok(a) => return vec![format!("the ballast has {} bytes, fsync'd {size}", a.size)],
        Err(e) => return vec![format!("getattr of the ballast: {e}")],
    }
    let mut buf = vec![0u8; 256 * 4096];
    for first in (0..b.durable.len()).step_by(256) {
        let n = (b.durable.len() - first).min(256);
        let got = &mut buf[..n * 4096];
        if let Err(e) = fs.read(ino, (first * 4096) as u64, got) {
            bad.push(format!("read of the ballast at block {first}: {e}"));
            break;
        }
        for (k, chunk) in got.chunks(4096).enumerate() {
            let blk = first + k;
            let want = if live { b.current[blk] } else { b.durable[blk] };
            if chunk.iter().all(|&x| x == want) {
                continue;
            }
            let later = b.since.get(&blk).map(|v| v.as_slice()).unwrap_or(&[]);
            if live || !(chunk.iter().all(|&x| x == chunk[0]) && later.contains(&chunk[0])) {
                bad.push(format!(
                    "ballast block {blk}: fsync'd bytes lost (reads {:#04x}, fsync'd {want:#04x})",
                    chunk[0]
                ));
            }
        }
        if bad.len() >= 10 {
            break;
        }
    }
    bad
}

/// Reachable blocks against what the device maps, on a mounted volume that has written
/// nothing since its last checkpoint. Returns (mapped dead blocks, findings). `exact`: no
/// discard may be outstanding.
fn check_mapped(fs: &Fs, ssd: &SsdDevice, exact: bool) -> (u64, Vec<String>) {
    let mut bad = Vec::new();
    let main = fs.inner().geo().main_addr;
    let reachable = match fsck(ssd) {
        Ok(r) if r.is_clean() => r.reachable.to_vec(),
        Ok(r) => return (0, vec![format!("fsck of the mounted volume: {r}")]),
        Err(e) => return (0, vec![format!("fsck of the mounted volume: {e}")]),
    };
    let Some(mapped) = ssd.mapped_lpns() else {
        return (0, vec!["the SSD cannot list what it maps".into()]);
    };
    let mapped: Vec<u64> = mapped.into_iter().filter(|&l| l >= main).collect();
    let queued: Vec<(u64, u64)> = fs
        .inner()
        .seg
        .discards
        .lock()
        .pending()
        .map(|c| (c.addr, c.addr + c.len))
        .collect();
    let in_queue = |a: u64| queued.iter().any(|&(s, e)| a >= s && a < e);
    // Both sorted: walk them together.
    let (mut i, mut j) = (0, 0);
    let (mut unmapped, mut dead, mut dead_unqueued) = (Vec::new(), 0u64, Vec::new());
    while i < reachable.len() || j < mapped.len() {
        match (reachable.get(i), mapped.get(j)) {
            (Some(&r), Some(&m)) if r == m => {
                i += 1;
                j += 1;
            }
            (Some(&r), Some(&m)) if r < m => {
                unmapped.push(r);
                i += 1;
            }
            (Some(_), None) => {
                unmapped.push(reachable[i]);
                i += 1;
            }
            (_, Some(&m)) => {
                dead += 1;
                if exact || !in_queue(m) {
                    dead_unqueued.push(m);
                }
                j += 1;
            }
            (None, None) => break,
        }
    }
    if !unmapped.is_empty() {
        bad.push(format!(
            "{} reachable blocks the device does not map (first {:x?})",
            unmapped.len(),
            &unmapped[..unmapped.len().min(4)]
        ));
    }
    if !dead_unqueued.is_empty() {
        bad.push(format!(
            "{} dead blocks the device still maps{} (first {:x?})",
            dead_unqueued.len(),
            if exact {
                " after every queued discard was issued"
            } else {
                " that no queued discard covers"
            },
            &dead_unqueued[..dead_unqueued.len().min(4)]
        ));
    }
    let live = fs.stats().live_blocks;
    if live != reachable.len() as u64 {
        bad.push(format!(
            "live count {live}, {} blocks reachable",
            reachable.len()
        ));
    }
    (dead, bad)
}

/// Run one case: the workload up to the cut, a power cycle of the SSD, two remounts, and
/// the checks. Err carries the findings and the operations up to the cut.
pub fn run_case(case: &NoneCase) -> Result<NoneOutcome, String> {
    let (ssd, dev, fs) = fresh(case.seed, Some(case.cut), case.landed)?;
    let fs = match fs {
        Ok(fs) => fs,
        Err(_) if dev.is_cut() => {
            // The cut came in the first mount's checkpoint: nothing was done yet.
            ssd.power_cycle();
            let run = Run {
                model: Model::new(),
                log: vec!["mount   <- power cut here".into()],
                ballast: None,
            };
            let mut out = check_after_cut(&ssd, &run)?;
            out.cut = true;
            return Ok(out);
        }
        Err(e) => return Err(format!("first mount: {e}")),
    };
    let mut setup_ops = 0;
    let run = workload(&fs, case.seed, &|| dev.ops(), &mut setup_ops, None);
    if dev.is_cut() {
        fs.abandon();
    } else if let Err(e) = fs.unmount() {
        // A cut in the unmount's checkpoint is a case like any other.
        if !dev.is_cut() {
            return Err(format!("unmount: {e}"));
        }
    }
    let cut = dev.is_cut();
    let run = run?;
    ssd.power_cycle();
    let mut recut = false;
    if let Some(r) = case.recut {
        // The recovery mount, cut at its request `r` (or, past its end, right after it).
        let dev = Arc::new(CutSsd::new(ssd.clone(), Some(r), false));
        match Fs::mount(dev.clone(), sim_mount_options(GcPolicy::None)) {
            Ok(fs) => fs.abandon(),
            Err(_) if dev.is_cut() => {}
            Err(e) => return Err(format!("recovery mount before the second cut: {e}")),
        }
        recut = dev.is_cut();
        ssd.power_cycle();
    }
    let mut out = check_after_cut(&ssd, &run)?;
    out.cut = cut;
    out.recut = recut;
    Ok(out)
}

/// The checks after a cut (or a fault), on the power-cycled SSD: two remounts, the
/// mapped-set check after the first, the model and the ballast after each, fsck after each
/// unmount. Err carries the findings and the operations up to the cut.
fn check_after_cut(ssd: &Arc<SsdDevice>, run: &Run) -> Result<NoneOutcome, String> {
    let ops = |bad: Vec<String>| -> String {
        let tail: Vec<&String> = run.log.iter().rev().take(12).collect();
        let mut s = bad.join("\n  - ");
        s.push_str("\n  last operations (newest first):");
        for o in tail {
            s.push_str(&format!("\n    {o}"));
        }
        s
    };
    let mut out = NoneOutcome::default();
    for round in ["first", "second"] {
        let fs = Fs::mount(ssd.clone(), sim_mount_options(GcPolicy::None))
            .map_err(|e| ops(vec![format!("{round} remount after the cut: {e}")]))?;
        let mut bad = Vec::new();
        if round == "first" {
            out.reissued = fs.stats().discard_log_reissued_blocks;
            let (dead, b) = check_mapped(&fs, ssd, false);
            out.mapped_dead = dead;
            bad.extend(b);
            if let Err(e) = dispatch(&fs) {
                bad.push(format!("dispatch round after the remount: {e}"));
            }
            bad.extend(check_mapped(&fs, ssd, true).1);
        }
        bad.extend(check_recovered_except(&fs, &run.model, &[BALLAST]));
        if let Some(b) = &run.ballast {
            bad.extend(check_ballast(&fs, b, false));
        }
        if let Err(e) = fs.unmount() {
            bad.push(format!("unmount after the {round} remount: {e}"));
        }
        match fsck(&**ssd) {
            Ok(r) if r.is_clean() => {}
            Ok(r) => bad.push(format!("fsck after the {round} remount: {r}")),
            Err(e) => bad.push(format!("fsck after the {round} remount: {e}")),
        }
        if !bad.is_empty() {
            bad.truncate(10);
            return Err(ops(bad
                .into_iter()
                .map(|b| format!("after the {round} remount: {b}"))
                .collect()));
        }
    }
    Ok(out)
}

/// The cases of a trace: up to two of each kind of point (spread over the run), and
/// `random` requests after the setup. Each comes with its kind (one of [`KINDS`]).
pub fn cases_of(seed: u64, t: &NoneTrace, random: u64) -> Vec<(NoneCase, &'static str)> {
    let mut v = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0191_5c07);
    let mut pick = |idx: &[u64], kind: &'static str, landed: &[bool], v: &mut Vec<_>| {
        if idx.is_empty() {
            return;
        }
        for _ in 0..2 {
            let i = idx[rng.random_range(0..idx.len())];
            for &l in landed {
                v.push((
                    NoneCase {
                        seed,
                        cut: i,
                        landed: l,
                        recut: None,
                    },
                    kind,
                ));
            }
        }
    };
    pick(&t.pack_writes, KINDS[0], &[false, true], &mut v);
    pick(&t.queued, KINDS[1], &[false], &mut v);
    pick(&t.discards, KINDS[2], &[false, true], &mut v);
    pick(&t.issued, KINDS[3], &[false], &mut v);
    let inside: Vec<u64> = t
        .fsyncs
        .iter()
        .filter(|(a, b)| b > a && *a >= t.setup_ops)
        .flat_map(|&(a, b)| [a + (b - a) / 2, b - 1])
        .collect();
    pick(&inside, KINDS[4], &[false, true], &mut v);
    // Random requests: every fourth in the mount and the setup (before the first
    // checkpoint after the mount's own), the others after it.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x1915_7a4d);
    for k in 0..random {
        let from = if k % 4 == 3 { 0 } else { t.setup_ops };
        let to = if k % 4 == 3 { t.setup_ops } else { t.ops };
        if to > from {
            v.push((
                NoneCase {
                    seed,
                    cut: rng.random_range(from..to),
                    landed: rng.random(),
                    recut: None,
                },
                KINDS[5],
            ));
        }
    }
    // Double cuts: the discard-log and discard cuts again, with a second cut in the
    // recovery mount (its first dozen requests: re-issue, recovery checkpoint, residue).
    let again: Vec<NoneCase> = v
        .iter()
        .filter(|(c, k)| !c.landed && (*k == KINDS[0] || *k == KINDS[2]))
        .map(|(c, _)| NoneCase {
            recut: Some(rng.random_range(0..12)),
            ..*c
        })
        .collect();
    v.extend(again.into_iter().map(|c| (c, KINDS[6])));
    v.sort_by_key(|(c, _)| (c.cut, c.landed, c.recut));
    v.dedup_by_key(|(c, _)| *c);
    v
}

/// A seed's cases: those that passed (with their kind and what they saw) and those that
/// failed (with the findings).
pub type SeedResult = (
    Vec<(NoneCase, &'static str, NoneOutcome)>,
    Vec<(NoneCase, &'static str, String)>,
);

/// Every case of one seed; Err if the trace itself failed.
pub fn run_seed(seed: u64, random: u64) -> Result<SeedResult, String> {
    let t = trace(seed).map_err(|e| format!("seed {seed}: trace: {e}"))?;
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for (c, kind) in cases_of(seed, &t, random) {
        match run_case(&c) {
            Ok(o) => ok.push((c, kind, o)),
            Err(e) => failed.push((c, kind, e)),
        }
    }
    Ok((ok, failed))
}

/// Counters of a run over several seeds.
#[derive(Debug, Default)]
pub struct NoneSummary {
    pub seeds: u64,
    pub cases: u64,
    /// Per kind of [`KINDS`], cases run.
    pub per_kind: [u64; 7],
    pub reissued_blocks: u64,
    pub failures: Vec<String>,
}

/// Every case of the seeds in `seeds`, on `threads` threads; stops after `max_failures`.
pub fn run_seeds(
    seeds: std::ops::Range<u64>,
    random: u64,
    threads: usize,
    max_failures: usize,
    progress: bool,
) -> NoneSummary {
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let sum = Mutex::new(NoneSummary::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end || sum.lock().expect("summary").failures.len() >= max_failures
                {
                    return;
                }
                let r = run_seed(seed, random);
                let mut g = sum.lock().expect("summary");
                match r {
                    Err(e) => {
                        eprintln!("FAILED: {e}");
                        g.failures.push(e);
                    }
                    Ok((ok, failed)) => {
                        g.seeds += 1;
                        for (_, kind, o) in &ok {
                            g.cases += 1;
                            g.per_kind[KINDS.iter().position(|k| k == kind).unwrap_or(5)] += 1;
                            g.reissued_blocks += o.reissued;
                        }
                        for (c, kind, e) in failed {
                            g.cases += 1;
                            g.per_kind[KINDS.iter().position(|k| *k == kind).unwrap_or(5)] += 1;
                            let f = format!("FAILED ({kind}): {}\n  - {e}", c.replay_command());
                            eprintln!("{f}");
                            g.failures.push(f);
                        }
                        if progress && g.seeds % 10 == 0 {
                            eprintln!(
                                "  gc=none: {} seeds, {} crash points, {} failures",
                                g.seeds,
                                g.cases,
                                g.failures.len()
                            );
                        }
                    }
                }
            });
        }
    });
    sum.into_inner().expect("summary")
}

// ---- Fault injection and ENOSPC on gc=none (the `fault` module's checks, on the SSD) ----

/// Requests of one kind the seed's whole run (mount, workload, unmount) issues without a
/// fault: where `run_fault` may inject one.
pub fn fault_points(seed: u64, kind: FaultKind) -> Result<u64, String> {
    let ssd = interval_ssd()?;
    mkfs(&ssd, seed)?;
    let fdev = Arc::new(FaultDevice::new(ssd.clone(), kind, u64::MAX));
    let fs = Fs::mount(fdev.clone(), sim_mount_options(GcPolicy::None))
        .map_err(|e| format!("mount: {e}"))?;
    let mut setup = 0;
    workload(&fs, seed, &|| 0, &mut setup, None)?;
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    let (r, w, f) = fdev.counts();
    Ok(match kind {
        FaultKind::Read => r,
        FaultKind::Flush => f,
        FaultKind::Write | FaultKind::PanicOnWrite => w,
    })
}

fn mkfs(ssd: &Arc<SsdDevice>, seed: u64) -> Result<(), String> {
    Fs::mkfs(
        ssd.clone(),
        &MkfsOptions {
            seed: Some(seed),
            mlogs: 1,
            ..Default::default()
        },
    )
    .map(|_| ())
    .map_err(|e| format!("mkfs: {e}"))
}

/// The seed's run with request `at` of `kind` failing (and every mutating request after
/// it refused): a write or flush fault poisons the mount, which then issues nothing; after
/// a restart of the SSD, nothing fsync'd is lost, fsck is clean and the device maps exactly
/// the reachable blocks (the checks of a power cut). Returns whether the fault fired.
pub fn run_fault(seed: u64, kind: FaultKind, at: u64) -> Result<bool, String> {
    let what = |e: String| {
        format!(
            "{e}\n  replay: cargo run -p flashlog-sim --release -- fault --policy none --seed {seed} --kind {} --at {at}",
            kind.name()
        )
    };
    let ssd = interval_ssd()?;
    mkfs(&ssd, seed)?;
    let fdev = Arc::new(FaultDevice::new(ssd.clone(), kind, at));
    let run = match Fs::mount(fdev.clone(), sim_mount_options(GcPolicy::None)) {
        Err(e) if fdev.fired() => {
            let _ = e;
            Run {
                model: Model::new(),
                log: vec!["mount   <- fault here".into()],
                ballast: None,
            }
        }
        Err(e) => return Err(what(format!("mount failed without a fault: {e}"))),
        Ok(fs) => {
            let mut setup = 0;
            let run = workload(&fs, seed, &|| 0, &mut setup, None).map_err(what)?;
            if !fdev.fired() {
                match fs.unmount() {
                    Ok(()) => return Ok(false),
                    Err(_) if fdev.fired() => {}
                    Err(e) => return Err(what(format!("unmount without a fault: {e}"))),
                }
            } else {
                if kind != FaultKind::Read {
                    let bad = crate::fault::check_poisoned(&fs, &fdev);
                    if !bad.is_empty() {
                        return Err(what(bad.join("; ")));
                    }
                }
                fs.abandon();
            }
            run
        }
    };
    ssd.power_cycle();
    check_after_cut(&ssd, &run).map_err(what)?;
    Ok(true)
}

/// What [`run_enospc`] saw.
#[derive(Clone, Debug, Default)]
pub struct EnospcOutcome {
    /// Blocks of file data written (and fsync'd) before ENOSPC, and the volume's blocks.
    pub written_blocks: u64,
    pub volume_blocks: u64,
    /// Blocks written again after half the files were deleted.
    pub rewritten_blocks: u64,
}

/// Fill a `gc=none` volume with fsync'd files (and overwrites, whose dead blocks the device
/// holds until discarded) until ENOSPC. ENOSPC must come as `Error::NoSpace`, only once live
/// data nearly fills the device's capacity, without poisoning the mount; a checkpoint still
/// succeeds; after deleting half the files the space comes back; and after a power cut
/// every fsync'd byte of the kept files reads back, fsck is clean and the device maps
/// exactly the reachable blocks.
pub fn run_enospc(seed: u64) -> Result<EnospcOutcome, String> {
    let ssd = interval_ssd()?;
    mkfs(&ssd, seed)?;
    let fs = Fs::mount(ssd.clone(), sim_mount_options(GcPolicy::None))
        .map_err(|e| format!("mount: {e}"))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xe05c);
    let volume = fs.statfs().blocks;
    let mut out = EnospcOutcome {
        volume_blocks: volume,
        ..Default::default()
    };
    // Per file: its fsync'd contents, one byte per block.
    let mut files: Vec<(String, flashlog_core::Ino, Vec<u8>)> = Vec::new();
    let full = 'fill: loop {
        let name = format!("fill{}", files.len());
        let ino = match fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0) {
            Ok(a) => a.ino,
            Err(e) => break 'fill e,
        };
        files.push((name, ino, Vec::new()));
        for _ in 0..64 {
            let f = files.last_mut().expect("a file");
            // Mostly appends; sometimes an overwrite of an older block (a dead block the
            // device holds until its discard).
            let blk = if !f.2.is_empty() && rng.random_ratio(1, 4) {
                rng.random_range(0..f.2.len())
            } else {
                f.2.len()
            };
            let byte = rng.random::<u8>() | 1;
            if let Err(e) = fs.write(ino, (blk * 4096) as u64, &[byte; 4096]) {
                break 'fill e;
            }
            if blk == f.2.len() {
                f.2.push(byte);
                out.written_blocks += 1;
            } else {
                f.2[blk] = byte;
            }
        }
        if let Err(e) = fs.fsync(ino, false) {
            break 'fill e;
        }
    };
    let mut bad = Vec::new();
    if !matches!(full, Error::NoSpace) {
        bad.push(format!("filling the volume ended with {full}, not ENOSPC"));
    }
    if out.written_blocks < volume * 80 / 100 {
        bad.push(format!(
            "ENOSPC after {} of {volume} blocks: too early",
            out.written_blocks
        ));
    }
    // The blocks the last file wrote since its fsync are not durable.
    if let Some(last) = files.last_mut() {
        let mut buf = vec![0u8; last.2.len() * 4096];
        if fs.read(last.1, 0, &mut buf).is_ok() {
            last.2 = buf.chunks(4096).map(|c| c[0]).collect();
        }
    }
    match fs.sync() {
        Ok(()) => {}
        Err(e) => bad.push(format!("sync after ENOSPC: {e}")),
    }
    match fs.create(ROOT_INO, b"after-enospc", 0o644, 0, 0) {
        Ok(_) | Err(Error::NoSpace) => {}
        Err(e) => bad.push(format!(
            "create after ENOSPC: {e} (expected success or ENOSPC)"
        )),
    }
    // Half the files go; the same room comes back.
    let mut kept = Vec::new();
    for (i, f) in files.into_iter().enumerate() {
        if i % 2 == 0 {
            if let Err(e) = fs.unlink(ROOT_INO, f.0.as_bytes()) {
                bad.push(format!("unlink {}: {e}", f.0));
            }
        } else {
            kept.push(f);
        }
    }
    let again = fs
        .create(ROOT_INO, b"again", 0o644, 0, 0)
        .map_err(|e| format!("create after deleting half: {e}"))?
        .ino;
    let want = out.written_blocks * 4 / 10;
    while out.rewritten_blocks < want {
        if let Err(e) = fs.write(again, out.rewritten_blocks * 4096, &[0x5a; 4096]) {
            bad.push(format!(
                "write after deleting half the files: {e} after {} of {want} blocks",
                out.rewritten_blocks
            ));
            break;
        }
        out.rewritten_blocks += 1;
    }
    if let Err(e) = fs.fsync(again, false) {
        bad.push(format!("fsync after deleting half the files: {e}"));
    }
    // Power cut: nothing fsync'd is lost, the volume mounts, the device maps what is live.
    fs.abandon();
    ssd.power_cycle();
    for round in ["first", "second"] {
        let fs = Fs::mount(ssd.clone(), sim_mount_options(GcPolicy::None))
            .map_err(|e| format!("{round} remount after ENOSPC and a cut: {e}"))?;
        if round == "first" {
            if let Err(e) = dispatch(&fs) {
                bad.push(format!("dispatch round after the remount: {e}"));
            }
            bad.extend(check_mapped(&fs, &ssd, true).1);
        }
        for (name, _, blocks) in &kept {
            match fs.read_file(&format!("/{name}")) {
                Ok(d) if d.len() == blocks.len() * 4096 => {
                    for (b, c) in d.chunks(4096).enumerate() {
                        if c.iter().any(|&x| x != blocks[b]) {
                            bad.push(format!("/{name} block {b}: fsync'd bytes lost"));
                            break;
                        }
                    }
                }
                Ok(d) => bad.push(format!(
                    "/{name}: {} bytes, fsync'd {}",
                    d.len(),
                    blocks.len() * 4096
                )),
                Err(e) => bad.push(format!("/{name}: {e}")),
            }
        }
        match fs.read_file("/again") {
            Ok(d)
                if d.len() as u64 == out.rewritten_blocks * 4096
                    && d.iter().all(|&x| x == 0x5a) => {}
            Ok(d) => bad.push(format!(
                "/again: {} bytes, not the fsync'd contents",
                d.len()
            )),
            Err(e) => bad.push(format!("/again: {e}")),
        }
        if let Err(e) = fs.unmount() {
            bad.push(format!("unmount after the {round} remount: {e}"));
        }
        match fsck(&*ssd) {
            Ok(r) if r.is_clean() => {}
            Ok(r) => bad.push(format!("fsck after the {round} remount: {r}")),
            Err(e) => bad.push(format!("fsck after the {round} remount: {e}")),
        }
        if bad.len() > 10 {
            break;
        }
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        bad.truncate(10);
        Err(bad.join("; "))
    }
}
