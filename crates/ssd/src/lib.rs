//! Flashlog's built-in flash SSD emulator (`flashlog-ssd`).
//!
//! Owns: [`SsdDevice`], a [`flashlog_dev::BlockDevice`] that models NAND geometry and timing
//! (per-die busy time, channel and host-link bandwidth calendars, firmware overhead, a write
//! buffer with early completion and back-pressure), a page-mapping FTL with overprovisioning,
//! line GC (greedy or cost-benefit) paced by write credits, TRIM, mapping-memory accounting,
//! virtual and wall clocks, presets, statistics, and the `flashlog ssd` command ([`run`]).
//! FTLs plug in behind the [`Ftl`] trait: page mapping, zoned (ZNS-style) and D2FS coupled GC.
//!
//! Module map (each file's header gives its invariants and lock order):
//! - `config`: parameters, presets, parsing, capacity scaling;
//! - `calendar`, `timing`: bandwidth calendars and the NAND timing model;
//! - `ftl`: the FTL trait, one file per FTL (`ftl/page`, `ftl/zoned`, `ftl/coupled`), victim
//!   policies, line table;
//! - `flash`: the NAND back-end every FTL runs on (timing, lines, reverse map, counters);
//! - `engine`: request dispatch from the device to the FTL;
//! - `store`: page contents (none, RAM, file);
//! - `stats`, `analytic`: measurements and closed-form expectations; `locks`: lock meters;
//! - `device`: the `BlockDevice`; `workload`, `cli`: the synthetic workload command.
//!
//! Lock order (whole crate): `SsdDevice.engine` → released → a `SsdDevice.recs` shard; store
//! shard locks are leaves (two at once only for a relocation across shards, in ascending
//! shard order). No lock is held while sleeping on the wall clock. `locks` meters every one
//! of them (docs/EMULATOR.md §2.8).

pub mod analytic;
pub mod calendar;
pub mod cli;
pub mod config;
pub mod device;
pub mod engine;
pub mod flash;
pub mod ftl;
pub mod locks;
pub mod stats;
pub mod store;
pub mod timing;
pub mod workload;

pub use cli::{run, SsdArgs};
pub use config::{
    parse_duration_ns, parse_size, ClockKind, ConfigError, FtlKind, GcConfig, Geometry, SsdConfig,
    StoreKind, Timing, VictimKind, WriteBufferConfig, MAP_UNIT,
};
pub use device::{SsdDevice, SsdError, Timed, ValidDiff};
pub use engine::{Counters, EngineError};
pub use flash::Flash;
pub use ftl::{
    CostBenefit, CostBenefitFlash, CoupledConfig, CoupledFtl, DChoices, EventQueue, Fifo, Ftl,
    FtlError, FtlMemory, FtlStats, Greedy, LineId, LineState, LineTable, Lpn, Mapping, PageFtl,
    PageMap, Ppn, Random, RegionUsage, VictimPolicy, ZonedConfig, ZonedFtl,
};
pub use locks::{LockStats, LockSummary};
pub use stats::{OpKind, SsdStats};
pub use workload::{Gaps, Pattern, Phase, PhaseResult};
