//! Fault injection: a failed read, write or flush at every request number of a few seeds'
//! workloads; the mount must poison itself, write nothing more, and lose nothing durable.
//! A panicking checkpoint thread must poison the mount the same way.

use flashlog_sim::fault::{run_background_panic, run_fault, FaultKind};

/// Request numbers tried per seed and kind (the workloads issue fewer).
const MAX_POINTS: u64 = 400;

#[test]
fn every_fault_point_poisons_and_loses_nothing() {
    let mut fired = 0;
    let mut failures = Vec::new();
    for seed in [3u64, 17, 40, 62] {
        for kind in FaultKind::ALL {
            for at in 0..MAX_POINTS {
                match run_fault(seed, kind, at, flashlog_core::GcPolicy::F2fs) {
                    Ok(o) if !o.fired => break,
                    Ok(_) => fired += 1,
                    Err(f) => failures.push(f.to_string()),
                }
            }
        }
    }
    println!("{fired} faults injected");
    assert!(
        failures.is_empty(),
        "{} fault cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(fired > 50, "only {fired} faults fired");
}

#[test]
fn every_policy_poisons_on_a_failed_flush() {
    for &p in flashlog_sim::POLICIES {
        for at in 0..4 {
            if let Err(f) = run_fault(5, FaultKind::Flush, at, p) {
                panic!("{f}");
            }
        }
    }
}

#[test]
fn panicking_checkpoint_thread_poisons_the_mount() {
    for &p in flashlog_sim::POLICIES {
        if let Err(e) = run_background_panic(p) {
            panic!("policy {}: {e}", flashlog_sim::policy_name(p));
        }
    }
}

/// `gc=none` (IPLFS) on the emulated interval SSD: a failed read, write or flush at points
/// spread over a seed's run (mount, namespace operations with fsyncs, ballast overwrites,
/// checkpoints with discard logs, dispatch rounds, unmount). A write or flush fault poisons
/// the mount, which issues nothing more; after a restart of the SSD nothing fsync'd is
/// lost, fsck is clean and the device maps exactly the reachable blocks.
#[test]
fn gc_none_fault_points_poison_and_lose_nothing() {
    use flashlog_sim::gc_none::{fault_points, run_fault};
    let mut fired = 0;
    let mut failures = Vec::new();
    for seed in [2u64, 7] {
        for kind in FaultKind::ALL {
            let n = fault_points(seed, kind).expect("uncut run");
            assert!(n > 0, "seed {seed}: no {} requests", kind.name());
            let mut points: Vec<u64> = (0..6).map(|k| k * n / 6).collect();
            points.push(n - 1);
            points.dedup();
            for at in points {
                match run_fault(seed, kind, at) {
                    Ok(true) => fired += 1,
                    Ok(false) => failures.push(format!(
                        "seed {seed} {} {at} of {n}: the fault never fired",
                        kind.name()
                    )),
                    Err(e) => failures.push(e),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} gc=none fault cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(fired >= 30, "only {fired} faults fired");
}

/// `gc=none`: filling the device's capacity (live data, and overwrites whose dead blocks the
/// device holds until discarded) ends in a clean ENOSPC, not a poisoned mount and not before
/// 80 % of the volume; a checkpoint still succeeds, deleting half the files gives the space
/// back, and after a power cut nothing fsync'd is lost and the volume mounts clean.
#[test]
fn gc_none_enospc_is_clean_and_loses_nothing() {
    for seed in [1u64, 2] {
        match flashlog_sim::gc_none::run_enospc(seed) {
            Ok(o) => {
                assert!(o.written_blocks >= o.volume_blocks * 8 / 10, "{o:?}");
                assert!(o.rewritten_blocks > 0, "{o:?}");
            }
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}
