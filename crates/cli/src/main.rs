//! `flashlog`: the command line of the Flashlog file system.
//!
//! Owns: argument parsing and the process (exit codes, logging, daemonizing, signals). One
//! subcommand per module; adding a subcommand is one `Command` variant plus its module.
//! Invoked as `mount.flashlog` or `mount.fuse.flashlog` (symlinks installed by
//! scripts/setup.sh), the binary is the mount(8) helper for `mount -t fuse.flashlog` and
//! fstab lines.
//!
//! Exit codes: 0 success; 1 an error (the message says what to do); 2 bad usage (clap);
//! `fsck` exits with the fsck(8) codes (0 clean, 4 errors left, 8 could not run).

/// mimalloc instead of glibc's malloc, for the mount daemon and the in-process bench alike.
/// The file system allocates and frees a 4 KiB page per cached page and the emulator 1 MiB
/// store chunks; with glibc those came back as page faults and `memset`s (its heap trims,
/// and its mmap threshold rises after the first free, so `calloc` zeroes by hand):
/// sequential fill in `flashlog bench sustained` 1,433-1,495 -> 1,624-1,635 MiB/s for
/// `f2fs`, 1,319-1,400 -> 1,716-1,763 for `none`, peak RSS 1.9-2.0 -> 1.2 GiB, random-write
/// throughput unchanged (docs/BENCHMARKS.md, 2026-11-25).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod device;
mod fsck_cmd;
mod inspect;
mod mkfs;
mod mount;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "flashlog",
    version,
    about = "Flashlog, a log-structured file system for flash (F2FS lineage)",
    long_about = "Flashlog, a log-structured file system for flash (F2FS lineage).\n\n\
        Typical use:\n  \
        flashlog mkfs --size 1G disk.img      # make a volume in an image file\n  \
        flashlog mount --daemon disk.img /mnt # mount it (FUSE); `umount /mnt` unmounts\n  \
        flashlog fsck disk.img                # check it (while unmounted)\n  \
        flashlog inspect disk.img             # superblock, checkpoint, segment usage\n\n\
        Also installed as mount.fuse.flashlog, so `mount -t fuse.flashlog disk.img /mnt` and fstab lines work.\n\
        Set RUST_LOG=debug for more log output."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Make a new Flashlog volume on an image file or block device.
    Mkfs(mkfs::Args),
    /// Check a volume for consistency (exit 0 clean, 4 errors found, 8 could not check).
    Fsck(fsck_cmd::Args),
    /// Mount a volume with FUSE (foreground unless --daemon).
    Mount(mount::Args),
    /// Show the superblock, the newest checkpoint and segment usage.
    Inspect(inspect::Args),
    /// Run a synthetic workload against the built-in flash SSD emulator alone.
    Ssd(flashlog_ssd::SsdArgs),
    /// Run the papers' experiments (sustained, fxmark, filebench, ycsb, fio) per GC policy,
    /// side by side, with a table, JSON and plots.
    Bench(flashlog_bench::BenchArgs),
}

/// Log to stderr; RUST_LOG overrides the default level.
pub(crate) fn init_logging(default: &str, ansi: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_env_filter(filter)
        .try_init();
}

/// Keep freed heap memory instead of handing it back to the kernel after every burst.
/// The page cache and log buffers free and allocate 4 KiB pages and 256 KiB buffers at
/// device speed; with glibc's defaults the heap top is trimmed and regrown, and every
/// regrowth page-faults and zeroes memory (7 % of a sequential fill's CPU profile). With
/// these settings the in-process sequential fill of `flashlog bench sustained` went from
/// 69-74 % to 81-90 % of the raw device (three runs each, alternated). Memory the process once used stays mapped: bounded by the
/// dirty-page cap and the log buffers in flight.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("mount.flashlog") || name.starts_with("mount.fuse.flashlog") {
        return report(mount::helper_main(std::env::args().skip(1).collect()));
    }
    let cli = Cli::parse();
    match cli.cmd {
        Command::Mkfs(a) => {
            init_logging("warn", false);
            report(mkfs::run(a))
        }
        Command::Fsck(a) => {
            init_logging("warn", false);
            end_quietly_on_a_closed_stdout();
            fsck_cmd::run(a)
        }
        Command::Mount(a) => report(mount::run(a)),
        Command::Inspect(a) => {
            init_logging("warn", false);
            end_quietly_on_a_closed_stdout();
            report(inspect::run(a))
        }
        Command::Bench(a) => {
            init_logging("warn", false);
            report(flashlog_bench::run(&a).map(|()| ExitCode::SUCCESS))
        }
        Command::Ssd(a) => {
            init_logging("warn", false);
            end_quietly_on_a_closed_stdout();
            report(flashlog_ssd::run(&a).map(|()| ExitCode::SUCCESS))
        }
    }
}

/// For the commands that only read and print (fsck, inspect, ssd): a reader that goes
/// away (`flashlog inspect IMG | head`) ends the process as SIGPIPE ends other Unix tools,
/// instead of a panic in `println!` (Rust ignores SIGPIPE). Not for mount, whose daemon
/// must outlive a closed stdout, nor mkfs, which prints only once its volume is made.
fn end_quietly_on_a_closed_stdout() {
    // SAFETY: installs the default disposition, no handler code runs.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
}

/// Print an error the way every subcommand does, and pick the exit code.
fn report(r: anyhow::Result<ExitCode>) -> ExitCode {
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("flashlog: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
