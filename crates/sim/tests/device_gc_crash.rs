//! The crash simulator covers `gc=device` (D2FS) on the emulated coupled-GC SSD: power cuts
//! right after each step of the protocol while upcalls are outstanding (received, applied in
//! memory, in a durable checkpoint, acknowledged), on requests whose completion carried an
//! upcall after the device ran them (the migration happened, the upcall was lost in
//! transit), and at random requests. After each cut the SSD is power-cycled (records kept,
//! unacknowledged upcalls re-sent), the volume remounted: no fsync'd byte may be lost and
//! fsck must be clean. (Checked to fail: acknowledging upcalls before the checkpoint that
//! covers them is durable loses fsync'd blocks at `--seed 1 --cut 4445`.)

use flashlog_sim::device_gc::{run_seed, POINTS};

#[test]
fn power_cuts_in_the_device_gc_protocol_lose_no_fsynced_byte() {
    let (ok, failed) = run_seed(1, 2).expect("trace");
    for (c, e) in &failed {
        eprintln!("FAILED: {}\n  {e}", c.replay_command());
    }
    assert!(failed.is_empty(), "{} of the cases failed", failed.len());
    // Every protocol step gave a cut, plus the lost-upcall cuts.
    assert!(ok.len() > POINTS.len(), "only {} cases", ok.len());
    assert!(
        ok.iter().all(|(_, o)| o.cut),
        "a cut point was never reached"
    );
    assert!(ok.iter().any(|(c, _)| c.landed), "no cut after a migration");
    assert!(
        ok.iter().any(|(_, o)| o.reapplied > 0),
        "no case had the device re-send an upcall the host then applied"
    );
}
