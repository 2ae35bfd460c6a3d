//! The experiments, and what they share: a fresh formatted and mounted [`Volume`] per policy,
//! per-thread operation counters ([`Ops`]), the sampler probe, and the end-of-run
//! measurements ([`VolumeEnd`]).

pub mod filebench;
pub mod fio;
pub mod fxmark;
pub mod gccost;
pub mod memory;
pub mod sustained;
pub mod vop;
pub mod ycsb;

use crate::device::{BenchDevice, DeviceSpec};
use crate::metrics::{peak_rss_mib, reset_peak_rss, Lat, ProcUsage, Sample, Sampler};
use crate::policy::PolicySpec;
use crate::Ctx;
use anyhow::{anyhow, Result};
use crossbeam_utils::CachePadded;
use flashlog_core::{Counters, Fs, MkfsOptions, MountOptions};
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per-thread operation counters (no shared cache line on the hot path).
pub struct Ops(Vec<CachePadded<AtomicU64>>);

impl Ops {
    pub fn new(threads: usize) -> Arc<Ops> {
        Arc::new(Ops((0..threads.max(1))
            .map(|_| Default::default())
            .collect()))
    }
    #[inline]
    pub fn add(&self, thread: usize, n: u64) {
        self.0[thread % self.0.len()].fetch_add(n, Ordering::Relaxed);
    }
    pub fn total(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// A mounted volume on a fresh device.
pub struct Volume {
    pub fs: Arc<Fs>,
    pub bd: BenchDevice,
    pub policy: PolicySpec,
    pub usage0: ProcUsage,
    pub t0: Instant,
    /// The device's size as the user gave it (`--device PRESET:SIZE`; a block device's
    /// size): what per-GiB figures divide by.
    pub device_bytes: u64,
}

/// Mount options of every bench run: the defaults (background cleaning every 30 s after
/// 5 s idle, checkpoints every 30 s), as a user would mount.
pub fn base_mount_options() -> MountOptions {
    MountOptions::default()
}

impl Volume {
    /// Fresh device, mkfs, mount with the policy. Resets the peak-RSS mark.
    pub fn open(ctx: &Ctx, policy: &PolicySpec) -> Result<Volume> {
        reset_peak_rss();
        let usage0 = ProcUsage::now();
        let bd = ctx.device.for_policy_spec(policy).open()?;
        let device_bytes = match &ctx.device {
            DeviceSpec::Dev { .. } => {
                flashlog_dev::BlockDevice::capabilities(&*bd.dev).block_count * 4096
            }
            spec => spec.bytes()?,
        };
        Fs::mkfs(
            bd.dev.clone(),
            &MkfsOptions {
                force: true,
                label: format!("bench-{}", policy.label),
                segs_per_sec: ctx.segs_per_sec,
                mlogs: ctx.args.mlogs,
                ..Default::default()
            },
        )
        .map_err(|e| anyhow!("mkfs for {}: {e}", policy.label))?;
        let mut opts = policy.mount_options(&base_mount_options());
        opts.mlog_map = ctx.args.mlog_map.parse().map_err(anyhow::Error::msg)?;
        let fs = Fs::mount(bd.dev.clone(), opts)
            .map_err(|e| anyhow!("mount with {}: {e}", policy.label))?;
        Ok(Volume {
            fs: Arc::new(fs),
            bd,
            policy: policy.clone(),
            usage0,
            t0: Instant::now(),
            device_bytes,
        })
    }

    /// Bytes the file system may use for file data.
    pub fn user_bytes(&self) -> u64 {
        let s = self.fs.statfs();
        s.blocks * u64::from(s.block_size)
    }

    /// How far each of `logs` append-and-truncate logs (ycsb's per-thread logs, OLTP's log)
    /// may grow before it is truncated: `max`, or less on a small volume, so that all of
    /// them together take at most half the space free now, in whole `unit`s (at least
    /// one). A log sized for a 1 GiB volume filled a 96 MiB one: a real ENOSPC that read
    /// as a file-system race (two of 64 test runs, issue 12).
    pub fn log_cap(&self, logs: u64, max: u64, unit: u64) -> u64 {
        let s = self.fs.statfs();
        let free = s.blocks_free * u64::from(s.block_size);
        ((free / 2 / logs.max(1)).min(max) / unit).max(1) * unit
    }

    /// Start a sampler over this volume; `ops` counts workload operations; the bar shows
    /// application bytes written (or ops when `bar_ops`).
    pub fn sampler(&self, ctx: &Ctx, ops: Arc<Ops>, bar: ProgressBar, bar_ops: bool) -> Sampler {
        let fs = self.fs.clone();
        let dev = self.bd.dev.clone();
        let ssd = self.bd.ssd.clone();
        let probe = move || {
            let c = fs.stats();
            let (r, w) = dev.bytes();
            let (die_user_ns, die_gc_ns, dies) = ssd.as_ref().map_or((0, 0, 0), |s| s.die_busy());
            Sample {
                data_blocks: c.data_blocks_written,
                dev_write_blocks: c.dev_write_blocks,
                die_user_ns,
                die_gc_ns,
                dies,
                t_s: 0.0,
                app_write_bytes: c.app_write_bytes,
                app_read_bytes: c.app_read_bytes,
                dev_read_bytes: r,
                dev_write_bytes: w,
                // gc=device: the host sees the device's cleaning as the upcalls it applies.
                gc_runs: c.gc_fg_runs + c.gc_bg_runs + c.upcalls_applied,
                gc_sections_freed: c.gc_sections_freed,
                ops: ops.total(),
            }
        };
        let mut last: Option<Sample> = None;
        let tick = move |s: &Sample| {
            if bar_ops {
                bar.set_position(s.ops);
            } else {
                bar.set_position(s.app_write_bytes);
            }
            if let Some(l) = last {
                let dt = (s.t_s - l.t_s).max(1e-9);
                let mib = |a: u64, b: u64| b.saturating_sub(a) as f64 / (1u64 << 20) as f64 / dt;
                bar.set_message(format!(
                    "app {:.0} MiB/s dev {:.0} MiB/s gc {}",
                    mib(l.app_write_bytes, s.app_write_bytes),
                    mib(
                        l.dev_read_bytes + l.dev_write_bytes,
                        s.dev_read_bytes + s.dev_write_bytes
                    ),
                    s.gc_runs
                ));
            }
            last = Some(*s);
        };
        Sampler::<crate::metrics::Sample>::start(ctx.sample_interval(), probe, tick)
    }

    /// Unmount and collect the end-of-run numbers.
    pub fn finish(self) -> Result<VolumeEnd> {
        let counters = self.fs.stats();
        let fs = Arc::try_unwrap(self.fs)
            .map_err(|_| anyhow!("volume still in use by a worker at unmount"))?;
        let t = Instant::now();
        let unmount_error = fs
            .unmount()
            .err()
            .map(|e| format!("unmount ({}): {e}", self.policy.label));
        let unmount_s = t.elapsed().as_secs_f64();
        let cpu_s = ProcUsage::now().cpu_since(&self.usage0);
        // Every run ends with a consistency check of what it left on the device.
        let fsck_errors = if unmount_error.is_none() {
            match flashlog_core::fsck(&*self.bd.dev) {
                Ok(r) if r.is_clean() => None,
                Ok(r) => Some(format!("fsck after {}: {r}", self.policy.label)),
                Err(e) => Some(format!("fsck after {}: {e}", self.policy.label)),
            }
        } else {
            None
        };
        Ok(VolumeEnd {
            counters,
            ssd: self.bd.ssd_stats().map(|s| SsdSummary {
                nand_waf: s.waf,
                host_write_bytes: s.host_write_bytes,
                host_read_bytes: s.host_read_bytes,
                nand_write_bytes: s.nand_write_bytes,
                device_gc_runs: s.gc_runs,
                device_gc_idle_runs: s.ftl.gc_idle_runs,
                device_gc_pages_moved: s.gc_pages_moved,
                device_gc_node_pages_moved: s.ftl.gc_node_pages_moved,
                write_p99_us: s.latency.write.p99_us,
                read_p99_us: s.latency.read.p99_us,
                wall_lateness_p50_us: s.latency.wall_lateness.p50_us,
                write_buffer_stall_s: s.write_buffer_stall_ns as f64 / 1e9,
                migration_records_peak: s.ftl.records_peak,
                migration_record_peak_kib_per_gib: {
                    // Per GiB of the device size given with --device, as the FTL-memory
                    // table's `KiB/GiB` (gauges.rs).
                    let gib = self.device_bytes.max(1) as f64 / (1u64 << 30) as f64;
                    (s.ftl.records_peak * flashlog_ssd::ftl::coupled::RECORD_BYTES) as f64
                        / 1024.0
                        / gib
                },
                locks: s.locks,
            }),
            cpu_s,
            peak_rss_mib: peak_rss_mib(),
            unmount_s,
            unmount_error,
            fsck_errors,
            elapsed_s: self.t0.elapsed().as_secs_f64(),
        })
    }
}

/// What the emulated device saw.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SsdSummary {
    /// NAND programs / host writes inside the device.
    pub nand_waf: f64,
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub nand_write_bytes: u64,
    pub device_gc_runs: u64,
    /// Of those, the victims idle-time GC collected between requests (`--ssd-set gc_idle=`).
    pub device_gc_idle_runs: u64,
    /// Pages device GC moved, and of those the pages written as node blocks (D2FS: the
    /// coupled FTL's node stream; 0 on other FTLs).
    pub device_gc_pages_moved: u64,
    pub device_gc_node_pages_moved: u64,
    pub write_p99_us: f64,
    pub read_p99_us: f64,
    /// How late wall-clock sleeps woke up (timer overshoot of the host).
    pub wall_lateness_p50_us: f64,
    pub write_buffer_stall_s: f64,
    /// D2FS coupled FTL: most migration records outstanding at once (buffered or sent and
    /// not acknowledged), and their modelled device DRAM per GiB of the device size given
    /// with `--device`; 0 on other FTLs.
    pub migration_records_peak: u64,
    pub migration_record_peak_kib_per_gib: f64,
    /// Waits on and holds of the emulator's own locks over the volume's life (mkfs to
    /// unmount): is the emulated device the lock the host waits on?
    pub locks: flashlog_ssd::LockStats,
}

/// End-of-run measurements of one volume.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VolumeEnd {
    pub counters: Counters,
    pub ssd: Option<SsdSummary>,
    /// Process CPU seconds (user + system) from mkfs to unmount.
    pub cpu_s: f64,
    /// Peak RSS of the process during this policy's run (includes the emulator's RAM page
    /// store, which holds the volume's live data).
    pub peak_rss_mib: f64,
    pub unmount_s: f64,
    /// The final checkpoint failed (the counters above are still valid).
    pub unmount_error: Option<String>,
    /// fsck of the unmounted volume found errors (None: clean, or not checked because the
    /// unmount failed).
    pub fsck_errors: Option<String>,
    pub elapsed_s: f64,
}

impl VolumeEnd {
    /// What went wrong at the end of the run: the unmount, else fsck.
    pub fn problem(&self) -> Option<String> {
        self.unmount_error
            .clone()
            .or_else(|| self.fsck_errors.clone())
    }
}

/// The emulator's lock waits as bench lock-wait points (`ssd_engine`, `ssd_recorder`,
/// `ssd_store`), next to the core's.
pub fn device_lock_waits(l: &flashlog_ssd::LockStats) -> Vec<(&'static str, f64, u64)> {
    vec![
        ("ssd_engine", l.engine.wait_s, l.engine.contended),
        ("ssd_recorder", l.recorder.wait_s, l.recorder.contended),
        ("ssd_store", l.store.wait_s, l.store.contended),
    ]
}

/// A 4 KiB-aligned buffer of non-zero bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = crate::metrics::Rng::new(seed, 7);
    let mut v = vec![0u8; len];
    for c in v.chunks_mut(8) {
        let x = r.next_u64().to_le_bytes();
        c.copy_from_slice(&x[..c.len()]);
    }
    v
}

/// Run `threads` workers until each returns or `dur` passes (then `stop` is set). Each
/// worker gets its index, the stop flag and its own latency histogram, and returns how many
/// operations it did. Returns (operations, seconds until the last worker returned, merged
/// latencies, the first error).
pub fn run_workers<F>(threads: usize, dur: Duration, work: F) -> (u64, f64, Lat, Option<String>)
where
    F: Fn(usize, &AtomicBool, &mut Lat) -> Result<u64> + Sync,
{
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let deadline = t0 + dur;
    let outs: Vec<(u64, Lat, Option<String>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, work) = (&stop, &work);
                s.spawn(move || {
                    let mut lat = Lat::default();
                    match work(t, stop, &mut lat) {
                        Ok(n) => (n, lat, None),
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            (0, lat, Some(format!("thread {t}: {e:#}")))
                        }
                    }
                })
            })
            .collect();
        while Instant::now() < deadline && !hs.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (0, Lat::default(), Some("worker panicked".into())))
            })
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut lat = Lat::default();
    let mut n = 0;
    let mut err = None;
    for (k, l, e) in outs {
        n += k;
        lat.merge(&l);
        if err.is_none() {
            err = e;
        }
    }
    (n, secs, lat, err)
}

/// Thread counts 1, 2, 4, ... up to and including `max`.
pub fn thread_counts(max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut n = 1;
    while n < max {
        v.push(n);
        n *= 2;
    }
    v.push(max);
    v
}
