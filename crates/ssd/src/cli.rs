//! `flashlog ssd`: run a synthetic workload against the emulator alone and report its
//! statistics as a table (stdout), a JSON file and a bandwidth-over-time plot (SVG + PNG).
//!
//! Owns: [`SsdArgs`] (clap), [`run`], the report type and the plot writers.
//!
//! Phases: optional fill (sequential write of the whole logical space; implied by read
//! workloads), optional TRIM of the top `--trim` fraction (the workload then uses the rest),
//! optional warm-up, then the measured phase, after which statistics are reset-free snapshots
//! of that phase alone.
//!
//! Invariants: bad options are reported as errors before any work starts; a missing font never
//! panics (the plot falls back to a plain hand-written SVG).
//!
//! Lock order: none of its own.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::analytic::{self, ExpectedPerf};
use crate::config::{parse_fraction, parse_size, ClockKind, SsdConfig, StoreKind, VictimKind};
use crate::device::SsdDevice;
use crate::stats::{LatencySummary, SsdStats};
use crate::workload::{run_phase, Gaps, Pattern, Phase, PhaseResult};
use flashlog_dev::BlockDevice;

/// Options of `flashlog ssd`.
#[derive(clap::Args, Debug, Clone)]
pub struct SsdArgs {
    /// Preset: 970pro-like, sata-like, test, tiny.
    #[arg(long, default_value = "970pro-like")]
    pub preset: String,
    /// Logical capacity (e.g. 4GiB); lines are scaled, timing kept. Default: the preset's.
    #[arg(long, value_name = "SIZE")]
    pub capacity: Option<String>,
    /// Overprovisioning (physical − logical)/logical, e.g. 0.07 or 7%.
    #[arg(long, value_name = "FRACTION")]
    pub op: Option<String>,
    /// Workload of the measured phase.
    #[arg(long, value_enum, default_value_t = Pattern::RandWrite)]
    pub workload: Pattern,
    /// Write the whole logical space sequentially first.
    #[arg(long)]
    pub fill: bool,
    /// After the fill, discard this top fraction of the logical space; the workload uses the rest.
    #[arg(long, value_name = "FRACTION")]
    pub trim: Option<String>,
    /// Unmeasured warm-up bytes of the same workload before the measured phase.
    #[arg(long, value_name = "SIZE")]
    pub warmup: Option<String>,
    /// Total bytes of the measured phase (read bytes for read workloads). Default: the logical
    /// capacity, at most 1 GiB.
    #[arg(long, value_name = "SIZE")]
    pub writes: Option<String>,
    /// Request size. Default: 4KiB for random, 128KiB for sequential workloads.
    #[arg(long, value_name = "SIZE")]
    pub bs: Option<String>,
    /// Requests in flight (threads on the wall clock).
    #[arg(long, default_value_t = 32)]
    pub qd: u32,
    /// Run the warm-up and measured phases in bursts of this many bytes, each followed by
    /// `--idle` of idle time (a host that pauses: where idle-time GC, `--set gc_idle=1ms`,
    /// runs). Virtual clock only. Bandwidths then count the idle time.
    #[arg(long, value_name = "SIZE", requires = "idle")]
    pub burst: Option<String>,
    /// Idle time after each `--burst` (e.g. 20ms).
    #[arg(long, value_name = "DURATION", requires = "burst")]
    pub idle: Option<String>,
    /// virtual (deterministic, fast) or wall (real time, threads sleep).
    #[arg(long, default_value = "virtual")]
    pub clock: String,
    /// GC victim policy: greedy, cost-benefit, cost-benefit-flash, fifo, random, d-choices
    /// (d = log2 of the line count) or d-choices:D.
    #[arg(long)]
    pub policy: Option<String>,
    /// Page contents: none, ram or file:PATH.
    #[arg(long, default_value = "none")]
    pub store: String,
    /// Override any parameter (repeatable), e.g. --set program_ns=200us.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Write the report as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Plot path prefix (PREFIX.svg, PREFIX.png). Default: next to the JSON, or ./ssd-bandwidth.
    #[arg(long, value_name = "PREFIX")]
    pub plot: Option<PathBuf>,
    /// Do not write the plot.
    #[arg(long)]
    pub no_plot: bool,
    /// Seed of the random addresses.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The JSON report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub preset: String,
    /// The FTL ("page", "zoned", "coupled").
    pub ftl: String,
    pub workload: &'static str,
    pub clock: ClockKind,
    /// The victim policy, as `--policy` names it (d-choices with its d resolved).
    pub policy: String,
    pub capacity_bytes: u64,
    pub physical_bytes: u64,
    pub op: f64,
    pub line_bytes: u64,
    pub lines: u64,
    pub bs: u64,
    pub qd: u32,
    pub trimmed_fraction: f64,
    pub ops: u64,
    pub bytes: u64,
    /// Device time of the measured phase.
    pub elapsed_s: f64,
    /// Host time of the measured phase.
    pub wall_s: f64,
    /// Emulator speed: requests per host second.
    pub emulator_ops_per_s: f64,
    pub waf: f64,
    /// The policy's closed form at the effective OP (uniform random writes over the used
    /// range; `analytic::waf_model`): Lambert-W for greedy, FIFO and cost-benefit, the
    /// mean field for random and d-choices.
    pub model_waf: f64,
    pub effective_op: f64,
    pub measured_effective_op: f64,
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub nand_write_bytes: u64,
    pub gc_runs: u64,
    pub gc_pages_moved: u64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
    pub iops: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub mean_us: f64,
    pub die_utilisation: f64,
    pub channel_utilisation: f64,
    pub mapping_memory_bytes: u64,
    pub expected: ExpectedPerf,
    pub stats: SsdStats,
}

/// Build the configuration the options describe.
pub fn config_from_args(a: &SsdArgs) -> anyhow::Result<SsdConfig> {
    let mut cfg = SsdConfig::preset(&a.preset)?;
    if let Some(op) = &a.op {
        cfg.op = parse_fraction("--op", op)?;
        if cfg.op <= 0.0 {
            bail!("--op must be greater than 0");
        }
    }
    if let Some(c) = &a.capacity {
        cfg = cfg.with_capacity(parse_size(c)?)?;
    }
    if let Some(p) = &a.policy {
        cfg.gc.policy = VictimKind::parse(p)?;
    }
    cfg.store = StoreKind::parse(&a.store)?;
    cfg.clock = ClockKind::parse(&a.clock)?;
    for kv in &a.set {
        cfg.set_kv(kv)?;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn progress(quiet: bool, len: u64, msg: &str) -> Option<ProgressBar> {
    if quiet {
        return None;
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>10} [{elapsed_precise}] {wide_bar} {pos}/{len} ({eta})")
    {
        pb.set_style(style);
    }
    pb.set_message(msg.to_string());
    Some(pb)
}

fn run_logged(dev: &SsdDevice, p: &Phase, quiet: bool, msg: &str) -> anyhow::Result<PhaseResult> {
    let ops = p.total_bytes.div_ceil(p.bs);
    let pb = progress(quiet || ops < 100_000, ops, msg);
    let r = run_phase(dev, p, pb.as_ref()).with_context(|| format!("{msg} phase failed"))?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(r)
}

/// Run `flashlog ssd`.
pub fn run(a: &SsdArgs) -> anyhow::Result<()> {
    let cfg = config_from_args(a)?;
    let bs = match &a.bs {
        Some(s) => parse_size(s)?,
        None if a.workload.is_random() => 4096,
        None => 128 * 1024,
    };
    if bs == 0 || bs % 4096 != 0 {
        bail!("--bs must be a positive multiple of 4096 (got {bs})");
    }
    if a.qd == 0 || a.qd > 4096 {
        bail!("--qd must be between 1 and 4096");
    }
    let trim = match &a.trim {
        Some(t) => parse_fraction("--trim", t)?,
        None => 0.0,
    };
    if !(0.0..0.95).contains(&trim) {
        bail!("--trim must be in [0, 0.95)");
    }
    let zone_aware = matches!(
        cfg.ftl,
        crate::config::FtlKind::Zoned(_) | crate::config::FtlKind::Coupled(_)
    );
    if zone_aware && (a.workload != Pattern::SeqWrite || a.fill || trim > 0.0) {
        bail!(
            "the {} FTL takes zone-aware writes only (sequential or write-once zones, no \
             rewrites before a reset); of the synthetic workloads only --workload seq-write \
             without --fill/--trim fits it: use flashlog bench for file-system runs",
            cfg.ftl.name()
        );
    }
    let dev = SsdDevice::new(cfg.clone())?;
    // An infinite logical space (ftl=interval) is not the space a synthetic workload should
    // spread over: use the capacity the physical space holds.
    let logical = if dev.capabilities().infinite_space {
        cfg.logical_blocks()
    } else if zone_aware {
        // The conventional region and the zones the host may write (not a GC region).
        match &cfg.ftl {
            crate::config::FtlKind::Coupled(_) => {
                dev.capabilities().block_count
                    - cfg
                        .logical_blocks()
                        .div_ceil(dev.capabilities().zone_blocks)
                        * dev.capabilities().zone_blocks
            }
            _ => dev.capabilities().block_count,
        }
    } else {
        dev.capabilities().block_count
    };
    let used = ((logical as f64) * (1.0 - trim)).floor() as u64;
    if used * 4096 < bs {
        bail!(
            "the used logical range ({} B) is smaller than one request ({bs} B)",
            used * 4096
        );
    }
    let writes = match &a.writes {
        Some(s) => parse_size(s)?,
        None => (used * 4096).min(1 << 30),
    };
    if writes == 0 {
        bail!("--writes must be greater than 0");
    }
    let warmup = match &a.warmup {
        Some(s) => parse_size(s)?,
        None => 0,
    };
    let gaps = match (&a.burst, &a.idle) {
        (Some(b), Some(i)) => {
            let burst = parse_size(b)?;
            if burst < bs {
                bail!("--burst {b} is smaller than one request ({bs} B)");
            }
            Some(Gaps {
                every: burst / bs,
                idle_ns: crate::config::parse_duration_ns(i)?,
            })
        }
        _ => None,
    };
    if gaps.is_some() && !dev.is_virtual() {
        bail!("--burst and --idle need the virtual clock (--clock virtual)");
    }
    eprintln!(
        "ssd: preset {} | FTL {} | logical {} MiB, physical {} MiB, OP {:.3}, {} lines × {} KiB | clock {:?}",
        cfg.preset,
        cfg.ftl.name(),
        (logical * 4096) >> 20,
        cfg.geometry.physical_bytes() >> 20,
        cfg.op,
        cfg.geometry.lines(),
        cfg.geometry.line_bytes() >> 10,
        cfg.clock
    );
    let fill = a.fill || !a.workload.is_write();
    if fill {
        if !a.fill {
            eprintln!("ssd: read workload: filling the logical space first");
        }
        let p = Phase {
            pattern: Pattern::SeqWrite,
            start: 0,
            blocks: logical,
            total_bytes: logical * 4096,
            bs: (128 * 1024).min(logical * 4096),
            qd: a.qd,
            seed: a.seed,
            gaps: None,
        };
        run_logged(&dev, &p, a.quiet, "fill")?;
    }
    if trim > 0.0 {
        dev.discard(used, logical - used)?;
    }
    let measured = Phase {
        pattern: a.workload,
        start: 0,
        blocks: used,
        total_bytes: writes,
        bs,
        qd: a.qd,
        seed: a.seed,
        gaps,
    };
    if warmup > 0 {
        let mut w = measured.clone();
        w.total_bytes = warmup;
        w.seed = a.seed.wrapping_add(0x5eed);
        run_logged(&dev, &w, a.quiet, "warm-up")?;
    }
    dev.reset_stats();
    let r = run_logged(&dev, &measured, a.quiet, "measure")?;
    let report = build_report(&dev, &cfg, a, &measured, &r, trim, used);
    print_table(&report);
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("ssd: wrote {}", path.display());
    }
    if !a.no_plot {
        let prefix = match (&a.plot, &a.json) {
            (Some(p), _) => p.clone(),
            (None, Some(j)) => {
                let stem = j
                    .file_stem()
                    .map_or("ssd".into(), |s| s.to_string_lossy().into_owned());
                j.with_file_name(format!("{stem}-bandwidth"))
            }
            (None, None) => PathBuf::from("ssd-bandwidth"),
        };
        write_plot(&prefix, &report)?;
    }
    Ok(())
}

fn build_report(
    dev: &SsdDevice,
    cfg: &SsdConfig,
    a: &SsdArgs,
    p: &Phase,
    r: &PhaseResult,
    trim: f64,
    used: u64,
) -> Report {
    let s = dev.stats();
    let secs = r.device_secs().max(1e-12);
    let mib = (1u64 << 20) as f64;
    let lat: &LatencySummary = if p.pattern.is_write() {
        &s.latency.write
    } else {
        &s.latency.read
    };
    let dies = s.busy.die_user_ns.len().max(1) as f64;
    let die_busy: u64 = s.busy.die_user_ns.iter().chain(&s.busy.die_gc_ns).sum();
    let ch_busy: u64 = s.busy.channel_ns.iter().sum();
    let chans = s.busy.channel_ns.len().max(1) as f64;
    let eff = analytic::effective_op(cfg, used);
    Report {
        preset: cfg.preset.clone(),
        ftl: cfg.ftl.name().to_string(),
        workload: p.pattern.name(),
        clock: cfg.clock,
        policy: match cfg.gc.policy {
            VictimKind::DChoices(0) => format!(
                "d-choices:{}",
                crate::ftl::default_choices(
                    u32::try_from(cfg.geometry.lines()).unwrap_or(u32::MAX)
                )
            ),
            p => p.name(),
        },
        capacity_bytes: if dev.capabilities().infinite_space {
            cfg.logical_bytes()
        } else {
            dev.capabilities().block_count * 4096
        },
        physical_bytes: cfg.geometry.physical_bytes(),
        op: cfg.op,
        line_bytes: cfg.geometry.line_bytes(),
        lines: cfg.geometry.lines(),
        bs: p.bs,
        qd: a.qd,
        trimmed_fraction: trim,
        ops: r.ops,
        bytes: r.bytes,
        elapsed_s: r.device_secs(),
        wall_s: r.wall_secs,
        emulator_ops_per_s: r.ops as f64 / r.wall_secs.max(1e-12),
        waf: s.waf,
        // The closed form models page mapping under uniform random writes only, without
        // idle GC (the free lines it keeps depend on the idle time).
        model_waf: if cfg.gc.idle_ns == 0
            && p.pattern.is_write()
            && matches!(
                cfg.ftl,
                crate::config::FtlKind::Page | crate::config::FtlKind::Interval(_)
            ) {
            analytic::waf_model(
                cfg.gc.policy,
                eff,
                cfg.geometry.slots_per_line() as u32,
                u32::try_from(cfg.geometry.lines()).unwrap_or(u32::MAX),
            )
        } else {
            f64::NAN
        },
        effective_op: eff,
        measured_effective_op: analytic::measured_effective_op(cfg, used, s.mean_free_units),
        host_write_bytes: s.host_write_bytes,
        host_read_bytes: s.host_read_bytes,
        nand_write_bytes: s.nand_write_bytes,
        gc_runs: s.gc_runs,
        gc_pages_moved: s.gc_pages_moved,
        read_mib_s: s.host_read_bytes as f64 / mib / secs,
        write_mib_s: s.host_write_bytes as f64 / mib / secs,
        iops: r.ops as f64 / secs,
        p50_us: lat.p50_us,
        p99_us: lat.p99_us,
        p999_us: lat.p999_us,
        mean_us: lat.mean_us,
        die_utilisation: die_busy as f64 / 1e9 / secs / dies,
        channel_utilisation: ch_busy as f64 / 1e9 / secs / chans,
        mapping_memory_bytes: s.memory.mapping_bytes + s.memory.line_metadata_bytes,
        expected: analytic::expected_perf(cfg),
        stats: s,
    }
}

fn print_table(r: &Report) {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    let rows: Vec<(&str, String)> = vec![
        ("preset / FTL", format!("{} / {}", r.preset, r.ftl)),
        (
            "workload",
            format!("{} bs={} qd={}", r.workload, r.bs, r.qd),
        ),
        (
            "capacity / physical",
            format!("{} / {}", mib(r.capacity_bytes), mib(r.physical_bytes)),
        ),
        (
            "op (configured / effective / measured)",
            format!(
                "{:.4} / {:.4} / {:.4}",
                r.op, r.effective_op, r.measured_effective_op
            ),
        ),
        ("lines", format!("{} × {}", r.lines, mib(r.line_bytes))),
        ("GC victim policy", r.policy.clone()),
        ("requests", r.ops.to_string()),
        ("device time", format!("{:.4} s", r.elapsed_s)),
        (
            "host time",
            format!("{:.3} s ({:.0} req/s)", r.wall_s, r.emulator_ops_per_s),
        ),
        (
            "host reads",
            format!(
                "{} ({} ops)",
                mib(r.host_read_bytes),
                r.stats.counters.host_read_ops
            ),
        ),
        (
            "host writes",
            format!(
                "{} ({} ops)",
                mib(r.host_write_bytes),
                r.stats.counters.host_write_ops
            ),
        ),
        (
            "host discards",
            format!(
                "{} ({} ops)",
                mib(r.stats.host_discard_bytes),
                r.stats.counters.host_discard_ops
            ),
        ),
        (
            "NAND reads",
            format!(
                "{} ops (+{} GC), {}",
                r.stats.counters.nand_read_ops,
                r.stats.counters.gc_read_ops,
                mib(r.stats.counters.nand_read_bytes)
            ),
        ),
        (
            "NAND programs",
            format!(
                "{} ops, {}",
                r.stats.counters.nand_program_ops,
                mib(r.nand_write_bytes)
            ),
        ),
        ("NAND erases", r.stats.counters.nand_erases.to_string()),
        (
            "GC runs / pages moved",
            if r.stats.ftl.gc_idle_runs > 0 {
                format!(
                    "{} / {} ({} runs in idle time)",
                    r.gc_runs, r.gc_pages_moved, r.stats.ftl.gc_idle_runs
                )
            } else {
                format!("{} / {}", r.gc_runs, r.gc_pages_moved)
            },
        ),
        (
            "WAF (measured / model)",
            if r.model_waf.is_finite() {
                format!("{:.3} / {:.3}", r.waf, r.model_waf)
            } else {
                format!("{:.3} / n/a", r.waf)
            },
        ),
        ("read bandwidth", format!("{:.1} MiB/s", r.read_mib_s)),
        ("write bandwidth", format!("{:.1} MiB/s", r.write_mib_s)),
        ("IOPS", format!("{:.0}", r.iops)),
        (
            "latency mean / p50 / p99 / p99.9",
            format!(
                "{:.2} / {:.2} / {:.2} / {:.2} µs",
                r.mean_us, r.p50_us, r.p99_us, r.p999_us
            ),
        ),
        (
            "die / channel utilisation",
            format!(
                "{:.1} % / {:.1} %",
                r.die_utilisation * 100.0,
                r.channel_utilisation * 100.0
            ),
        ),
        (
            "write-buffer stall",
            format!("{:.3} ms", r.stats.write_buffer_stall_ns as f64 / 1e6),
        ),
        ("mapping memory", mib(r.mapping_memory_bytes)),
        (
            "expected QD1 4K read / write",
            format!(
                "{:.2} / {:.2} µs",
                r.expected.read_4k_qd1_ns / 1e3,
                r.expected.write_4k_qd1_ns / 1e3
            ),
        ),
        (
            "expected seq write / read",
            format!(
                "{:.1} / {:.1} MiB/s",
                r.expected.seq_write_bytes_per_s / (1u64 << 20) as f64,
                r.expected.seq_read_bytes_per_s / (1u64 << 20) as f64
            ),
        ),
    ];
    if r.stats.latency.wall_lateness.count > 0 {
        let l = &r.stats.latency.wall_lateness;
        println!(
            "(wall clock: completions were late by p50 {:.1} µs, p99 {:.1} µs)",
            l.p50_us, l.p99_us
        );
    }
    let w = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (k, v) in rows {
        println!("{k:<w$}  {v}");
    }
}

static FONT: OnceLock<bool> = OnceLock::new();
const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Register DejaVu Sans with plotters once; false if the file is missing or unreadable.
fn font_ready() -> bool {
    *FONT.get_or_init(|| {
        let Ok(bytes) = std::fs::read(FONT_PATH) else {
            return false;
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
            .is_ok()
    })
}

/// `prefix` + `suffix` (unlike `with_extension`, keeps dots inside the prefix).
fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Write PREFIX.svg and PREFIX.png (plotters), or a plain PREFIX.svg without a font.
pub fn write_plot(prefix: &Path, r: &Report) -> anyhow::Result<()> {
    let pts = r.stats.bandwidth.points();
    let svg = with_suffix(prefix, ".svg");
    if !font_ready() {
        eprintln!(
            "ssd: font {FONT_PATH} not found: writing a plain SVG plot only (install fonts-dejavu-core for PNG)"
        );
        std::fs::write(&svg, plain_svg(&pts, r))?;
        eprintln!("ssd: wrote {}", svg.display());
        return Ok(());
    }
    let png = with_suffix(prefix, ".png");
    {
        let root = plotters::backend::SVGBackend::new(&svg, (900, 480));
        draw(root, &pts, r).with_context(|| format!("drawing {}", svg.display()))?;
    }
    {
        let root = plotters::backend::BitMapBackend::new(&png, (900, 480));
        draw(root, &pts, r).with_context(|| format!("drawing {}", png.display()))?;
    }
    eprintln!("ssd: wrote {} and {}", svg.display(), png.display());
    Ok(())
}

fn draw<DB: plotters::backend::DrawingBackend>(
    backend: DB,
    pts: &[(f64, f64, f64)],
    r: &Report,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let x_max = pts.last().map_or(1.0, |p| p.0).max(1e-6);
    let y_max = pts
        .iter()
        .map(|p| p.1.max(p.2))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let title = format!(
        "{} {} bs={} qd={}: bandwidth",
        r.preset, r.workload, r.bs, r.qd
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("device time (s)")
        .y_desc("MiB/s")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.2)), &RED))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .label("write")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
    chart
        .draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), &BLUE))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .label("read")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// A dependency-free SVG (no font metrics needed) for machines without the font.
fn plain_svg(pts: &[(f64, f64, f64)], r: &Report) -> String {
    let (w, h, m) = (900.0, 480.0, 50.0);
    let x_max = pts.last().map_or(1.0, |p| p.0).max(1e-6);
    let y_max = pts.iter().map(|p| p.1.max(p.2)).fold(1.0f64, f64::max) * 1.1;
    let line = |sel: fn(&(f64, f64, f64)) -> f64| -> String {
        pts.iter()
            .map(|p| {
                format!(
                    "{:.1},{:.1}",
                    m + p.0 / x_max * (w - 2.0 * m),
                    h - m - sel(p) / y_max * (h - 2.0 * m)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{m}\" y=\"30\">{} {}: bandwidth (MiB/s, max {:.0}) over {:.3} s; red write, blue read</text>\n\
         <rect x=\"{m}\" y=\"{m}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n\
         <polyline fill=\"none\" stroke=\"red\" points=\"{}\"/>\n\
         <polyline fill=\"none\" stroke=\"blue\" points=\"{}\"/>\n</svg>\n",
        r.preset,
        r.workload,
        y_max / 1.1,
        x_max,
        w - 2.0 * m,
        h - 2.0 * m,
        line(|p| p.2),
        line(|p| p.1)
    )
}
