//! `flashlog inspect`: the superblock, the newest valid checkpoint and a segment-usage
//! summary, read straight from the device (the state as of the last checkpoint).
//!
//! Reads only: it never writes, and decodes everything through flashlog_format (hostile
//! bytes give an error, never a panic).

use crate::device;
use crate::fsck_cmd::Unclean;
use anyhow::{Context, Result};
use flashlog_core::checkpoint::{read_checkpoint, read_superblock};
use flashlog_dev::BlockDevice;
use flashlog_format::codec::{test_bit, zero_block};
use flashlog_format::cp::{flags, Checkpoint};
use flashlog_format::meta::{SitBlock, SIT_ENTRIES_PER_BLOCK};
use flashlog_format::sb::Superblock;
use flashlog_format::{BLOCKS_PER_SEG, BLOCK_SIZE};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Image file or block device.
    target: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Histogram buckets of valid blocks per segment: 0, 1-63, 64-127, ..., 448-511, 512.
const BUCKET_BLOCKS: u64 = 64;

#[derive(Default)]
struct Usage {
    free: u64,
    full: u64,
    partial: u64,
    valid_blocks: u64,
    /// [0] = empty, [1..=8] = by 64-block step, [9] = full.
    histogram: [u64; 10],
}

fn bucket_label(i: usize) -> String {
    match i {
        0 => "0".into(),
        9 => format!("{BLOCKS_PER_SEG}"),
        i => format!(
            "{}-{}",
            if i == 1 {
                1
            } else {
                (i as u64 - 1) * BUCKET_BLOCKS
            },
            i as u64 * BUCKET_BLOCKS - 1
        ),
    }
}

fn segment_usage(dev: &dyn BlockDevice, sb: &Superblock, ck: &Checkpoint) -> Result<Usage> {
    let g = &sb.geo;
    let mut u = Usage::default();
    let mut blk = zero_block();
    for i in 0..g.sit_blocks {
        let copy = test_bit(&ck.sit_bitmap, i as usize) as u8;
        dev.read(g.sit_block_addr(i, copy), &mut blk[..])
            .with_context(|| format!("reading SIT block {i}"))?;
        let sit = SitBlock::decode(&blk, i).with_context(|| format!("SIT block {i}"))?;
        for (j, e) in sit.entries.iter().enumerate() {
            let seg = i * SIT_ENTRIES_PER_BLOCK as u64 + j as u64;
            if seg >= g.main_segments {
                break;
            }
            let v = e.valid as u64;
            u.valid_blocks += v;
            let b = if v == 0 {
                u.free += 1;
                0
            } else if v >= BLOCKS_PER_SEG {
                u.full += 1;
                9
            } else {
                u.partial += 1;
                (v / BUCKET_BLOCKS + 1) as usize
            };
            u.histogram[b] += 1;
        }
    }
    Ok(u)
}

fn flag_names(f: u32) -> Vec<&'static str> {
    let mut v = Vec::new();
    if f & flags::UMOUNT != 0 {
        v.push("umount");
    }
    if f & flags::ORPHANS != 0 {
        v.push("orphans");
    }
    if f & flags::NEED_FSCK != 0 {
        v.push("need_fsck");
    }
    v
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn run(a: Args) -> Result<ExitCode> {
    let (dev, mounted) = device::open_to_peek(&a.target)?;
    let name = a.target.display().to_string();
    // Not mounted: whether a crash left fsync'd data to recover (a read-only mount finds
    // out; a mounted volume's checkpoint lacks the umount flag anyway).
    let probe = (!mounted).then(|| dev.clone() as Arc<dyn BlockDevice>);
    let text =
        render_with(&*dev, &name, mounted, a.json, probe).map_err(|e| match e
            .downcast::<flashlog_core::Error>()
        {
            Ok(e) => device::explain(&a.target, e),
            Err(e) => e,
        })?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// The report on `dev` (named `target`), as text or JSON.
pub fn render(dev: &dyn BlockDevice, target: &str, mounted: bool, json: bool) -> Result<String> {
    render_with(dev, target, mounted, json, None)
}

/// `render`; with `probe` (the same device, not mounted), a volume that was not unmounted
/// cleanly is said to be so, with whether fsync'd data awaits roll-forward recovery.
fn render_with(
    dev: &dyn BlockDevice,
    target: &str,
    mounted: bool,
    json: bool,
    probe: Option<Arc<dyn BlockDevice>>,
) -> Result<String> {
    use std::fmt::Write;
    let mut out = String::new();
    let sb = read_superblock(dev)?;
    let ck = read_checkpoint(dev, &sb.geo)?;
    let unclean = probe.and_then(|d| Unclean::of(&*d, &sb.geo, &ck));
    let u = segment_usage(dev, &sb, &ck)?;
    // IPLFS: no SIT to summarise; the live interval per log head (a walk of the tree, as
    // fsck does it: there is no reverse map) and the discard log instead.
    let iplfs = if sb.geo.infinite {
        Some(infinite_summary(dev, &ck)?)
    } else {
        None
    };
    let g = &sb.geo;
    let mib = |blocks: u64| blocks as f64 * BLOCK_SIZE as f64 / (1u64 << 20) as f64;
    let heads: Vec<_> = ck
        .heads
        .iter()
        .map(|h| json!({"kind": format!("{:?}", h.kind).to_lowercase(), "temp": format!("{:?}", h.temp).to_lowercase(), "mlog": h.mlog, "stream": h.stream, "segment": h.seg, "block_offset": h.blkoff, "next_segment": h.next_seg}))
        .collect();
    let hist: serde_json::Map<String, serde_json::Value> = u
        .histogram
        .iter()
        .enumerate()
        .map(|(i, n)| (bucket_label(i), json!(n)))
        .collect();
    let v = json!({
        "target": target,
        "mounted": mounted,
        "superblock": {
            "format_version": sb.version, "label": sb.label, "uuid": hex(&sb.uuid), "created_unix": sb.created_unix, "features": sb.features,
            "block_size": BLOCK_SIZE, "block_count": g.block_count, "segments_per_section": g.segs_per_sec,
            "checkpoint_addr": g.cp_addr, "checkpoint_pack_blocks": g.cp_pack_blocks, "orphan_slots": g.orphan_slots,
            "sit_addr": g.sit_addr, "sit_blocks": g.sit_blocks, "nat_addr": g.nat_addr, "nat_blocks": g.nat_blocks,
            "ssa_addr": g.ssa_addr, "ssa_blocks": g.ssa_blocks, "main_addr": g.main_addr, "main_segments": g.main_segments,
            "max_nid": g.max_nid, "reserved_segments": g.reserved_segments, "overprovision_segments": g.ovp_segments,
            "user_blocks": g.user_blocks, "log_heads": g.log_heads, "mlogs": g.mlogs,
        },
        "checkpoint": {
            "version": ck.version, "flags": flag_names(ck.flags), "elapsed_secs": ck.elapsed_secs, "wall_unix": ck.wall_unix,
            "valid_blocks": ck.valid_blocks, "valid_nodes": ck.valid_nodes, "valid_inodes": ck.valid_inodes,
            "free_segments": ck.free_segments, "orphans": ck.orphans.len(), "log_heads": heads,
        },
        // An infinite volume has no SIT: its usage is `infinite` (live intervals per head).
        "segment_usage": (!g.infinite).then(|| json!({
            "segments": g.main_segments, "free": u.free, "partial": u.partial, "full": u.full,
            "valid_blocks": u.valid_blocks, "histogram_valid_blocks": hist,
        })),
        "infinite": iplfs.as_ref().map(|s| s.json()),
        // Both null when not known (the volume is mounted).
        "unmounted_cleanly": (!mounted).then_some(unclean.is_none()),
        "roll_forward_pending": match &unclean {
            _ if mounted => None,
            None => Some(false),
            Some(u) => u.roll_forward,
        },
    });
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(out);
    }
    if mounted {
        writeln!(
            out,
            "note: {} is mounted; this shows its last checkpoint\n",
            target
        )?;
    }
    writeln!(out, "Superblock")?;
    writeln!(
        out,
        "  format version {}, label {:?}, uuid {}, created {} (unix)",
        sb.version,
        sb.label,
        hex(&sb.uuid),
        sb.created_unix
    )?;
    if g.infinite {
        // The whole 2^64-block space: block and segment counts in MiB would be noise.
        writeln!(
            out,
            "  an infinite logical space (2^64 blocks of {} bytes, gc=none); user space {:.1} MiB (the device's capacity less metadata and reserve)",
            BLOCK_SIZE,
            mib(g.user_blocks)
        )?;
    } else {
        writeln!(
            out,
            "  {} blocks of {} bytes ({:.1} MiB); user space {:.1} MiB",
            g.block_count,
            BLOCK_SIZE,
            mib(g.block_count),
            mib(g.user_blocks)
        )?;
    }
    writeln!(
        out,
        "  checkpoint @{} (2 x {}, {} orphan slots), SIT @{} (2 x {}), NAT @{} (2 x {}, {} nids), SSA @{} (2 x {})",
        g.cp_addr,
        g.cp_pack_blocks,
        g.orphan_slots,
        g.sit_addr,
        g.sit_blocks,
        g.nat_addr,
        g.nat_blocks,
        g.max_nid,
        g.ssa_addr,
        g.ssa_blocks
    )?;
    if g.infinite {
        writeln!(
            out,
            "  main @{:#x}: one region of 2^{} blocks per log head, never reused; {} segments of {} blocks reserved",
            g.main_addr,
            flashlog_format::sb::REGION_BLOCKS_LOG2,
            g.reserved_segments,
            BLOCKS_PER_SEG
        )?;
    } else {
        writeln!(
            out,
            "  main @{}: {} segments of {} blocks, {} per section; {} reserved, {} overprovision",
            g.main_addr,
            g.main_segments,
            BLOCKS_PER_SEG,
            g.segs_per_sec,
            g.reserved_segments,
            g.ovp_segments
        )?;
    }
    writeln!(
        out,
        "  {} log heads ({} mlogs), features {:#x}",
        g.log_heads, g.mlogs, sb.features
    )?;
    writeln!(out, "Checkpoint")?;
    writeln!(
        out,
        "  version {}, flags [{}], volume age {} s, written at {} (unix)",
        ck.version,
        flag_names(ck.flags).join(" "),
        ck.elapsed_secs,
        ck.wall_unix
    )?;
    if let Some(u) = &unclean {
        writeln!(out, "  note: {}", u.note())?;
    }
    writeln!(
        out,
        "  valid: {} blocks ({:.1} MiB), {} nodes, {} inodes; {} free segments; {} orphans",
        ck.valid_blocks,
        mib(ck.valid_blocks),
        ck.valid_nodes,
        ck.valid_inodes,
        ck.free_segments,
        ck.orphans.len()
    )?;
    // Segment numbers of an infinite volume's 2^56-block regions are unreadable as
    // decimals: there the head's block address says the same.
    writeln!(
        out,
        "  log heads:  kind  temp  mlog  {}",
        if g.infinite {
            "at block"
        } else {
            "segment  offset  next"
        }
    )?;
    for h in &ck.heads {
        let position = if g.infinite {
            format!("{:#x}", g.seg_start(h.seg) + u64::from(h.blkoff))
        } else {
            // Data heads reserve no next segment (`u64::MAX` on disk).
            let next = if h.next_seg == u64::MAX {
                "-".to_string()
            } else {
                h.next_seg.to_string()
            };
            format!("{:>7}  {:>6}  {next:>4}", h.seg, h.blkoff)
        };
        writeln!(
            out,
            "              {:<5} {:<5} {:>4}  {position}",
            format!("{:?}", h.kind).to_lowercase(),
            format!("{:?}", h.temp).to_lowercase(),
            h.mlog,
        )?;
    }
    if let Some(s) = &iplfs {
        s.print(&mut out)?;
        return Ok(out);
    }
    writeln!(out, "Segment usage ({} segments: {} free, {} partial, {} full; {} valid blocks, {:.1}% of main)", g.main_segments, u.free, u.partial, u.full, u.valid_blocks, 100.0 * u.valid_blocks as f64 / g.main_blocks().max(1) as f64)?;
    let max = u.histogram.iter().copied().max().unwrap_or(1).max(1);
    writeln!(out, "  valid blocks   segments")?;
    for (i, n) in u.histogram.iter().enumerate() {
        let bar = "#".repeat(((n * 40).div_ceil(max)) as usize);
        writeln!(out, "  {:>12}   {:>8}  {bar}", bucket_label(i), n)?;
    }
    Ok(out)
}

/// What inspect shows of an infinite (gc=none) volume.
struct Infinite {
    live_blocks: u64,
    intervals: Vec<flashlog_core::fsck::LiveInterval>,
    /// The discard log's commands (merged), from the checkpoint.
    discards: Vec<flashlog_core::discard::DiscardCmd>,
    log_bytes: usize,
}

/// Commands of the discard log listed one by one, at most.
const LOG_LISTED: usize = 16;

fn infinite_summary(dev: &dyn BlockDevice, ck: &Checkpoint) -> Result<Infinite> {
    let r = flashlog_core::fsck::fsck(dev)?;
    let discards = if ck.discard_log.is_empty() {
        Vec::new()
    } else {
        flashlog_core::discard::decode_log(&ck.discard_log, u64::MAX)?
    };
    Ok(Infinite {
        live_blocks: ck.live_blocks,
        intervals: r.live_intervals,
        discards,
        log_bytes: ck.discard_log.len(),
    })
}

impl Infinite {
    fn json(&self) -> serde_json::Value {
        json!({
            "live_blocks": self.live_blocks,
            "live_intervals": self.intervals,
            "discard_log": {
                "bytes": self.log_bytes,
                "commands": self.discards.len(),
                "blocks": self.discards.iter().map(|c| c.len).sum::<u64>(),
                "first": self.discards.iter().take(LOG_LISTED).map(|c| json!({"addr": c.addr, "len": c.len})).collect::<Vec<_>>(),
            },
        })
    }

    fn print(&self, out: &mut String) -> Result<()> {
        use std::fmt::Write;
        writeln!(
            out,
            "Infinite space (gc=none): {} live blocks",
            self.live_blocks
        )?;
        writeln!(
            out,
            "  head  region start         first live          last live           head at             live blocks"
        )?;
        let opt = |a: Option<u64>| a.map_or("-".to_string(), |a| format!("{a:#x}"));
        for v in &self.intervals {
            writeln!(
                out,
                "  {:>4}  {:<18}  {:<18}  {:<18}  {:<18}  {:>11}",
                v.head,
                format!("{:#x}", v.region_start),
                opt(v.first_live),
                opt(v.last_live),
                format!("{:#x}", v.head_at),
                v.live_blocks
            )?;
        }
        let blocks: u64 = self.discards.iter().map(|c| c.len).sum();
        writeln!(
            out,
            "Discard log: {} bytes, {} commands, {} blocks to discard",
            self.log_bytes,
            self.discards.len(),
            blocks
        )?;
        for c in self.discards.iter().take(LOG_LISTED) {
            writeln!(out, "  {:#x} +{}", c.addr, c.len)?;
        }
        if self.discards.len() > LOG_LISTED {
            writeln!(out, "  ... {} more", self.discards.len() - LOG_LISTED)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashlog_core::{Fs, MkfsOptions, MountOptions, ROOT_INO};
    use flashlog_ssd::{SsdConfig, SsdDevice, StoreKind};
    use std::sync::Arc;

    #[test]
    fn inspect_shows_the_live_interval_and_the_discard_log_of_a_gc_none_volume() {
        let mut c = SsdConfig::preset("970pro-like")
            .unwrap()
            .with_capacity(256 << 20)
            .unwrap();
        c.set("ftl", "interval").unwrap();
        c.store = StoreKind::Ram;
        let ssd = Arc::new(SsdDevice::new(c).unwrap());
        Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
        let opts = MountOptions {
            gc: "none".parse().unwrap(),
            cp_interval: None,
            gc_interval: None,
            ..MountOptions::default()
        };
        let fs = Fs::mount(ssd.clone(), opts).unwrap();
        let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        fs.write(f, 0, &vec![7u8; 2 << 20]).unwrap();
        fs.sync().unwrap();
        fs.write(f, 0, &vec![8u8; 2 << 20]).unwrap();
        fs.sync().unwrap();
        fs.abandon(); // the second checkpoint's discards stay in its log
        let text = render(&*ssd, "ssd", false, false).unwrap();
        assert!(text.contains("Infinite space (gc=none)"), "{text}");
        assert!(!text.contains("Segment usage"), "{text}");
        // The warm data head (index 1) lives in region 2.
        assert!(text.contains("0x200000000000000"), "{text}");
        let v: serde_json::Value =
            serde_json::from_str(&render(&*ssd, "ssd", false, true).unwrap()).unwrap();
        assert!(
            v["segment_usage"].is_null(),
            "no SIT, no segment usage: {v}"
        );
        let inf = &v["infinite"];
        assert!(
            inf["discard_log"]["blocks"].as_u64().unwrap() >= 512,
            "{inf}"
        );
        let warm = &inf["live_intervals"][1];
        assert_eq!(warm["live_blocks"].as_u64(), Some(512), "{inf}");
        assert!(warm["first_live"].as_u64().unwrap() >= 2 << 56);
    }
}
