//! `flashlog fsck`: run the core's checker and exit with the fsck(8) code.

use crate::device;
use flashlog_core::fsck::Severity;
use flashlog_core::FsckStep;
use flashlog_dev::BlockDevice;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// fsck(8): "operational error" — the check could not run.
const EXIT_OPERATIONAL: u8 = 8;

#[derive(clap::Args)]
pub struct Args {
    /// Image file or block device (unmounted).
    target: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Only print problems (and nothing when the volume is clean).
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Show progress on stderr (the default when stderr is a terminal and --quiet is not
    /// given): each step with what it has done of what it has to do.
    #[arg(long)]
    progress: bool,
}

/// Progress on stderr: on a terminal one line rewritten at most every 200 ms; otherwise a
/// line when a step starts and ends, and every 5 s between.
struct ProgressLine {
    tty: bool,
    last: Option<(FsckStep, u64, Instant)>,
}

impl ProgressLine {
    fn show(&mut self, step: FsckStep, done: u64, total: u64) {
        let now = Instant::now();
        let gap = Duration::from_millis(if self.tty { 200 } else { 5000 });
        if self.last.is_some_and(|(s, d, _)| s == step && d == done) {
            return; // told twice (a step's end)
        }
        let edge = done >= total || self.last.is_none_or(|(s, _, _)| s != step);
        if !edge
            && self
                .last
                .is_some_and(|(_, _, t)| now.duration_since(t) < gap)
        {
            return;
        }
        let (what, unit) = step.describe();
        let pct = (done * 100).checked_div(total).unwrap_or(100).min(100);
        let line = format!("flashlog fsck: {what}: {done} of {total} {unit} ({pct} %)");
        if self.tty {
            eprint!("\r\x1b[K{line}");
        } else {
            eprintln!("{line}");
        }
        self.last = Some((step, done, now));
    }

    /// Clear a terminal's line before the report.
    fn finish(&self) {
        if self.tty && self.last.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

pub fn run(a: Args) -> ExitCode {
    match check(&a) {
        Ok(code) => code,
        Err(e) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({ "error": format!("{e:#}"), "exit_code": EXIT_OPERATIONAL })
                );
            }
            eprintln!("flashlog fsck: cannot check {}: {e:#}", a.target.display());
            ExitCode::from(EXIT_OPERATIONAL)
        }
    }
}

/// A volume that was not unmounted cleanly (its daemon was killed, or power was cut): its
/// newest checkpoint lacks the umount flag, or data was fsync'd past it (a crash before the
/// mount's first checkpoint leaves mkfs's or the last unmount's checkpoint, with the flag).
/// Its next read-write mount rolls forward what was fsync'd after the checkpoint and writes
/// a new one.
pub(crate) struct Unclean {
    /// Whether the newest checkpoint carries the umount flag.
    pub flagged_clean: bool,
    /// Whether fsync'd data past the checkpoint awaits roll-forward recovery: found by
    /// walking the fsync chains as roll-forward does (`recovery::fsync_pending`, reads
    /// only); `None` if a chain could not be read.
    pub roll_forward: Option<bool>,
}

impl Unclean {
    /// `None` for a cleanly unmounted volume. Reads the volume's chains, so only for a
    /// volume nobody has mounted.
    pub fn of(
        dev: &dyn BlockDevice,
        geo: &flashlog_format::sb::Geometry,
        ck: &flashlog_format::cp::Checkpoint,
    ) -> Option<Unclean> {
        let flagged_clean = ck.flags & flashlog_format::cp::flags::UMOUNT != 0;
        // The chains alone, as roll-forward walks them (a read-only mount did this, and
        // held the volume's tables for it: 1.1 GiB for 4 TiB, seven times fsck's own).
        let roll_forward = flashlog_core::recovery::fsync_pending(dev, geo, ck).ok();
        if flagged_clean && roll_forward != Some(true) {
            return None;
        }
        Some(Unclean {
            flagged_clean,
            roll_forward,
        })
    }

    /// One line for people.
    pub fn note(&self) -> String {
        let head = if self.flagged_clean {
            "the volume was not unmounted cleanly (it was mounted again after its newest checkpoint, which has the umount flag, and not unmounted)"
        } else {
            "the volume was not unmounted cleanly (its newest checkpoint lacks the umount flag)"
        };
        match self.roll_forward {
            Some(true) => format!("{head}; data fsync'd after that checkpoint awaits roll-forward recovery: its next read-write mount recovers it (a read-only mount is refused until then)"),
            Some(false) => format!("{head}; nothing fsync'd after that checkpoint awaits recovery (what was written after it and not fsync'd is lost); its next read-write mount writes a new checkpoint"),
            None => format!("{head}; its next read-write mount recovers what was fsync'd after that checkpoint"),
        }
    }
}

fn check(a: &Args) -> anyhow::Result<ExitCode> {
    let dev = device::open(&a.target, true)?;
    // A volume that is not Flashlog at all is an operational error, not a finding.
    let sb = flashlog_core::checkpoint::read_superblock(&*dev)
        .map_err(|e| device::explain(&a.target, e))?;
    let tty = std::io::stderr().is_terminal();
    let mut line = (a.progress || (tty && !a.quiet)).then_some(ProgressLine { tty, last: None });
    let report = flashlog_core::fsck_with_progress(&*dev, &mut |step, done, total| {
        if let Some(l) = line.as_mut() {
            l.show(step, done, total);
        }
    });
    if let Some(l) = &line {
        l.finish();
    }
    let report = report.map_err(|e| match e {
        // The check could not start: "cannot check IMG: not enough memory: ...".
        flashlog_core::Error::NoMemory(_) => anyhow::anyhow!("{e}; {}", device::NO_MEMORY_HINT),
        e => device::explain(&a.target, e),
    })?;
    let code = report.exit_code();
    let ck = flashlog_core::checkpoint::read_checkpoint(&*dev, &sb.geo)
        .map_err(|e| device::explain(&a.target, e))?;
    let unclean = Unclean::of(&*dev, &sb.geo, &ck);
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["unmounted_cleanly"] = unclean.is_none().into();
        v["roll_forward_pending"] = match &unclean {
            None => false.into(),
            Some(u) => u.roll_forward.into(),
        };
        v["errors"] = report.errors().into();
        v["exit_code"] = code.into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for f in &report.findings {
            if a.quiet && f.severity != Severity::Error {
                continue;
            }
            let sev = match f.severity {
                Severity::Error => "ERROR",
                Severity::Warning => "warning",
            };
            println!("{sev}: {}: {}", f.area, f.message);
        }
        if let (Some(u), false) = (&unclean, a.quiet) {
            println!("note: {}", u.note());
        }
        if !a.quiet || !report.is_clean() {
            println!(
                "{}: {} (checkpoint {}, {} inodes: {} files, {} directories; {} data blocks, {} node blocks; {} errors, {} warnings)",
                a.target.display(),
                if report.is_clean() { "clean" } else { "ERRORS FOUND" },
                report.checkpoint_version,
                report.inodes,
                report.files,
                report.directories,
                report.data_blocks,
                report.node_blocks,
                report.errors(),
                report.findings.len() - report.errors(),
            );
        }
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
