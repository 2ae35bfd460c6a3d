//! Closed-form expectations the emulator is validated against: the Lambert-W write
//! amplification of greedy/FIFO GC and that of random victims under uniform random writes
//! (reference/ssd-emulator.md §3),
//! the reserve correction for lines held back from the spare pool, and the bandwidth/latency
//! a configuration implies (derived in docs/EMULATOR.md).
//!
//! Owns: pure functions only.
//!
//! Invariants: `lambert_w0(x)` is defined for x ∈ [−1/e, 0]; WAF ≥ 1.
//!
//! Lock order: none.

use serde::Serialize;

use crate::config::{SsdConfig, VictimKind, MAP_UNIT};

/// Principal branch of the Lambert W function on [−1/e, 0] (Halley iteration).
pub fn lambert_w0(x: f64) -> f64 {
    let branch = -1.0 / std::f64::consts::E;
    if x <= branch {
        return -1.0;
    }
    if x == 0.0 {
        return 0.0;
    }
    // Series around the branch point for a good start, else log1p.
    let p = (2.0 * (std::f64::consts::E * x + 1.0)).sqrt();
    let mut w = if x < -0.25 {
        -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p * p * p
    } else {
        x.ln_1p() * 0.9
    };
    for _ in 0..64 {
        let ew = w.exp();
        let f = w * ew - x;
        let wp1 = w + 1.0;
        if wp1.abs() < 1e-300 {
            break;
        }
        let dw = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1));
        w -= dw;
        if dw.abs() < 1e-15 * (1.0 + w.abs()) {
            break;
        }
    }
    w
}

/// WAF of greedy GC (b → ∞, equal to FIFO) under uniform random writes at overprovisioning
/// ρ = (T−U)/U: α/(α + W₀(−α e^{−α})), α = 1 + ρ.
pub fn waf_greedy(rho: f64) -> f64 {
    let a = 1.0 + rho;
    a / (a + lambert_w0(-a * (-a).exp()))
}

/// WAF of random victim selection under uniform random writes at overprovisioning ρ:
/// (1 + ρ)/ρ. A line drawn uniformly holds the average valid share of the lines, U/T =
/// 1/(1 + ρ), at every line size; each collection frees the rest (Hu et al., SYSTOR '09;
/// Van Houdt, SIGMETRICS '13).
pub fn waf_random(rho: f64) -> f64 {
    (1.0 + rho) / rho
}

/// The closed form for a victim policy at overprovisioning ρ: `waf_random` for random
/// selection (and d-choices with d = 1, the same policy); the Lambert-W form for FIFO (exact
/// at every line size), greedy (its limit as lines grow; below it for small lines) and
/// cost-benefit (at or just below it in the reference's simulation); NaN for d-choices with
/// d >= 2, which has no closed form (Van Houdt's mean field is a fixed point solved
/// numerically; measured, it runs from random at d = 1 to greedy near d = 30).
pub fn waf_model(policy: VictimKind, rho: f64) -> f64 {
    match policy {
        VictimKind::Random | VictimKind::DChoices(1) => waf_random(rho),
        VictimKind::Greedy | VictimKind::CostBenefit | VictimKind::Fifo => waf_greedy(rho),
        VictimKind::DChoices(_) => f64::NAN,
    }
}

/// Lines held back from the spare pool by the page FTL's GC trigger "GC while free lines
/// ≤ θ" (NVMeVirt's `should_gc_high`), plus half of each of the two open lines (host and GC)
/// on average. Paced (one victim per write-credit exhaustion, credits = the slots it freed),
/// the spare slots are conserved from one victim to the next, so the free lines stay at θ on
/// average: r = θ + 1. Unpaced (collect until more than θ are free), they oscillate between θ
/// and θ + 1: r = θ + 1.5.
pub fn reserve_lines(threshold_lines: u32, pacing: bool) -> f64 {
    let free = f64::from(threshold_lines) + if pacing { 0.0 } else { 0.5 };
    free + 0.5 * 2.0
}

/// Effective overprovisioning (T − r·b − U)/U with `user_blocks` logical blocks in use.
pub fn effective_op(cfg: &SsdConfig, user_blocks: u64) -> f64 {
    let t = cfg.geometry.physical_slots() as f64;
    let b = cfg.geometry.slots_per_line() as f64;
    let u = user_blocks as f64;
    (t - reserve_lines(cfg.gc.threshold_lines, cfg.gc.pacing) * b - u) / u
}

/// Effective OP from a measured mean of spare units outside the valid/invalid cycle.
pub fn measured_effective_op(cfg: &SsdConfig, user_blocks: u64, mean_free_units: f64) -> f64 {
    let t = cfg.geometry.physical_slots() as f64;
    let u = user_blocks as f64;
    (t - mean_free_units - u) / u
}

/// What a configuration implies for QD1 latency and sequential bandwidth (no GC).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ExpectedPerf {
    pub read_4k_qd1_ns: f64,
    pub write_4k_qd1_ns: f64,
    /// Large sequential writes at high queue depth.
    pub seq_write_bytes_per_s: f64,
    /// Large sequential reads at high queue depth.
    pub seq_read_bytes_per_s: f64,
}

fn xfer_ns(bytes: u64, bytes_per_s: u64) -> f64 {
    if bytes_per_s == 0 {
        0.0
    } else {
        bytes as f64 * 1e9 / bytes_per_s as f64
    }
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

/// Derive [`ExpectedPerf`] from the parameters (see docs/EMULATOR.md §3 for the reasoning).
pub fn expected_perf(cfg: &SsdConfig) -> ExpectedPerf {
    let g = &cfg.geometry;
    let t = &cfg.timing;
    let ch = t.channel_bytes_per_s;
    let link = t.link_bytes_per_s;
    let read_4k_qd1_ns = t.fw_read_4k_ns as f64
        + mean(&t.read_4k_ns)
        + xfer_ns(MAP_UNIT, ch)
        + xfer_ns(MAP_UNIT, link);
    let unit = g.program_unit_bytes;
    let fw_w = (t.fw_write_ns + t.fw_write_per_4k_ns) as f64;
    let write_4k_qd1_ns = if cfg.write_buffer.early_completion {
        fw_w + xfer_ns(MAP_UNIT, link)
    } else {
        // Write-through: a 4 KiB write completes when the unit it closes is programmed
        // (presets without a buffer have 4 KiB program units).
        fw_w + xfer_ns(MAP_UNIT, link) + xfer_ns(unit, ch) + t.program_ns as f64
    };
    let dies = f64::from(g.dies());
    let inf = f64::INFINITY;
    let link_bw = if link == 0 { inf } else { link as f64 };
    let chan_bw = f64::from(g.channels) * ch as f64;
    let die_write = dies * unit as f64 * 1e9 / (xfer_ns(unit, ch) + t.program_ns as f64);
    let seq_write_bytes_per_s = link_bw.min(chan_bw).min(die_write);
    let ru = g.read_unit_bytes;
    // The die is held through tR and the channel transfer of the whole read unit.
    let die_read = dies * ru as f64 * 1e9 / (mean(&t.read_unit_ns) + xfer_ns(ru, ch));
    let seq_read_bytes_per_s = link_bw.min(chan_bw).min(die_read);
    ExpectedPerf {
        read_4k_qd1_ns,
        write_4k_qd1_ns,
        seq_write_bytes_per_s,
        seq_read_bytes_per_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambert_w_satisfies_its_equation() {
        for &x in &[-0.36, -0.3, -0.2, -0.1, -0.01, -1e-6] {
            let w = lambert_w0(x);
            assert!((w * w.exp() - x).abs() < 1e-12, "x={x} w={w}");
            assert!(w >= -1.0);
        }
    }

    #[test]
    fn waf_matches_the_reference_table() {
        // reference/ssd-emulator.md §3, Lambert-W column.
        for (rho, want) in [
            (0.07, 7.82),
            (0.15, 4.02),
            (0.28, 2.48),
            (0.30, 2.36),
            (1.0, 1.26),
        ] {
            let w = waf_greedy(rho);
            assert!((w - want).abs() < 0.011, "rho {rho}: {w} vs {want}");
        }
    }

    #[test]
    fn expected_970pro_numbers() {
        let p = expected_perf(&SsdConfig::preset("970pro-like").unwrap());
        assert!((p.read_4k_qd1_ns / 1e3 - 63.0).abs() < 1.0, "{p:?}");
        assert!((p.write_4k_qd1_ns / 1e3 - 5.6).abs() < 0.1, "{p:?}");
        assert!((p.seq_write_bytes_per_s / 1e9 - 2.34).abs() < 0.02, "{p:?}");
        assert!((p.seq_read_bytes_per_s / 1e9 - 3.52).abs() < 0.02, "{p:?}");
    }
}
