//! `flashlog inspect`: the superblock, the newest valid checkpoint and a segment-usage
//! summary, read straight from the device (the state as of the last checkpoint).
//!
//! Reads only: it never writes, and decodes everything through flashlog_format (hostile
//! bytes give an error, never a panic).

use crate::device;
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
    let lock = device::try_lock_now(&a.target);
    let mounted = lock.is_none();
    let dev = device::open(&a.target, true)?;
    let sb = read_superblock(&*dev).map_err(|e| device::explain(&a.target, e))?;
    let ck = read_checkpoint(&*dev, &sb.geo).map_err(|e| device::explain(&a.target, e))?;
    let u = segment_usage(&*dev, &sb, &ck)?;
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
        "target": a.target.display().to_string(),
        "mounted": mounted,
        "superblock": {
            "label": sb.label, "uuid": hex(&sb.uuid), "created_unix": sb.created_unix, "features": sb.features,
            "block_size": BLOCK_SIZE, "block_count": g.block_count, "segments_per_section": g.segs_per_sec,
            "checkpoint_addr": g.cp_addr, "checkpoint_pack_blocks": g.cp_pack_blocks,
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
        "segment_usage": {
            "segments": g.main_segments, "free": u.free, "partial": u.partial, "full": u.full,
            "valid_blocks": u.valid_blocks, "histogram_valid_blocks": hist,
        },
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if mounted {
        println!(
            "note: {} is mounted; this shows its last checkpoint\n",
            a.target.display()
        );
    }
    println!("Superblock");
    println!(
        "  label {:?}, uuid {}, created {} (unix)",
        sb.label,
        hex(&sb.uuid),
        sb.created_unix
    );
    println!(
        "  {} blocks of {} bytes ({:.1} MiB); user space {:.1} MiB",
        g.block_count,
        BLOCK_SIZE,
        mib(g.block_count),
        mib(g.user_blocks)
    );
    println!(
        "  checkpoint @{} (2 x {}), SIT @{} (2 x {}), NAT @{} (2 x {}, {} nids), SSA @{} (2 x {})",
        g.cp_addr,
        g.cp_pack_blocks,
        g.sit_addr,
        g.sit_blocks,
        g.nat_addr,
        g.nat_blocks,
        g.max_nid,
        g.ssa_addr,
        g.ssa_blocks
    );
    println!(
        "  main @{}: {} segments of {} blocks, {} per section; {} reserved, {} overprovision",
        g.main_addr,
        g.main_segments,
        BLOCKS_PER_SEG,
        g.segs_per_sec,
        g.reserved_segments,
        g.ovp_segments
    );
    println!(
        "  {} log heads ({} mlogs), features {:#x}",
        g.log_heads, g.mlogs, sb.features
    );
    println!("Checkpoint");
    println!(
        "  version {}, flags [{}], volume age {} s, written at {} (unix)",
        ck.version,
        flag_names(ck.flags).join(" "),
        ck.elapsed_secs,
        ck.wall_unix
    );
    println!(
        "  valid: {} blocks ({:.1} MiB), {} nodes, {} inodes; {} free segments; {} orphans",
        ck.valid_blocks,
        mib(ck.valid_blocks),
        ck.valid_nodes,
        ck.valid_inodes,
        ck.free_segments,
        ck.orphans.len()
    );
    println!("  log heads:  kind  temp  mlog  segment  offset  next");
    for h in &ck.heads {
        println!(
            "              {:<5} {:<5} {:>4}  {:>7}  {:>6}  {:>4}",
            format!("{:?}", h.kind).to_lowercase(),
            format!("{:?}", h.temp).to_lowercase(),
            h.mlog,
            h.seg,
            h.blkoff,
            h.next_seg
        );
    }
    println!("Segment usage ({} segments: {} free, {} partial, {} full; {} valid blocks, {:.1}% of main)", g.main_segments, u.free, u.partial, u.full, u.valid_blocks, 100.0 * u.valid_blocks as f64 / g.main_blocks().max(1) as f64);
    let max = u.histogram.iter().copied().max().unwrap_or(1).max(1);
    println!("  valid blocks   segments");
    for (i, n) in u.histogram.iter().enumerate() {
        let bar = "#".repeat(((n * 40).div_ceil(max)) as usize);
        println!("  {:>12}   {:>8}  {bar}", bucket_label(i), n);
    }
    Ok(ExitCode::SUCCESS)
}
