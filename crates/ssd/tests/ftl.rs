//! Tests of the zoned and the D2FS coupled-GC FTLs through the `BlockDevice` trait, on the
//! virtual clock (deterministic): zone rules, resets, no device GC for zones; coupled GC
//! against a host model that applies upcalls as a file system would (mapping correctness
//! under random writes/discards + GC), record merging, read and discard redirect, re-send
//! after a power cut, record memory.

use std::collections::HashMap;

use flashlog_dev::{BlockDevice, Completion, DevError, DeviceEvent, MigrationPair, BLOCK_SIZE};
use flashlog_ssd::{CoupledConfig, FtlKind, SsdConfig, SsdDevice, StoreKind, ZonedConfig};

fn block(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(tag ^ (i as u64) << 48).to_le_bytes());
    }
    b
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A host's view of where its blocks are after migration pairs: block `orig` (the address it
/// wrote) now lives at `cur`. A pair applies only if its old address is still live (the
/// node-lock rule: a block discarded meanwhile is skipped). Applying and acknowledging must
/// not interleave with a discard that looked the address up, so threads share it under a lock.
#[derive(Default)]
struct Remap {
    cur_of: HashMap<u64, u64>,
    /// Live addresses → the address first written.
    orig_of: HashMap<u64, u64>,
}

impl Remap {
    fn write(&mut self, addr: u64) {
        self.orig_of.insert(addr, addr);
        self.cur_of.insert(addr, addr);
    }
    fn apply(&mut self, pairs: &[MigrationPair]) {
        for p in pairs {
            if let Some(orig) = self.orig_of.remove(&p.old) {
                self.orig_of.insert(p.new, orig);
                self.cur_of.insert(orig, p.new);
            }
        }
    }
    /// The address to discard for `orig`, forgetting it.
    fn take(&mut self, orig: u64) -> u64 {
        let cur = self.cur_of.remove(&orig).unwrap_or(orig);
        self.orig_of.remove(&cur);
        cur
    }
}

fn tiny(ftl: FtlKind) -> SsdConfig {
    let mut c = SsdConfig::preset("tiny").unwrap();
    c.store = StoreKind::Ram;
    c.ftl = ftl;
    c
}

fn read(dev: &SsdDevice, addr: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    dev.read(addr, &mut b).unwrap();
    b
}

// ---------------------------------------------------------------- zoned

#[test]
fn zoned_takes_sequential_writes_only_and_resets_by_discard() {
    let dev = SsdDevice::new(tiny(FtlKind::Zoned(ZonedConfig::default()))).unwrap();
    let caps = dev.capabilities().clone();
    let z = caps.zone_blocks;
    let c = caps.conventional_blocks;
    assert_eq!(z, 32, "a zone is one line of the tiny preset");
    assert_eq!(c, 32, "auto: 1/32 of capacity, rounded up to a zone");
    assert!(!caps.migration_upcalls);
    let zones = (caps.block_count - c) / z;
    assert!(zones >= 20, "{zones} sequential zones");
    // In order: fine, also across a zone boundary in one request.
    dev.write(c, &block(1)).unwrap();
    let mut two = block(2);
    two.extend(block(3));
    dev.write(c + 1, &two).unwrap();
    // Out of order (a hole, or a rewrite) is refused and changes nothing.
    for bad in [c + 5, c + 1, c + z + 3] {
        match dev.write(bad, &block(9)) {
            Err(DevError::Refused(msg)) => assert!(msg.contains("sequential"), "{msg}"),
            other => panic!("write at {bad}: {other:?}"),
        }
    }
    assert_eq!(read(&dev, c + 1), block(2));
    assert_eq!(dev.stats().counters.host_write_blocks, 3);
    // Fill zone 0, then reset it with a whole-zone discard and write it again from 0.
    for o in 3..z {
        dev.write(c + o, &block(100 + o)).unwrap();
    }
    assert!(matches!(dev.write(c, &block(0)), Err(DevError::Refused(_))));
    dev.discard(c, z).unwrap();
    assert_eq!(dev.ftl_stats().zone_resets, 1);
    assert_eq!(read(&dev, c + 7), vec![0u8; BLOCK_SIZE]);
    dev.write(c, &block(5)).unwrap();
    assert_eq!(read(&dev, c), block(5));
    // A full zone whose blocks are all discarded piecewise is reset too.
    let z1 = c + z;
    for o in 0..z {
        dev.write(z1 + o, &block(o)).unwrap();
    }
    for o in 0..z {
        dev.discard(z1 + o, 1).unwrap();
    }
    assert_eq!(dev.ftl_stats().zone_resets, 2);
    dev.write(z1, &block(6)).unwrap();
    dev.check_invariants().unwrap();
}

/// Writing every sequential zone many times over, with resets, never runs device GC: the
/// device writes each host block once (WAF 1), while the conventional zones take random
/// overwrites through their own page-mapped GC and keep their contents.
#[test]
fn zoned_has_no_device_gc_and_conventional_zones_keep_contents() {
    let dev = SsdDevice::new(tiny(FtlKind::Zoned(ZonedConfig::default()))).unwrap();
    let caps = dev.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    let zones = (caps.block_count - c) / z;
    for round in 0..5u64 {
        for zone in 0..zones {
            let base = c + zone * z;
            let mut buf = Vec::with_capacity(z as usize * BLOCK_SIZE);
            for o in 0..z {
                buf.extend(block(round * 10_000 + base + o));
            }
            dev.write(base, &buf).unwrap();
        }
        for zone in 0..zones {
            let base = c + zone * z;
            assert_eq!(read(&dev, base + 3), block(round * 10_000 + base + 3));
            dev.discard(base, z).unwrap();
        }
    }
    let s = dev.stats();
    assert_eq!(s.gc_runs, 0);
    assert!((s.waf - 1.0).abs() < 1e-9, "waf {}", s.waf);
    assert_eq!(dev.ftl_stats().zone_resets, 5 * zones);
    // Random overwrites of the conventional region: its GC runs, contents survive.
    let mut rng = Rng(3);
    let mut model = HashMap::new();
    for i in 0..(c * 40) {
        let a = rng.below(c);
        dev.write(a, &block(i)).unwrap();
        model.insert(a, i);
    }
    assert!(dev.stats().gc_runs > 10);
    for (a, tag) in model {
        assert_eq!(read(&dev, a), block(tag), "conventional block {a}");
    }
    dev.check_invariants().unwrap();
}

// ---------------------------------------------------------------- coupled

/// A host that behaves as a log-structured file system on the coupled FTL: it appends object
/// versions to regular-region zones, discards every block it invalidates at once, applies
/// migration pairs under the "still points at old" rule, and acknowledges after its
/// "checkpoint".
struct Host {
    /// Object → (address, version tag).
    loc: HashMap<u64, (u64, u64)>,
    /// Address → object.
    owner: HashMap<u64, u64>,
    /// Live objects per regular zone (host view).
    live: Vec<u32>,
    /// Per log (the host's log heads: `alloc` uses log 0): its zone and the next offset.
    /// Log 1 has no zone (`usize::MAX`) until it first allocates.
    cur: [usize; 2],
    off: [u64; 2],
    z: u64,
    c: u64,
    gc_start: u64,
    last_upcall: u64,
    applied_pairs: u64,
    skipped_pairs: u64,
    upcalls_seen: Vec<u64>,
}

impl Host {
    /// Object `obj` now lives at `a` (its write's completion applied): the old copy is
    /// discarded at once and the new address adopted.
    fn placed(&mut self, dev: &SsdDevice, obj: u64, a: u64, version: u64) {
        if let Some((old, _)) = self.loc.insert(obj, (a, version)) {
            self.forget(old);
            let c = dev.discard(old, 1).unwrap();
            self.apply(&c);
        }
        self.adopt(a, obj);
    }

    /// Object `obj`, if live, reads back its last version from the address the host knows.
    fn probe(&mut self, dev: &SsdDevice, obj: u64, op: u64) {
        if let Some(&(a, tag)) = self.loc.get(&obj) {
            let mut b = vec![0u8; BLOCK_SIZE];
            let c = dev.read(a, &mut b).unwrap();
            assert_eq!(b, block(tag), "object {obj} at {a} (op {op})");
            self.apply(&c);
        }
    }

    /// Checkpoint (the flush also sends the partial batch), then acknowledge.
    fn checkpoint(&mut self, dev: &SsdDevice) {
        let c = dev.flush().unwrap();
        self.apply(&c);
        if self.last_upcall > 0 {
            dev.ack_migrations(self.last_upcall).unwrap();
        }
    }

    fn new(dev: &SsdDevice, gc_start: u64) -> Self {
        let caps = dev.capabilities();
        let z = caps.zone_blocks;
        let c = caps.conventional_blocks;
        let zones = ((gc_start - c) / z) as usize;
        Host {
            loc: HashMap::new(),
            owner: HashMap::new(),
            live: vec![0; zones],
            cur: [0, usize::MAX],
            off: [0, z],
            z,
            c,
            gc_start,
            last_upcall: 0,
            applied_pairs: 0,
            skipped_pairs: 0,
            upcalls_seen: Vec::new(),
        }
    }

    fn zone(&self, a: u64) -> Option<usize> {
        (a >= self.c && a < self.gc_start).then(|| ((a - self.c) / self.z) as usize)
    }

    fn forget(&mut self, a: u64) {
        self.owner.remove(&a);
        if let Some(zn) = self.zone(a) {
            self.live[zn] -= 1;
        }
    }

    fn adopt(&mut self, a: u64, obj: u64) {
        self.owner.insert(a, obj);
        if let Some(zn) = self.zone(a) {
            self.live[zn] += 1;
        }
    }

    /// Next regular-region address: fill the current zone, then take a zone the host holds
    /// nothing in (the device reclaimed it or every block was discarded).
    fn alloc(&mut self) -> u64 {
        self.alloc_in(0)
    }

    /// `alloc` for log `log` (0 or 1): each log fills its own zones, as F2FS's data and node
    /// heads fill their own sections.
    fn alloc_in(&mut self, log: usize) -> u64 {
        if self.off[log] == self.z {
            let n = self.live.len();
            let other = self.cur[1 - log];
            // A log without a zone yet starts at zone 0; one with a zone moves past it.
            let (from, first) = match self.cur[log] {
                usize::MAX => (0, 0),
                c => (c, 1),
            };
            let next = (first..n)
                .map(|i| (from + i) % n)
                .find(|&zn| self.live[zn] == 0 && zn != other)
                .unwrap_or_else(|| {
                    panic!(
                        "no free section: device GC did not keep up; live per zone {:?}",
                        self.live
                    )
                });
            self.cur[log] = next;
            self.off[log] = 0;
        }
        let a = self.c + self.cur[log] as u64 * self.z + self.off[log];
        self.off[log] += 1;
        a
    }

    fn apply(&mut self, comp: &Completion) {
        for ev in &comp.events {
            let DeviceEvent::Migrated {
                upcall,
                first_record,
                pairs,
            } = ev;
            assert!(pairs.len() <= 256 && !pairs.is_empty());
            assert!(*first_record > 0);
            self.upcalls_seen.push(*upcall);
            if *upcall <= self.last_upcall {
                continue; // already applied (re-sent)
            }
            assert_eq!(*upcall, self.last_upcall + 1, "upcalls arrive in order");
            for &MigrationPair { old, new } in pairs {
                match self.owner.get(&old).copied() {
                    Some(obj) => {
                        self.forget(old);
                        self.adopt(new, obj);
                        let tag = self.loc[&obj].1;
                        self.loc.insert(obj, (new, tag));
                        self.applied_pairs += 1;
                    }
                    None => self.skipped_pairs += 1,
                }
            }
            self.last_upcall = *upcall;
        }
    }
}

/// The tiny preset at 15 % OP, near the 970 PRO's 7 % (with its own 50 % OP, 1.4 × capacity would be
/// smaller than the physical space, and virtual overprovisioning would not be virtual).
fn coupled_cfg(degree: f64) -> SsdConfig {
    let mut c = tiny(FtlKind::Coupled(CoupledConfig {
        degree,
        ..CoupledConfig::default()
    }));
    c.op = 0.15;
    c
}

/// Device capacity (logical blocks of a page-mapped device of the same geometry).
fn capacity() -> u64 {
    coupled_cfg(1.4).logical_blocks()
}

fn gc_start(dev: &SsdDevice, degree: f64) -> u64 {
    let caps = dev.capabilities();
    let z = caps.zone_blocks;
    let cap = capacity();
    caps.conventional_blocks + ((degree * cap as f64) / z as f64).ceil() as u64 * z
}

/// Random object writes (append + immediate discard of the old copy) and deletions at 45 % of
/// the device's capacity, with device GC running all along and the host applying upcalls and
/// acknowledging every 40 operations: every object reads back from the address the host
/// knows (through redirects until applied), the FTL invariants hold, the host never runs out
/// of free sections, and at the end no record is left once everything is acknowledged.
#[test]
fn coupled_gc_keeps_the_mapping_under_random_writes_and_discards() {
    let degree = 1.4;
    let dev = SsdDevice::new(coupled_cfg(degree)).unwrap();
    assert!(dev.capabilities().migration_upcalls);
    let gs = gc_start(&dev, degree);
    let mut host = Host::new(&dev, gs);
    let cap = capacity();
    let objects = cap * 45 / 100;
    let mut rng = Rng(11);
    let mut version = 0u64;
    for i in 0..(cap * 60) {
        let obj = rng.below(objects);
        version += 1;
        if i % 13 == 0 {
            // Delete.
            if let Some((a, _)) = host.loc.remove(&obj) {
                host.forget(a);
                let c = dev.discard(a, 1).unwrap();
                host.apply(&c);
            }
        } else {
            let a = host.alloc();
            let c = dev.write(a, &block(version)).unwrap();
            host.apply(&c);
            host.placed(&dev, obj, a, version);
        }
        if i % 7 == 0 {
            host.probe(&dev, rng.below(objects), i);
        }
        if i % 40 == 0 {
            host.checkpoint(&dev);
        }
        if i % 500 == 0 {
            dev.check_invariants().unwrap();
        }
    }
    let s = dev.stats();
    let f = dev.ftl_stats();
    assert!(s.gc_runs > 50, "device GC ran {} times", s.gc_runs);
    assert!(f.upcalls_sent > 5 && host.applied_pairs > 100, "{f:?}");
    assert!(f.reads_redirected > 0, "{f:?}");
    assert!(f.discards_redirected > 0, "{f:?}");
    assert!(s.memory.migration_record_bytes <= f.records_peak * 24);
    // Drain: flush sends the partial batch, the host applies and acknowledges everything.
    let c = dev.flush().unwrap();
    host.apply(&c);
    dev.ack_migrations(host.last_upcall).unwrap();
    let f = dev.ftl_stats();
    assert_eq!(f.records_now, 0, "{f:?}");
    assert_eq!(dev.stats().memory.migration_record_bytes, 0);
    for (obj, &(a, tag)) in &host.loc {
        assert_eq!(read(&dev, a), block(tag), "object {obj} at {a}");
    }
    // The device holds exactly the live objects: no discarded or moved block leaked.
    assert_eq!(dev.valid_blocks(), host.loc.len() as u64);
    // The region report (bench `vop`, D2FS Fig. 11) accounts for every valid block, and
    // device GC moved some of them into the GC region.
    let regions = dev.region_usage();
    let names: Vec<&str> = regions.iter().map(|r| r.name).collect();
    assert_eq!(names, ["conventional", "regular", "gc"]);
    let valid: u64 = regions.iter().map(|r| r.valid_blocks).sum();
    assert_eq!(valid, dev.valid_blocks(), "{regions:?}");
    let caps = dev.capabilities();
    assert_eq!(regions[2].blocks, caps.gc_region_blocks, "{regions:?}");
    assert!(
        regions[2].valid_blocks > 0 && regions[2].zones_in_use > 0,
        "{regions:?}"
    );
    assert!(regions
        .iter()
        .all(|r| r.zones_in_use <= r.zones && r.valid_blocks <= r.blocks));
    // Read-only gauges agree with the full snapshot.
    assert_eq!(
        dev.ftl_memory().mapping_bytes,
        dev.stats().memory.mapping_bytes
    );
    assert_eq!(dev.counters().gc_runs, dev.stats().gc_runs);
    dev.check_invariants().unwrap();
}

/// FAST '25 §6, block type in the I/O command: the host writes node objects and data objects
/// to sections of their own, each write with its hint (`write_hinted`), node objects
/// overwritten far more often (as F2FS rewrites its node blocks), discards every invalidated
/// block at once, and applies pairs and acknowledges at each checkpoint (every 40 writes).
/// After every checkpoint (all records delivered and applied, so the host's view is the
/// device's) it counts the GC-region zones holding live blocks of both kinds; every probed
/// object reads back from the address the host knows (through redirects between
/// checkpoints), the FTL invariants hold, and at the end every object reads back and no block
/// leaked. Returns (mixed zones seen, checkpoints that saw at least two GC zones in use).
fn node_and_data_objects(streams: bool) -> (u64, u64) {
    use flashlog_dev::WriteHint;
    let degree = 1.4;
    let mut cfg = coupled_cfg(degree);
    if !streams {
        cfg.set("vop_streams", "off").unwrap();
    }
    let dev = SsdDevice::new(cfg).unwrap();
    let gs = gc_start(&dev, degree);
    let caps = dev.capabilities().clone();
    let (z, end) = (caps.zone_blocks, caps.block_count);
    let mut host = Host::new(&dev, gs);
    let cap = capacity();
    // Objects below `nodes` are node blocks, written 8 times as often each as data objects.
    let (nodes, objects) = (cap * 5 / 100, cap * 45 / 100);
    let kind = |obj: u64| usize::from(obj < nodes);
    let hint = |k: usize| [WriteHint::Data, WriteHint::Node][k];
    let mut rng = Rng(23);
    let mut version = 0u64;
    let (mut mixed, mut checks) = (0, 0);
    for i in 0..(cap * 40) {
        let obj = if rng.below(2) == 0 {
            rng.below(nodes)
        } else {
            nodes + rng.below(objects - nodes)
        };
        version += 1;
        let a = host.alloc_in(kind(obj));
        let c = dev
            .write_hinted(a, &block(version), hint(kind(obj)))
            .unwrap();
        host.apply(&c);
        host.placed(&dev, obj, a, version);
        if i % 7 == 0 {
            host.probe(&dev, rng.below(objects), i);
        }
        if i % 40 == 0 {
            host.checkpoint(&dev);
            // Every record is delivered and applied: the kinds of each GC zone's blocks.
            let mut zone_kinds: HashMap<u64, [u32; 2]> = HashMap::new();
            for (&obj, &(a, _)) in &host.loc {
                if a >= gs && a < end {
                    zone_kinds.entry((a - gs) / z).or_default()[kind(obj)] += 1;
                }
            }
            mixed += zone_kinds.values().filter(|k| k[0] > 0 && k[1] > 0).count() as u64;
            checks += u64::from(zone_kinds.len() > 1);
        }
        if i % 500 == 0 {
            dev.check_invariants().unwrap();
        }
    }
    let s = dev.stats();
    let f = dev.ftl_stats();
    assert!(s.gc_runs > 50, "device GC ran {} times", s.gc_runs);
    // Node pages moved are counted apart, with or without streams.
    assert!(
        f.gc_node_pages_moved > 0 && f.gc_node_pages_moved < s.gc_pages_moved,
        "{} node pages of {} moved",
        f.gc_node_pages_moved,
        s.gc_pages_moved
    );
    let c = dev.flush().unwrap();
    host.apply(&c);
    dev.ack_migrations(host.last_upcall).unwrap();
    for (obj, &(a, tag)) in &host.loc {
        assert_eq!(read(&dev, a), block(tag), "object {obj} at {a}");
    }
    assert_eq!(dev.valid_blocks(), host.loc.len() as u64);
    dev.check_invariants().unwrap();
    (mixed, checks)
}

/// With one GC destination per block type (the default), no GC-region zone ever holds node
/// and data blocks together, and the FTL's own check (`check_invariants`: every valid page of
/// a GC zone's line has the zone's stream) agrees. With `vop_streams=off` (one destination,
/// the code before the streams) the same workload mixes them: the check can see it.
#[test]
fn coupled_gc_keeps_node_and_data_pages_in_separate_destinations() {
    let (mixed, checks) = node_and_data_objects(true);
    assert!(checks > 10, "GC zones were checked {checks} times");
    assert_eq!(mixed, 0, "GC zones held node and data blocks together");
    let (mixed, checks) = node_and_data_objects(false);
    assert!(
        checks > 10 && mixed > 10,
        "one stream: {mixed} mixed zones in {checks} checks"
    );
}

/// FAST '25 §8.2, ρ_regular 1.0: the regular region has exactly as many zones as the device
/// has capacity, so a host holding 70 % live data and overwriting at random runs out of
/// regular zones it holds nothing in while the flash still has its overprovisioning lines
/// free (every fully dead zone is reset by its discards): the line threshold never fires.
/// The regular-region watermark must make the device collect regular zones (their valid
/// blocks go to the GC region, the host applies the pairs) before the host's region is
/// exhausted (`Host::alloc` panics then). Checkpoints (flush + acknowledge) every 40 ops;
/// every object reads back and the invariants hold.
#[test]
fn coupled_below_degree_1_4_collects_regular_zones_before_the_host_runs_out() {
    // 40 % physical overprovisioning: the flash has lines to spare when the region is full.
    let mut cfg = coupled_cfg(1.0);
    cfg.op = 0.4;
    let dev = SsdDevice::new(cfg).unwrap();
    let caps = dev.capabilities().clone();
    let gs = caps.block_count - caps.gc_region_blocks;
    let mut host = Host::new(&dev, gs);
    let cap = caps.gc_region_blocks;
    let zones = host.live.len() as u64;
    assert_eq!(
        zones,
        cap / caps.zone_blocks,
        "degree 1.0: one capacity of zones"
    );
    let objects = cap * 70 / 100;
    let mut rng = Rng(23);
    let mut version = 0u64;
    let mut min_free = u64::MAX;
    for i in 0..(cap * 12) {
        let obj = if i < objects { i } else { rng.below(objects) };
        version += 1;
        let a = host.alloc();
        let c = dev.write(a, &block(version)).unwrap();
        host.apply(&c);
        host.placed(&dev, obj, a, version);
        if i % 40 == 0 {
            host.checkpoint(&dev);
            let free = host.live.iter().filter(|&&l| l == 0).count() as u64;
            min_free = min_free.min(free);
        }
        if i % 1000 == 0 {
            dev.check_invariants().unwrap();
        }
    }
    let f = dev.ftl_stats();
    assert!(
        f.regular_gc_runs > 0 && host.applied_pairs > 0,
        "the watermark never collected: {f:?}"
    );
    assert!(
        min_free >= 1,
        "the host's free zones fell to {min_free} of {zones}"
    );
    eprintln!(
        "{zones} regular zones, min free {min_free}, device GC {} (watermark {}), pairs {}",
        dev.stats().gc_runs,
        f.regular_gc_runs,
        host.applied_pairs
    );
    for (obj, &(a, tag)) in &host.loc {
        assert_eq!(read(&dev, a), block(tag), "object {obj} at {a}");
    }
    dev.check_invariants().unwrap();
}

/// `vop_free_zones` sets the watermark; a value the regular region cannot hold is refused.
#[test]
fn coupled_regular_watermark_is_configurable_and_checked() {
    let mut cfg = coupled_cfg(1.0);
    cfg.set("vop_free_zones", "4").unwrap();
    assert!(SsdDevice::new(cfg.clone()).is_ok());
    cfg.set("vop_free_zones", "1000000").unwrap();
    let err = SsdDevice::new(cfg).err().expect("refused").to_string();
    assert!(err.contains("regular_free_zones"), "{err}");
    let mut page = tiny(FtlKind::Page);
    assert!(page.set("vop_free_zones", "4").is_err());
}

/// Drive the device into GC without applying upcalls: each round writes one zone (zone
/// `r mod 36`), discards 3 of every 4 blocks of the zone written 10 rounds ago and the rest of
/// the zone written 34 rounds ago (through redirects where the device moved them), so a zone
/// is empty again when its turn comes while more zones hold data than the device has lines.
/// Returns the events seen, unapplied.
fn age(dev: &SsdDevice, rounds: u64) -> Vec<DeviceEvent> {
    let caps = dev.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    let base = |r: u64| c + (r % 36) * z;
    let mut events = Vec::new();
    for r in 0..rounds {
        for o in 0..z {
            events.extend(dev.write(base(r) + o, &block(r * 1000 + o)).unwrap().events);
        }
        if r >= 10 {
            for o in (0..z).filter(|o| o % 4 != 0) {
                events.extend(dev.discard(base(r - 10) + o, 1).unwrap().events);
            }
        }
        if r >= 34 {
            for o in (0..z).step_by(4) {
                events.extend(dev.discard(base(r - 34) + o, 1).unwrap().events);
            }
        }
    }
    events
}

/// Reads of an address whose page the device moved are served from the new address until
/// the host applies the record; a buffered record whose page moves again is rewritten in
/// place (merge), so the host sees one pair old → newest.
#[test]
fn coupled_redirects_reads_and_merges_records() {
    let mut cfg = coupled_cfg(1.4);
    if let FtlKind::Coupled(cc) = &mut cfg.ftl {
        cc.send_on_flush = false;
        // `age` keeps 36 of the tiny region's 39 zones in use, below the auto watermark
        // (19 zones here): a watermark of 1 zone leaves GC to the line threshold, whose
        // GC-region victims are what this test is about (merges).
        cc.regular_free_zones = 1;
    }
    let dev = SsdDevice::new(cfg).unwrap();
    let caps = dev.capabilities().clone();
    let c = caps.conventional_blocks;
    let rounds = 200;
    let events = age(&dev, rounds);
    let s = dev.stats();
    assert!(s.gc_runs > 0);
    let f = dev.ftl_stats();
    assert!(f.records_created > 0);
    // Every block not yet discarded reads back its own content, from wherever it went.
    let z = caps.zone_blocks;
    let before = f.reads_redirected;
    for r in rounds - 34..rounds {
        for o in 0..z {
            if r >= rounds - 10 || o % 4 == 0 {
                let a = c + (r % 36) * z + o;
                assert_eq!(read(&dev, a), block(r * 1000 + o), "round {r} block {a}");
            }
        }
    }
    assert!(dev.ftl_stats().reads_redirected > before);
    // Merges: pages of the GC region are collected again before their records were sent.
    let f = dev.ftl_stats();
    assert!(
        f.records_merged > 0,
        "no merge after {} records: {f:?}",
        f.records_created
    );
    // Sent pairs never name an intermediate address that was merged away: each old address
    // appears at most once among the pairs not yet acknowledged.
    let mut olds = HashMap::new();
    for ev in &events {
        let DeviceEvent::Migrated { pairs, .. } = ev;
        for p in pairs {
            assert!(olds.insert(p.old, p.new).is_none(), "old {} twice", p.old);
        }
    }
    dev.check_invariants().unwrap();
}

/// A power cut loses the completions that would have carried upcalls, but not the records:
/// after the restart the same upcalls (same ids, same pairs, in order) ride on the next
/// completion, and stay until acknowledged. Acknowledging frees their memory; an
/// acknowledgement of an upcall never sent is refused.
#[test]
fn coupled_resends_unacknowledged_upcalls_after_a_power_cut() {
    let mut cfg = coupled_cfg(1.4);
    cfg.set("upcall_pairs", "16").unwrap();
    let dev = SsdDevice::new(cfg).unwrap();
    let mut sent = age(&dev, 200);
    sent.extend(dev.flush().unwrap().events); // the partial batch
    assert!(sent.len() >= 2, "{} upcalls", sent.len());
    let ids: Vec<u64> = sent
        .iter()
        .map(|e| match e {
            DeviceEvent::Migrated { upcall, .. } => *upcall,
        })
        .collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let f = dev.ftl_stats();
    assert_eq!(
        dev.stats().memory.migration_record_bytes,
        f.records_now * 24
    );
    assert!(f.records_now > 0);
    // Refused: an id never sent.
    let last = *ids.last().unwrap();
    assert!(matches!(
        dev.ack_migrations(last + 1),
        Err(DevError::Refused(_))
    ));
    // Acknowledge the first upcall, then cut power.
    dev.ack_migrations(ids[0]).unwrap();
    dev.power_cycle();
    let again = dev.flush().unwrap().events;
    assert_eq!(again, sent[1..].to_vec(), "re-sent upcalls differ");
    assert!(dev.flush().unwrap().events.is_empty(), "re-sent once");
    // A host restart without a power cut can ask for them too.
    dev.resend_migrations().unwrap();
    assert_eq!(dev.flush().unwrap().events, sent[1..].to_vec());
    dev.ack_migrations(last).unwrap();
    let f = dev.ftl_stats();
    assert_eq!(f.records_now, 0);
    assert_eq!(f.upcalls_resent, 2 * (sent.len() as u64 - 1));
    assert_eq!(dev.stats().memory.migration_record_bytes, 0);
    dev.power_cycle();
    assert!(dev.flush().unwrap().events.is_empty());
    dev.check_invariants().unwrap();
}

/// The GC region is the device's: host writes there are refused; so are rewrites of a zone
/// block before the zone is reclaimed. The logical space is conventional + degree × capacity + capacity.
#[test]
fn coupled_layout_and_refusals() {
    for degree in [1.0, 1.4, 2.0] {
        let dev = SsdDevice::new(coupled_cfg(degree)).unwrap();
        let caps = dev.capabilities().clone();
        let cap = capacity();
        let z = caps.zone_blocks;
        let gs = gc_start(&dev, degree);
        assert_eq!(
            caps.block_count,
            gs + cap.div_ceil(z) * z,
            "degree {degree}"
        );
        assert!(caps.block_count as f64 > (1.0 + degree) * cap as f64);
        match dev.write(gs, &block(1)) {
            Err(DevError::Refused(m)) => assert!(m.contains("GC region"), "{m}"),
            other => panic!("{other:?}"),
        }
        let c = caps.conventional_blocks;
        // Zone blocks are write-once, in any order (I/O threads may reorder a section).
        dev.write(c + 2, &block(12)).unwrap();
        dev.write(c + 1, &block(11)).unwrap();
        match dev.write(c + 2, &block(13)) {
            Err(DevError::Refused(m)) => assert!(m.contains("write-once"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(read(&dev, c + 1), block(11));
        assert_eq!(read(&dev, c + 2), block(12));
        // Once the host discards every block of a complete zone, the zone is reset and takes
        // writes again.
        for o in (0..z).filter(|&o| o != 1 && o != 2) {
            dev.write(c + o, &block(o)).unwrap();
        }
        dev.discard(c, z).unwrap();
        assert_eq!(dev.ftl_stats().zone_resets, 1);
        dev.write(c + 2, &block(14)).unwrap();
        assert_eq!(read(&dev, c + 2), block(14));
        // The conventional region takes rewrites.
        dev.write(0, &block(1)).unwrap();
        dev.write(0, &block(2)).unwrap();
        assert_eq!(read(&dev, 0), block(2));
        // Reads and discards of the GC region are fine (nothing there yet).
        assert_eq!(read(&dev, gs), vec![0u8; BLOCK_SIZE]);
        dev.discard(gs, 1).unwrap();
    }
    let mut bad = coupled_cfg(1.4);
    if let FtlKind::Coupled(cc) = &mut bad.ftl {
        cc.degree = f64::NAN;
    }
    assert!(SsdDevice::new(bad).is_err());
}

/// Modelled FTL memory (D2FS Table 1) on the 970pro-like preset at 4 GiB: page mapping needs
/// 4 B per logical block; zoned needs a zone map plus the conventional page map; coupled
/// needs zone maps for 2.4 × the capacity plus written-slot bits, and grows by 24 B per
/// outstanding record. Printed with `--nocapture`.
#[test]
fn ftl_memory_per_kind() {
    let mut mem = Vec::new();
    for ftl in ["page", "zoned", "coupled"] {
        let mut cfg = SsdConfig::preset("970pro-like")
            .unwrap()
            .with_capacity(4 << 30)
            .unwrap();
        cfg.set("ftl", ftl).unwrap();
        let dev = SsdDevice::new(cfg).unwrap();
        let m = dev.stats().memory;
        println!(
            "{ftl:8} mapping {:>9} B  line metadata {:>9} B  records {} B  logical {} GiB",
            m.mapping_bytes,
            m.line_metadata_bytes,
            m.migration_record_bytes,
            dev.capabilities().block_count as f64 * 4096.0 / f64::from(1 << 30)
        );
        mem.push(m.mapping_bytes);
    }
    let cap_blocks = (4u64 << 30) / 4096;
    assert!(mem[0] >= cap_blocks * 4, "page map: 4 B per block");
    assert!(
        mem[1] * 20 < mem[0],
        "zoned map {} vs page {}",
        mem[1],
        mem[0]
    );
    assert!(mem[2] > mem[1] && mem[2] * 8 < mem[0], "coupled {mem:?}");
}

/// The host end of upcalls: an `UpcallTap` around the device takes every upcall off the
/// completions of ordinary requests (here a writer thread's) and wakes a handler thread
/// blocked in `wait`, which applies nothing but acknowledges in order. No polling: the handler
/// sleeps with a long timeout and still sees every upcall promptly.
#[test]
fn upcall_tap_wakes_the_handler_from_completions() {
    use flashlog_dev::UpcallTap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut cfg = coupled_cfg(1.4);
    cfg.set("upcall_pairs", "16").unwrap();
    let tap = Arc::new(UpcallTap::new(SsdDevice::new(cfg).unwrap()));
    let done = Arc::new(AtomicBool::new(false));
    let remap = Arc::new(parking_lot::Mutex::new(Remap::default()));
    let handler = {
        let (tap, done, remap) = (tap.clone(), done.clone(), remap.clone());
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            let mut wakeups = 0u64;
            while !done.load(Ordering::Acquire) || tap.pending() > 0 {
                tap.wait_ready(std::time::Duration::from_millis(500));
                wakeups += 1;
                // Take, apply, then acknowledge under the host's lock: no discard looks an
                // address up in between, and nothing taken waits unapplied.
                let mut m = remap.lock();
                let ups = tap.take();
                for u in &ups {
                    ids.push(u.id);
                    m.apply(&u.pairs);
                }
                if let Some(last) = ups.last() {
                    tap.ack_migrations(last.id).unwrap();
                }
            }
            (ids, wakeups)
        })
    };
    let discard = |orig: u64| {
        let m = &mut *remap.lock();
        let at = m.take(orig);
        tap.discard(at, 1).unwrap().events.len()
    };
    // The writer goes through the tap: its completions carry no upcall any more.
    let caps = tap.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    let mut leaked = 0;
    for r in 0..200u64 {
        let base = c + (r % 36) * z;
        // Before a section is reused ("checkpoint"), the handler has applied every upcall
        // already received: a pair for an address discarded earlier then finds it dead and
        // is skipped, instead of finding the new data written there. The handler takes
        // upcalls only under the lock, so an empty queue seen under it means all applied.
        while {
            let _m = remap.lock();
            tap.pending() > 0
        } {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        for o in 0..z {
            remap.lock().write(base + o);
            leaked += tap.write(base + o, &block(o)).unwrap().events.len();
        }
        if r >= 10 {
            for o in (0..z).filter(|o| o % 4 != 0) {
                leaked += discard(c + ((r - 10) % 36) * z + o);
            }
        }
        if r >= 34 {
            for o in (0..z).step_by(4) {
                leaked += discard(c + ((r - 34) % 36) * z + o);
            }
        }
    }
    leaked += tap.flush().unwrap().events.len();
    done.store(true, Ordering::Release);
    tap.flush().unwrap(); // wake the handler for its last look
    let (ids, wakeups) = handler.join().unwrap();
    assert!(wakeups >= 1);
    assert_eq!(leaked, 0);
    let f = tap.inner().ftl_stats();
    assert!(f.upcalls_sent >= 3, "{f:?}");
    assert_eq!(ids, (1..=f.upcalls_sent).collect::<Vec<_>>());
    assert_eq!(f.upcalls_acked, f.upcalls_sent, "{f:?}");
    // Nothing leaked on flash: the last 10 zones whole and the quarter kept of the 24 before.
    assert_eq!(tap.inner().valid_blocks(), 10 * z + 24 * (z / 4));
}

/// Device-side numbers for D2FS Fig. 16 and 17 on the 970pro-like preset at 1 GiB (8 MiB
/// zones, 137 lines): a host that cycles over 160 regular zones, writes whole zones, discards
/// 3/4 of a zone 10 zones later and the rest 158 zones later (so more zones hold data than the
/// device has lines), applies every pair at once and acknowledges, discarding each block at
/// its current address. Prints the die time
/// one coupled-GC pass costs (reads, programs, erase of one section) and the peak record
/// memory; checks the target of < 2 MiB of records per GiB of device.
#[test]
fn coupled_gc_cost_and_record_memory_on_970pro_like() {
    let mut cfg = SsdConfig::preset("970pro-like")
        .unwrap()
        .with_capacity(1 << 30)
        .unwrap();
    cfg.set("ftl", "coupled").unwrap();
    let dev = SsdDevice::new(cfg).unwrap();
    let caps = dev.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    let zones_used = 160u64;
    let regular = (gc_start_of(&dev) - c) / z;
    assert!(regular > zones_used, "{regular} regular zones");
    let chunk = vec![0u8; 32 * BLOCK_SIZE];
    let base = |r: u64| c + (r % zones_used) * z;
    let mut remap = Remap::default();
    // Apply every pair, then acknowledge (the host's checkpoint is implicit here).
    let take = |comp: Completion, remap: &mut Remap| {
        let mut last = None;
        for ev in comp.events {
            let DeviceEvent::Migrated { upcall, pairs, .. } = ev;
            remap.apply(&pairs);
            last = Some(upcall);
        }
        if let Some(id) = last {
            dev.ack_migrations(id).unwrap();
        }
    };
    for r in 0..600u64 {
        for o in (0..z).step_by(32) {
            for k in 0..32 {
                remap.write(base(r) + o + k);
            }
            take(dev.write(base(r) + o, &chunk).unwrap(), &mut remap);
        }
        if r >= 10 {
            for o in (0..z).filter(|o| o % 4 != 0) {
                let at = remap.take(base(r - 10) + o);
                take(dev.discard(at, 1).unwrap(), &mut remap);
            }
        }
        if r >= zones_used - 2 {
            for o in (0..z).step_by(4) {
                let at = remap.take(base(r - (zones_used - 2)) + o);
                take(dev.discard(at, 1).unwrap(), &mut remap);
            }
        }
    }
    // Nothing leaked: the last 10 zones whole and a quarter of the 148 before.
    assert_eq!(dev.valid_blocks(), 10 * z + (zones_used - 12) * (z / 4));
    let s = dev.stats();
    let f = dev.ftl_stats();
    let dies = s.busy.die_gc_ns.len() as f64;
    let gc_ms = s.busy.die_gc_ns.iter().sum::<u64>() as f64 / dies / s.gc_runs as f64 / 1e6;
    let moved = s.gc_pages_moved as f64 / s.gc_runs as f64;
    let peak_bytes = f.records_peak * 24;
    println!(
        "970pro-like 1 GiB, {} MiB zones: {} GC passes, {moved:.0} pages moved per pass, \
         {gc_ms:.3} ms of die time per pass (per die), WAF {:.3}; records: {} created, {} \
         merged, peak {} ({} KiB)",
        (z * 4096) >> 20,
        s.gc_runs,
        s.waf,
        f.records_created,
        f.records_merged,
        f.records_peak,
        peak_bytes >> 10
    );
    assert!(s.gc_runs > 20, "{} GC passes", s.gc_runs);
    assert!(
        peak_bytes < 2 << 20,
        "record memory {peak_bytes} B on a 1 GiB device"
    );
    dev.check_invariants().unwrap();
}

fn gc_start_of(dev: &SsdDevice) -> u64 {
    let caps = dev.capabilities();
    let z = caps.zone_blocks;
    let cap = dev.config().logical_blocks();
    caps.block_count - cap.div_ceil(z) * z
}

/// The hazard behind the host rule "apply every received upcall before a checkpoint frees
/// sections", forced step by step: the device moves A to B and sends (A, B); the host discards
/// A before applying the pair (the device drops the page at B; the pair stays in flight);
/// A's zone, reclaimed by the device GC, is written again with new data at A. A pair applied
/// now by the "still points at old" rule would remap the new data to B, where the device
/// holds nothing. The test checks that the pair reached the host no later than the discard's
/// completion, so a host that applies what it received before reusing A skips it.
#[test]
fn a_pair_in_flight_for_a_discarded_address_arrives_before_the_address_can_be_reused() {
    let mut cfg = coupled_cfg(1.4);
    cfg.set("upcall_pairs", "1").unwrap();
    let dev = SsdDevice::new(cfg).unwrap();
    let caps = dev.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    // Age until the first pair arrives (every zone: write, discard 3/4 ten rounds later).
    let mut received: Vec<MigrationPair> = Vec::new();
    let mut r = 0u64;
    while received.is_empty() {
        assert!(r < 30, "no GC after {r} zones");
        let base = c + r * z;
        for o in 0..z {
            received.extend(pairs_of(dev.write(base + o, &block(r * 1000 + o)).unwrap()));
        }
        if r >= 10 {
            for o in (0..z).filter(|o| o % 4 != 0) {
                received.extend(pairs_of(dev.discard(c + (r - 10) * z + o, 1).unwrap()));
            }
        }
        r += 1;
    }
    let MigrationPair { old: a, new: b } = received[0];
    assert!(a < gc_start(&dev, 1.4) && b >= gc_start(&dev, 1.4));
    let content = read(&dev, a);
    assert_eq!(read(&dev, b), content, "redirect serves A from B");
    // The host deletes A before applying (A, B): the device drops B; the pair stays sent.
    let at_discard = pairs_of(dev.discard(a, 1).unwrap());
    assert_eq!(read(&dev, b), vec![0u8; BLOCK_SIZE]);
    // The pair was already with the host (here, on the write or discard that ran the GC);
    // nothing about A arrives later.
    assert!(received.iter().chain(&at_discard).any(|p| p.old == a));
    // A's zone was reclaimed by the device: the host may write A again.
    let zone_a = c + (a - c) / z * z;
    for o in 0..z {
        if zone_a + o != a {
            let _ = dev.discard(zone_a + o, 1).unwrap();
        }
    }
    dev.write(a, &block(424242)).unwrap();
    assert_eq!(read(&dev, a), block(424242));
    // Applying (A, B) now would point A's new owner at B, which holds nothing.
    assert_ne!(read(&dev, b), block(424242));
    assert!(dev.flush().unwrap().events.iter().all(|e| match e {
        DeviceEvent::Migrated { pairs, .. } => pairs.iter().all(|p| p.old != a),
    }));
    dev.check_invariants().unwrap();
}

fn pairs_of(c: Completion) -> Vec<MigrationPair> {
    c.events
        .into_iter()
        .flat_map(|e| match e {
            DeviceEvent::Migrated { pairs, .. } => pairs,
        })
        .collect()
}
