//! Fidelity checks of the emulator against its documented model (docs/EMULATOR.md §2-§4) and
//! shared/reference/ssd-emulator.md.
//! `cargo run --release -p flashlog-ssd --example fidelity -- [SUBCOMMAND]`:
//! - `timing`: per preset, QD1 4 KiB read/write latency against `analytic::expected_perf`, a
//!   burst of writes at one instant (write-buffer back-pressure: first write that waited) and
//!   a flush behind it;
//! - `wall`: QD1 reads on the wall clock, caller-measured vs device-recorded vs the model;
//! - `waf`: greedy WAF under uniform random overwrites (970pro-like 1 GiB, b = 1024 and the
//!   `test` preset at several OPs) against Lambert-W(ρ_eff) (`analytic::effective_op`), with a
//!   victim-checking policy (wrong choices, bad valid counts), victims per host write (GC
//!   pacing: bursts) and write-latency p99/p99.9;
//! - `waf970`: the same for 970pro-like 1 GiB only;
//! - `trim`: the WAF run with 10/20/30 % of the space trimmed;
//! - `coupled`: coupled-FTL (D2FS) record accounting against the upcalls a host model applies;
//! - `all` (default): everything but `waf970`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use flashlog_dev::{BlockDevice, Completion, DeviceEvent, MigrationPair, BLOCK_SIZE};
use flashlog_ssd::analytic::{effective_op, expected_perf, waf_greedy};
use flashlog_ssd::workload::Rng;
use flashlog_ssd::{
    Greedy, LineId, LineState, LineTable, PageFtl, SsdConfig, SsdDevice, VictimPolicy,
};

fn cfg(preset: &str) -> SsdConfig {
    let c = SsdConfig::preset(preset).unwrap();
    match preset {
        "970pro-like" | "sata-like" => c.with_capacity(1 << 30).unwrap(),
        _ => c,
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

// ------------------------------------------------------------------ timing
fn timing(preset: &str) {
    let c = cfg(preset);
    let exp = expected_perf(&c);
    let dev = SsdDevice::new(c.clone()).unwrap();
    let blocks = (dev.capabilities().block_count.min(16384) / 32) * 32;
    let chunk = vec![0u8; 32 * BLOCK_SIZE];
    for a in (0..blocks).step_by(32) {
        dev.write(a, &chunk).unwrap();
    }
    dev.flush().unwrap();
    let mut rng = Rng(7);
    let mut t = dev.now_ns() + 10_000_000;
    // QD1 4 KiB reads on an idle device.
    let mut lat = Vec::new();
    let mut b = vec![0u8; BLOCK_SIZE];
    for _ in 0..4000 {
        let a = rng.below(blocks);
        let tm = dev.read_at(t, a, &mut b).unwrap();
        lat.push((tm.done_ns - t) as f64 / 1e3);
        t = tm.done_ns + 1_000_000;
    }
    let (mn, mx) = lat
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
    println!(
        "{preset}: QD1 4K read mean {:.2} us (min {mn:.2}, max {mx:.2}), expected {:.2}",
        mean(&lat),
        exp.read_4k_qd1_ns / 1e3
    );
    // QD1 4 KiB writes, idle between.
    let mut wl = Vec::new();
    t += 10_000_000;
    for _ in 0..2000 {
        let a = rng.below(blocks);
        let tm = dev.write_at(t, a, &b).unwrap();
        wl.push((tm.done_ns - t) as f64 / 1e3);
        t = tm.done_ns + 2_000_000;
    }
    println!(
        "{preset}: QD1 4K write mean {:.2} us, expected {:.2}",
        mean(&wl),
        exp.write_4k_qd1_ns / 1e3
    );
    // Write buffer: many 4 KiB sequential writes submitted at the same instant.
    t += 50_000_000;
    let wb = c.write_buffer.bytes;
    let n = if wb > 0 { 4 * wb / 4096 } else { 64 };
    let mut done = Vec::new();
    for i in 0..n {
        let tm = dev.write_at(t, i % blocks, &b).unwrap();
        done.push(tm.done_ns - t);
    }
    // Without buffer waits write i completes at fw + (i+1) link transfers (the link is shared).
    let fw = (c.timing.fw_write_ns + c.timing.fw_write_per_4k_ns) as f64;
    let link = if c.timing.link_bytes_per_s == 0 {
        0.0
    } else {
        4096e9 / c.timing.link_bytes_per_s as f64
    };
    let first_wait = done
        .iter()
        .enumerate()
        .position(|(i, &d)| d as f64 > fw + (i + 1) as f64 * link + 5_000.0)
        .unwrap_or(done.len());
    let fl = dev.flush_at(t).unwrap();
    let last = *done.iter().max().unwrap();
    println!(
        "{preset}: burst of {n} x 4K at one instant: first write that waited = #{first_wait} \
         ({} KiB in), last completion {:.1} us, flush at same instant completes {:.1} us \
         (buffer {} KiB, unit {} KiB, tPROG {} us)",
        first_wait * 4,
        last as f64 / 1e3,
        (fl.done_ns - t) as f64 / 1e3,
        wb >> 10,
        c.geometry.program_unit_bytes >> 10,
        c.timing.program_ns / 1000
    );
    let burst_bw = (n * 4096) as f64 / ((fl.done_ns - t) as f64 / 1e9) / (1 << 20) as f64;
    println!(
        "{preset}: burst sustained to flush: {burst_bw:.1} MiB/s (expected seq write {:.1})",
        exp.seq_write_bytes_per_s / (1 << 20) as f64
    );
}

// ------------------------------------------------------------------ wall clock
fn wall(preset: &str) {
    let mut c = cfg(preset);
    let exp = expected_perf(&c);
    c.set("clock", "wall").unwrap();
    let dev = SsdDevice::new(c).unwrap();
    let chunk = vec![0u8; 32 * BLOCK_SIZE];
    for a in (0..4096).step_by(32) {
        dev.write(a, &chunk).unwrap();
    }
    dev.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut b = vec![0u8; BLOCK_SIZE];
    let mut rng = Rng(3);
    let mut lat = Vec::new();
    for _ in 0..2000 {
        let a = rng.below(4096);
        let s = Instant::now();
        dev.read(a, &mut b).unwrap();
        lat.push(s.elapsed().as_nanos() as f64 / 1e3);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let st = dev.stats();
    println!(
        "{preset} wall: QD1 4K read measured by caller mean {:.1} p50 {:.1} p99 {:.1} us; device-recorded mean {:.1} us; model {:.1} us; wake-up lateness p50 {:.1} us",
        mean(&lat),
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100],
        st.latency.read.mean_us,
        exp.read_4k_qd1_ns / 1e3,
        st.latency.wall_lateness.p50_us,
    );
}

// ------------------------------------------------------------------ WAF + victim checks
static SELECTS: AtomicU64 = AtomicU64::new(0);
static BAD_CHOICE: AtomicU64 = AtomicU64::new(0);
static BAD_VPC: AtomicU64 = AtomicU64::new(0);
static VPC_SUM: AtomicU64 = AtomicU64::new(0);
static MAX_PER_WRITE: AtomicU64 = AtomicU64::new(0);
static MULTI: AtomicU64 = AtomicU64::new(0);
static IN_BURSTS: AtomicU64 = AtomicU64::new(0);

/// Greedy, checked: the chosen line is sealed with the fewest valid pages, and every line's
/// valid count lies in 0..=b.
struct CheckedGreedy;
impl VictimPolicy for CheckedGreedy {
    fn name(&self) -> &'static str {
        "greedy-checked"
    }
    fn select(&mut self, lines: &LineTable, now: u64) -> Option<LineId> {
        let b = lines.slots_per_line();
        let mut min = u32::MAX;
        for l in 0..lines.lines() {
            let v = lines.vpc(LineId(l));
            if v > b {
                BAD_VPC.fetch_add(1, Ordering::Relaxed);
            }
            if lines.state(LineId(l)) == LineState::Free && v != 0 {
                BAD_VPC.fetch_add(1, Ordering::Relaxed);
            }
        }
        for l in lines.sealed_lines() {
            min = min.min(lines.vpc(l));
        }
        let pick = Greedy.select(lines, now);
        if let Some(p) = pick {
            if lines.vpc(p) != min || lines.state(p) != LineState::Sealed {
                BAD_CHOICE.fetch_add(1, Ordering::Relaxed);
            }
            VPC_SUM.fetch_add(u64::from(lines.vpc(p)), Ordering::Relaxed);
        }
        SELECTS.fetch_add(1, Ordering::Relaxed);
        pick
    }
}

fn rand_writes(dev: &SsdDevice, range: (u64, u64), n: u64, rng: &mut Rng, check_every: u64) {
    let b = vec![0u8; BLOCK_SIZE];
    // QD32 on the virtual clock: submit at the earliest outstanding completion.
    let mut heap = std::collections::BinaryHeap::new();
    for _ in 0..32 {
        heap.push(std::cmp::Reverse(dev.now_ns()));
    }
    let mut end = dev.now_ns();
    for i in 0..n {
        let std::cmp::Reverse(t) = heap.pop().unwrap();
        let a = range.0 + rng.below(range.1);
        let s0 = SELECTS.load(Ordering::Relaxed);
        let tm = dev.write_at(t, a, &b).unwrap();
        let k = SELECTS.load(Ordering::Relaxed) - s0;
        MAX_PER_WRITE.fetch_max(k, Ordering::Relaxed);
        if k > 1 {
            MULTI.fetch_add(1, Ordering::Relaxed);
            IN_BURSTS.fetch_add(k, Ordering::Relaxed);
        }
        end = end.max(tm.done_ns);
        heap.push(std::cmp::Reverse(tm.done_ns));
        if check_every > 0 && i % check_every == check_every - 1 {
            dev.check_invariants().unwrap();
        }
    }
    dev.advance_to(end);
}

fn waf_run(c: SsdConfig, trim: f64, label: &str) {
    SELECTS.store(0, Ordering::Relaxed);
    BAD_CHOICE.store(0, Ordering::Relaxed);
    BAD_VPC.store(0, Ordering::Relaxed);
    VPC_SUM.store(0, Ordering::Relaxed);
    let ftl = PageFtl::new(&c, Box::new(CheckedGreedy));
    let dev = SsdDevice::with_ftl(c.clone(), Box::new(ftl)).unwrap();
    let u = dev.capabilities().block_count;
    let chunk = vec![0u8; 64 * BLOCK_SIZE];
    let mut a = 0;
    while a < u {
        let n = (u - a).min(64);
        dev.write(a, &chunk[..(n as usize) * BLOCK_SIZE]).unwrap();
        a += n;
    }
    let before = dev.valid_blocks();
    let used = ((1.0 - trim) * u as f64) as u64;
    if trim > 0.0 {
        dev.discard(used, u - used).unwrap();
    }
    let after = dev.valid_blocks();
    let mut rng = Rng(11);
    rand_writes(&dev, (0, used), 3 * used, &mut rng, used / 2);
    dev.reset_stats();
    let s0 = SELECTS.load(Ordering::Relaxed);
    let v0 = VPC_SUM.load(Ordering::Relaxed);
    MAX_PER_WRITE.store(0, Ordering::Relaxed);
    MULTI.store(0, Ordering::Relaxed);
    IN_BURSTS.store(0, Ordering::Relaxed);
    rand_writes(&dev, (0, used), 3 * used, &mut rng, used);
    let st = dev.stats();
    dev.check_invariants().unwrap();
    let rho_eff = effective_op(&c, used);
    let sel = SELECTS.load(Ordering::Relaxed) - s0;
    let b = c.geometry.slots_per_line() as f64;
    let victim_valid = (VPC_SUM.load(Ordering::Relaxed) - v0) as f64 / sel.max(1) as f64 / b;
    println!(
        "{label}: b={} lines={} U={u} used={used} valid after fill {before}, after trim {after} \
         (expected {used}); WAF {:.3}, Lambert-W(rho_eff={rho_eff:.4}) {:.3} ({:+.2} %), \
         1/(1-mean victim u)={:.3}; victims {sel}, wrong choices {}, bad vpc {}, valid now {}; \
         max victims in one 4K write {}, writes with >1 victim {} (holding {} victims); write lat p99 {:.0} us p99.9 {:.0} us max {:.0} us",
        c.geometry.slots_per_line(),
        c.geometry.lines(),
        st.waf,
        waf_greedy(rho_eff),
        (st.waf / waf_greedy(rho_eff) - 1.0) * 100.0,
        1.0 / (1.0 - victim_valid),
        BAD_CHOICE.load(Ordering::Relaxed),
        BAD_VPC.load(Ordering::Relaxed),
        dev.valid_blocks(),
        MAX_PER_WRITE.load(Ordering::Relaxed),
        MULTI.load(Ordering::Relaxed),
        IN_BURSTS.load(Ordering::Relaxed),
        st.latency.write.p99_us,
        st.latency.write.p999_us,
        st.latency.write.max_us,
    );
}

fn waf() {
    {
        let c = SsdConfig::preset("970pro-like")
            .unwrap()
            .with_capacity(1 << 30)
            .unwrap();
        waf_run(
            c,
            0.0,
            "970pro-like 1GiB op=0.07 (reference target for the 256 GiB device: 7.85)",
        );
    }
    for op in [0.07, 0.15, 0.28] {
        let mut c = SsdConfig::preset("test").unwrap();
        c.set("pages_per_block", "256").unwrap();
        c.op = op;
        waf_run(c, 0.0, &format!("b=1024 op={op}"));
    }
    for op in [0.07, 0.25, 0.5] {
        let mut c = SsdConfig::preset("test").unwrap();
        c.op = op;
        waf_run(
            c,
            0.0,
            &format!("test b=128 op={op} (reference sim: 8.54/2.75/1.73)"),
        );
    }
}

fn trim() {
    for f in [0.1, 0.2, 0.3] {
        let mut c = SsdConfig::preset("test").unwrap();
        c.set("pages_per_block", "256").unwrap();
        c.op = 0.07;
        waf_run(c, f, &format!("b=1024 op=0.07 trim={f}"));
    }
}

// ------------------------------------------------------------------ coupled FTL
fn coupled() {
    let mut cfg = SsdConfig::preset("970pro-like")
        .unwrap()
        .with_capacity(1 << 30)
        .unwrap();
    cfg.set("ftl", "coupled").unwrap();
    let dev = SsdDevice::new(cfg).unwrap();
    let caps = dev.capabilities().clone();
    let (z, c) = (caps.zone_blocks, caps.conventional_blocks);
    let zones_used = 160u64;
    let chunk = vec![0u8; 32 * BLOCK_SIZE];
    let base = |r: u64| c + (r % zones_used) * z;
    let mut cur_of: HashMap<u64, u64> = HashMap::new();
    let mut orig_of: HashMap<u64, u64> = HashMap::new();
    let mut delivered = 0u64;
    let mut upcalls = 0u64;
    let mut last_id = 0u64;
    let mut take =
        |comp: Completion, cur_of: &mut HashMap<u64, u64>, orig_of: &mut HashMap<u64, u64>| {
            let mut last = None;
            for ev in comp.events {
                let DeviceEvent::Migrated { upcall, pairs, .. } = ev;
                assert_eq!(upcall, last_id + 1, "upcall ids in order");
                last_id = upcall;
                delivered += pairs.len() as u64;
                upcalls += 1;
                for MigrationPair { old, new } in pairs {
                    if let Some(o) = orig_of.remove(&old) {
                        orig_of.insert(new, o);
                        cur_of.insert(o, new);
                    }
                }
                last = Some(upcall);
            }
            if let Some(id) = last {
                dev.ack_migrations(id).unwrap();
            }
        };
    let take_addr = |o: u64, cur_of: &mut HashMap<u64, u64>, orig_of: &mut HashMap<u64, u64>| {
        let cur = cur_of.remove(&o).unwrap_or(o);
        orig_of.remove(&cur);
        cur
    };
    for r in 0..400u64 {
        for o in (0..z).step_by(32) {
            for k in 0..32 {
                orig_of.insert(base(r) + o + k, base(r) + o + k);
                cur_of.insert(base(r) + o + k, base(r) + o + k);
            }
            take(
                dev.write(base(r) + o, &chunk).unwrap(),
                &mut cur_of,
                &mut orig_of,
            );
        }
        if r >= 10 {
            for o in (0..z).filter(|o| o % 4 != 0) {
                let at = take_addr(base(r - 10) + o, &mut cur_of, &mut orig_of);
                take(dev.discard(at, 1).unwrap(), &mut cur_of, &mut orig_of);
            }
        }
        if r >= zones_used - 2 {
            for o in (0..z).step_by(4) {
                let at = take_addr(base(r - (zones_used - 2)) + o, &mut cur_of, &mut orig_of);
                take(dev.discard(at, 1).unwrap(), &mut cur_of, &mut orig_of);
            }
        }
    }
    take(dev.flush().unwrap(), &mut cur_of, &mut orig_of);
    let s = dev.stats();
    let f = dev.ftl_stats();
    println!(
        "coupled: gc runs {}, pages moved {}, records created {}, merged {}, dropped {}, \
         acked {}, now {}; upcalls sent {} delivered {upcalls}, pairs delivered {delivered}; \
         created - merged - dropped - now = {} (should equal pairs delivered); WAF {:.3}",
        s.gc_runs,
        s.gc_pages_moved,
        f.records_created,
        f.records_merged,
        f.records_dropped,
        f.records_acked,
        f.records_now,
        f.upcalls_sent,
        f.records_created as i64
            - f.records_merged as i64
            - f.records_dropped as i64
            - f.records_now as i64,
        s.waf
    );
    dev.check_invariants().unwrap();
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let all = what == "all";
    if all || what == "timing" {
        for p in SsdConfig::PRESETS {
            timing(p);
        }
    }
    if all || what == "wall" {
        for p in ["970pro-like", "sata-like", "test"] {
            wall(p);
        }
    }
    if what == "waf970" {
        let c = SsdConfig::preset("970pro-like")
            .unwrap()
            .with_capacity(1 << 30)
            .unwrap();
        waf_run(c, 0.0, "970pro-like 1GiB op=0.07");
    }
    if all || what == "waf" {
        waf();
    }
    if all || what == "trim" {
        trim();
    }
    if all || what == "coupled" {
        coupled();
    }
}
