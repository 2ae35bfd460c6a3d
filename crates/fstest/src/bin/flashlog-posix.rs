//! `flashlog-posix DIR`: runs the POSIX conformance suite against DIR.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flashlog_fstest::posix;

/// POSIX conformance suite for a mounted directory (pjdfstest-like).
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Directory to test in (a private subdirectory is created and removed).
    dir: Option<PathBuf>,
    /// Run only cases whose name contains SUBSTR (repeatable).
    #[arg(long, value_name = "SUBSTR")]
    filter: Vec<String>,
    /// List the case names (after filtering) and exit.
    #[arg(long)]
    list: bool,
    /// Unprivileged uid for permission cases (uid + 1 is used as "other").
    #[arg(long, default_value_t = 65534)]
    uid: u32,
    /// Unprivileged gid for permission cases.
    #[arg(long, default_value_t = 65534)]
    gid: u32,
    /// Keep the case directories instead of removing them.
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for c in posix::selected(&args.filter) {
            println!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    let Some(dir) = args.dir else {
        eprintln!("flashlog-posix: DIR is required (or use --list)");
        return ExitCode::from(2);
    };
    let opts = posix::RunOpts {
        dir,
        filters: args.filter,
        uid: args.uid,
        gid: args.gid,
        keep: args.keep,
    };
    match posix::run(&opts) {
        Ok(sum) if sum.fail == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("flashlog-posix: {e:#}");
            ExitCode::from(2)
        }
    }
}
