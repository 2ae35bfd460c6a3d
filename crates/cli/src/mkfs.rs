//! `flashlog mkfs`: lay out a new volume, creating or resizing an image file on request.

use crate::device;
use anyhow::{bail, Context, Result};
use flashlog_core::{Fs, MkfsOptions};
use flashlog_dev::{BlockDevice, FileDevice};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  flashlog mkfs --size 1G disk.img\n  flashlog mkfs --force --label data /dev/nvme0n1p3"
)]
pub struct Args {
    /// Image file or block device. A missing image file is created when --size is given.
    target: PathBuf,
    /// Size of the image file: create it, or resize an existing one (e.g. 64M, 512MiB, 1G;
    /// at least 64M). Not for block devices.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Overwrite an existing file system (Flashlog or another one).
    #[arg(long, short = 'f')]
    force: bool,
    /// Volume label (up to 64 bytes).
    #[arg(long, short = 'l', default_value = "")]
    label: String,
    /// Segments (2 MiB each) per section, the unit of cleaning.
    #[arg(long, default_value_t = 1, value_name = "N")]
    segs_per_sec: u32,
    /// Independent log partitions (Max mlogs: 6 log heads and a part of the free sections
    /// each), 1 to 32, or `auto`: one per core, as many as the volume affords (each costs
    /// about 10 sections of overprovision; at most 10 % of the user space in all).
    #[arg(long, default_value = "auto", value_name = "N|auto")]
    mlogs: String,
}

pub fn run(a: Args) -> Result<ExitCode> {
    if a.label.len() > flashlog_format::sb::LABEL_LEN {
        bail!(
            "label is {} bytes; the limit is {}",
            a.label.len(),
            flashlog_format::sb::LABEL_LEN
        );
    }
    let mlogs_of = |blocks: u64| -> Result<u32> {
        match a.mlogs.as_str() {
            "auto" => Ok(flashlog_core::config::auto_mlogs(
                blocks,
                a.segs_per_sec,
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )),
            n => n
                .parse::<u32>()
                .map_err(|_| anyhow::anyhow!("--mlogs {n:?}: expected a number or auto")),
        }
    };
    let exists = a.target.exists();
    let mut created = None;
    let dev = if let Some(size) = &a.size {
        let bytes = flashlog_fuse::parse_size(size).map_err(anyhow::Error::msg)?;
        if bytes < flashlog_format::sb::MIN_VOLUME_BYTES {
            bail!("--size {size} is too small: a volume needs at least 64M");
        }
        // Every option is checked before the file is created or resized: a typo must not
        // truncate an existing file or leave a new one behind. An image file is a
        // conventional device: its layout is `Geometry::compute`'s, as `Fs::mkfs` will
        // find it.
        let blocks = bytes / flashlog_format::BLOCK_SIZE as u64;
        flashlog_format::sb::Geometry::compute(blocks, a.segs_per_sec, mlogs_of(blocks)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.target.display()))?;
        if exists {
            device::check_target(&a.target)?;
            let md = std::fs::metadata(&a.target)?;
            if !md.file_type().is_file() {
                bail!(
                    "--size only applies to image files; {} is a block device (leave --size out)",
                    a.target.display()
                );
            }
            // The device holds the volume's lock from here to the end of mkfs.
            let mut dev = device::open_device(&a.target, false)?;
            if !a.force && dev.capabilities().block_count > 0 {
                // Refuse before resizing, so that a volume is never truncated by mistake.
                if let Some(sig) = flashlog_core::checkpoint::detect_signature(&dev)
                    .map_err(|e| device::explain(&a.target, e))?
                {
                    bail!(
                        "{} already holds a {sig} file system; add --force to overwrite it",
                        a.target.display()
                    );
                }
            }
            dev.set_len(bytes)
                .with_context(|| format!("cannot resize {}", a.target.display()))?;
            Arc::new(dev)
        } else {
            created = Some(RemoveOnError(&a.target));
            Arc::new(
                FileDevice::create(&a.target, bytes)
                    .with_context(|| format!("cannot create {}", a.target.display()))?,
            )
        }
    } else if !exists {
        bail!(
            "{} does not exist; add --size SIZE (e.g. --size 1G) to create an image file",
            a.target.display()
        );
    } else {
        device::open(&a.target, false)?
    };
    let mlogs = mlogs_of(dev.capabilities().block_count)?;
    let opts = MkfsOptions {
        label: a.label,
        segs_per_sec: a.segs_per_sec,
        mlogs,
        force: a.force,
        ..Default::default()
    };
    let report = Fs::mkfs(dev, &opts).map_err(|e| match e {
        flashlog_core::Error::Invalid(why) => anyhow::anyhow!("{}: {why}", a.target.display()),
        e => device::explain(&a.target, e),
    })?;
    // The volume is made: nothing after this removes it. A reader that went away (`mkfs
    // ... | head -1`) panicked `println!`, and the unwinding guard removed the new image.
    if let Some(c) = created {
        std::mem::forget(c);
    }
    let _ = writeln!(std::io::stdout(), "{report}");
    Ok(ExitCode::SUCCESS)
}

/// Armed while mkfs works on an image file it created: any error return removes the file,
/// so a refused mkfs leaves nothing behind. Forgotten once the volume is made.
struct RemoveOnError<'a>(&'a std::path::Path);

impl Drop for RemoveOnError<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}
