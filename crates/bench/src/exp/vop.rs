//! `vop`: D2FS Fig. 10 and 11, the virtual-overprovisioning degree of the coupled FTL's
//! regular region (`vop_degree`, crates/ssd/src/ftl/coupled.rs; paper default 1.4; the GC
//! region is always one device capacity). Runs the `sustained` workload (fill, random 4 KiB
//! overwrites; `--aged` applies) once per degree of `--degrees` as the policies
//! `device/vop_degree=D`, and reports per degree the throughput after device cleaning started
//! (normalised to degree 1.4 when it ran, as Fig. 10 normalises), the stall time and any
//! ENOSPC, and the regular and GC regions' fill over time (Fig. 11): valid blocks / region
//! blocks, and zones holding a flash line / zones.
//!
//! Owns: the degree list (`--degrees` → policies `device/vop_degree=D`) and the sweep table
//! and plots; the runs are `sustained`'s. Invariants: one row per policy, in `--degrees`
//! order; "vs 1.4" only when the 1.4 run succeeded. Lock order: none of its own.

use super::sustained::{build_report, run_all, SustainedResult};
use crate::plot::{line_plot, Lines};
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{bail, Result};

/// `--degrees` as the policy list `device/vop_degree=D,...`.
pub fn policies(degrees: &str) -> Result<String> {
    let mut v = Vec::new();
    for d in degrees.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match d.parse::<f64>() {
            Ok(x) if x.is_finite() && (0.5..=64.0).contains(&x) => {
                v.push(format!("device/vop_degree={d}"))
            }
            _ => bail!("--degrees: {d:?} is not a degree in 0.5..=64 (e.g. 1.0,1.4,2.0)"),
        }
    }
    if v.is_empty() {
        bail!("--degrees is empty");
    }
    Ok(v.join(","))
}

/// The degree a result ran at (its `vop_degree` override, else the FTL default 1.4).
fn degree_of(r: &SustainedResult, ctx: &Ctx) -> f64 {
    ctx.policies
        .iter()
        .find(|p| p.label == r.policy)
        .and_then(|p| {
            p.ssd_set
                .iter()
                .rev()
                .find_map(|kv| kv.strip_prefix("vop_degree=")?.parse().ok())
        })
        .unwrap_or(flashlog_ssd::CoupledConfig::default().degree)
}

pub fn run(ctx: &Ctx) -> Result<Report> {
    if ctx.device.ssd_config().is_err() {
        bail!("bench vop sweeps the emulator's coupled FTL: use --device PRESET:SIZE");
    }
    let (results, raw) = run_all(ctx)?;
    let rows: Vec<(f64, &SustainedResult)> =
        results.iter().map(|r| (degree_of(r, ctx), r)).collect();
    let during = |r: &SustainedResult| {
        if r.gc_start_s.is_some() {
            r.app_mib_s_during_gc
        } else {
            r.random_mib_s
        }
    };
    let base = rows
        .iter()
        .find(|(d, r)| (*d - 1.4).abs() < 1e-9 && r.error.is_none())
        .map(|(_, r)| during(r));
    let mut t = Table::new(&[
        "degree",
        "policy",
        "MiB/s after cleaning",
        "vs 1.4",
        "random MiB/s",
        "p99.9 us",
        "stall s",
        "device GC runs",
        "regular fill (end)",
        "regular zones used",
        "GC fill",
        "GC zones used",
        "error",
    ]);
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let mut sweep = Vec::new();
    for (d, r) in &rows {
        let last = r.gauges.last().cloned().unwrap_or_default();
        let norm = base.map(|b| during(r) / b.max(1e-9));
        t.row(vec![
            format!("{d:.2}"),
            r.policy.clone(),
            num(during(r)),
            norm.map_or("-".into(), num),
            num(r.random_mib_s),
            num(r.p999_us),
            num(r.stall_time_s),
            last.device_gc_runs.to_string(),
            pct(last.regular_fill),
            pct(last.regular_zones_used),
            pct(last.gc_fill),
            pct(last.gc_zones_used),
            r.error.clone().unwrap_or_else(|| "-".into()),
        ]);
        sweep.push(serde_json::json!({
            "degree": d,
            "policy": r.policy,
            "mib_s_after_cleaning": during(r),
            "vs_degree_1_4": norm,
            "stall_time_s": r.stall_time_s,
            "error": r.error,
            "regular_fill_end": last.regular_fill,
            "gc_fill_end": last.gc_fill,
        }));
    }
    let mut body = t.render();
    body += "MiB/s after cleaning: application write bandwidth from the first migration upcall \
             applied (device cleaning) to the end, or the whole random phase if none was. fill: \
             valid blocks of the region / its blocks; zones used: zones holding a flash line \
             (written, not yet reclaimed). Paper Fig. 10: below 1.4 the file system \
             occasionally runs out of free sections and waits for device GC.\n";
    let mut rep = build_report(ctx, "vop", results.clone(), raw)?;
    rep.sections.insert(
        0,
        ("regular-region degree sweep (D2FS Fig. 10-11)".into(), body),
    );
    let out = &ctx.args.out;
    let pts: Vec<(String, Vec<(f64, f64)>)> = vec![(
        "device".into(),
        rows.iter()
            .filter(|(_, r)| r.error.is_none())
            .map(|(d, r)| (*d, during(r)))
            .collect(),
    )];
    rep.plots.extend(line_plot(
        out,
        "vop_throughput",
        &Lines {
            title: "D2FS throughput after cleaning starts vs regular-region degree (Fig. 10)",
            x_desc: "regular-region degree",
            y_desc: "application write MiB/s",
            series: &pts,
            log_x: false,
            points: true,
        },
    )?);
    let mut fill: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (d, r) in &rows {
        fill.push((
            format!("{d:.1} regular"),
            r.gauges
                .iter()
                .map(|g| (g.t_s, 100.0 * g.regular_fill))
                .collect(),
        ));
        fill.push((
            format!("{d:.1} GC region"),
            r.gauges
                .iter()
                .map(|g| (g.t_s, 100.0 * g.gc_fill))
                .collect(),
        ));
    }
    rep.plots.extend(line_plot(
        out,
        "region_fill",
        &Lines {
            title: "D2FS region utilization over time (Fig. 11): valid blocks / region",
            x_desc: "time (s)",
            y_desc: "% of the region's blocks valid",
            series: &fill,
            log_x: false,
            points: false,
        },
    )?);
    rep.extra
        .insert("vop_sweep".into(), serde_json::Value::Array(sweep));
    Ok(rep)
}
