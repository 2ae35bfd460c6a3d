//! The crash simulator covers `gc=none` (IPLFS) on the emulated interval-mapping SSD:
//! power cuts while a checkpoint writes a non-empty discard log (the pack not written, and
//! written with its completion lost), right after a checkpoint queued discards, on discard
//! requests (not run, and run with the completion lost), right after a dispatch round, in
//! fsyncs, and at random. After each cut the SSD is power-cycled and the volume remounted
//! twice: no fsync'd byte may be lost, fsck must be clean, and the device must map exactly
//! the reachable blocks once the queued discards are issued (before that, every mapped dead
//! block must be queued). Checked to fail: without the mount's re-issue of the discard log,
//! `none --seed 1 --cut 72` finds dead blocks mapped; without the residue discard after a
//! cut, `none --seed 1 --cut 32 --landed`; without the mount's checkpoint over a clean one
//! (the bug this simulator found, core/tests/iplfs.rs), `none --seed 2 --cut 3`.

use flashlog_sim::gc_none::{run_seed, KINDS};

#[test]
fn power_cuts_in_the_discard_protocol_lose_nothing_and_leave_no_dead_block_mapped() {
    let (ok, failed) = run_seed(1, 2).expect("trace");
    for (c, kind, e) in &failed {
        eprintln!("FAILED ({kind}): {}\n  {e}", c.replay_command());
    }
    assert!(failed.is_empty(), "{} of the cases failed", failed.len());
    for kind in KINDS {
        assert!(
            ok.iter().any(|(_, k, _)| *k == kind),
            "no cut point of kind {kind}"
        );
    }
    assert!(
        ok.iter().all(|(_, _, o)| o.cut),
        "a cut point was never reached"
    );
    assert!(
        ok.iter().any(|(_, _, o)| o.recut),
        "no second cut came inside a recovery mount"
    );
    assert!(
        ok.iter().any(|(_, _, o)| o.reissued > 0),
        "no case re-issued a discard log at the remount"
    );
    assert!(
        ok.iter().any(|(_, _, o)| o.mapped_dead > 0),
        "no case left dead blocks mapped (queued) after the remount: the mapped-set check \
         never had anything to compare"
    );
}
