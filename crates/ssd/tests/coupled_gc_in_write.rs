//! The coupled FTL's GC inside a write request (found in review, 2026-11-27): the device
//! collects before each page of a request, so it can move a page the same request just
//! wrote and sealed, before the request's bytes reach the store. The move then copied
//! nothing and the bytes landed at an address no longer mapped: the accepted block read
//! back as zeros through the redirect and at the pair's new address. Failed 3 of 3 runs
//! (virtual clock, deterministic) before `SsdDevice::exec` stored such a write first.

use flashlog_dev::{BlockDevice, DeviceEvent, MigrationPair, BLOCK_SIZE};
use flashlog_ssd::{CoupledConfig, FtlKind, SsdConfig, SsdDevice, StoreKind};

fn block(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(tag ^ (i as u64) << 48).to_le_bytes());
    }
    b
}

fn read(dev: &SsdDevice, addr: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    dev.read(addr, &mut b).unwrap();
    b
}

fn pairs(events: &[DeviceEvent]) -> Vec<MigrationPair> {
    events
        .iter()
        .flat_map(|e| match e {
            DeviceEvent::Migrated { pairs, .. } => pairs.clone(),
        })
        .collect()
}

/// Coupled FTL: device GC runs *between the pages of one write request* (`write_page` calls
/// `maybe_gc` before every page). A two-block write that ends zone K (its last slot seals K's
/// line with one valid page) and begins zone K+1 (which needs a new line, so GC runs before
/// page 2) makes K's line the greedy victim: the page written one step earlier is moved to
/// the GC region and its relocation (K[z-1] -> Y) is applied to the store in `exec` *before*
/// the write's own data has been copied (the copy happens afterwards, at K[z-1]). The FTL now
/// redirects K[z-1] to Y, where the store holds nothing: the accepted write reads back as
/// zeros, through the redirect and through the pair the host applies.
#[test]
fn coupled_gc_inside_a_write_moves_a_page_whose_data_is_not_stored_yet() {
    let mut cfg = SsdConfig::preset("tiny").unwrap();
    cfg.store = StoreKind::Ram;
    cfg.ftl = FtlKind::Coupled(CoupledConfig {
        degree: 1.4,
        // Keep the regular-region watermark out of the way: only the line threshold collects.
        regular_free_zones: 1,
        ..CoupledConfig::default()
    });
    cfg.op = 0.15;
    let dev = SsdDevice::new(cfg).unwrap();
    let caps = dev.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    let base = |k: u64| c + k * z;
    // CoupledConfig::default().gc_threshold_lines (max(5, streams + 1)): GC runs while at
    // most this many lines are free.
    let threshold = 5;

    // Two sealed zones with 3/4 of their blocks discarded: GC victims for later.
    for k in 0..2 {
        for o in 0..z {
            dev.write(base(k) + o, &block(k * 10_000 + o)).unwrap();
        }
        for o in (0..z).filter(|o| o % 4 != 0) {
            dev.discard(base(k) + o, 1).unwrap();
        }
    }
    // Fill whole zones until exactly `threshold + 1` lines are free (no GC yet).
    let mut k = 2;
    while dev.stats().free_lines > threshold + 1 {
        for o in 0..z {
            dev.write(base(k) + o, &block(k * 10_000 + o)).unwrap();
        }
        k += 1;
    }
    assert_eq!(dev.stats().free_lines, threshold + 1);
    assert_eq!(dev.stats().gc_runs, 0);

    // One write: the last block of zone k, then the first block of zone k+1.
    let a = base(k) + z - 1;
    let mut buf = block(777);
    buf.extend_from_slice(&block(888));
    let mut events = dev.write(a, &buf).unwrap().events;
    assert!(dev.stats().gc_runs > 0, "GC did not run inside the write");
    events.extend(dev.flush().unwrap().events);
    let moved: Vec<MigrationPair> = pairs(&events).into_iter().filter(|p| p.old == a).collect();
    dev.check_invariants().unwrap();
    assert_eq!(read(&dev, a + 1), block(888), "second block of the write");
    // The host's address before it applies the pair (served by read redirect) ...
    let via_redirect = read(&dev, a);
    // ... and after it applies it.
    let via_pair = moved.first().map(|p| read(&dev, p.new));
    assert!(
        via_redirect == block(777) && via_pair.iter().all(|b| *b == block(777)),
        "accepted write of block {a} lost: redirect reads {}, pair {:?} reads {}",
        if via_redirect == vec![0u8; BLOCK_SIZE] {
            "zeros"
        } else {
            "other data"
        },
        moved.first(),
        match &via_pair {
            None => "n/a",
            Some(b) if *b == vec![0u8; BLOCK_SIZE] => "zeros",
            Some(b) if *b == block(777) => "the data",
            Some(_) => "other data",
        }
    );
}
