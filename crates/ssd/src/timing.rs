//! NAND timing model (NVMeVirt style): per-die `busy_until` scalars served FIFO in processing
//! order, per-channel and host-link bandwidth calendars, and the write buffer with early
//! completion and back-pressure.
//!
//! Owns: die, channel and link state; the write buffer's occupancy and pending releases;
//! busy-time accounting per die (user vs GC) and per channel.
//!
//! Invariants: a die's `busy_until` never decreases; a read holds its die until its last byte
//! left the die over the channel; a program occupies the channel for the unit transfer and then
//! the die for tPROG; write-buffer occupancy never exceeds its capacity except for a single
//! request larger than the whole buffer (which is split by the caller, so never in practice).
//!
//! Lock order: none (owned by the engine, under its lock).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Serialize;

use crate::calendar::Calendar;
use crate::config::{SsdConfig, Timing, MAP_UNIT};

/// Whose work a NAND operation is, for busy-time accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    User,
    Gc,
}

#[derive(Clone, Debug, Default)]
struct Die {
    busy_until: u64,
    busy_user_ns: u64,
    busy_gc_ns: u64,
}

/// Busy-time snapshot.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BusyStats {
    pub die_user_ns: Vec<u64>,
    pub die_gc_ns: Vec<u64>,
    pub channel_ns: Vec<u64>,
    pub link_ns: u64,
}

/// Write buffer: capacity, occupancy and a min-heap of (release time, bytes).
#[derive(Debug)]
struct WriteBuffer {
    cap: u64,
    used: u64,
    releases: BinaryHeap<Reverse<(u64, u64)>>,
    /// Total time requests waited for buffer space (back-pressure).
    stall_ns: u64,
}

impl WriteBuffer {
    /// Claim `bytes` at time `t`; returns when the claim succeeded (≥ t).
    fn alloc(&mut self, mut t: u64, bytes: u64) -> u64 {
        let start = t;
        while let Some(&Reverse((when, b))) = self.releases.peek() {
            if when > t {
                break;
            }
            self.used -= b;
            self.releases.pop();
        }
        while self.used + bytes > self.cap {
            match self.releases.pop() {
                Some(Reverse((when, b))) => {
                    t = t.max(when);
                    self.used -= b;
                }
                // Only bytes of a partly filled program unit remain: nothing will free them
                // before this claim, so over-commit rather than wait forever.
                None => break,
            }
        }
        self.used += bytes;
        self.stall_ns += t - start;
        t
    }

    fn release_at(&mut self, t: u64, bytes: u64) {
        self.releases.push(Reverse((t, bytes)));
    }

    fn last_release(&self) -> u64 {
        self.releases.iter().map(|r| r.0 .0).max().unwrap_or(0)
    }
}

/// The timing state of the whole device.
#[derive(Debug)]
pub struct NandTiming {
    t: Timing,
    dies_per_channel: u32,
    channels_n: u32,
    program_unit_bytes: u64,
    dies: Vec<Die>,
    channels: Vec<Calendar>,
    link: Calendar,
    wbuf: Option<WriteBuffer>,
    early_completion: bool,
    /// Latest `busy_until` of any die (flush waits for it).
    max_busy: u64,
}

impl NandTiming {
    pub fn new(cfg: &SsdConfig) -> Self {
        let g = &cfg.geometry;
        let t = cfg.timing.clone();
        NandTiming {
            dies: vec![Die::default(); g.dies() as usize],
            channels: (0..g.channels)
                .map(|_| Calendar::new(t.channel_bytes_per_s, t.slot_ns))
                .collect(),
            link: Calendar::new(t.link_bytes_per_s, t.slot_ns),
            wbuf: (cfg.write_buffer.bytes > 0).then(|| WriteBuffer {
                cap: cfg.write_buffer.bytes,
                used: 0,
                releases: BinaryHeap::new(),
                stall_ns: 0,
            }),
            early_completion: cfg.write_buffer.early_completion,
            dies_per_channel: g.dies_per_channel,
            channels_n: g.channels,
            program_unit_bytes: g.program_unit_bytes,
            max_busy: 0,
            t,
        }
    }

    /// Dies are numbered channel-first: die `d` sits on channel `d % channels`.
    fn channel_of(&self, die: u32) -> usize {
        (die % self.channels_n) as usize
    }

    pub fn has_buffer(&self) -> bool {
        self.wbuf.is_some()
    }

    pub fn early_completion(&self) -> bool {
        self.early_completion
    }

    /// Largest write segment that is claimed from the buffer at once.
    pub fn write_segment_bytes(&self) -> u64 {
        match &self.wbuf {
            Some(w) => (w.cap - self.program_unit_bytes).max(MAP_UNIT),
            None => u64::MAX,
        }
    }

    pub fn fw_read(&self, bytes: u64) -> u64 {
        if bytes <= MAP_UNIT {
            self.t.fw_read_4k_ns
        } else {
            self.t.fw_read_ns
        }
    }

    pub fn fw_trim(&self) -> u64 {
        self.t.fw_trim_ns
    }

    /// Host side of a write segment: wait for buffer space, firmware overhead, then the host
    /// link transfer. Returns (buffer claimed at, data in device at).
    pub fn host_write_in(&mut self, t: u64, bytes: u64) -> (u64, u64) {
        let start = match &mut self.wbuf {
            Some(w) => w.alloc(t, bytes),
            None => t,
        };
        let fw = self.t.fw_write_ns + self.t.fw_write_per_4k_ns * bytes.div_ceil(MAP_UNIT);
        let tx = self.link.reserve(start + fw, bytes);
        (start, tx)
    }

    fn account(&mut self, die: u32, start: u64, end: u64, work: Work) {
        let d = &mut self.dies[die as usize];
        d.busy_until = end;
        match work {
            Work::User => d.busy_user_ns += end - start,
            Work::Gc => d.busy_gc_ns += end - start,
        }
        self.max_busy = self.max_busy.max(end);
    }

    /// A NAND read of `bytes` (within one read unit) on `die`, data ready at `t`. With
    /// `to_host`, each channel chunk is pipelined with its host-link transfer. Returns the
    /// time the data is at its destination (host memory, or the controller for GC).
    pub fn read(
        &mut self,
        die: u32,
        cell: u32,
        bytes: u64,
        t: u64,
        to_host: bool,
        work: Work,
    ) -> u64 {
        let lat = if bytes <= MAP_UNIT {
            &self.t.read_4k_ns
        } else {
            &self.t.read_unit_ns
        };
        let tr = lat[cell as usize % lat.len()];
        let start = self.dies[die as usize].busy_until.max(t);
        let mut e = start + tr;
        let mut done = e;
        let ch = self.channel_of(die);
        let mut remaining = bytes;
        while remaining > 0 {
            let chunk = remaining.min(self.t.channel_chunk_bytes);
            e = self.channels[ch].reserve(e, chunk);
            done = if to_host {
                self.link.reserve(e, chunk)
            } else {
                e
            };
            remaining -= chunk;
        }
        self.account(die, start, e, work);
        done
    }

    /// Program one program unit on `die` whose data is in the controller at `t`. Returns the
    /// program end. User programs release their buffer bytes at that time.
    pub fn program(&mut self, die: u32, t: u64, work: Work) -> u64 {
        let start = self.dies[die as usize].busy_until.max(t);
        let ch = self.channel_of(die);
        let ch_end = self.channels[ch].reserve(start, self.program_unit_bytes);
        let end = ch_end + self.t.program_ns;
        self.account(die, start, end, work);
        if work == Work::User {
            if let Some(w) = &mut self.wbuf {
                w.release_at(end, self.program_unit_bytes);
            }
        }
        end
    }

    /// Erase one block on `die`, no earlier than `t`.
    pub fn erase(&mut self, die: u32, t: u64) -> u64 {
        if self.t.erase_ns == 0 {
            return t;
        }
        let start = self.dies[die as usize].busy_until.max(t);
        let end = start + self.t.erase_ns;
        self.account(die, start, end, Work::Gc);
        end
    }

    /// Hold `die` until `end` for device-internal work that began no earlier than `from`
    /// (accounted as GC/background time from when the die is free); a die busy past `end`
    /// keeps its own end. Returns `end`.
    pub fn occupy_until(&mut self, die: u32, from: u64, end: u64) -> u64 {
        let start = self.dies[die as usize].busy_until.max(from);
        if end > start {
            self.account(die, start, end, Work::Gc);
        }
        end
    }

    /// When the NAND side last has work: every die idle and every buffered unit whose
    /// program was issued done (idle GC's "quiet since", with the requests' completions).
    pub fn quiet_from(&self) -> u64 {
        let wb = self.wbuf.as_ref().map_or(0, |w| w.last_release());
        self.max_busy.max(wb)
    }

    /// Completion of a flush issued at `t`: every die idle and every buffered unit programmed.
    pub fn flush(&self, t: u64) -> u64 {
        let wb = self.wbuf.as_ref().map_or(0, |w| w.last_release());
        (t + self.t.fw_flush_ns).max(self.max_busy).max(wb)
    }

    pub fn busy(&self) -> BusyStats {
        BusyStats {
            die_user_ns: self.dies.iter().map(|d| d.busy_user_ns).collect(),
            die_gc_ns: self.dies.iter().map(|d| d.busy_gc_ns).collect(),
            channel_ns: self.channels.iter().map(|c| c.busy_ns).collect(),
            link_ns: self.link.busy_ns,
        }
    }

    pub fn buffer_stall_ns(&self) -> u64 {
        self.wbuf.as_ref().map_or(0, |w| w.stall_ns)
    }

    /// Zero the busy counters (start of a measured phase); timing state is kept.
    pub fn reset_busy(&mut self) {
        for d in &mut self.dies {
            d.busy_user_ns = 0;
            d.busy_gc_ns = 0;
        }
        for c in &mut self.channels {
            c.busy_ns = 0;
            c.bytes = 0;
        }
        self.link.busy_ns = 0;
        self.link.bytes = 0;
        if let Some(w) = &mut self.wbuf {
            w.stall_ns = 0;
        }
    }

    pub fn dies_per_channel(&self) -> u32 {
        self.dies_per_channel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_dies_on_one_channel_serialise_transfers_dies_on_separate_channels_do_not() {
        let cfg = SsdConfig::preset("970pro-like").unwrap();
        let mut t = NandTiming::new(&cfg);
        // Dies 0 and 8 share channel 0.
        let a = t.read(0, 0, 16384, 0, false, Work::User);
        let b = t.read(8, 0, 16384, 0, false, Work::User);
        let xfer = 16384.0 / (800.0 * 1048576.0) * 1e9;
        let gap = b as f64 - a as f64;
        assert!((gap / xfer - 1.0).abs() < 0.15, "gap {gap} xfer {xfer}");
        let mut t = NandTiming::new(&cfg);
        // Dies 0..8 sit on channels 0..8.
        let ends: Vec<u64> = (0..8)
            .map(|d| t.read(d, 0, 16384, 0, false, Work::User))
            .collect();
        assert!(ends.iter().all(|&e| e == ends[0]));
    }

    #[test]
    fn write_buffer_back_pressure() {
        let cfg = SsdConfig::preset("970pro-like").unwrap();
        let mut t = NandTiming::new(&cfg);
        // Fill the 1 MiB buffer with 32 units programmed on die 0 only: the 33rd claim waits.
        for _ in 0..32 {
            let (_, tx) = t.host_write_in(0, 32768);
            t.program(0, tx, Work::User);
        }
        let (start, _) = t.host_write_in(0, 32768);
        assert!(start >= 185_000, "start {start}");
        assert!(t.buffer_stall_ns() > 0);
    }
}
