//! `flashlog-stress DIR --procs P --seconds T --seed S`: multi-process
//! namespace and data stress with a final consistency check.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flashlog_fstest::stress::{self, StressOpts};

/// Forks P processes that race create/write/append/rename/link/unlink/
/// mkdir/rmdir/readdir/stat/truncate/fsync in shared directories, then
/// verifies names, link counts and file contents.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Directory in which the shared tree is created (removed on success).
    dir: PathBuf,
    /// Number of child processes.
    #[arg(long, default_value_t = 4)]
    procs: usize,
    /// Run time of the children in seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seed for the children's op choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Upper bound on the number of files.
    #[arg(long, default_value_t = 256)]
    max_files: usize,
    /// Upper bound on one file's size in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    max_file_size: usize,
    /// Keep the tree after the run.
    #[arg(long)]
    keep: bool,
    /// Self-test of the verifier: plant a corrupt record (must fail).
    #[arg(long, hide = true)]
    inject_corruption: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let opts = StressOpts {
        dir: a.dir,
        procs: a.procs,
        seconds: a.seconds,
        seed: a.seed,
        max_files: a.max_files,
        max_file_size: a.max_file_size,
        keep: a.keep,
        inject_corruption: a.inject_corruption,
    };
    let r = match stress::run(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("flashlog-stress: {e:#}");
            return ExitCode::from(2);
        }
    };
    println!(
        "stress: {} procs, {:.1}s, seed {}",
        opts.procs,
        r.elapsed.as_secs_f64(),
        opts.seed
    );
    let total: u64 = r.counts.ok.values().sum();
    println!("  successful ops: {total}");
    for (k, v) in &r.counts.ok {
        println!("    {k:<13} {v}");
    }
    let legal: u64 = r.counts.legal.values().sum();
    println!("  errors legal under concurrency: {legal}");
    for ((op, e), v) in &r.counts.legal {
        println!("    {op:<13} {e:<10} {v}");
    }
    let v = &r.verify;
    println!(
        "  verified: {} dirs, {} files ({} names), {} bytes: {} records, {} zero slots",
        v.dirs, v.files, v.names, v.bytes, v.records, v.zero_slots
    );
    for f in &r.counts.failures {
        println!("  UNEXPECTED: {f}");
    }
    for p in &r.child_problems {
        println!("  CHILD: {p}");
    }
    for p in &v.problems {
        println!("  INCONSISTENT: {p}");
    }
    if r.passed() {
        println!("stress: PASS");
        ExitCode::SUCCESS
    } else {
        println!(
            "stress: FAIL ({} unexpected errors, {} consistency problems)",
            r.counts.failures.len(),
            v.problems.len() + r.child_problems.len()
        );
        ExitCode::FAILURE
    }
}
