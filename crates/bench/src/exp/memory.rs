//! `memory`: D2FS Table 1 / Fig. 17 and the IPLFS mapping-memory targets. The `sustained`
//! workload (fill, then random 4 KiB overwrites) on each policy's FTL, default
//! `f2fs,device,none,none/compaction_period=0,zf2fs` (page mapping, coupled, interval with
//! and without compaction, zoned), with the device gauges sampled every `--sample-ms`: the
//! report's "FTL memory" table compares each FTL's mapping memory with a page map of the same
//! live data and (interval FTL) with a flat map of the touched range; `ftl_memory.svg`,
//! `migration_records.svg` and `upcall_rate.svg` plot them over time.
//!
//! The interval FTL compacts every `compaction_period` of device time (default 30 s): a run
//! shorter than that never compacts, so use `--duration` > 30 or a policy override such as
//! `none/compaction_period=5s`.
//!
//! Owns: nothing but the experiment's defaults and name; the workload, gauges and tables
//! are `sustained`'s and `gauges.rs`'s. Lock order: none of its own.

use crate::report::Report;
use crate::Ctx;
use anyhow::{bail, Result};

pub fn run(ctx: &Ctx) -> Result<Report> {
    if ctx.device.ssd_config().is_err() {
        bail!(
            "bench memory measures the emulator's FTLs: use --device PRESET:SIZE (an emulated SSD)"
        );
    }
    super::sustained::run_named(ctx, "memory")
}
