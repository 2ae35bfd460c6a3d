//! Idle-time GC of the page FTL (`gc_idle`, FEMU's background GC): a host that writes in
//! bursts with idle time between them gets its GC done in the gaps (no write waits for a
//! victim), at the price of write amplification (the free lines idle GC keeps are spare
//! space the steady state no longer has); a host that never pauses never meets it. Virtual
//! clock: every number is deterministic.

use flashlog_dev::BlockDevice;
use flashlog_ssd::workload::{run_phase, Gaps, Pattern, Phase};
use flashlog_ssd::{SsdConfig, SsdDevice};

struct Run {
    waf: f64,
    gc_runs: u64,
    idle_runs: u64,
    p99_us: f64,
}

/// The `test` preset (256 lines of 128 units) at 25 % OP: fill, then 256 MiB of uniform
/// random 4 KiB writes at QD 8 to warm up and 256 MiB measured, in bursts of 1 MiB with
/// `idle_ms` of idle time after each (None: back to back).
fn run(settings: &[&str], idle_ms: Option<u64>) -> Run {
    let mut cfg = SsdConfig::preset("test").unwrap();
    cfg.op = 0.25;
    let gaps = idle_ms.map(|ms| Gaps {
        every: (1 << 20) / 4096,
        idle_ns: ms * 1_000_000,
    });
    run_on(cfg, settings, gaps, 8, (256 << 20, 256 << 20), true)
}

/// `run` on any configuration: `warm` bytes of warm-up, in the same bursts or (not
/// `warm_in_bursts`) back to back, then `bytes` measured, 4 KiB writes at `qd`, in bursts
/// with `gaps`.
fn run_on(
    mut cfg: SsdConfig,
    settings: &[&str],
    gaps: Option<Gaps>,
    qd: u32,
    (warm, bytes): (u64, u64),
    warm_in_bursts: bool,
) -> Run {
    for kv in settings {
        cfg.set_kv(kv).unwrap();
    }
    cfg.validate().unwrap();
    let dev = SsdDevice::new(cfg).unwrap();
    let u = dev.capabilities().block_count;
    let fill = Phase {
        pattern: Pattern::SeqWrite,
        start: 0,
        blocks: u,
        total_bytes: u * 4096,
        bs: 128 << 10,
        qd: 8,
        seed: 1,
        gaps: None,
    };
    run_phase(&dev, &fill, None).unwrap();
    let mut p = Phase {
        pattern: Pattern::RandWrite,
        total_bytes: bytes,
        bs: 4096,
        qd,
        gaps,
        ..fill
    };
    let warm = Phase {
        gaps: if warm_in_bursts { p.gaps } else { None },
        total_bytes: warm,
        ..p.clone()
    };
    run_phase(&dev, &warm, None).unwrap();
    dev.reset_stats();
    p.seed = 2;
    run_phase(&dev, &p, None).unwrap();
    dev.check_invariants().unwrap();
    let s = dev.stats();
    Run {
        waf: s.waf,
        gc_runs: s.gc_runs,
        idle_runs: s.ftl.gc_idle_runs,
        p99_us: s.latency.write.p99_us,
    }
}

#[test]
fn idle_gc_moves_the_cleaning_into_the_gaps_and_pays_for_it_in_write_amplification() {
    let off = run(&["gc_idle=off"], Some(300));
    let on = run(&["gc_idle=1ms"], Some(300));
    eprintln!(
        "off: WAF {:.3}, GC {} ({} idle), p99 {:.0} us; on: WAF {:.3}, GC {} ({} idle), \
         p99 {:.0} us",
        off.waf,
        off.gc_runs,
        off.idle_runs,
        off.p99_us,
        on.waf,
        on.gc_runs,
        on.idle_runs,
        on.p99_us
    );
    assert_eq!(off.idle_runs, 0);
    assert!(off.gc_runs > 0);
    // 300 ms between 1 MiB bursts is time enough for all of it.
    assert_eq!(on.idle_runs, on.gc_runs, "GC ran inside a burst");
    assert!(
        on.p99_us * 10.0 < off.p99_us,
        "p99 {:.0} us with idle GC, {:.0} without",
        on.p99_us,
        off.p99_us
    );
    // The free lines it keeps are no longer spare: victims hold more valid data.
    assert!(on.waf > off.waf * 1.2, "WAF {} against {}", on.waf, off.waf);
}

/// Quiet means every earlier request complete. On a device that completes writes from its
/// buffer (970pro-like), a host writing one 4 KiB block at a time with gaps 2 us shorter
/// than `gc_idle` after each completion never meets idle GC: that write completes ~5.6 us
/// after it was submitted and its program unit is not full, so the dies were idle long
/// before (quiet counted from the last submission and the dies alone started victims 3.6 us
/// early, review of 2026-11-29); gaps twice as long do. On the `test` preset, gaps shorter
/// than `gc_idle` (20 ms against 50 ms) never do either.
#[test]
fn idle_gc_waits_for_the_whole_idle_time_after_the_last_completion() {
    let mut pro = SsdConfig::preset("970pro-like").unwrap();
    pro = pro.with_capacity(512 << 20).unwrap();
    pro.op = 0.25;
    let idle = 1_000_000;
    let one_block = |idle_ns| Some(Gaps { every: 1, idle_ns });
    // Warmed up back to back with 2 capacities: free lines at the foreground threshold, far
    // under the target.
    let short = run_on(
        pro.clone(),
        &["gc_idle=1ms"],
        one_block(idle - 2_000),
        1,
        (1 << 30, 8 << 20),
        false,
    );
    let long = run_on(
        pro,
        &["gc_idle=1ms"],
        one_block(2 * idle),
        1,
        (1 << 30, 8 << 20),
        false,
    );
    eprintln!(
        "970pro-like: gaps of 998 us: {} of {} GC runs idle; of 2 ms: {} of {}",
        short.idle_runs, short.gc_runs, long.idle_runs, long.gc_runs
    );
    assert_eq!(short.idle_runs, 0, "idle GC began before 1 ms of quiet");
    assert!(long.idle_runs > 0, "idle GC never ran in 2 ms gaps");
    let test = run(&["gc_idle=50ms"], Some(20));
    assert!(test.gc_runs > 0);
    assert_eq!(
        test.idle_runs, 0,
        "idle GC ran in gaps shorter than gc_idle"
    );
}

#[test]
fn idle_gc_never_runs_for_a_host_that_never_pauses() {
    let off = run(&["gc_idle=off"], None);
    let on = run(&["gc_idle=1ms"], None);
    assert_eq!(on.idle_runs, 0);
    assert_eq!((on.waf, on.gc_runs), (off.waf, off.gc_runs));
}

/// A target above the spare space can never be reached: idle GC then collects every victim
/// that has 1/8 of its units invalid and stops at the first that has less, so a victim frees
/// at least 1/8 of a line and WAF stays under 8. Without the rule it copies lines that are
/// all but full for as long as the gap lasts (3 s here).
#[test]
fn an_unreachable_idle_target_still_collects_only_victims_worth_it() {
    let r = run(&["gc_idle=1ms", "gc_idle_free=0.5"], Some(3000));
    eprintln!("WAF {:.3}, GC {} ({} idle)", r.waf, r.gc_runs, r.idle_runs);
    assert!(r.idle_runs > 0);
    assert!(r.waf < 8.0, "WAF {}", r.waf);
}

#[test]
fn idle_settings_are_checked() {
    let mut cfg = SsdConfig::preset("test").unwrap();
    for bad in [
        "gc_idle=soon",
        "gc_idle_free=0",
        "gc_idle_free=1",
        "gc_idle_free=x",
    ] {
        let mut c = cfg.clone();
        assert!(
            c.set_kv(bad).is_err() || c.validate().is_err(),
            "{bad} was accepted"
        );
    }
    cfg.set_kv("gc_idle=2ms").unwrap();
    cfg.set_kv("gc_idle_free=auto").unwrap();
    assert_eq!((cfg.gc.idle_ns, cfg.gc.idle_free), (2_000_000, None));
    cfg.set_kv("gc_idle_free=10%").unwrap();
    assert_eq!(cfg.gc.idle_free, Some(0.1));
    cfg.validate().unwrap();
    // The FTLs without idle GC refuse it rather than ignore it.
    for ftl in ["ftl=zoned", "ftl=coupled"] {
        let mut c = cfg.clone();
        c.set_kv(ftl).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("no idle-time GC"), "{ftl}: {e}");
    }
    let mut c = cfg.clone();
    c.set_kv("ftl=interval").unwrap();
    c.validate().unwrap();
}
