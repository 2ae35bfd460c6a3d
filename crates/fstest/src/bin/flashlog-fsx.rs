//! `flashlog-fsx DIR --seed S --ops N`: fsx-style randomized file checker.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flashlog_fstest::fsx::{self, FsxOpts};

/// Random read/write/truncate/fallocate/mmap ops on one file, checked
/// against an in-memory shadow copy.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Directory in which the test file is created (and removed on success).
    dir: PathBuf,
    /// Seed of the op sequence (the same seed gives the same ops).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of operations.
    #[arg(long, default_value_t = 10_000)]
    ops: u64,
    /// Maximum file size in bytes.
    #[arg(long, default_value_t = 256 * 1024)]
    file_size: u64,
    /// Maximum length of one read/write/fallocate in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    max_len: u64,
    /// Do not use mmap reads/writes (they are generated but skipped).
    #[arg(long)]
    no_mmap: bool,
    /// Print every op.
    #[arg(long, short)]
    verbose: bool,
    /// Number of op log lines printed on failure.
    #[arg(long, default_value_t = 40)]
    log_tail: usize,
    /// Self-test of the checker: corrupt the file after op N (must fail).
    #[arg(long, hide = true, value_name = "N")]
    corrupt_after: Option<u64>,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let opts = FsxOpts {
        dir: a.dir,
        seed: a.seed,
        ops: a.ops,
        file_size: a.file_size,
        max_len: a.max_len,
        no_mmap: a.no_mmap,
        verbose: a.verbose,
        log_tail: a.log_tail,
        corrupt_after: a.corrupt_after,
    };
    let started = std::time::Instant::now();
    match fsx::run(&opts) {
        Ok(Ok(stats)) => {
            let done: Vec<String> = stats.done.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!(
                "fsx: seed {} passed {} ops in {:.1}s, final size {}",
                opts.seed,
                opts.ops,
                started.elapsed().as_secs_f64(),
                stats.final_size
            );
            println!("  done: {}", done.join(" "));
            if !stats.skipped.is_empty() {
                let sk: Vec<String> = stats
                    .skipped
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                println!("  skipped: {}", sk.join(" "));
            }
            ExitCode::SUCCESS
        }
        Ok(Err(failure)) => {
            eprint!("{}", failure.message);
            println!("fsx: seed {} FAILED (see stderr)", opts.seed);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("flashlog-fsx: {e:#}");
            ExitCode::from(2)
        }
    }
}
