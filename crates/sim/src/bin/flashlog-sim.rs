//! flashlog-sim: run, replay and enumerate crash cases; inject faults; write fuzz corpora.
//!
//! Every failure prints the exact command that replays it (see docs/TESTING.md).

use clap::{Parser, Subcommand};
use flashlog_core::{GcPolicy, MlogMap};
use flashlog_sim::crash::{self, parse_mode, Case, RunOptions};
use flashlog_sim::device_gc;
use flashlog_sim::fault::{self, FaultKind};
use flashlog_sim::gc_none;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Deterministic crash simulation and fault injection for Flashlog")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Sampled crash points over a range of seeds, every kill mode and GC policy.
    Run {
        /// Seeds as A..B (end exclusive).
        #[arg(long, default_value = "0..1000")]
        seeds: String,
        /// Kill modes: drop, subset, tear, or all.
        #[arg(long, default_value = "all")]
        mode: String,
        /// Cut points per seed and mode.
        #[arg(long, default_value_t = 4)]
        cuts: u64,
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 10)]
        max_failures: usize,
        /// GC policies, comma separated, or all.
        #[arg(long, default_value = "all")]
        policies: String,
        /// Mlog counts of the base image (mkfs `mlogs`), comma separated.
        #[arg(long, default_value = "1")]
        mlogs: String,
        /// Mount options `mlog=`, comma separated: ino, thread (each operation on one of
        /// four threads of known slots, drawn from the seed).
        #[arg(long, default_value = "ino")]
        mlog_map: String,
        /// Mount options `inode_cache_max`, comma separated (0: the default). A small
        /// cache (4) evicts cells between checkpoints, before the fsyncs.
        #[arg(long, default_value = "0")]
        inode_cache: String,
    },
    /// gc=device (D2FS) on the emulated coupled-GC SSD: power cuts between device
    /// migration, upcall, host apply, checkpoint and acknowledgement. Without --cut, every
    /// case of the seed; with --cut, that one case.
    Device {
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long)]
        cut: Option<u64>,
        /// The cut request still runs on the device (its completion is lost).
        #[arg(long)]
        landed: bool,
        /// Random cut points per seed besides the protocol steps.
        #[arg(long, default_value_t = 4)]
        random: u64,
    },
    /// gc=none (IPLFS) on the emulated interval-mapping SSD: power cuts while a discard log
    /// is written, between a discard's queueing and its issue, after a dispatch round, in
    /// fsyncs and at random; after each, the device must map exactly the live blocks.
    /// Without --cut, every case of the seeds; with --cut, that one case of --seed.
    None {
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Seeds as A..B (end exclusive), instead of --seed.
        #[arg(long)]
        seeds: Option<String>,
        #[arg(long)]
        cut: Option<u64>,
        /// The cut request still runs on the device (its completion is lost).
        #[arg(long)]
        landed: bool,
        /// A second cut, at this request of the recovery mount after the first.
        #[arg(long)]
        recut: Option<u64>,
        /// Random cut points per seed besides the protocol points.
        #[arg(long, default_value_t = 4)]
        random: u64,
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 10)]
        max_failures: usize,
    },
    /// Replay one crash case exactly.
    Replay {
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        mode: String,
        #[arg(long)]
        cut: u64,
        #[arg(long, default_value_t = 0)]
        partial: u64,
        #[arg(long, default_value = "f2fs")]
        policy: GcPolicy,
        #[arg(long, default_value_t = 1)]
        mlogs: u32,
        /// Mount option `mlog=` (ino or thread).
        #[arg(long, default_value = "ino")]
        mlog_map: MlogMap,
        /// Mount option `inode_cache_max` (0: the default).
        #[arg(long, default_value_t = 0)]
        inode_cache: usize,
        /// A second cut, at this request of the recovery mount.
        #[arg(long)]
        recut: Option<u64>,
    },
    /// Crash at every point of the seed's trace (littlefs style).
    Exhaustive {
        #[arg(long)]
        seed: u64,
        /// How many consecutive seeds from `seed`.
        #[arg(long, default_value_t = 1)]
        count: u64,
        #[arg(long, default_value = "all")]
        mode: String,
        #[arg(long)]
        threads: Option<usize>,
        /// Mlog counts of the base image (mkfs `mlogs`), comma separated.
        #[arg(long, default_value = "1")]
        mlogs: String,
        /// Mount options `mlog=`, comma separated: ino, thread (each operation on one of
        /// four threads of known slots, drawn from the seed).
        #[arg(long, default_value = "ino")]
        mlog_map: String,
        /// Mount options `inode_cache_max`, comma separated (0: the default). A small
        /// cache (4) evicts cells between checkpoints, before the fsyncs.
        #[arg(long, default_value = "0")]
        inode_cache: String,
    },
    /// Print a seed's operations and device requests (no crash).
    Trace {
        #[arg(long)]
        seed: u64,
        #[arg(long, default_value = "f2fs")]
        policy: GcPolicy,
        #[arg(long, default_value_t = 1)]
        mlogs: u32,
        /// Mount option `mlog=` (ino or thread).
        #[arg(long, default_value = "ino")]
        mlog_map: MlogMap,
        /// Mount option `inode_cache_max` (0: the default).
        #[arg(long, default_value_t = 0)]
        inode_cache: usize,
    },
    /// Inject a device fault: the `at`-th request of a kind fails (or, without --at, every
    /// request number of the seed's trace in turn).
    Fault {
        #[arg(long)]
        seed: u64,
        /// read, write, flush or panic.
        #[arg(long)]
        kind: String,
        #[arg(long)]
        at: Option<u64>,
        #[arg(long, default_value = "f2fs")]
        policy: GcPolicy,
    },
    /// Write seed corpora for the fuzz targets (default fuzz/corpus).
    Corpus {
        #[arg(long, default_value = "fuzz/corpus")]
        out: std::path::PathBuf,
    },
}

fn modes(s: &str) -> Result<Vec<flashlog_dev::CrashMode>, String> {
    if s == "all" {
        return Ok(flashlog_dev::CrashMode::ALL.to_vec());
    }
    s.split(',').map(parse_mode).collect()
}

fn policies(s: &str) -> Result<Vec<GcPolicy>, String> {
    if s == "all" {
        return Ok(flashlog_sim::ALL_POLICIES.to_vec());
    }
    s.split(',').map(|p| p.parse()).collect()
}

fn mlog_counts(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(|m| {
            m.parse::<u32>()
                .map_err(|e| format!("mlogs {m:?}: {e}"))
                .and_then(|n| {
                    flashlog_sim::image::base_image_mlogs(n)?;
                    Ok(n)
                })
        })
        .collect()
}

fn mlog_maps(s: &str) -> Result<Vec<MlogMap>, String> {
    s.split(',').map(|m| m.parse()).collect()
}

fn inode_caches(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|c| c.parse().map_err(|e| format!("inode cache {c:?}: {e}")))
        .collect()
}

fn seeds(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("seeds {s:?}: expected A..B"))?;
    let a: u64 = a.parse().map_err(|e| format!("seeds {s:?}: {e}"))?;
    let b: u64 = b.parse().map_err(|e| format!("seeds {s:?}: {e}"))?;
    Ok(a..b)
}

fn report(s: &crash::Summary, start: Instant) -> ExitCode {
    println!(
        "{} seeds, {} crash points (drop {}, subset {}, tear {}; mlog=ino {}, mlog=thread {}) in {:.1} s: {} failures",
        s.seeds,
        s.cases,
        s.per_mode[0],
        s.per_mode[1],
        s.per_mode[2],
        s.per_map[0],
        s.per_map[1],
        start.elapsed().as_secs_f64(),
        s.failures.len()
    );
    if s.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every gc=device case of one seed; prints each failure with its replay command. True if
/// all passed.
fn run_device_seed(seed: u64, random: u64) -> Result<bool, String> {
    let t = Instant::now();
    let (ok, failed) = device_gc::run_seed(seed, random)?;
    for (c, o) in &ok {
        println!(
            "ok: {} (re-sent upcalls applied {} skipped {})",
            c.replay_command(),
            o.reapplied,
            o.skipped
        );
    }
    for (c, e) in &failed {
        println!("FAILED: {}\n  {e}", c.replay_command());
    }
    let reapplied: u64 = ok.iter().map(|(_, o)| o.reapplied).sum();
    println!(
        "gc=device seed {seed}: {} crash points in {:.1} s ({} re-sent upcalls applied after the cuts): {} failures",
        ok.len() + failed.len(),
        t.elapsed().as_secs_f64(),
        reapplied,
        failed.len()
    );
    Ok(failed.is_empty())
}

/// Every gc=none case of the seeds; prints each failure with its replay command.
fn run_none_seeds(
    seeds: std::ops::Range<u64>,
    random: u64,
    threads: usize,
    max_failures: usize,
) -> bool {
    let t = Instant::now();
    let s = gc_none::run_seeds(seeds, random, threads, max_failures, true);
    let kinds: Vec<String> = gc_none::KINDS
        .iter()
        .zip(s.per_kind)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "gc=none: {} seeds, {} crash points ({}) in {:.1} s, {} blocks re-issued from discard logs: {} failures",
        s.seeds,
        s.cases,
        kinds.join(", "),
        t.elapsed().as_secs_f64(),
        s.reissued_blocks,
        s.failures.len()
    );
    s.failures.is_empty()
}

fn main() -> ExitCode {
    match real_main() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flashlog-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode, String> {
    let cli = Cli::parse();
    let start = Instant::now();
    let threads = |t: Option<usize>| {
        t.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
    };
    match cli.cmd {
        Cmd::Run {
            seeds: s,
            mode,
            cuts,
            threads: t,
            max_failures,
            policies: p,
            mlogs,
            mlog_map,
            inode_cache,
        } => {
            let mut pols = policies(&p)?;
            let device = pols.contains(&GcPolicy::Device);
            let none = pols.contains(&GcPolicy::None);
            pols.retain(|p| *p != GcPolicy::Device && *p != GcPolicy::None);
            let range = seeds(&s)?;
            // gc=device runs on an emulated SSD (seconds per case): the first seed of the
            // range, every case of it.
            let mut device_failed = false;
            if device {
                device_failed = !run_device_seed(range.start, cuts)?;
            }
            // gc=none too (under a second per case): every seed of the range with only
            // none; with other policies, the first seed.
            if none {
                let r = if pols.is_empty() && !device {
                    range.clone()
                } else {
                    range.start..range.start + 1
                };
                device_failed |= !run_none_seeds(r, cuts, threads(t), max_failures);
            }
            if pols.is_empty() {
                return Ok(if device_failed {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                });
            }
            let o = RunOptions {
                seeds: range,
                modes: modes(&mode)?,
                policies: pols,
                mlogs: mlog_counts(&mlogs)?,
                mlog_maps: mlog_maps(&mlog_map)?,
                inode_caches: inode_caches(&inode_cache)?,
                cuts_per_mode: cuts,
                threads: threads(t),
                max_failures,
                progress_every: 100,
            };
            let code = report(&crash::run_sampled(&o), start);
            Ok(if device_failed {
                ExitCode::FAILURE
            } else {
                code
            })
        }
        Cmd::Device {
            seed,
            cut,
            landed,
            random,
        } => match cut {
            None => Ok(if run_device_seed(seed, random)? {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }),
            Some(cut) => {
                let c = device_gc::DeviceCase { seed, cut, landed };
                match device_gc::run_case(&c) {
                    Ok(o) => {
                        println!(
                            "ok: {} (cut {}, re-sent upcalls applied {} skipped {})",
                            c.replay_command(),
                            o.cut,
                            o.reapplied,
                            o.skipped
                        );
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(e) => {
                        println!("FAILED: {}\n  {e}", c.replay_command());
                        Ok(ExitCode::FAILURE)
                    }
                }
            }
        },
        Cmd::None {
            seed,
            seeds: range,
            cut,
            landed,
            recut,
            random,
            threads: t,
            max_failures,
        } => match cut {
            None => {
                let r = match range {
                    Some(r) => seeds(&r)?,
                    None => seed..seed + 1,
                };
                Ok(if run_none_seeds(r, random, threads(t), max_failures) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            Some(cut) => {
                let c = gc_none::NoneCase {
                    seed,
                    cut,
                    landed,
                    recut,
                };
                match gc_none::run_case(&c) {
                    Ok(o) => {
                        println!(
                            "ok: {} (cut {}, second cut {}, re-issued {} blocks, {} dead blocks mapped and queued after the remount)",
                            c.replay_command(),
                            o.cut,
                            o.recut,
                            o.reissued,
                            o.mapped_dead
                        );
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(e) => {
                        println!("FAILED: {}\n  - {e}", c.replay_command());
                        Ok(ExitCode::FAILURE)
                    }
                }
            }
        },
        Cmd::Replay {
            seed,
            mode,
            cut,
            partial,
            policy,
            mlogs,
            mlog_map,
            inode_cache,
            recut,
        } => {
            mlog_counts(&mlogs.to_string())?;
            let case = Case {
                seed,
                mode: parse_mode(&mode)?,
                cut,
                partial,
                policy,
                mlogs,
                mlog_map,
                inode_cache,
                recut,
            };
            match crash::run_case(&case) {
                Ok(()) => {
                    println!("ok: {}", case.replay_command());
                    Ok(ExitCode::SUCCESS)
                }
                Err(f) => {
                    eprintln!("{f}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Cmd::Exhaustive {
            seed,
            count,
            mode,
            threads: t,
            mlogs,
            mlog_map,
            inode_cache,
        } => {
            let o = RunOptions {
                seeds: seed..seed + count,
                modes: modes(&mode)?,
                mlogs: mlog_counts(&mlogs)?,
                mlog_maps: mlog_maps(&mlog_map)?,
                inode_caches: inode_caches(&inode_cache)?,
                threads: threads(t),
                ..Default::default()
            };
            Ok(report(&crash::run_exhaustive(&o), start))
        }
        Cmd::Trace {
            seed,
            policy,
            mlogs,
            mlog_map,
            inode_cache,
        } => match crash::trace_script_map(
            crash::Script::Seed(seed),
            policy,
            mlogs,
            crash::MountKind {
                map: mlog_map,
                inode_cache,
            },
        ) {
            Ok(t) => {
                for (i, o) in t.log.iter().enumerate() {
                    println!("op {i:3}: {o}");
                }
                for (i, r) in t.ops.iter().enumerate() {
                    println!("request {i:4}: {r:?}");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(f) => {
                eprintln!("{f}");
                Ok(ExitCode::FAILURE)
            }
        },
        Cmd::Fault {
            seed,
            kind,
            at,
            policy,
        } => {
            let kind = FaultKind::parse(&kind)?;
            if kind == FaultKind::PanicOnWrite {
                return Ok(match fault::run_background_panic(policy) {
                    Ok(()) => {
                        println!("ok: a panicking checkpoint thread poisons the mount");
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("background panic check FAILED: {e}");
                        ExitCode::FAILURE
                    }
                });
            }
            let points: Box<dyn Iterator<Item = u64>> = match at {
                Some(a) => Box::new(std::iter::once(a)),
                None => Box::new(0..),
            };
            let (mut ran, mut failed) = (0u64, 0u64);
            if policy == GcPolicy::None {
                // gc=none runs on the emulated interval SSD (gc_none's workload and checks).
                for a in points {
                    match gc_none::run_fault(seed, kind, a) {
                        Ok(false) => break,
                        Ok(true) => ran += 1,
                        Err(e) => {
                            eprintln!("fault case FAILED: {e}");
                            ran += 1;
                            failed += 1;
                        }
                    }
                }
                println!(
                    "{ran} {} faults injected for seed {seed} (gc=none): {failed} failures",
                    kind.name()
                );
                return Ok(if failed == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            for a in points {
                match fault::run_fault(seed, kind, a, policy) {
                    Ok(o) if !o.fired => break,
                    Ok(_) => ran += 1,
                    Err(f) => {
                        eprintln!("{f}");
                        ran += 1;
                        failed += 1;
                    }
                }
            }
            println!(
                "{ran} {} faults injected for seed {seed}: {failed} failures",
                kind.name()
            );
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Cmd::Corpus { out } => {
            let n = flashlog_sim::image::write_corpora(&out).map_err(|e| e.to_string())?;
            println!("wrote {n} seed files under {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
