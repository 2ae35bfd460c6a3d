//! Synthetic workloads against an [`SsdDevice`]: sequential or uniform random reads or writes
//! over a logical range with a queue depth.
//!
//! Owns: the address generators and the two drivers. On a virtual clock a single thread keeps
//! `qd` requests in flight by always submitting the next request at the earliest completion
//! time among the outstanding ones (so submissions are in time order, as the model wants),
//! optionally in bursts with idle time between them (`Gaps`). On a wall clock `qd` threads
//! issue blocking requests through the `BlockDevice` trait.
//!
//! Invariants: every request lies inside the phase's range and the device; a phase issues
//! exactly `ceil(total_bytes / bs)` requests; the same seed gives the same addresses.
//!
//! Lock order: none of its own (device locks only through the device's methods).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use flashlog_dev::{BlockDevice, DevError, DevResult, BLOCK_SIZE_U64};
use indicatif::ProgressBar;
use parking_lot::Mutex;
use serde::Serialize;

use crate::device::SsdDevice;

/// Access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    SeqWrite,
    RandWrite,
    SeqRead,
    RandRead,
}

impl Pattern {
    pub fn is_write(self) -> bool {
        matches!(self, Pattern::SeqWrite | Pattern::RandWrite)
    }
    pub fn is_random(self) -> bool {
        matches!(self, Pattern::RandWrite | Pattern::RandRead)
    }
    pub fn name(self) -> &'static str {
        match self {
            Pattern::SeqWrite => "seq-write",
            Pattern::RandWrite => "rand-write",
            Pattern::SeqRead => "seq-read",
            Pattern::RandRead => "rand-read",
        }
    }
}

/// One phase of a workload.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub pattern: Pattern,
    /// First logical block of the range.
    pub start: u64,
    /// Blocks in the range.
    pub blocks: u64,
    pub total_bytes: u64,
    /// Request size in bytes (a multiple of 4 KiB).
    pub bs: u64,
    pub qd: u32,
    pub seed: u64,
    /// Bursts with idle time between them (virtual clock only): None, back to back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gaps: Option<Gaps>,
}

/// A phase in bursts: after every `every` requests the driver waits until all of them have
/// completed, then leaves the device idle for `idle_ns` before the next burst (a host that
/// thinks between bursts: what idle-time GC, `gc_idle`, uses).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Gaps {
    pub every: u64,
    pub idle_ns: u64,
}

/// What a phase did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseResult {
    pub ops: u64,
    pub bytes: u64,
    /// Device time at start and end (the end is the last completion).
    pub start_ns: u64,
    pub end_ns: u64,
    /// Host time the phase took (emulator speed).
    pub wall_secs: f64,
}

impl PhaseResult {
    pub fn device_secs(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9
    }
}

/// SplitMix64: tiny, fast and seedable; good enough for uniform addresses. The one
/// generator of the emulator's workloads, tests, examples and sampled victim policies
/// (`Rng(seed)`).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// `next() % n`: the slightly biased form some model tests were written against.
    pub fn below_mod(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in 0..n (multiply-shift; bias below 2^-40 for our ranges).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// Address of request `i` (sequential) or a random one: (first block, blocks).
struct AddrGen {
    random: bool,
    start: u64,
    blocks: u64,
    bsb: u64,
    rng: Rng,
}

impl AddrGen {
    fn new(p: &Phase, stream: u64) -> Self {
        AddrGen {
            random: p.pattern.is_random(),
            start: p.start,
            blocks: p.blocks,
            bsb: (p.bs / BLOCK_SIZE_U64).max(1),
            rng: Rng(p.seed ^ stream.wrapping_mul(0xA24B_AED4_963E_E407)),
        }
    }

    fn get(&mut self, i: u64) -> (u64, u64) {
        if self.random {
            let slots = (self.blocks / self.bsb).max(1);
            let n = self.bsb.min(self.blocks);
            (self.start + self.rng.below(slots) * self.bsb, n)
        } else {
            let per_pass = self.blocks.div_ceil(self.bsb);
            let k = i % per_pass;
            let off = k * self.bsb;
            (self.start + off, self.bsb.min(self.blocks - off))
        }
    }
}

/// Check a phase before running it.
pub fn check_phase(dev: &SsdDevice, p: &Phase) -> Result<(), String> {
    let cap = dev.capabilities().block_count;
    if p.bs == 0 || p.bs % BLOCK_SIZE_U64 != 0 {
        return Err(format!(
            "request size {} is not a positive multiple of 4096",
            p.bs
        ));
    }
    if p.blocks == 0 || p.start.checked_add(p.blocks).is_none_or(|e| e > cap) {
        return Err(format!(
            "range {}+{} does not fit the device ({} blocks)",
            p.start, p.blocks, cap
        ));
    }
    if p.qd == 0 {
        return Err("queue depth must be at least 1".into());
    }
    if let Some(g) = p.gaps {
        if g.every == 0 {
            return Err("a burst between idle gaps needs at least one request".into());
        }
        if !dev.is_virtual() {
            return Err("idle gaps between bursts need the virtual clock (--clock virtual)".into());
        }
        // The device clock is u64 ns: keep the phase's idle time far from its end.
        let gaps = p.total_bytes.div_ceil(p.bs) / g.every;
        if g.idle_ns.checked_mul(gaps).is_none_or(|t| t > 1 << 60) {
            return Err(format!(
                "{gaps} idle gaps of {} ns exceed the device clock (2^60 ns, 36 years, in all)",
                g.idle_ns
            ));
        }
    }
    Ok(())
}

/// Run a phase on the device's clock.
pub fn run_phase(
    dev: &SsdDevice,
    p: &Phase,
    progress: Option<&ProgressBar>,
) -> DevResult<PhaseResult> {
    if let Err(e) = check_phase(dev, p) {
        return Err(DevError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            e,
        )));
    }
    if dev.is_virtual() {
        run_virtual(dev, p, progress)
    } else {
        run_wall(dev, p, progress)
    }
}

/// How often the progress bar is advanced (in requests): cheap enough to be invisible.
const PROGRESS_EVERY: u64 = 4096;

fn run_virtual(
    dev: &SsdDevice,
    p: &Phase,
    progress: Option<&ProgressBar>,
) -> DevResult<PhaseResult> {
    let ops = p.total_bytes.div_ceil(p.bs);
    let wall = Instant::now();
    let t0 = dev.now_ns();
    let mut heap: BinaryHeap<Reverse<u64>> = (0..p.qd).map(|_| Reverse(t0)).collect();
    let mut gen = AddrGen::new(p, 0);
    let mut buf = vec![0u8; p.bs as usize];
    let mut end = t0;
    let mut bytes = 0;
    for i in 0..ops {
        let Reverse(t) = heap.pop().unwrap_or(Reverse(end));
        let (addr, n) = gen.get(i);
        let len = (n * BLOCK_SIZE_U64) as usize;
        let timed = if p.pattern.is_write() {
            dev.write_at(t, addr, &buf[..len])?
        } else {
            dev.read_at(t, addr, &mut buf[..len])?
        };
        bytes += len as u64;
        end = end.max(timed.done_ns);
        heap.push(Reverse(timed.done_ns));
        if let Some(g) = p.gaps {
            if i % g.every == g.every - 1 && i + 1 < ops {
                // The burst drains, then the device is left alone.
                let resume = end.saturating_add(g.idle_ns);
                heap = (0..p.qd).map(|_| Reverse(resume)).collect();
                end = resume;
            }
        }
        if let Some(pb) = progress {
            if i % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
                pb.inc(PROGRESS_EVERY);
            }
        }
    }
    dev.advance_to(end);
    Ok(PhaseResult {
        ops,
        bytes,
        start_ns: t0,
        end_ns: end,
        wall_secs: wall.elapsed().as_secs_f64(),
    })
}

fn run_wall(dev: &SsdDevice, p: &Phase, progress: Option<&ProgressBar>) -> DevResult<PhaseResult> {
    let ops = p.total_bytes.div_ceil(p.bs);
    let wall = Instant::now();
    let t0 = dev.now_ns();
    let next = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let first_err: Mutex<Option<DevError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for w in 0..p.qd {
            let (next, bytes, first_err) = (&next, &bytes, &first_err);
            s.spawn(move || {
                let mut gen = AddrGen::new(p, u64::from(w));
                let mut buf = vec![0u8; p.bs as usize];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= ops || first_err.lock().is_some() {
                        break;
                    }
                    let (addr, n) = gen.get(i);
                    let len = (n * BLOCK_SIZE_U64) as usize;
                    let r = if p.pattern.is_write() {
                        dev.write(addr, &buf[..len])
                    } else {
                        dev.read(addr, &mut buf[..len])
                    };
                    if let Err(e) = r {
                        first_err.lock().get_or_insert(e);
                        break;
                    }
                    bytes.fetch_add(len as u64, Ordering::Relaxed);
                    if let Some(pb) = progress {
                        pb.inc(1);
                    }
                }
            });
        }
    });
    if let Some(e) = first_err.into_inner() {
        return Err(e);
    }
    Ok(PhaseResult {
        ops,
        bytes: bytes.into_inner(),
        start_ns: t0,
        end_ns: dev.now_ns(),
        wall_secs: wall.elapsed().as_secs_f64(),
    })
}
