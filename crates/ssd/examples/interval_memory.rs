//! Mapping memory of the IPLFS interval FTL over time, with and without map-node compaction,
//! against the page-mapping FTL of the same device and a flat map of the touched range.
//!
//! Workload (what an IPLFS volume sends the device): fill `util` of the logical capacity
//! sequentially, then for `passes` x capacity steps append one block at the log head and
//! discard one live block chosen uniformly (a 4 KiB random overwrite of a file: the new copy
//! is appended, the old one discarded). Live data stays constant; the interval slides. The
//! last column counts the map nodes in each layout.
//!
//! `cargo run --release -p flashlog-ssd --example interval_memory -- [capacity] [util]
//! [passes] [period] [preset]` (defaults: 1GiB 0.9 3 1s 970pro-like).

use flashlog_dev::{BlockDevice, BLOCK_SIZE};
use flashlog_ssd::{parse_duration_ns, parse_size, SsdConfig, SsdDevice, StoreKind};

use flashlog_ssd::workload::Rng;

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let capacity = parse_size(&arg(0, "1GiB"))?;
    let util: f64 = arg(1, "0.9").parse()?;
    let passes: f64 = arg(2, "3").parse()?;
    let period = arg(3, "1s");
    parse_duration_ns(&period)?;
    let preset = arg(4, "970pro-like");
    let page_cfg = SsdConfig::preset(&preset)?.with_capacity(capacity)?;
    let page_map_bytes = page_cfg.logical_blocks() * 4;
    println!(
        "# {preset} {capacity} B, util {util}, {passes} passes; page-mapping FTL map: {page_map_bytes} B"
    );
    println!("compaction\tpass\tdevice_s\tlive_blocks\ttree_bytes\tmap_node_bytes\tx_page_map_live\tx_page_ftl\tflat_touched_x\tnodes_compacted\tstall_ms\tgc_runs\tdense/regions/bitmap/list");
    for with in [true, false] {
        let mut cfg = page_cfg.clone();
        cfg.store = StoreKind::None;
        cfg.set_kv("ftl=interval")?;
        cfg.set_kv(&format!(
            "compaction_period={}",
            if with { period.as_str() } else { "0s" }
        ))?;
        let cap = cfg.logical_blocks();
        let dev = SsdDevice::new(cfg)?;
        let buf = vec![0u8; BLOCK_SIZE];
        let live_n = (cap as f64 * util) as u64;
        let mut live: Vec<u64> = (0..live_n).collect();
        let mut head = 0u64;
        let chunk = vec![0u8; 64 * BLOCK_SIZE];
        while head < live_n {
            let n = (live_n - head).min(64);
            dev.write(head, &chunk[..(n as usize) * BLOCK_SIZE])?;
            head += n;
        }
        let mut r = Rng(1);
        let steps = (passes * cap as f64) as u64;
        let report_every = (cap / 4).max(1);
        for step in 1..=steps {
            dev.write(head, &buf)?;
            live.push(head);
            head += 1;
            let i = (r.next() % live.len() as u64) as usize;
            let victim = live.swap_remove(i);
            dev.discard(victim, 1)?;
            if step % report_every == 0 || step == steps {
                let st = dev.stats();
                let iv = st.ftl.interval.clone().unwrap_or_default();
                println!(
                    "{}\t{:.2}\t{:.2}\t{}\t{}\t{}\t{:.3}\t{:.3}\t{:.1}\t{}\t{:.1}\t{}\t{}/{}/{}/{}",
                    if with { "on" } else { "off" },
                    step as f64 / cap as f64,
                    dev.now_ns() as f64 / 1e9,
                    iv.valid_entries,
                    iv.memory.total_bytes,
                    iv.memory.map_node_bytes,
                    iv.memory.total_bytes as f64 / iv.page_map_bytes_for_live.max(1) as f64,
                    iv.memory.total_bytes as f64 / page_map_bytes as f64,
                    iv.flat_touched_bytes as f64 / iv.memory.total_bytes.max(1) as f64,
                    iv.nodes_compacted,
                    iv.compaction_busy_ns as f64 / 1e6,
                    st.gc_runs,
                    iv.layouts.dense,
                    iv.layouts.regions,
                    iv.layouts.bitmap,
                    iv.layouts.list,
                );
            }
        }
    }
    Ok(())
}
