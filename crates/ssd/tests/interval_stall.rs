//! The interval-mapping FTL's (`ftl=interval`) map compaction as a device stall: charged
//! once, however many requests wait for it (found in review, 2026-11-27).

use flashlog_dev::BLOCK_SIZE;
use flashlog_ssd::{SsdConfig, SsdDevice, StoreKind};

fn block(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(tag ^ (i as u64) << 48).to_le_bytes());
    }
    b
}

fn interval(set: &[&str]) -> SsdConfig {
    let mut c = SsdConfig::preset("tiny").unwrap();
    c.store = StoreKind::Ram;
    c.set_kv("ftl=interval").unwrap();
    for kv in set {
        c.set_kv(kv).unwrap();
    }
    c
}

/// One compaction is charged once, however many requests arrive while it runs.
///
/// Forces: a compaction falls due at 1 s (cost 8.8 ms of modelled firmware time); `k`
/// reads are submitted 1 ns apart while it runs (each waits for its end, as designed);
/// then one read is submitted 1 ms after the compaction ended. That last read must take
/// what it takes on a device that never compacts, whatever `k` is.
///
/// Bug: `PageFtl::background` (crates/ssd/src/ftl/page.rs) calls
/// `Flash::firmware_busy(t, busy_until - t)` on *every* request that arrives during the
/// stall, and `firmware_busy` (crates/ssd/src/flash.rs) calls `Timing::occupy(die, t, ns)`,
/// which starts at `max(die.busy_until, t)`: each such request holds every die for another
/// `busy_until - t` after the compaction already ended (and after the die's own work). With
/// 3 stalled reads the dies stay busy ~2 x 8.8 ms past the compaction, so the read 1 ms
/// after it waits ~16 ms more than it should.
#[test]
fn a_compaction_is_charged_once_however_many_requests_wait_for_it() {
    let cfg = |period: &str| {
        interval(&[
            "map_node_blocks=64",
            "zone_map_nodes=4",
            &format!("compaction_period={period}"),
            "compaction_entry_ns=100us",
        ])
    };
    // Cost of the one compaction (as in tests/interval.rs `compaction_stalls_requests`).
    let cost = 1_000 + (64 + 24) * 100_000u64;
    let run = |period: &str, stalled_reads: u64| {
        let dev = SsdDevice::new(cfg(period)).unwrap();
        let data: Vec<u8> = (0..64).flat_map(block).collect();
        dev.write_at(0, 0, &data).unwrap();
        dev.discard_at(0, 10, 40).unwrap();
        let mut buf = vec![0u8; BLOCK_SIZE];
        for i in 0..stalled_reads {
            dev.read_at(1_000_000_001 + i, 5, &mut buf).unwrap();
        }
        let after = 1_000_000_000 + cost + 1_000_000;
        let t = dev.read_at(after, 5, &mut buf).unwrap();
        assert_eq!(buf, block(5));
        (t.done_ns - t.submit_ns, dev.stats())
    };
    let (plain, _) = run("0s", 3);
    for k in [1, 3] {
        let (late, st) = run("1s", k);
        let iv = st.ftl.interval.unwrap();
        assert_eq!(iv.compaction_runs, 1);
        assert_eq!(iv.compaction_busy_ns, cost);
        assert!(
            late <= plain + 100_000,
            "{k} read(s) during the compaction: a read 1 ms after it ended took {late} ns, \
             {plain} ns without compaction (compaction cost {cost} ns)"
        );
    }
}
