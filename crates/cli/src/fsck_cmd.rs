//! `flashlog fsck`: run the core's checker and exit with the fsck(8) code.

use crate::device;
use flashlog_core::fsck::Severity;
use std::path::PathBuf;
use std::process::ExitCode;

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

fn check(a: &Args) -> anyhow::Result<ExitCode> {
    let dev = device::open(&a.target, true)?;
    // A volume that is not Flashlog at all is an operational error, not a finding.
    flashlog_core::checkpoint::read_superblock(&*dev).map_err(|e| device::explain(&a.target, e))?;
    let report = flashlog_core::fsck(&*dev).map_err(|e| device::explain(&a.target, e))?;
    let code = report.exit_code();
    if a.json {
        let mut v = serde_json::to_value(&report)?;
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
