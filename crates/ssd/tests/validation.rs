//! Validation of the emulator against what its parameters imply (docs/EMULATOR.md §3) and
//! against the analytic write-amplification model (reference/ssd-emulator.md §3).
//!
//! All runs use the virtual clock and keep no page contents, so they are deterministic and
//! fast; every expected value comes from a closed form, never from a previous run.

use flashlog_dev::BlockDevice;
use flashlog_ssd::analytic::{
    effective_op, expected_perf, measured_effective_op, waf_greedy, waf_model, waf_random,
};
use flashlog_ssd::workload::{run_phase, Pattern, Phase};
use flashlog_ssd::{SsdConfig, SsdDevice};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn within(measured: f64, expected: f64, tol: f64) -> bool {
    (measured / expected - 1.0).abs() <= tol
}

/// Presets as used here: the big ones scaled to 1 GiB, the small ones native.
fn preset(name: &str) -> SsdConfig {
    let c = SsdConfig::preset(name).unwrap();
    if c.logical_bytes() > (1 << 30) {
        c.with_capacity(1 << 30).unwrap()
    } else {
        c
    }
}

fn phase(pattern: Pattern, blocks: u64, total: u64, bs: u64, qd: u32) -> Phase {
    Phase {
        pattern,
        start: 0,
        blocks,
        total_bytes: total,
        bs,
        qd,
        seed: 7,
        gaps: None,
    }
}

/// Sequential bandwidth and QD1 4 KiB latency of one preset, each within 10 % of the value
/// derived from its parameters.
fn check_perf(name: &str) {
    let cfg = preset(name);
    let want = expected_perf(&cfg);
    let dev = SsdDevice::new(cfg.clone()).unwrap();
    let logical = dev.capabilities().block_count;
    // Sequential write of up to 256 MiB (half the device at most), 128 KiB at QD 32.
    let region = (logical / 2).min(256 * MIB / 4096);
    let r = run_phase(
        &dev,
        &phase(Pattern::SeqWrite, region, region * 4096, 128 * KIB, 32),
        None,
    )
    .unwrap();
    let bw = r.bytes as f64 / r.device_secs();
    eprintln!(
        "{name}: seq write {:.1} MiB/s (expected {:.1})",
        bw / MIB as f64,
        want.seq_write_bytes_per_s / MIB as f64
    );
    assert!(
        within(bw, want.seq_write_bytes_per_s, 0.10),
        "{name}: seq write {:.1} MB/s, expected {:.1}",
        bw / 1e6,
        want.seq_write_bytes_per_s / 1e6
    );
    dev.flush().unwrap();
    // Sequential read of the same region.
    let r = run_phase(
        &dev,
        &phase(Pattern::SeqRead, region, region * 4096, 128 * KIB, 32),
        None,
    )
    .unwrap();
    let bw = r.bytes as f64 / r.device_secs();
    eprintln!(
        "{name}: seq read {:.1} MiB/s (expected {:.1})",
        bw / MIB as f64,
        want.seq_read_bytes_per_s / MIB as f64
    );
    assert!(
        within(bw, want.seq_read_bytes_per_s, 0.10),
        "{name}: seq read {:.1} MB/s, expected {:.1}",
        bw / 1e6,
        want.seq_read_bytes_per_s / 1e6
    );
    // QD1 random 4 KiB reads over the written region.
    dev.reset_stats();
    run_phase(
        &dev,
        &phase(Pattern::RandRead, region, 2000 * 4096, 4096, 1),
        None,
    )
    .unwrap();
    let lat = dev.stats().latency.read.mean_us * 1e3;
    eprintln!(
        "{name}: QD1 4K read {:.2} us (expected {:.2})",
        lat / 1e3,
        want.read_4k_qd1_ns / 1e3
    );
    assert!(
        within(lat, want.read_4k_qd1_ns, 0.10),
        "{name}: QD1 4K read {lat:.0} ns, expected {:.0}",
        want.read_4k_qd1_ns
    );
    // QD1 4 KiB writes (sequential, into the unwritten half).
    dev.flush().unwrap();
    dev.reset_stats();
    let n = (logical - region).min(2000);
    let mut p = phase(Pattern::SeqWrite, n, n * 4096, 4096, 1);
    p.start = region;
    run_phase(&dev, &p, None).unwrap();
    let lat = dev.stats().latency.write.mean_us * 1e3;
    eprintln!(
        "{name}: QD1 4K write {:.2} us (expected {:.2})",
        lat / 1e3,
        want.write_4k_qd1_ns / 1e3
    );
    assert!(
        within(lat, want.write_4k_qd1_ns, 0.10),
        "{name}: QD1 4K write {lat:.0} ns, expected {:.0}",
        want.write_4k_qd1_ns
    );
}

#[test]
fn perf_970pro_like() {
    check_perf("970pro-like");
}

#[test]
fn perf_sata_like() {
    check_perf("sata-like");
}

#[test]
fn perf_test() {
    check_perf("test");
}

#[test]
fn perf_tiny() {
    check_perf("tiny");
}

/// Greedy GC in the b → ∞ regime: 1024 mapping units per line (where the reference finds the
/// closed form exact within 0.2 % once the reserve is accounted for), 256 lines.
fn waf_config(op: f64) -> SsdConfig {
    let mut c = SsdConfig::preset("test").unwrap();
    c.geometry.pages_per_block = 256; // 4 dies × 256 × 4 KiB = 1024 units per line
    c.geometry.blocks_per_plane = 256;
    c.op = op;
    c.validate().unwrap();
    assert_eq!(c.geometry.slots_per_line(), 1024);
    c
}

/// Fill, trim the top `trim` fraction, then uniform random 4 KiB writes over the rest:
/// 4 × U warm-up, 4 × U measured. Returns (measured WAF, model WAF, measured effective OP).
fn steady_waf(cfg: SsdConfig, trim: f64) -> (f64, f64, f64) {
    steady_waf_over(cfg, trim, 4, 4)
}

/// `steady_waf` with `warm` × U warm-up and `measured` × U measured writes.
fn steady_waf_over(cfg: SsdConfig, trim: f64, warm: u64, measured: u64) -> (f64, f64, f64) {
    let dev = SsdDevice::new(cfg.clone()).unwrap();
    let logical = dev.capabilities().block_count;
    run_phase(
        &dev,
        &phase(Pattern::SeqWrite, logical, logical * 4096, 128 * KIB, 32),
        None,
    )
    .unwrap();
    let used = ((logical as f64) * (1.0 - trim)) as u64;
    if used < logical {
        dev.discard(used, logical - used).unwrap();
    }
    let rand = |total| phase(Pattern::RandWrite, used, total, 4096, 32);
    run_phase(&dev, &rand(warm * used * 4096), None).unwrap();
    dev.reset_stats();
    let mut p = rand(measured * used * 4096);
    p.seed = 99;
    run_phase(&dev, &p, None).unwrap();
    dev.check_invariants().unwrap();
    let s = dev.stats();
    let model = waf_greedy(effective_op(&cfg, used));
    (
        s.waf,
        model,
        measured_effective_op(&cfg, used, s.mean_free_units),
    )
}

fn check_waf(op: f64) {
    let cfg = waf_config(op);
    let (waf, model, eff_measured) = steady_waf(cfg.clone(), 0.0);
    let eff = effective_op(&cfg, cfg.logical_blocks());
    eprintln!(
        "op {op}: effective {eff:.4} (measured {eff_measured:.4}), WAF {waf:.3}, model {model:.3}"
    );
    assert!(
        within(waf, model, 0.05),
        "op {op}: WAF {waf:.3} vs model {model:.3}"
    );
    // The reserve correction must describe the run: the measured spare agrees with it.
    assert!(
        (eff - eff_measured).abs() < 0.1 * eff,
        "effective OP {eff} vs measured {eff_measured}"
    );
}

#[test]
fn waf_greedy_op_7() {
    check_waf(0.07);
}

#[test]
fn waf_greedy_op_15() {
    check_waf(0.15);
}

#[test]
fn waf_greedy_op_28() {
    check_waf(0.28);
}

#[test]
fn trim_lowers_waf_as_the_model_predicts() {
    let cfg = waf_config(0.07);
    let (full, _, _) = steady_waf(cfg.clone(), 0.0);
    for f in [0.1, 0.2] {
        let (waf, model, _) = steady_waf(cfg.clone(), f);
        eprintln!("trim {f}: WAF {waf:.3}, model {model:.3}, untrimmed {full:.3}");
        assert!(
            within(waf, model, 0.05),
            "trim {f}: WAF {waf:.3} vs model {model:.3}"
        );
        assert!(
            waf < full * 0.8,
            "trim {f}: {waf:.3} not lower than {full:.3}"
        );
    }
}

/// The `test` preset (b = 128 units a line, 256 lines) at `op` with a victim policy, 6 U
/// warm-up and 8 U measured (random victims need the longer run to settle within 1 %):
/// (measured WAF, effective OP, the policy's model). The reference's simulated targets at
/// 25 %: greedy 2.75, FIFO 2.80, cost-benefit 2.76 (reference/ssd-emulator.md §3).
fn policy_waf(policy: &str, op: f64) -> (f64, f64, f64) {
    let mut cfg = SsdConfig::preset("test").unwrap();
    cfg.op = op;
    cfg.set_kv(&format!("gc_policy={policy}")).unwrap();
    cfg.validate().unwrap();
    let (waf, _, _) = steady_waf_over(cfg.clone(), 0.0, 6, 8);
    let eff = effective_op(&cfg, cfg.logical_blocks());
    let b = cfg.geometry.slots_per_line() as u32;
    let lines = cfg.geometry.lines() as u32;
    (waf, eff, waf_model(cfg.gc.policy, eff, b, lines))
}

/// FIFO's closed form holds at every line size (the Lambert-W form is its exact mean, not a
/// large-line limit as for greedy): at b = 128, where greedy sits 2 % below the form, FIFO
/// meets it, as in the reference's simulation. Random and d-choices meet their mean-field
/// model (Van Houdt's, with full lines never drawn) within 1 % at 7 % and 25 % OP, random a
/// little under the textbook (1+ρ)/ρ, which draws full lines too; d-choices runs from random
/// (d = 1, the same draws) towards greedy as d grows (d ≈ 30 is greedy).
#[test]
fn victim_policies_meet_their_models_and_order_by_choice() {
    let (greedy, eff, lambert) = policy_waf("greedy", 0.25);
    let (fifo, _, _) = policy_waf("fifo", 0.25);
    let (random, _, random_model) = policy_waf("random", 0.25);
    eprintln!(
        "effective OP {eff:.4}: Lambert-W {lambert:.3}, greedy {greedy:.3}, fifo {fifo:.3}, \
         random {random:.3} (mean field {random_model:.3}, (1+ρ)/ρ {:.3})",
        waf_random(eff)
    );
    assert!(
        within(fifo, lambert, 0.02),
        "fifo {fifo:.3} vs {lambert:.3}"
    );
    assert!(
        within(fifo, 2.80, 0.02),
        "fifo {fifo:.3} vs the reference's 2.80"
    );
    assert!(
        greedy < fifo * 0.99,
        "greedy {greedy:.3} not below fifo {fifo:.3} at b = 128"
    );
    assert!(
        within(random, waf_random(eff), 0.05) && random < waf_random(eff),
        "random {random:.3} vs (1+ρ)/ρ = {:.3}",
        waf_random(eff)
    );
    for op in [0.07, 0.25] {
        let mut last = f64::INFINITY;
        for d in [1, 2, 4, 8, 30] {
            let (waf, _, model) = policy_waf(&format!("d-choices:{d}"), op);
            eprintln!("op {op}, d-choices:{d}: WAF {waf:.3}, mean field {model:.3}");
            assert!(
                within(waf, model, 0.01),
                "op {op}, d-choices:{d}: WAF {waf:.3} vs mean field {model:.3}"
            );
            assert!(
                waf < last,
                "op {op}, d-choices:{d}: {waf:.3} not below {last:.3}"
            );
            if d == 1 && op == 0.25 {
                assert_eq!(waf, random, "d-choices:1 draws as random does");
            }
            if d == 30 && op == 0.25 {
                assert!(
                    within(waf, greedy, 0.02),
                    "d-choices:30 {waf:.3} vs greedy {greedy:.3}"
                );
            }
            last = waf;
        }
    }
}
