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
