//! Power-cut simulation device.
//!
//! Keeps two states: the durable image (what survives power loss) and the writes completed
//! since the last flush (volatile: they may or may not survive). Every request is numbered;
//! power can be cut after any request or in the middle of a multi-block write. After the cut
//! every request fails with [`DevError::PowerCut`], and [`SimDevice::crash_image`] builds the
//! image a remount would see, under a [`CrashMode`].
//!
//! Fault model (documented in docs/TESTING.md): a flush makes every earlier completed write
//! durable; unflushed writes survive in any subset (device reordering); a write can be torn at
//! 512-byte granularity inside a 4 KiB block.
//!
//! Lock order: `state` only (leaf).

use crate::ram::RamDevice;
use crate::{
    check_range, check_request, BlockDevice, Capabilities, Completion, DevError, DevResult,
    BLOCK_SIZE,
};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// Sector size for torn writes.
const SECTOR: usize = 512;

/// Which unflushed writes a crash keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every write not yet flushed is lost.
    DropUnflushed,
    /// Each unflushed block write independently survives or not (reordering).
    KeepRandomSubset,
    /// Like `KeepRandomSubset`, and one surviving block is torn: only some of its 512-byte
    /// sectors carry the new contents.
    TearOne,
}

impl CrashMode {
    pub const ALL: [CrashMode; 3] = [
        CrashMode::DropUnflushed,
        CrashMode::KeepRandomSubset,
        CrashMode::TearOne,
    ];
}

/// One recorded request (without data), for traces and exhaustive crash enumeration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimOp {
    Write { addr: u64, count: u64 },
    Discard { addr: u64, count: u64 },
    Flush,
}

struct State {
    /// Requests completed so far (reads are not counted: they change nothing).
    ops: u64,
    /// Power is cut once `ops` reaches this.
    cut_at: u64,
    /// How many blocks of the request that hits `cut_at` still reach the device.
    cut_partial_blocks: u64,
    cut: bool,
    /// Unflushed block writes in completion order: (addr, contents).
    pending: Vec<(u64, Box<[u8]>)>,
    /// Newest unflushed contents per block, for reads.
    overlay: HashMap<u64, usize>,
    trace: Vec<SimOp>,
    record_trace: bool,
}

pub struct SimDevice {
    caps: Capabilities,
    durable: RamDevice,
    state: Mutex<State>,
}

impl SimDevice {
    pub fn new(block_count: u64) -> Self {
        Self::from_image(RamDevice::new(block_count))
    }

    /// Start from an existing image (for instance one a crash produced).
    pub fn from_image(durable: RamDevice) -> Self {
        let mut caps = durable.capabilities().clone();
        caps.kind = "sim".into();
        SimDevice {
            caps,
            durable,
            state: Mutex::new(State {
                ops: 0,
                cut_at: u64::MAX,
                cut_partial_blocks: 0,
                cut: false,
                pending: Vec::new(),
                overlay: HashMap::new(),
                trace: Vec::new(),
                record_trace: false,
            }),
        }
    }

    /// Record every request in a trace (see [`SimDevice::trace`]).
    pub fn record_trace(&self, on: bool) {
        self.state.lock().record_trace = on;
    }

    pub fn trace(&self) -> Vec<SimOp> {
        self.state.lock().trace.clone()
    }

    /// Cut power when the request numbered `op` (0-based, counting writes, discards and
    /// flushes) arrives; if it is a multi-block write, its first `partial_blocks` blocks still
    /// land (unflushed).
    pub fn cut_at(&self, op: u64, partial_blocks: u64) {
        let mut s = self.state.lock();
        s.cut_at = op;
        s.cut_partial_blocks = partial_blocks;
        if s.ops >= op {
            s.cut = true;
        }
    }

    /// Cut power now.
    pub fn cut_now(&self) {
        self.state.lock().cut = true;
    }

    pub fn is_cut(&self) -> bool {
        self.state.lock().cut
    }

    /// Requests completed so far.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Number of unflushed block writes.
    pub fn unflushed_blocks(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// The image a remount would see after a power cut now, under `mode`; `seed` makes the
    /// choice of surviving writes reproducible.
    pub fn crash_image(&self, mode: CrashMode, seed: u64) -> RamDevice {
        let s = self.state.lock();
        let img = self.durable.deep_clone();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let keep: Vec<bool> = match mode {
            CrashMode::DropUnflushed => vec![false; s.pending.len()],
            _ => (0..s.pending.len()).map(|_| rng.random_bool(0.5)).collect(),
        };
        let torn = match mode {
            CrashMode::TearOne if !s.pending.is_empty() => {
                Some(rng.random_range(0..s.pending.len()))
            }
            _ => None,
        };
        for (i, (addr, data)) in s.pending.iter().enumerate() {
            if Some(i) == torn {
                for sector in 0..BLOCK_SIZE / SECTOR {
                    if rng.random_bool(0.5) {
                        let at = sector * SECTOR;
                        img.write_partial(*addr, at, &data[at..at + SECTOR]);
                    }
                }
            } else if keep[i] {
                img.write_partial(*addr, 0, data);
            }
        }
        img
    }

    /// The durable image after flushing everything (as if the machine shut down cleanly).
    pub fn clean_image(&self) -> RamDevice {
        let s = self.state.lock();
        let img = self.durable.deep_clone();
        for (addr, data) in &s.pending {
            img.write_partial(*addr, 0, data);
        }
        img
    }

    /// Count one request; returns how many of its blocks may proceed, or PowerCut.
    fn admit(s: &mut State, op: SimOp, blocks: u64) -> DevResult<u64> {
        if s.cut {
            return Err(DevError::PowerCut);
        }
        if s.ops >= s.cut_at {
            s.cut = true;
            return Ok(s.cut_partial_blocks.min(blocks));
        }
        s.ops += 1;
        if s.record_trace {
            s.trace.push(op);
        }
        Ok(blocks)
    }
}

impl BlockDevice for SimDevice {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        check_request(&self.caps, addr, buf.len())?;
        let s = self.state.lock();
        if s.cut {
            return Err(DevError::PowerCut);
        }
        for (i, out) in buf.chunks_exact_mut(BLOCK_SIZE).enumerate() {
            let a = addr + i as u64;
            match s.overlay.get(&a) {
                Some(&idx) => out.copy_from_slice(&s.pending[idx].1),
                None => self.durable.read_block(a, out),
            }
        }
        Ok(Completion::empty())
    }

    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        let count = check_request(&self.caps, addr, buf.len())?;
        let mut s = self.state.lock();
        let allowed = Self::admit(&mut s, SimOp::Write { addr, count }, count)?;
        for (i, data) in buf
            .chunks_exact(BLOCK_SIZE)
            .take(allowed as usize)
            .enumerate()
        {
            let idx = s.pending.len();
            s.pending.push((addr + i as u64, data.into()));
            s.overlay.insert(addr + i as u64, idx);
        }
        if s.cut {
            return Err(DevError::PowerCut);
        }
        Ok(Completion::empty())
    }

    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        check_range(&self.caps, addr, count)?;
        let mut s = self.state.lock();
        Self::admit(&mut s, SimOp::Discard { addr, count }, 0)?;
        if s.cut {
            return Err(DevError::PowerCut);
        }
        // Discard is modelled as an immediate, durable zeroing of blocks with no unflushed
        // writes; blocks with pending writes keep them (discard never destroys newer data).
        for a in addr..addr + count {
            if !s.overlay.contains_key(&a) {
                self.durable.discard(a, 1)?;
            }
        }
        Ok(Completion::empty())
    }

    fn flush(&self) -> DevResult<Completion> {
        let mut s = self.state.lock();
        Self::admit(&mut s, SimOp::Flush, 0)?;
        if s.cut {
            return Err(DevError::PowerCut);
        }
        for (addr, data) in s.pending.drain(..) {
            self.durable.write_partial(addr, 0, &data);
        }
        s.overlay.clear();
        Ok(Completion::empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(v: u8) -> Vec<u8> {
        vec![v; BLOCK_SIZE]
    }

    #[test]
    fn unflushed_writes_are_lost_on_drop() {
        let d = SimDevice::new(16);
        d.write(1, &block(1)).unwrap();
        d.flush().unwrap();
        d.write(2, &block(2)).unwrap();
        let mut b = block(0);
        d.read(2, &mut b).unwrap();
        assert_eq!(b[0], 2);
        let img = d.crash_image(CrashMode::DropUnflushed, 0);
        img.read(1, &mut b).unwrap();
        assert_eq!(b[0], 1);
        img.read(2, &mut b).unwrap();
        assert_eq!(b[0], 0);
    }

    #[test]
    fn cut_stops_requests_and_tears_multiblock_write() {
        let d = SimDevice::new(16);
        d.cut_at(1, 1);
        d.write(0, &block(5)).unwrap();
        let two = [block(6), block(7)].concat();
        assert!(matches!(d.write(4, &two), Err(DevError::PowerCut)));
        assert!(matches!(d.flush(), Err(DevError::PowerCut)));
        let img = d.clean_image();
        let mut b = block(0);
        img.read(4, &mut b).unwrap();
        assert_eq!(b[0], 6);
        img.read(5, &mut b).unwrap();
        assert_eq!(b[0], 0);
    }

    #[test]
    fn torn_block_mixes_sectors() {
        let d = SimDevice::new(4);
        d.write(0, &block(0xff)).unwrap();
        // Some seed tears the only pending block so that it is neither all old nor all new.
        let mixed = (0..64).any(|seed| {
            let img = d.crash_image(CrashMode::TearOne, seed);
            let mut b = block(0);
            img.read(0, &mut b).unwrap();
            b.contains(&0) && b.contains(&0xff)
        });
        assert!(mixed);
    }
}
