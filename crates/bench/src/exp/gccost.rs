//! `gccost`: D2FS Fig. 16, the cost of reclaiming one file-system section by host GC against
//! device GC, broken down.
//!
//! Per policy, on a fresh device: fill `--fill` of the volume (one file per thread, as
//! `sustained`), then overwrite at random until cleaning has started (or `--aging-max`), then
//! checkpoint. Then:
//!
//! - **host GC** (`f2fs`, `f2fs-lfs`, `scale`, `zf2fs`): the volume is quiet; `--sections`
//!   times, `Fs::gc(1)` (clean one victim, then checkpoint) runs on this thread with the
//!   block layer traced (`device::Counted`). Per call: the collector's time (the core's
//!   `gc_time_s`), within it the device reads and writes this thread waited for (victim
//!   summaries and valid blocks; log writes), the rest of it (CPU: victim selection,
//!   page-cache and node updates), the writes the log threads issued meanwhile, and the
//!   checkpoint (the core's `checkpoint_time_s`, the last part of the call); counts of
//!   blocks read, moved, node blocks and device blocks written. Reported per section freed.
//! - **device GC** (`device`, and `none`'s page-level device GC): the random overwrites go on
//!   for `--duration`; over that window the device's GC runs (one victim line = one section
//!   with `--segs-per-sec auto`), its NAND reads, programs and erases and their die time
//!   (busy time of the dies on GC, split by the configured tR/tPROG/tBERS), and on the host
//!   the upcall pairs applied, checkpoints and checkpoint time. Reported per device GC run.
//!
//! Departure: the core times the collector and the checkpoint as wholes (no per-step timers);
//! the split inside the collector comes from the block-layer trace, and for `device` the
//! host's upcall apply is inside its checkpoints (gc_device.rs applies every queued upcall at
//! the start of a checkpoint), so they are one number.
//!
//! Owns: [`HostCost`], [`DeviceCost`], the trace split ([`split_events`]). Invariants: host
//! numbers are per section actually freed (calls that freed nothing are counted, not
//! averaged in); device numbers are per device GC run of the window. Lock order: the block
//! layer's trace lock (`device::Counted`) is a leaf, taken after each request completes.

use super::sustained::{age_until_cleaning, fill_files, random_phase, RAND_BS};
use super::{Ops, Volume};
use crate::device::{mark_caller, IoEvent, IoKind};
use crate::metrics::Lat;
use crate::plot::{bar_plot, Bars};
use crate::policy::PolicySpec;
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{anyhow, bail, Result};
use flashlog_core::{GcPolicy, Ino};
use parking_lot::Mutex;
use std::time::Instant;

/// Host GC, per section freed (milliseconds and blocks).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HostCost {
    pub calls: u64,
    pub sections_freed: u64,
    /// Valid blocks of the victims / their blocks.
    pub victim_valid: f64,
    pub total_ms: f64,
    pub collector_ms: f64,
    pub read_wait_ms: f64,
    pub write_wait_ms: f64,
    /// Collector time this thread did not spend in device requests: victim selection, page
    /// cache, node (direct node and NAT) updates, and waits for the log threads' writes.
    pub cpu_ms: f64,
    pub checkpoint_ms: f64,
    /// Device time of the writes the log threads issued during the call (overlaps the rest).
    pub async_write_ms: f64,
    pub victim_blocks_read: f64,
    pub blocks_moved: f64,
    pub node_blocks_written: f64,
    pub device_blocks_written: f64,
    pub checkpoints: f64,
    /// Device GC runs of the underlying FTL during the calls, per section.
    pub device_gc_runs: f64,
}

/// Device GC, per device GC run (one victim line).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DeviceCost {
    pub window_s: f64,
    pub gc_runs: u64,
    pub dies: usize,
    /// Die time on GC per run, summed over dies, and as latency with the dies in parallel.
    pub die_ms: f64,
    pub latency_ms: f64,
    /// Die time split by the configured NAND timings (summed over dies).
    pub nand_read_ms: f64,
    pub nand_program_ms: f64,
    pub nand_erase_ms: f64,
    pub nand_reads: f64,
    pub pages_moved: f64,
    /// Pages moved / slots of a line: the victims' valid ratio.
    pub victim_valid: f64,
    pub erases: f64,
    /// Host side per run: upcall pairs applied, checkpoints and their time (which includes
    /// applying the upcalls).
    pub pairs_applied: f64,
    pub checkpoints: f64,
    pub apply_and_checkpoint_ms: f64,
    pub app_mib_s: f64,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GcCostResult {
    pub policy: String,
    pub aging_s: f64,
    pub aging_cleaning_started: bool,
    pub host: Option<HostCost>,
    pub device: Option<DeviceCost>,
    pub error: Option<String>,
}

pub fn run(ctx: &Ctx) -> Result<Report> {
    let mut results = Vec::new();
    for p in &ctx.policies {
        let r = run_policy(ctx, p)?;
        if let Some(e) = &r.error {
            ctx.say(&format!("{}: {e}", p.label));
        }
        results.push(r);
    }
    build_report(ctx, results)
}

fn run_policy(ctx: &Ctx, p: &PolicySpec) -> Result<GcCostResult> {
    let threads = ctx.args.threads;
    let vol = Volume::open(ctx, p)?;
    let mut res = GcCostResult {
        policy: p.label.clone(),
        ..Default::default()
    };
    let user = vol.user_bytes();
    let per_file = ((user as f64 * ctx.args.fill) as u64 / threads as u64) / RAND_BS * RAND_BS;
    if per_file < RAND_BS {
        bail!("volume too small for {threads} files");
    }
    let ops = Ops::new(threads);
    let err: Mutex<Option<String>> = Mutex::new(None);
    let fail = |e: String| {
        err.lock().get_or_insert(e);
    };
    let bar = ctx.bar(4, format!("{} gccost", p.label), false);
    bar.set_message("fill");
    let inos = fill_files(&vol.fs, threads, per_file, ctx.args.seed, &ops, &fail);
    bar.inc(1);
    bar.set_message("aging");
    if err.lock().is_none() {
        (_, res.aging_s, res.aging_cleaning_started) = age_until_cleaning(
            ctx,
            &vol,
            &inos,
            per_file,
            ctx.args.seed ^ 0x6CC,
            &fail,
            &ops,
        );
    }
    bar.inc(1);
    if err.lock().is_none() {
        vol.fs
            .sync()
            .map_err(|e| anyhow!("sync after aging: {e}"))?;
        bar.set_message("measure");
        // The same window of random overwrites for every policy, so that victims come from
        // the steady state of the workload; device GC is measured over it, host GC on the
        // quiet volume after it.
        let d = device_window(ctx, &vol, &inos, per_file, &fail, &ops)?;
        match p.gc {
            GcPolicy::Device | GcPolicy::None => res.device = Some(d),
            _ => {
                vol.fs
                    .sync()
                    .map_err(|e| anyhow!("sync after the window: {e}"))?;
                res.host = Some(host_calls(ctx, &vol)?)
            }
        }
    }
    bar.finish_and_clear();
    let end = vol.finish()?;
    res.error = err.into_inner().or_else(|| end.problem());
    Ok(res)
}

/// `--sections` calls of `Fs::gc(1)` on a quiet volume, traced.
fn host_calls(ctx: &Ctx, vol: &Volume) -> Result<HostCost> {
    let mut h = HostCost::default();
    let ssd_gc = || vol.bd.ssd.as_ref().map_or(0, |s| s.counters().gc_runs);
    let mut sum = HostCost::default();
    for _ in 0..ctx.args.sections {
        let c0 = vol.fs.stats();
        let g0 = ssd_gc();
        vol.bd.dev.trace_start();
        mark_caller(true);
        let t0 = Instant::now();
        let r = vol.fs.gc(1);
        let total = t0.elapsed().as_secs_f64();
        mark_caller(false);
        let ev = vol.bd.dev.trace_take();
        let freed = r.map_err(|e| anyhow!("gc: {e}"))?;
        let c1 = vol.fs.stats();
        h.calls += 1;
        if freed == 0 {
            continue;
        }
        let cp_s = (c1.checkpoint_time_s - c0.checkpoint_time_s).max(0.0);
        let coll_s = (c1.gc_time_s - c0.gc_time_s).max(0.0);
        let split = split_events(&ev, total - cp_s);
        sum.sections_freed += freed;
        sum.total_ms += total * 1e3;
        sum.collector_ms += coll_s * 1e3;
        sum.read_wait_ms += split.read_s * 1e3;
        sum.write_wait_ms += split.write_s * 1e3;
        sum.cpu_ms += (coll_s - split.read_s - split.write_s).max(0.0) * 1e3;
        sum.checkpoint_ms += cp_s * 1e3;
        sum.async_write_ms += split.async_write_s * 1e3;
        sum.victim_blocks_read += (c1.gc_read_blocks - c0.gc_read_blocks) as f64;
        sum.blocks_moved += (c1.gc_moved_blocks - c0.gc_moved_blocks) as f64;
        sum.node_blocks_written += (c1.node_blocks_written - c0.node_blocks_written) as f64;
        sum.device_blocks_written += (c1.dev_write_blocks - c0.dev_write_blocks) as f64;
        sum.checkpoints += (c1.checkpoints - c0.checkpoints) as f64;
        sum.device_gc_runs += ssd_gc().saturating_sub(g0) as f64;
    }
    let n = sum.sections_freed.max(1) as f64;
    h.sections_freed = sum.sections_freed;
    h.total_ms = sum.total_ms / n;
    h.collector_ms = sum.collector_ms / n;
    h.read_wait_ms = sum.read_wait_ms / n;
    h.write_wait_ms = sum.write_wait_ms / n;
    h.cpu_ms = sum.cpu_ms / n;
    h.checkpoint_ms = sum.checkpoint_ms / n;
    h.async_write_ms = sum.async_write_ms / n;
    h.victim_blocks_read = sum.victim_blocks_read / n;
    let sec_blocks = flashlog_core::BLOCKS_PER_SEG * u64::from(ctx.segs_per_sec);
    h.victim_valid = h.victim_blocks_read / sec_blocks as f64;
    h.blocks_moved = sum.blocks_moved / n;
    h.node_blocks_written = sum.node_blocks_written / n;
    h.device_blocks_written = sum.device_blocks_written / n;
    h.checkpoints = sum.checkpoints / n;
    h.device_gc_runs = sum.device_gc_runs / n;
    Ok(h)
}

/// Device time of one traced call, split: what the calling thread waited for before the
/// checkpoint began (`cp_start_s` after the trace started), by kind, and the writes other
/// threads issued during the whole call.
#[derive(Debug, Default, PartialEq)]
pub struct Split {
    pub read_s: f64,
    pub write_s: f64,
    pub async_write_s: f64,
}

pub fn split_events(ev: &[IoEvent], cp_start_s: f64) -> Split {
    let mut s = Split::default();
    for e in ev {
        if !e.caller {
            if e.kind == IoKind::Write {
                s.async_write_s += e.dur_s;
            }
            continue;
        }
        if e.start_s >= cp_start_s {
            continue;
        }
        match e.kind {
            IoKind::Read => s.read_s += e.dur_s,
            IoKind::Write | IoKind::Flush => s.write_s += e.dur_s,
            IoKind::Discard => {}
        }
    }
    s
}

/// Random overwrites for `--duration` with the device cleaning; its GC work per run.
fn device_window(
    ctx: &Ctx,
    vol: &Volume,
    inos: &[Option<Ino>],
    per_file: u64,
    fail: &(dyn Fn(String) + Sync),
    ops: &Ops,
) -> Result<DeviceCost> {
    let Some(ssd) = vol.bd.ssd.as_ref() else {
        bail!("device GC is measured on the emulator only: use --device PRESET:SIZE");
    };
    let cfg = ssd.config().clone();
    let c0 = vol.fs.stats();
    let d0 = ssd.counters();
    let (_, gc0, dies) = ssd.die_busy();
    let a0 = vol.fs.stats().app_write_bytes;
    let t = Instant::now();
    let (_lat, _b): (Lat, u64) = random_phase(
        &vol.fs,
        inos,
        per_file,
        u64::MAX,
        t + ctx.duration(),
        None,
        ctx.args.seed ^ 0xD6C,
        fail,
        ops,
    );
    let window_s = t.elapsed().as_secs_f64();
    let c1 = vol.fs.stats();
    let d1 = ssd.counters();
    let (_, gc1, _) = ssd.die_busy();
    let runs = d1.gc_runs - d0.gc_runs;
    let n = runs.max(1) as f64;
    let reads = (d1.gc_read_ops - d0.gc_read_ops) as f64;
    let moved = (d1.gc_pages_moved - d0.gc_pages_moved) as f64;
    let erases = runs as f64 * dies as f64;
    let mean = |v: &[u64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<u64>() as f64 / v.len() as f64
        }
    };
    let read_ns = mean(&cfg.timing.read_unit_ns);
    let programs = moved / f64::from(cfg.geometry.slots_per_unit().max(1));
    let model = [
        reads * read_ns,
        programs * cfg.timing.program_ns as f64,
        erases * cfg.timing.erase_ns as f64,
    ];
    let die_ns = (gc1 - gc0) as f64;
    let model_sum: f64 = model.iter().sum::<f64>().max(1.0);
    // The measured GC die time split in the proportions of the modelled NAND work (the
    // remainder is channel transfer and queueing, spread the same way).
    let part = |i: usize| die_ns * model[i] / model_sum / n / 1e6;
    Ok(DeviceCost {
        window_s,
        gc_runs: runs,
        dies,
        die_ms: die_ns / n / 1e6,
        latency_ms: die_ns / n / 1e6 / dies.max(1) as f64,
        nand_read_ms: part(0),
        nand_program_ms: part(1),
        nand_erase_ms: part(2),
        nand_reads: reads / n,
        pages_moved: moved / n,
        victim_valid: moved / n / cfg.geometry.slots_per_line() as f64,
        erases: erases / n,
        pairs_applied: (c1.upcall_pairs_applied - c0.upcall_pairs_applied) as f64 / n,
        checkpoints: (c1.checkpoints - c0.checkpoints) as f64 / n,
        apply_and_checkpoint_ms: (c1.checkpoint_time_s - c0.checkpoint_time_s) * 1e3 / n,
        app_mib_s: (c1.app_write_bytes - a0) as f64 / (1u64 << 20) as f64 / window_s.max(1e-9),
    })
}

fn build_report(ctx: &Ctx, results: Vec<GcCostResult>) -> Result<Report> {
    let out = &ctx.args.out;
    let mut rep = Report::new("gccost", out, ctx.config_json());
    let mut t = Table::new(&[
        "policy",
        "sections",
        "victim valid",
        "total ms",
        "collector ms",
        "dev read wait",
        "dev write wait",
        "rest (CPU, log waits)",
        "checkpoint ms",
        "log-thread writes ms",
        "blocks read",
        "moved",
        "node blocks",
        "dev blocks written",
        "checkpoints",
        "dev GC runs",
    ]);
    for r in &results {
        if let Some(h) = &r.host {
            t.row(vec![
                r.policy.clone(),
                h.sections_freed.to_string(),
                format!("{:.0}%", 100.0 * h.victim_valid),
                num(h.total_ms),
                num(h.collector_ms),
                num(h.read_wait_ms),
                num(h.write_wait_ms),
                num(h.cpu_ms),
                num(h.checkpoint_ms),
                num(h.async_write_ms),
                num(h.victim_blocks_read),
                num(h.blocks_moved),
                num(h.node_blocks_written),
                num(h.device_blocks_written),
                num(h.checkpoints),
                num(h.device_gc_runs),
            ]);
        }
    }
    let mut body = t.render();
    body += "Host GC: per section freed by `Fs::gc(1)` on a quiet aged volume (one victim, \
             then a checkpoint), on this thread, after the same --duration window of random \
             overwrites as the device GC rows (victims from the workload's steady state). collector = the core's GC time; dev read/write \
             wait = device requests this thread waited for before the checkpoint began; rest = \
             collector minus those waits: victim selection, page cache, node updates, and waits \
             for the log (I/O) threads' writes; checkpoint = the core's checkpoint time (its own \
             I/O included); log-thread writes = device time of the writes the I/O threads issued \
             meanwhile (overlaps the rest); dev GC runs = the FTL's own GC under the host's \
             (page mapping: log-on-log).\n";
    rep.section(
        "host GC: cost of reclaiming one section (D2FS Fig. 16)",
        body,
    );
    let mut t = Table::new(&[
        "policy",
        "window s",
        "device GC runs",
        "victim valid",
        "latency ms (dies parallel)",
        "die ms",
        "NAND read",
        "NAND program",
        "NAND erase",
        "reads",
        "pages moved",
        "erases",
        "host: pairs applied",
        "checkpoints",
        "apply + checkpoint ms",
        "app MiB/s",
    ]);
    for r in &results {
        if let Some(d) = &r.device {
            t.row(vec![
                r.policy.clone(),
                num(d.window_s),
                d.gc_runs.to_string(),
                format!("{:.0}%", 100.0 * d.victim_valid),
                num(d.latency_ms),
                num(d.die_ms),
                num(d.nand_read_ms),
                num(d.nand_program_ms),
                num(d.nand_erase_ms),
                num(d.nand_reads),
                num(d.pages_moved),
                num(d.erases),
                num(d.pairs_applied),
                num(d.checkpoints),
                num(d.apply_and_checkpoint_ms),
                num(d.app_mib_s),
            ]);
        }
    }
    let mut body = t.render();
    body += "Device GC: per device GC run (one victim line = one section with --segs-per-sec \
             auto) over a window of random overwrites after cleaning started. die ms = busy time \
             of the dies on GC, summed over dies; latency = die ms / dies (the dies work in \
             parallel); NAND read/program/erase split die ms by the configured tR, tPROG and \
             tBERS. Host side per run: upcall pairs applied, checkpoints and their time (the \
             apply runs inside the checkpoint).\n";
    for r in &results {
        body += &format!(
            "{}: aged {:.1} s (cleaning {})",
            r.policy,
            r.aging_s,
            if r.aging_cleaning_started {
                "started"
            } else {
                "had NOT started"
            }
        );
        if let Some(e) = &r.error {
            body += &format!("; ERROR {e}");
        }
        body.push('\n');
    }
    rep.section("device GC: cost per reclaimed section (D2FS Fig. 16)", body);
    // One stacked view as grouped bars: ms per section by component.
    let groups: Vec<String> = [
        "read / NAND read",
        "write / NAND program",
        "rest (CPU, log waits) / NAND erase",
        "checkpoint (+apply)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let series: Vec<(String, Vec<f64>)> = results
        .iter()
        .filter_map(|r| {
            if let Some(h) = &r.host {
                Some((
                    format!("{} (host GC)", r.policy),
                    vec![h.read_wait_ms, h.write_wait_ms, h.cpu_ms, h.checkpoint_ms],
                ))
            } else {
                r.device.as_ref().map(|d| {
                    let k = 1.0 / d.dies.max(1) as f64;
                    (
                        format!("{} (device GC)", r.policy),
                        vec![
                            d.nand_read_ms * k,
                            d.nand_program_ms * k,
                            d.nand_erase_ms * k,
                            d.apply_and_checkpoint_ms,
                        ],
                    )
                })
            }
        })
        .collect();
    if !series.is_empty() {
        rep.plots.extend(bar_plot(
            out,
            "gc_cost",
            &Bars {
                title: "cost of reclaiming one section, ms (D2FS Fig. 16)",
                y_desc: "ms per section",
                groups: &groups,
                series: &series,
            },
        )?);
    }
    let host = |n: &str| {
        results
            .iter()
            .find(|r| r.policy == n)
            .and_then(|r| r.host.as_ref())
    };
    let dev = results
        .iter()
        .find_map(|r| r.device.as_ref().filter(|_| r.policy == "device"));
    let mut ratios = serde_json::Map::new();
    if let Some(d) = dev {
        // Device GC alone, and with every host checkpoint of the window charged to it (an
        // upper bound: those checkpoints also write back the application's data).
        let dev_ms = d.latency_ms;
        let dev_host_ms = d.latency_ms + d.apply_and_checkpoint_ms;
        for n in ["f2fs", "zf2fs", "f2fs-lfs", "scale"] {
            if let Some(h) = host(n) {
                ratios.insert(
                    format!("{n}_host_gc_vs_device_gc"),
                    serde_json::json!(h.total_ms / dev_ms.max(1e-9)),
                );
                ratios.insert(
                    format!("{n}_host_gc_vs_device_gc_with_all_checkpoints"),
                    serde_json::json!(h.total_ms / dev_host_ms.max(1e-9)),
                );
            }
        }
    }
    if !ratios.is_empty() {
        let mut s = String::from("per-section ratios (host GC total / device GC):");
        for (k, v) in &ratios {
            s += &format!(" {k} {:.1}x;", v.as_f64().unwrap_or(0.0));
        }
        s.push('\n');
        if let Some((_, b)) = rep.sections.last_mut() {
            b.push_str(&s);
        }
    }
    rep.extra
        .insert("ratios".into(), serde_json::Value::Object(ratios));
    rep.results = serde_json::to_value(&results)?;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_at_the_checkpoint() {
        let e = |caller, kind, start_s, dur_s| IoEvent {
            caller,
            kind,
            start_s,
            dur_s,
            blocks: 1,
        };
        let ev = vec![
            e(true, IoKind::Read, 0.0, 0.002),
            e(true, IoKind::Read, 0.003, 0.001),
            e(false, IoKind::Write, 0.004, 0.005),
            e(true, IoKind::Write, 0.005, 0.001),
            // The checkpoint's own I/O, from 0.010 on: not the collector's.
            e(true, IoKind::Write, 0.011, 0.004),
            e(true, IoKind::Flush, 0.016, 0.001),
            e(false, IoKind::Read, 0.012, 0.003),
        ];
        let s = split_events(&ev, 0.010);
        assert!((s.read_s - 0.003).abs() < 1e-12);
        assert!((s.write_s - 0.001).abs() < 1e-12);
        assert!((s.async_write_s - 0.005).abs() < 1e-12);
    }
}
