//! [`SsdDevice`]: the emulator as a [`BlockDevice`], on a virtual or a wall clock.
//!
//! Owns: the engine (FTL + timing) behind one short-held lock, the statistics recorder (one
//! shard per group of threads), the page-content store, the clock and the lock meters.
//!
//! Clocks:
//! - virtual: a request is submitted at the device's current virtual time and the time jumps
//!   to its completion when it returns; nothing sleeps. Requests from several threads are thus
//!   serialised in virtual time; use [`BlockDevice::read_many`] or the `*_at` methods (explicit
//!   submission times, as the workload generator does for queue depth > 1) for parallelism.
//! - wall: device time is nanoseconds since the device was created; a request is submitted at
//!   the current time, and the calling thread sleeps until the modelled completion. The
//!   achieved latency (and how late the wake-up was) is what the statistics record.
//!
//! Writes carry the host's block type ([`WriteHint`], `BlockDevice::write_hinted`; a plain
//! `write` is `WriteHint::None`) to the FTL with every page.
//!
//! Invariants: the engine sees requests in the order they take its lock; every completion
//! carries all device events queued before it finished; requests are checked (range,
//! alignment) before touching any state.
//!
//! Lock order: `engine`, then the store's shard locks (ascending), then nothing. On FTLs
//! that keep the store in step with their remaps (`remaps`), every store operation runs
//! under `engine`, except a write's copy: its shard locks are taken under `engine` and held
//! past its release (`Store::hold_for_write`), so a later request on those blocks waits at
//! the shard lock (holding `engine`) until the copy is done; a holder past `engine` takes no
//! lock. On other FTLs the store's locks are taken with no other lock held. A recorder shard
//! is taken only after `engine` is released (one shard at a time). Every lock is metered (`locks.rs`, reported in `SsdStats::locks`); docs/EMULATOR.md
//! §2.8 lists what each protects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flashlog_dev::{
    check_range, check_request, BlockDevice, Capabilities, Completion, DevError, DevResult,
    DeviceEvent, WriteHint, BLOCK_SIZE, BLOCK_SIZE_U64,
};
use parking_lot::Mutex;

use crate::config::{ClockKind, ConfigError, FtlKind, SsdConfig, StoreKind, VictimKind};
use crate::engine::{Engine, EngineError};
use crate::ftl::{
    CostBenefit, CostBenefitFlash, CoupledFtl, DChoices, Fifo, Ftl, FtlError, FtlStats, Greedy,
    IntervalMap, PageFtl, Random, VictimPolicy, ZonedFtl,
};
use crate::locks::{LockMeter, LockStats, Metered};
use crate::stats::{LatencyStats, MemoryStats, OpKind, Recorder, SsdStats};
use crate::store::Store;

/// Recorder shards (see `SsdDevice::recs`).
const RECORDER_SHARDS: usize = 16;
/// Seed of the sampled victim policies (`random`, `d-choices`): fixed, so that a run on the
/// virtual clock repeats exactly.
const VICTIM_SEED: u64 = 0x5eed_f1a5_4109;

static NEXT_THREAD_SLOT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// A small per-thread number: which recorder shard this thread records into.
    static THREAD_SLOT: usize = NEXT_THREAD_SLOT.fetch_add(1, Ordering::Relaxed) as usize;
}

/// [`SsdDevice::valid_against`]: how the blocks valid on flash differ from what the host
/// references.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidDiff {
    /// Blocks valid on flash (at or above the address asked from).
    pub valid: u64,
    /// Valid on flash and referenced by nobody, ascending.
    pub unreferenced: Vec<u64>,
    /// Referenced but not valid at that address.
    pub missing: u64,
}

/// Errors building a device.
#[derive(Debug, thiserror::Error)]
pub enum SsdError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the backing file: {0}")]
    Io(#[from] std::io::Error),
    #[error("the mapping covers {mapping} logical blocks but the configuration exposes {config}")]
    MappingSize { mapping: u64, config: u64 },
    #[error("cannot build the {ftl} FTL: {why}")]
    Ftl { ftl: &'static str, why: String },
}

/// A request's result with its modelled times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed {
    pub completion: Completion,
    pub submit_ns: u64,
    pub done_ns: u64,
}

enum Clock {
    Virtual(AtomicU64),
    Wall(Instant),
}

impl Clock {
    fn now(&self) -> u64 {
        match self {
            Clock::Virtual(t) => t.load(Ordering::Acquire),
            Clock::Wall(epoch) => epoch.elapsed().as_nanos() as u64,
        }
    }
}

fn engine_err(e: EngineError) -> DevError {
    match e {
        FtlError::NoReclaimableSpace { .. } => DevError::Io(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            e.to_string(),
        )),
        FtlError::Refused(why) => DevError::Refused(why),
        FtlError::Unsupported { .. } => DevError::Unsupported(e.to_string()),
    }
}

/// The flash SSD emulator.
pub struct SsdDevice {
    cfg: SsdConfig,
    caps: Capabilities,
    engine: Mutex<Engine>,
    engine_meter: LockMeter,
    /// Recorder shards: a thread records into shard `thread slot % RECORDER_SHARDS`, so that
    /// completions of different threads rarely meet on one lock; `stats` merges them.
    recs: Box<[Mutex<Recorder>]>,
    rec_meter: LockMeter,
    store: Store,
    clock: Clock,
    /// The FTL changes logical addresses during GC: store accesses happen under the engine
    /// lock, so contents move with their pages atomically.
    remaps: bool,
}

impl SsdDevice {
    /// A device with the configured FTL (`cfg.ftl`: page mapping by default) and victim
    /// policy.
    pub fn new(cfg: SsdConfig) -> Result<Self, SsdError> {
        cfg.validate()?;
        let policy: Box<dyn VictimPolicy> = match cfg.gc.policy {
            VictimKind::Greedy => Box::new(Greedy),
            VictimKind::CostBenefit => Box::new(CostBenefit),
            VictimKind::CostBenefitFlash => Box::new(CostBenefitFlash),
            VictimKind::Fifo => Box::new(Fifo),
            VictimKind::Random => Box::new(Random::new(VICTIM_SEED)),
            VictimKind::DChoices(d) => {
                let lines = u32::try_from(cfg.geometry.lines()).unwrap_or(u32::MAX);
                Box::new(DChoices::new(d, lines, VICTIM_SEED))
            }
        };
        let ftl: Box<dyn Ftl> = match &cfg.ftl {
            FtlKind::Page => Box::new(PageFtl::new(&cfg, policy)),
            FtlKind::Zoned(z) => Box::new(
                ZonedFtl::new(&cfg, z.clone())
                    .map_err(|why| SsdError::Ftl { ftl: "zoned", why })?,
            ),
            FtlKind::Coupled(c) => Box::new(CoupledFtl::new(&cfg, c.clone(), policy).map_err(
                |why| SsdError::Ftl {
                    ftl: "coupled",
                    why,
                },
            )?),
            FtlKind::Interval(c) => Box::new(PageFtl::with_mapping(
                &cfg,
                Box::new(IntervalMap::new(c.clone()).map_err(|why| SsdError::Ftl {
                    ftl: "interval",
                    why,
                })?),
                policy,
            )),
        };
        Self::with_ftl(cfg, ftl)
    }

    /// A device with a caller-supplied FTL. The FTL's logical size is what the device exposes
    /// (it may exceed the physical space, e.g. for virtual OP, but not fall short of the
    /// configured capacity unless the FTL is zoned).
    pub fn with_ftl(cfg: SsdConfig, ftl: Box<dyn Ftl>) -> Result<Self, SsdError> {
        cfg.validate()?;
        if ftl.zone_blocks() == 0 && ftl.logical_blocks() < cfg.logical_blocks() {
            return Err(SsdError::MappingSize {
                mapping: ftl.logical_blocks(),
                config: cfg.logical_blocks(),
            });
        }
        let store = match &cfg.store {
            StoreKind::None => Store::none(),
            StoreKind::Ram => Store::ram(),
            // One 4 KiB block per logical address cannot back a 2^64-block space.
            StoreKind::File(_) if ftl.infinite_space() => {
                return Err(SsdError::Ftl {
                    ftl: ftl.name(),
                    why: "store=file cannot back an infinite logical space (2^64 blocks); use store=ram or store=none".into(),
                })
            }
            StoreKind::File(p) => Store::file(p, ftl.logical_blocks())?,
        };
        let mut caps = Capabilities::plain(
            &format!("ssd:{}:{}", cfg.preset, ftl.name()),
            ftl.logical_blocks(),
        );
        caps.migration_upcalls = ftl.migration_upcalls();
        caps.persistent = store.persistent();
        caps.zone_blocks = ftl.zone_blocks();
        caps.conventional_blocks = ftl.conventional_blocks();
        caps.gc_region_blocks = ftl.gc_region_blocks();
        caps.infinite_space = ftl.infinite_space();
        if caps.infinite_space {
            caps.capacity_blocks = cfg.logical_blocks();
        }
        let remaps = ftl.migration_upcalls();
        let engine = Engine::new(&cfg, ftl);
        let clock = match cfg.clock {
            ClockKind::Virtual => Clock::Virtual(AtomicU64::new(0)),
            ClockKind::Wall => Clock::Wall(Instant::now()),
        };
        Ok(SsdDevice {
            recs: (0..RECORDER_SHARDS)
                .map(|_| Mutex::new(Recorder::new(cfg.bw_bin_ns, 0)))
                .collect(),
            rec_meter: LockMeter::default(),
            caps,
            engine: Mutex::new(engine),
            engine_meter: LockMeter::default(),
            store,
            clock,
            cfg,
            remaps,
        })
    }

    pub fn config(&self) -> &SsdConfig {
        &self.cfg
    }

    /// The engine lock, metered.
    fn engine(&self) -> Metered<'_, Engine> {
        self.engine_meter.lock(&self.engine)
    }

    /// This thread's recorder shard, metered.
    fn rec(&self) -> Metered<'_, Recorder> {
        let slot = THREAD_SLOT.with(|s| *s);
        self.rec_meter.lock(&self.recs[slot % self.recs.len()])
    }

    /// Every recorder shard merged into one.
    fn merged_recorder(&self) -> Recorder {
        let mut all = self.rec_meter.lock(&self.recs[0]).clone();
        for r in self.recs.iter().skip(1) {
            all.merge(&self.rec_meter.lock(r));
        }
        all
    }

    /// Waits and holds of the emulator's own locks since the last `reset_stats`.
    pub fn lock_stats(&self) -> LockStats {
        LockStats {
            engine: self.engine_meter.summary(),
            recorder: self.rec_meter.summary(),
            store: self.store.lock_summary().unwrap_or_default(),
        }
    }

    /// Current device time in ns (virtual, or since creation).
    pub fn now_ns(&self) -> u64 {
        self.clock.now()
    }

    pub fn is_virtual(&self) -> bool {
        matches!(self.clock, Clock::Virtual(_))
    }

    /// Move the virtual clock forward to at least `t` (no effect on a wall clock).
    pub fn advance_to(&self, t: u64) {
        if let Clock::Virtual(c) = &self.clock {
            c.fetch_max(t, Ordering::AcqRel);
        }
    }

    /// Queue a device-to-host event; it rides on the next completion.
    pub fn push_event(&self, ev: DeviceEvent) {
        self.engine().events_mut().push(ev);
    }

    /// Power cut and restart (fault injection for every FTL): events not yet delivered on a
    /// completion are lost; what the FTL keeps in capacitor-backed memory (mapping, D2FS
    /// migration records) survives, and unacknowledged upcalls ride on the next completions
    /// again. Contents of accepted writes survive (the write buffer is capacitor-backed too).
    pub fn power_cycle(&self) {
        self.engine().power_cycle();
    }

    /// 4 KiB blocks holding valid data on flash (over every line; O(lines)).
    pub fn valid_blocks(&self) -> u64 {
        let e = self.engine();
        let lines = e.lines();
        (0..lines.lines())
            .map(|l| u64::from(lines.vpc(crate::ftl::LineId(l))))
            .sum()
    }

    /// The blocks valid on flash at logical address `from` and above, against `referenced`
    /// (ascending: what the host's volume points at), for any FTL. Tests and the crash
    /// simulator: a block the device keeps that nobody references is capacity lost; a
    /// referenced one not valid at its address was moved (or lost). O(physical size).
    pub fn valid_against(&self, from: u64, referenced: &[u64]) -> ValidDiff {
        let valid: Vec<u64> = self
            .engine()
            .valid_lpns()
            .into_iter()
            .filter(|&l| l >= from)
            .collect();
        ValidDiff {
            valid: valid.len() as u64,
            unreferenced: valid
                .iter()
                .copied()
                .filter(|l| referenced.binary_search(l).is_err())
                .collect(),
            missing: referenced
                .iter()
                .filter(|l| valid.binary_search(l).is_err())
                .count() as u64,
        }
    }

    /// Every logical block the FTL maps, ascending, where it can list them (the interval
    /// FTL); None for the other FTLs. Read-only (crash simulator checks).
    pub fn mapped_lpns(&self) -> Option<Vec<u64>> {
        self.engine().ftl().mapped_lpns()
    }

    /// FTL-specific counters (zone resets, migration records, upcalls, redirects, ...).
    pub fn ftl_stats(&self) -> FtlStats {
        self.engine().ftl_stats()
    }

    /// The FTL's logical regions and how full each is (D2FS: conventional, regular, GC
    /// region); empty for FTLs without regions. Read-only, O(zones), for reports.
    pub fn region_usage(&self) -> Vec<crate::ftl::RegionUsage> {
        self.engine().region_usage()
    }

    /// Modelled device DRAM of the FTL's own structures (mapping, migration records) now,
    /// without building the rest of [`SsdDevice::stats`]. Read-only, for sampled reports.
    pub fn ftl_memory(&self) -> crate::ftl::FtlMemory {
        self.engine().memory().0
    }

    /// Engine counters now (NAND reads, programs, erases, device GC runs), without the
    /// histograms [`SsdDevice::stats`] merges. Read-only, for sampled reports.
    pub fn counters(&self) -> crate::engine::Counters {
        self.engine().counters().clone()
    }

    /// Name of the FTL ("page", "zoned", "coupled", ...).
    pub fn ftl_name(&self) -> &'static str {
        self.engine().mapping_name()
    }

    /// Start a measured phase: zero counters, histograms, busy times and the bandwidth
    /// series. The FTL and timing state (mapping, lines, die queues) are kept.
    pub fn reset_stats(&self) {
        let now = self.now_ns();
        self.engine().reset_counters();
        for r in self.recs.iter() {
            r.lock().reset(now);
        }
        self.engine_meter.reset();
        self.rec_meter.reset();
        self.store.reset_lock_stats();
    }

    /// Die busy time so far, summed over dies, as (serving the host, device GC, dies); a
    /// cheap probe for utilisation over an interval (`stats` builds histograms too).
    pub fn die_busy(&self) -> (u64, u64, usize) {
        let b = self.engine().busy();
        (
            b.die_user_ns.iter().sum(),
            b.die_gc_ns.iter().sum(),
            b.die_user_ns.len(),
        )
    }

    /// Snapshot of all statistics.
    pub fn stats(&self) -> SsdStats {
        let (counters, busy, stall, mem, free_lines, ftl) = {
            let e = self.engine();
            (
                e.counters().clone(),
                e.busy(),
                e.flash.timing.buffer_stall_ns(),
                e.memory(),
                e.free_lines(),
                e.ftl_stats(),
            )
        };
        let rec = self.merged_recorder();
        let latency = LatencyStats {
            read: rec.latency(OpKind::Read),
            write: rec.latency(OpKind::Write),
            discard: rec.latency(OpKind::Discard),
            flush: rec.latency(OpKind::Flush),
            wall_lateness: rec.lateness(),
        };
        let bandwidth = rec.bandwidth();
        let wb = self.cfg.write_buffer.bytes;
        SsdStats {
            waf: SsdStats::compute_waf(&counters),
            host_read_bytes: counters.host_read_blocks * BLOCK_SIZE_U64,
            host_write_bytes: counters.host_write_blocks * BLOCK_SIZE_U64,
            host_discard_bytes: counters.host_discard_blocks.saturating_mul(BLOCK_SIZE_U64),
            nand_write_bytes: counters.nand_written_blocks * BLOCK_SIZE_U64,
            gc_runs: counters.gc_runs,
            gc_pages_moved: counters.gc_pages_moved,
            free_lines,
            mean_free_units: if counters.free_units_samples == 0 {
                0.0
            } else {
                counters.free_units_sum as f64 / counters.free_units_samples as f64
            },
            latency,
            busy,
            write_buffer_stall_ns: stall,
            memory: MemoryStats {
                mapping_bytes: mem.0.mapping_bytes,
                migration_record_bytes: mem.0.record_bytes,
                line_metadata_bytes: mem.1,
                write_buffer_bytes: wb,
                total_bytes: mem.0.mapping_bytes + mem.0.record_bytes + mem.1 + wb,
            },
            bandwidth,
            counters,
            ftl,
            locks: self.lock_stats(),
        }
    }

    /// Check the FTL invariants (O(device size); for tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.engine().check_invariants()
    }

    /// Run `f` on the engine at `at`, then `store_op` on the contents (under the engine lock
    /// when the FTL remaps, else after releasing it; a remapping write's `store_op` only
    /// takes its shard locks there); returns the completion with its events. `write` is a
    /// write request's blocks (address, bytes): see below.
    fn exec<'s, R>(
        &'s self,
        at: u64,
        write: Option<(u64, &[u8])>,
        f: impl FnOnce(&mut Engine) -> Result<(u64, R), EngineError>,
        store_op: impl FnOnce(&'s Store, R) -> DevResult<()>,
    ) -> DevResult<Timed> {
        let mut completion = Completion::empty();
        let mut e = self.engine();
        let res = f(&mut e);
        // GC moves that changed logical addresses move their contents before anything else
        // can look at the store (also when the request itself failed).
        let (moved, dropped) = e.take_store_changes();
        // GC that ran inside this write (the coupled FTL collects before each page) may
        // have moved a page the write itself had just put on a line it sealed: its bytes
        // must be in the store before the move copies them, or the move copies nothing and
        // the write lands at an address no longer mapped (found in review, 2026-11-27:
        // the accepted block read back as zeros, through the redirect and at the pair's
        // new address). Such a write stores its bytes here, under the engine lock, and not
        // again after it.
        let mut stored = false;
        if let (Some((addr, buf)), true, true) = (write, self.remaps, res.is_ok()) {
            let n = buf.len() as u64 / BLOCK_SIZE_U64;
            if moved.iter().any(|&(old, _)| old >= addr && old < addr + n) {
                self.store.write(addr, buf)?;
                stored = true;
            }
        }
        for (old, new) in moved {
            self.store.relocate(old, new)?;
        }
        for lpn in dropped {
            self.store.discard(lpn, 1)?;
        }
        let (done, r) = res.map_err(engine_err)?;
        if self.remaps {
            if !stored {
                store_op(&self.store, r)?;
            }
            e.drain_events(&mut completion.events);
            drop(e);
        } else {
            e.drain_events(&mut completion.events);
            drop(e);
            store_op(&self.store, r)?;
        }
        Ok(Timed {
            completion,
            submit_ns: at,
            done_ns: done,
        })
    }

    fn record(&self, kind: OpKind, timed: &Timed, bytes: u64) {
        self.rec()
            .record(kind, timed.done_ns - timed.submit_ns, timed.done_ns, bytes);
    }

    /// Read `buf` at `addr` from the store; blocks in `redirects` come from the logical
    /// address their content is kept under now (D2FS read redirect).
    fn read_store(
        store: &Store,
        addr: u64,
        buf: &mut [u8],
        redirects: &[(u64, u64)],
    ) -> DevResult<()> {
        store.read(addr, buf)?;
        let n = (buf.len() / BLOCK_SIZE) as u64;
        for &(host, at) in redirects {
            if host >= addr && host < addr + n {
                let off = ((host - addr) as usize) * BLOCK_SIZE;
                store.read(at, &mut buf[off..off + BLOCK_SIZE])?;
            }
        }
        Ok(())
    }

    fn do_read(&self, at: u64, addr: u64, buf: &mut [u8]) -> DevResult<Timed> {
        let n = check_request(&self.caps, addr, buf.len())?;
        self.exec(
            at,
            None,
            |e| e.read(&[(addr, n)], at),
            |st, red| Self::read_store(st, addr, buf, &red),
        )
    }

    fn do_read_many(&self, at: u64, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Timed> {
        let mut extents = Vec::with_capacity(reqs.len());
        for (addr, buf) in reqs.iter() {
            extents.push((*addr, check_request(&self.caps, *addr, buf.len())?));
        }
        self.exec(
            at,
            None,
            |e| e.read(&extents, at),
            |st, red| {
                for (addr, buf) in reqs.iter_mut() {
                    Self::read_store(st, *addr, buf, &red)?;
                }
                Ok(())
            },
        )
    }

    fn do_write(&self, at: u64, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Timed> {
        let n = check_request(&self.caps, addr, buf.len())?;
        // A remapping FTL's write copies after the engine lock, under the blocks' shard locks
        // taken inside it (`Store::hold_for_write`): the engine's order is kept, and the
        // engine is not held for the copy (18 % of `device`'s CPU at 16 threads, all of it
        // under the engine lock before).
        let mut held = None;
        let timed = self.exec(
            at,
            Some((addr, buf)),
            |e| e.write(addr, n, at, hint).map(|d| (d, ())),
            |st, ()| {
                if self.remaps {
                    held = st.hold_for_write(addr, n);
                }
                match held {
                    Some(_) => Ok(()),
                    None => st.write(addr, buf),
                }
            },
        )?;
        if let Some(h) = held {
            h.write(buf);
        }
        Ok(timed)
    }

    fn do_discard(&self, at: u64, addr: u64, count: u64) -> DevResult<Timed> {
        check_range(&self.caps, addr, count)?;
        // A discard redirected to a page's new address (D2FS) also drops the content kept
        // under that address: the FTL reports it in `Flash::dropped`, applied in `exec`.
        self.exec(
            at,
            None,
            |e| e.discard(addr, count, at).map(|d| (d, ())),
            |st, ()| st.discard(addr, count),
        )
    }

    fn do_discard_many(&self, at: u64, ranges: &[(u64, u64)]) -> DevResult<Timed> {
        for &(addr, count) in ranges {
            check_range(&self.caps, addr, count)?;
        }
        self.exec(
            at,
            None,
            |e| e.discard_many(ranges, at).map(|d| (d, ())),
            |st, ()| st.discard_many(ranges),
        )
    }

    fn do_flush(&self, at: u64) -> DevResult<Timed> {
        self.exec(
            at,
            None,
            |e| e.flush(at).map(|d| (d, ())),
            |st, ()| st.sync(),
        )
    }

    /// Read at an explicit submission time (no sleeping; records the modelled latency).
    pub fn read_at(&self, at: u64, addr: u64, buf: &mut [u8]) -> DevResult<Timed> {
        let timed = self.do_read(at, addr, buf)?;
        self.record(OpKind::Read, &timed, buf.len() as u64);
        self.advance_to(at);
        Ok(timed)
    }

    /// Several reads in flight together, submitted at `at`.
    pub fn read_many_at(&self, at: u64, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Timed> {
        let bytes = reqs.iter().map(|r| r.1.len() as u64).sum();
        let timed = self.do_read_many(at, reqs)?;
        self.record(OpKind::Read, &timed, bytes);
        self.advance_to(at);
        Ok(timed)
    }

    /// Write at an explicit submission time.
    pub fn write_at(&self, at: u64, addr: u64, buf: &[u8]) -> DevResult<Timed> {
        self.write_hinted_at(at, addr, buf, WriteHint::None)
    }

    /// Write with a block-type hint ([`BlockDevice::write_hinted`]) at an explicit submission
    /// time.
    pub fn write_hinted_at(
        &self,
        at: u64,
        addr: u64,
        buf: &[u8],
        hint: WriteHint,
    ) -> DevResult<Timed> {
        let timed = self.do_write(at, addr, buf, hint)?;
        self.record(OpKind::Write, &timed, buf.len() as u64);
        self.advance_to(at);
        Ok(timed)
    }

    /// Discard at an explicit submission time.
    pub fn discard_at(&self, at: u64, addr: u64, count: u64) -> DevResult<Timed> {
        let timed = self.do_discard(at, addr, count)?;
        self.record(OpKind::Discard, &timed, 0);
        self.advance_to(at);
        Ok(timed)
    }

    /// Several discards in one request at an explicit submission time.
    pub fn discard_many_at(&self, at: u64, ranges: &[(u64, u64)]) -> DevResult<Timed> {
        let timed = self.do_discard_many(at, ranges)?;
        self.record(OpKind::Discard, &timed, 0);
        self.advance_to(at);
        Ok(timed)
    }

    /// Flush at an explicit submission time.
    pub fn flush_at(&self, at: u64) -> DevResult<Timed> {
        let timed = self.do_flush(at)?;
        self.record(OpKind::Flush, &timed, 0);
        self.advance_to(at);
        Ok(timed)
    }

    /// Run a request on the device's own clock: virtual time jumps to the completion; wall
    /// time sleeps until it and records the achieved latency.
    fn on_clock(
        &self,
        kind: OpKind,
        bytes: u64,
        f: impl FnOnce(&Self, u64) -> DevResult<Timed>,
    ) -> DevResult<Completion> {
        match &self.clock {
            Clock::Virtual(c) => {
                let at = c.load(Ordering::Acquire);
                let timed = f(self, at)?;
                c.fetch_max(timed.done_ns, Ordering::AcqRel);
                Ok(timed.completion)
            }
            Clock::Wall(_) => {
                let at = self.clock.now();
                let timed = f(self, at)?;
                sleep_until(&self.clock, timed.done_ns);
                let end = self.clock.now();
                let mut rec = self.rec();
                rec.record(kind, end - at, timed.done_ns, bytes);
                rec.record_lateness(end.saturating_sub(timed.done_ns));
                Ok(timed.completion)
            }
        }
    }
}

/// Sleep (never spin) until the clock reaches `target`.
fn sleep_until(clock: &Clock, target: u64) {
    loop {
        let now = clock.now();
        if now >= target {
            return;
        }
        std::thread::sleep(Duration::from_nanos(target - now));
    }
}

impl BlockDevice for SsdDevice {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        let bytes = buf.len() as u64;
        if self.is_virtual() {
            return self.on_clock(OpKind::Read, bytes, |d, at| d.read_at(at, addr, buf));
        }
        self.on_clock(OpKind::Read, bytes, |d, at| d.do_read(at, addr, buf))
    }

    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.write_hinted(addr, buf, WriteHint::None)
    }

    /// The hint reaches the FTL with every page (the coupled FTL's GC keeps one destination
    /// per block type; the others ignore it).
    fn write_hinted(&self, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Completion> {
        self.write_hinted_ordered(addr, buf, hint, &mut || {})
    }

    /// The request is scheduled (its place in the device's order fixed, its contents
    /// stored) before the clock moves to its completion: `accepted` is called in between,
    /// so on the wall clock a writer of one zone may start the next buffer while this one's
    /// time passes, as a host queues several writes for an open zone in order.
    fn write_hinted_ordered(
        &self,
        addr: u64,
        buf: &[u8],
        hint: WriteHint,
        accepted: &mut dyn FnMut(),
    ) -> DevResult<Completion> {
        let virtual_clock = self.is_virtual();
        self.on_clock(OpKind::Write, buf.len() as u64, |d, at| {
            let timed = if virtual_clock {
                d.write_hinted_at(at, addr, buf, hint)?
            } else {
                d.do_write(at, addr, buf, hint)?
            };
            accepted();
            Ok(timed)
        })
    }

    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        if self.is_virtual() {
            return self.on_clock(OpKind::Discard, 0, |d, at| d.discard_at(at, addr, count));
        }
        self.on_clock(OpKind::Discard, 0, |d, at| d.do_discard(at, addr, count))
    }

    /// One request for up to [`flashlog_dev::MAX_DISCARD_RANGES`] ranges (NVMe DSM): one
    /// firmware overhead and one completion per chunk, not one per range.
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        let mut all = Completion::empty();
        for chunk in ranges.chunks(flashlog_dev::MAX_DISCARD_RANGES) {
            let c = if self.is_virtual() {
                self.on_clock(OpKind::Discard, 0, |d, at| d.discard_many_at(at, chunk))?
            } else {
                self.on_clock(OpKind::Discard, 0, |d, at| d.do_discard_many(at, chunk))?
            };
            all.events.extend(c.events);
        }
        Ok(all)
    }

    fn flush(&self) -> DevResult<Completion> {
        if self.is_virtual() {
            return self.on_clock(OpKind::Flush, 0, |d, at| d.flush_at(at));
        }
        self.on_clock(OpKind::Flush, 0, |d, at| d.do_flush(at))
    }

    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        let bytes = reqs.iter().map(|r| r.1.len() as u64).sum();
        if self.is_virtual() {
            return self.on_clock(OpKind::Read, bytes, |d, at| d.read_many_at(at, reqs));
        }
        self.on_clock(OpKind::Read, bytes, |d, at| d.do_read_many(at, reqs))
    }

    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        self.engine
            .lock()
            .ack_migrations(upto)
            .map(|_| ())
            .map_err(engine_err)
    }

    fn resend_migrations(&self) -> DevResult<()> {
        self.engine().resend_migrations().map_err(engine_err)
    }
}
