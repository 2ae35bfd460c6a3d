//! Emulator configuration: geometry, NAND and firmware timing, write buffer, overprovisioning,
//! GC policy, page-content store and clock; presets by name; size/duration parsing; capacity
//! scaling; `key=value` overrides of every parameter.
//!
//! Owns: [`SsdConfig`] and its parts, the preset table, [`parse_size`], [`parse_duration_ns`].
//!
//! Invariants (checked by [`SsdConfig::validate`], which every constructor of a device calls):
//! - every size is a positive multiple of the 4 KiB mapping unit; the program unit is a multiple
//!   of the read unit; a die-block (one block in every plane of a die) is a whole number of
//!   program units;
//! - the physical mapping units fit a 32-bit physical page number;
//! - the spare space (physical − logical) is at least `gc.threshold_lines + 2` lines, so greedy
//!   GC finds a victim with an invalid page while the logical space is in use (at the
//!   emergency level, one free line, 3 spare lines suffice: the sealed lines cannot all be
//!   valid; a paced GC above it that finds none waits for the host's overwrites);
//! - a write buffer, when present, holds at least two program units.
//!
//! Lock order: no locks (plain data).

use std::path::PathBuf;

use serde::Serialize;

/// The mapping unit: one logical block, one slot of a flash page.
pub const MAP_UNIT: u64 = flashlog_dev::BLOCK_SIZE_U64;

/// The capacity scaler keeps at least this many lines (superblocks), halving the block size
/// if needed: with fewer lines the GC reserve (≈3 lines, `analytic::reserve_lines`) eats most of
/// the overprovisioning.
pub const MIN_LINES_WHEN_SCALED: u64 = 128;

/// Largest number of physical mapping units: physical page numbers are 32-bit, and
/// `u32::MAX` marks "unmapped" in the page map.
pub const MAX_PHYSICAL_UNITS: u64 = u32::MAX as u64 - 1;

/// Bad configuration or bad option value.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("unknown preset {0:?} (known: 970pro-like, sata-like, test, tiny)")]
    UnknownPreset(String),
    #[error("invalid size {0:?}: expected a number with an optional unit (B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB, TB)")]
    BadSize(String),
    #[error("invalid duration {0:?}: expected a number with an optional unit (ns, us, ms, s)")]
    BadDuration(String),
    #[error("invalid value {value:?} for {key}: {why}")]
    BadValue {
        key: String,
        value: String,
        why: String,
    },
    #[error("unknown parameter {0:?} (see docs/EMULATOR.md for the list)")]
    UnknownKey(String),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// NAND geometry. A line (superblock) is block *i* of every plane of every die, so
/// `lines = blocks_per_plane`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Geometry {
    pub channels: u32,
    pub dies_per_channel: u32,
    pub planes_per_die: u32,
    pub blocks_per_plane: u32,
    /// Flash pages per block, per plane.
    pub pages_per_block: u32,
    /// Flash page size (per plane).
    pub page_bytes: u64,
    /// Unit of one NAND read (tR is charged per read unit touched).
    pub read_unit_bytes: u64,
    /// Unit of one NAND program (one-shot, multi-plane); 4 KiB writes are aggregated into it.
    pub program_unit_bytes: u64,
}

impl Geometry {
    pub fn dies(&self) -> u32 {
        self.channels * self.dies_per_channel
    }
    /// Bytes of one block in every plane of one die.
    pub fn die_block_bytes(&self) -> u64 {
        u64::from(self.planes_per_die) * u64::from(self.pages_per_block) * self.page_bytes
    }
    /// Mapping units per program unit.
    pub fn slots_per_unit(&self) -> u32 {
        (self.program_unit_bytes / MAP_UNIT) as u32
    }
    /// Mapping units per read unit.
    pub fn slots_per_read_unit(&self) -> u32 {
        (self.read_unit_bytes / MAP_UNIT) as u32
    }
    /// Program units per die-block.
    pub fn units_per_die_block(&self) -> u32 {
        (self.die_block_bytes() / self.program_unit_bytes) as u32
    }
    /// Mapping units per line (`b` in the WAF model).
    pub fn slots_per_line(&self) -> u64 {
        u64::from(self.dies()) * self.die_block_bytes() / MAP_UNIT
    }
    pub fn lines(&self) -> u64 {
        u64::from(self.blocks_per_plane)
    }
    pub fn line_bytes(&self) -> u64 {
        self.slots_per_line() * MAP_UNIT
    }
    /// Physical mapping units (`T`).
    pub fn physical_slots(&self) -> u64 {
        self.lines() * self.slots_per_line()
    }
    pub fn physical_bytes(&self) -> u64 {
        self.physical_slots() * MAP_UNIT
    }
}

/// NAND and firmware timing. Bandwidths in bytes per second; 0 means unlimited.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    /// tR of a 4 KiB read, per cell type (cycled by read-unit index: LSB, MSB, ...).
    pub read_4k_ns: Vec<u64>,
    /// tR of a larger read (up to a read unit), per cell type.
    pub read_unit_ns: Vec<u64>,
    /// tPROG of one program unit.
    pub program_ns: u64,
    /// tBERS of one block.
    pub erase_ns: u64,
    pub channel_bytes_per_s: u64,
    /// Largest channel transfer; reads are moved in chunks of this size, each pipelined with
    /// its host-link transfer.
    pub channel_chunk_bytes: u64,
    /// Host link (PCIe/SATA) bandwidth; 0 = unlimited.
    pub link_bytes_per_s: u64,
    /// Slot of the bandwidth calendars (NVMeVirt: 4 µs).
    pub slot_ns: u64,
    /// Firmware overhead of a read of at most 4 KiB.
    pub fw_read_4k_ns: u64,
    /// Firmware overhead of a larger read.
    pub fw_read_ns: u64,
    /// Firmware overhead of a write, plus the per-4 KiB part.
    pub fw_write_ns: u64,
    pub fw_write_per_4k_ns: u64,
    /// Firmware overhead of a discard request.
    pub fw_trim_ns: u64,
    /// Firmware overhead of a flush.
    pub fw_flush_ns: u64,
}

/// The device write buffer. `bytes == 0` means none: writes complete when programmed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WriteBufferConfig {
    pub bytes: u64,
    /// Complete a write once its data is in the buffer (else when programmed).
    pub early_completion: bool,
}

/// GC victim selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VictimKind {
    /// Fewest valid pages (O(1) with buckets by valid count).
    Greedy,
    /// Largest (1−u)·age/(1+u) (Rosenblum & Ousterhout), age in host writes.
    CostBenefit,
    /// Largest (1−u)·age/(2u) (Kawaguchi et al., cost-benefit for flash).
    CostBenefitFlash,
    /// Oldest sealed line (MQSim's `FIFO`).
    Fifo,
    /// A sealed line with an invalid unit drawn uniformly (MQSim's `RANDOM_P`).
    Random,
    /// Fewest valid pages of `d` lines drawn uniformly (MQSim's `RGA`, "randomized greedy");
    /// 0: log2 of the line count, MQSim's default.
    DChoices(u32),
}

impl VictimKind {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let bad = |why: String| ConfigError::BadValue {
            key: "gc.policy".into(),
            value: s.into(),
            why,
        };
        match s {
            "greedy" => Ok(VictimKind::Greedy),
            "cost-benefit" | "cb" => Ok(VictimKind::CostBenefit),
            "cost-benefit-flash" | "kawaguchi" => Ok(VictimKind::CostBenefitFlash),
            "fifo" => Ok(VictimKind::Fifo),
            "random" => Ok(VictimKind::Random),
            "d-choices" | "rga" => Ok(VictimKind::DChoices(0)),
            _ => {
                let d = s
                    .strip_prefix("d-choices:")
                    .or_else(|| s.strip_prefix("rga:"))
                    .ok_or_else(|| {
                        bad(
                            "expected greedy, cost-benefit, cost-benefit-flash, fifo, random, \
                             d-choices or d-choices:D"
                                .into(),
                        )
                    })?;
                match d.parse::<u32>() {
                    Ok(d) if (1..=1024).contains(&d) => Ok(VictimKind::DChoices(d)),
                    _ => Err(bad(format!(
                        "d-choices:D takes a number of lines to draw from 1 to 1024, got {d:?}"
                    ))),
                }
            }
        }
    }

    /// The name `parse` reads back.
    pub fn name(&self) -> String {
        match self {
            VictimKind::Greedy => "greedy".into(),
            VictimKind::CostBenefit => "cost-benefit".into(),
            VictimKind::CostBenefitFlash => "cost-benefit-flash".into(),
            VictimKind::Fifo => "fifo".into(),
            VictimKind::Random => "random".into(),
            VictimKind::DChoices(0) => "d-choices".into(),
            VictimKind::DChoices(d) => format!("d-choices:{d}"),
        }
    }
}

/// Garbage collection.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GcConfig {
    pub policy: VictimKind,
    /// Foreground GC runs before a host page while at most this many lines are free
    /// (NVMeVirt's `should_gc_high`: `free_line_cnt <= gc_thres_lines_high`, 2). At least 1;
    /// independently of it the host never takes the last free line (kept for GC
    /// destinations): at 1 free line a host that needs a new line collects first.
    pub threshold_lines: u32,
    /// Write-credit pacing (NVMeVirt): when the credits are used up and the trigger holds, ONE
    /// victim is collected, and the host may write the `ipc` pages it freed before GC is
    /// considered again. Without pacing, GC collects until more than `threshold_lines` lines
    /// are free.
    pub pacing: bool,
    /// Idle-time GC (FEMU's background GC in its FTL thread, MQSim's idle GC; NVMeVirt has
    /// none): once no request has reached the device and every die has been idle for this
    /// long, it collects victims, one after another, while fewer than `idle_free` of the
    /// lines are free and the victim has at least 1/8 of its units invalid (FEMU's and
    /// NVMeVirt's background rule). It runs in the gap before the next request, which waits
    /// only for a victim begun before it arrived. 0: off (the default, as NVMeVirt).
    pub idle_ns: u64,
    /// Idle GC runs while free lines are below this share of all lines (FEMU's
    /// `gc_thres_pcent = 75` is 0.25). None (the default): half of the spare lines (physical
    /// minus logical), since a share above the spare can never be reached and then every
    /// victim with 1/8 invalid is collected (the `test` preset at 25 % OP with 0.25: WAF
    /// 2.75 -> 7.6; docs/EMULATOR.md §2.3).
    pub idle_free: Option<f64>,
}

/// The FTL of a device (see `ftl/`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FtlKind {
    /// Page mapping (NVMeVirt's conventional FTL).
    Page,
    /// ZNS-style: conventional zones, then sequential-write zones, no device GC.
    Zoned(crate::ftl::ZonedConfig),
    /// D2FS coupled GC with migration upcalls and virtual overprovisioning.
    Coupled(crate::ftl::CoupledConfig),
    /// IPLFS interval mapping: page-mapping GC over a sparse map of a 2^64-block space.
    Interval(crate::ftl::IntervalConfig),
}

impl FtlKind {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "page" => Ok(FtlKind::Page),
            "zoned" => Ok(FtlKind::Zoned(Default::default())),
            "coupled" | "d2fs" => Ok(FtlKind::Coupled(Default::default())),
            "interval" | "iplfs" => Ok(FtlKind::Interval(Default::default())),
            _ => Err(ConfigError::BadValue {
                key: "ftl".into(),
                value: s.into(),
                why: "expected page, zoned, coupled or interval".into(),
            }),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            FtlKind::Page => "page",
            FtlKind::Zoned(_) => "zoned",
            FtlKind::Coupled(_) => "coupled",
            FtlKind::Interval(_) => "interval",
        }
    }
}

/// Where page contents live.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    /// Not kept: reads return zeros (timing-only sweeps).
    None,
    /// In RAM, sparse.
    Ram,
    /// In a (sparse) backing file, one 4 KiB block per logical address.
    File(PathBuf),
}

impl StoreKind {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "none" => Ok(StoreKind::None),
            "ram" => Ok(StoreKind::Ram),
            _ => match s.strip_prefix("file:") {
                Some(p) if !p.is_empty() => Ok(StoreKind::File(PathBuf::from(p))),
                _ => Err(ConfigError::BadValue {
                    key: "store".into(),
                    value: s.into(),
                    why: "expected none, ram or file:PATH".into(),
                }),
            },
        }
    }
}

/// Which clock the device runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClockKind {
    /// Deterministic simulated time: requests return at once, time jumps to completions.
    Virtual,
    /// Real time: a request returns when the model says it completes (the caller sleeps).
    Wall,
}

impl ClockKind {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "virtual" => Ok(ClockKind::Virtual),
            "wall" => Ok(ClockKind::Wall),
            _ => Err(ConfigError::BadValue {
                key: "clock".into(),
                value: s.into(),
                why: "expected virtual or wall".into(),
            }),
        }
    }
}

/// Full emulator configuration. Every field is public; [`SsdConfig::set`] overrides any of
/// them by name.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SsdConfig {
    /// Name of the preset this came from (for reports).
    pub preset: String,
    pub geometry: Geometry,
    pub timing: Timing,
    pub write_buffer: WriteBufferConfig,
    /// Overprovisioning ρ = (physical − logical) / logical.
    pub op: f64,
    pub gc: GcConfig,
    pub store: StoreKind,
    pub clock: ClockKind,
    /// Initial width of a bandwidth-over-time bin (doubles when the series grows long).
    pub bw_bin_ns: u64,
    /// Which FTL runs the device.
    pub ftl: FtlKind,
}

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

impl SsdConfig {
    /// Names accepted by [`SsdConfig::preset`].
    pub const PRESETS: [&'static str; 4] = ["970pro-like", "sata-like", "test", "tiny"];

    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        match name {
            "970pro-like" => Ok(Self::pro970()),
            "sata-like" => Ok(Self::sata()),
            "test" => Ok(Self::test()),
            "tiny" => Ok(Self::tiny()),
            _ => Err(ConfigError::UnknownPreset(name.to_string())),
        }
    }

    /// NVMeVirt's SAMSUNG_970PRO constants: 8 ch × 2 dies × 2 planes, 16 KiB pages, 32 KiB
    /// one-shot program and read units, 2 MiB die-blocks, 32 MiB lines, 256 GiB raw.
    fn pro970() -> Self {
        SsdConfig {
            preset: "970pro-like".into(),
            geometry: Geometry {
                channels: 8,
                dies_per_channel: 2,
                planes_per_die: 2,
                blocks_per_plane: 8192,
                pages_per_block: 64,
                page_bytes: 16 * KIB,
                read_unit_bytes: 32 * KIB,
                program_unit_bytes: 32 * KIB,
            },
            timing: Timing {
                read_4k_ns: vec![29_760, 41_760],
                read_unit_ns: vec![30_013, 42_013],
                program_ns: 185_000,
                erase_ns: 0,
                channel_bytes_per_s: 800 * MIB,
                channel_chunk_bytes: 16 * KIB,
                link_bytes_per_s: 3360 * MIB,
                slot_ns: 4_000,
                fw_read_4k_ns: 21_500,
                fw_read_ns: 30_490,
                fw_write_ns: 4_000,
                fw_write_per_4k_ns: 460,
                fw_trim_ns: 2_000,
                fw_flush_ns: 0,
            },
            write_buffer: WriteBufferConfig {
                bytes: MIB,
                early_completion: true,
            },
            op: 0.07,
            gc: GcConfig {
                policy: VictimKind::Greedy,
                threshold_lines: 2,
                pacing: true,
                idle_ns: 0,
                idle_free: None,
            },
            store: StoreKind::None,
            clock: ClockKind::Virtual,
            bw_bin_ns: 1_000_000,
            ftl: FtlKind::Page,
        }
    }

    /// A ~500 MB/s SATA-class drive: 4 ch × 2 dies × 2 planes, SATA 6 Gb/s link.
    fn sata() -> Self {
        SsdConfig {
            preset: "sata-like".into(),
            geometry: Geometry {
                channels: 4,
                dies_per_channel: 2,
                planes_per_die: 2,
                blocks_per_plane: 1024,
                pages_per_block: 64,
                page_bytes: 16 * KIB,
                read_unit_bytes: 32 * KIB,
                program_unit_bytes: 32 * KIB,
            },
            timing: Timing {
                read_4k_ns: vec![45_000, 55_000],
                read_unit_ns: vec![46_000, 56_000],
                program_ns: 500_000,
                erase_ns: 3_000_000,
                channel_bytes_per_s: 400 * MIB,
                channel_chunk_bytes: 16 * KIB,
                link_bytes_per_s: 530 * MIB,
                slot_ns: 4_000,
                fw_read_4k_ns: 30_000,
                fw_read_ns: 35_000,
                fw_write_ns: 8_000,
                fw_write_per_4k_ns: 500,
                fw_trim_ns: 5_000,
                fw_flush_ns: 0,
            },
            write_buffer: WriteBufferConfig {
                bytes: 512 * KIB,
                early_completion: true,
            },
            op: 0.07,
            gc: GcConfig {
                policy: VictimKind::Greedy,
                threshold_lines: 2,
                pacing: true,
                idle_ns: 0,
                idle_free: None,
            },
            store: StoreKind::None,
            clock: ClockKind::Virtual,
            bw_bin_ns: 1_000_000,
            ftl: FtlKind::Page,
        }
    }

    /// Round numbers: 2 ch × 2 dies, 4 KiB pages, 128-unit lines, 128 MiB raw, write-through.
    fn test() -> Self {
        SsdConfig {
            preset: "test".into(),
            geometry: Geometry {
                channels: 2,
                dies_per_channel: 2,
                planes_per_die: 1,
                blocks_per_plane: 256,
                pages_per_block: 32,
                page_bytes: 4 * KIB,
                read_unit_bytes: 4 * KIB,
                program_unit_bytes: 4 * KIB,
            },
            timing: Timing {
                read_4k_ns: vec![50_000],
                read_unit_ns: vec![50_000],
                program_ns: 500_000,
                erase_ns: 3_000_000,
                // 4 KiB per 10 µs.
                channel_bytes_per_s: 409_600_000,
                channel_chunk_bytes: 4 * KIB,
                link_bytes_per_s: 0,
                slot_ns: 4_000,
                fw_read_4k_ns: 0,
                fw_read_ns: 0,
                fw_write_ns: 0,
                fw_write_per_4k_ns: 0,
                fw_trim_ns: 0,
                fw_flush_ns: 0,
            },
            write_buffer: WriteBufferConfig {
                bytes: 0,
                early_completion: false,
            },
            op: 0.25,
            // The reference's small-line simulations (and their WAF targets): GC loops while
            // fewer than 2 lines are free, no pacing.
            gc: GcConfig {
                policy: VictimKind::Greedy,
                threshold_lines: 1,
                pacing: false,
                idle_ns: 0,
                idle_free: None,
            },
            store: StoreKind::None,
            clock: ClockKind::Virtual,
            bw_bin_ns: 1_000_000,
            ftl: FtlKind::Page,
        }
    }

    /// Smallest useful device: 1 ch × 2 dies, 32-unit lines, 32 lines (4 MiB raw), OP 50 %.
    fn tiny() -> Self {
        let mut c = Self::test();
        c.preset = "tiny".into();
        c.geometry.channels = 1;
        c.geometry.dies_per_channel = 2;
        c.geometry.pages_per_block = 16;
        c.geometry.blocks_per_plane = 32;
        c.op = 0.5;
        c
    }

    /// Logical 4 KiB blocks exposed to the host: `floor(T / (1 + op))`.
    pub fn logical_blocks(&self) -> u64 {
        let t = self.geometry.physical_slots() as f64;
        (t / (1.0 + self.op)).floor() as u64
    }

    pub fn logical_bytes(&self) -> u64 {
        self.logical_blocks() * MAP_UNIT
    }

    /// Scale the number of lines so that the logical capacity is at least `logical_bytes`
    /// (rounded up to whole lines, OP kept). If that gives fewer than
    /// [`MIN_LINES_WHEN_SCALED`] lines, the block size is halved (down to one program unit)
    /// first; channel/die/plane counts and timing never change.
    pub fn with_capacity(mut self, logical_bytes: u64) -> Result<Self, ConfigError> {
        if logical_bytes < MAP_UNIT {
            return Err(ConfigError::Invalid(format!(
                "capacity {logical_bytes} B is smaller than one 4 KiB block"
            )));
        }
        let phys = (logical_bytes as f64 * (1.0 + self.op)).ceil() as u64;
        loop {
            let line = self.geometry.line_bytes().max(1);
            let lines = phys.div_ceil(line);
            let half_ppb = self.geometry.pages_per_block / 2;
            let can_halve = half_ppb > 0
                && (u64::from(half_ppb)
                    * u64::from(self.geometry.planes_per_die)
                    * self.geometry.page_bytes)
                    % self.geometry.program_unit_bytes.max(1)
                    == 0;
            if lines >= MIN_LINES_WHEN_SCALED || !can_halve {
                // GC needs a few spare lines on top of the OP share.
                let lines = lines.max(u64::from(self.gc.threshold_lines) + 4);
                self.geometry.blocks_per_plane = u32::try_from(lines).map_err(|_| {
                    ConfigError::Invalid(format!("capacity {logical_bytes} B needs too many lines"))
                })?;
                break;
            }
            self.geometry.pages_per_block = half_ppb;
        }
        // The floor in logical_blocks may lose a block to rounding; add lines until it fits.
        while self.logical_bytes() < logical_bytes {
            self.geometry.blocks_per_plane += 1;
        }
        self.validate()?;
        Ok(self)
    }

    /// Check every invariant listed in the module header.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let g = &self.geometry;
        let bad = |s: String| Err(ConfigError::Invalid(s));
        if g.channels == 0
            || g.dies_per_channel == 0
            || g.planes_per_die == 0
            || g.blocks_per_plane == 0
            || g.pages_per_block == 0
        {
            return bad("channels, dies, planes, blocks and pages must all be at least 1".into());
        }
        for (name, v) in [
            ("page_bytes", g.page_bytes),
            ("read_unit_bytes", g.read_unit_bytes),
            ("program_unit_bytes", g.program_unit_bytes),
        ] {
            if v == 0 || v % MAP_UNIT != 0 {
                return bad(format!("{name} = {v} is not a positive multiple of 4096"));
            }
        }
        if g.program_unit_bytes % g.read_unit_bytes != 0 {
            return bad("program_unit_bytes must be a multiple of read_unit_bytes".into());
        }
        if g.die_block_bytes() % g.program_unit_bytes != 0 {
            return bad(format!(
                "a die-block ({} B = planes × pages × page) is not a whole number of program units ({} B)",
                g.die_block_bytes(),
                g.program_unit_bytes
            ));
        }
        if g.physical_slots() > MAX_PHYSICAL_UNITS {
            return bad(format!(
                "{} physical 4 KiB units exceed the 32-bit physical page number",
                g.physical_slots()
            ));
        }
        if !(self.op.is_finite() && self.op > 0.0) {
            return bad(format!("overprovisioning {} must be > 0", self.op));
        }
        let spare = g.physical_slots() - self.logical_blocks();
        let need_lines = u64::from(self.gc.threshold_lines) + 2;
        if spare < need_lines * g.slots_per_line() {
            return bad(format!(
                "overprovisioning {} leaves {} spare 4 KiB units, less than {} lines ({} units) needed by GC; raise --op or the capacity",
                self.op,
                spare,
                need_lines,
                need_lines * g.slots_per_line()
            ));
        }
        if self.gc.threshold_lines < 1 {
            return bad("gc.threshold_lines must be at least 1".into());
        }
        if self.gc.idle_ns > 0 && matches!(self.ftl, FtlKind::Zoned(_) | FtlKind::Coupled(_)) {
            return bad(format!(
                "gc_idle: the {} FTL has no idle-time GC (the page and interval FTLs have)",
                self.ftl.name()
            ));
        }
        if let Some(f) = self.gc.idle_free {
            if !(f > 0.0 && f < 1.0) {
                return bad(format!(
                    "gc_idle_free {f} must be a share of the lines between 0 and 1"
                ));
            }
        }
        let t = &self.timing;
        if t.read_4k_ns.is_empty() || t.read_unit_ns.is_empty() {
            return bad("read_4k_ns and read_unit_ns need at least one value".into());
        }
        if t.channel_bytes_per_s == 0 {
            return bad("channel_bytes_per_s must be > 0".into());
        }
        if t.slot_ns == 0 {
            return bad("slot_ns must be > 0".into());
        }
        for (name, bw) in [
            ("channel_bytes_per_s", t.channel_bytes_per_s),
            ("link_bytes_per_s", t.link_bytes_per_s),
        ] {
            if bw != 0 && (u128::from(bw) * u128::from(t.slot_ns)) / 1_000_000_000 < 128 {
                return bad(format!(
                    "{name} = {bw} moves less than 128 B per {} ns slot",
                    t.slot_ns
                ));
            }
        }
        if t.channel_chunk_bytes == 0 || t.channel_chunk_bytes % MAP_UNIT != 0 {
            return bad("channel_chunk_bytes must be a positive multiple of 4096".into());
        }
        let wb = &self.write_buffer;
        if wb.bytes != 0 && wb.bytes < 2 * g.program_unit_bytes {
            return bad(format!(
                "write buffer of {} B must hold at least two program units ({} B)",
                wb.bytes,
                2 * g.program_unit_bytes
            ));
        }
        if wb.bytes == 0 && wb.early_completion {
            return bad("early completion needs a write buffer (write_buffer_bytes > 0)".into());
        }
        if self.bw_bin_ns == 0 {
            return bad("bw_bin_ns must be > 0".into());
        }
        Ok(())
    }

    /// Names of the parameters [`SsdConfig::set`] accepts.
    pub const KEYS: [&'static str; 50] = [
        "channels",
        "dies_per_channel",
        "planes_per_die",
        "blocks_per_plane",
        "pages_per_block",
        "page_bytes",
        "read_unit_bytes",
        "program_unit_bytes",
        "read_4k_ns",
        "read_unit_ns",
        "program_ns",
        "erase_ns",
        "channel_bytes_per_s",
        "channel_chunk_bytes",
        "link_bytes_per_s",
        "slot_ns",
        "fw_read_4k_ns",
        "fw_read_ns",
        "fw_write_ns",
        "fw_write_per_4k_ns",
        "fw_trim_ns",
        "fw_flush_ns",
        "write_buffer_bytes",
        "early_completion",
        "op",
        "gc_policy",
        "gc_threshold_lines",
        "gc_pacing",
        "gc_idle",
        "gc_idle_free",
        "store",
        "clock",
        "bw_bin_ns",
        "capacity",
        "preset",
        "ftl",
        "vop_degree",
        "conventional_bytes",
        "upcall_pairs",
        "vop_free_zones",
        "vop_streams",
        "map_node_blocks",
        "zone_map_nodes",
        "root_region_bits",
        "compaction_threshold",
        "compaction_period",
        "compaction_node_ns",
        "compaction_entry_ns",
        "min_region_blocks",
        "max_map_bytes",
    ];

    /// Override one parameter by name. Sizes accept units (`16KiB`, `800MiB`), durations
    /// accept `ns/us/ms/s`, lists are comma-separated. `capacity` runs the scaler. Does not
    /// validate the whole config (call [`SsdConfig::validate`] when done).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |why: &str| ConfigError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            why: why.to_string(),
        };
        let size = || parse_size(value);
        let u32v = || -> Result<u32, ConfigError> {
            u32::try_from(parse_size(value)?).map_err(|_| bad("too large"))
        };
        let dur = || parse_duration_ns(value);
        let durs = || -> Result<Vec<u64>, ConfigError> {
            value
                .split(',')
                .map(|v| parse_duration_ns(v.trim()))
                .collect()
        };
        let boolv = || match value {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(bad("expected true or false")),
        };
        let g = &mut self.geometry;
        let t = &mut self.timing;
        match key {
            "channels" => g.channels = u32v()?,
            "dies_per_channel" => g.dies_per_channel = u32v()?,
            "planes_per_die" => g.planes_per_die = u32v()?,
            "blocks_per_plane" => g.blocks_per_plane = u32v()?,
            "pages_per_block" => g.pages_per_block = u32v()?,
            "page_bytes" => g.page_bytes = size()?,
            "read_unit_bytes" => g.read_unit_bytes = size()?,
            "program_unit_bytes" => g.program_unit_bytes = size()?,
            "read_4k_ns" => t.read_4k_ns = durs()?,
            "read_unit_ns" => t.read_unit_ns = durs()?,
            "program_ns" => t.program_ns = dur()?,
            "erase_ns" => t.erase_ns = dur()?,
            "channel_bytes_per_s" => t.channel_bytes_per_s = size()?,
            "channel_chunk_bytes" => t.channel_chunk_bytes = size()?,
            "link_bytes_per_s" => t.link_bytes_per_s = size()?,
            "slot_ns" => t.slot_ns = dur()?,
            "fw_read_4k_ns" => t.fw_read_4k_ns = dur()?,
            "fw_read_ns" => t.fw_read_ns = dur()?,
            "fw_write_ns" => t.fw_write_ns = dur()?,
            "fw_write_per_4k_ns" => t.fw_write_per_4k_ns = dur()?,
            "fw_trim_ns" => t.fw_trim_ns = dur()?,
            "fw_flush_ns" => t.fw_flush_ns = dur()?,
            "write_buffer_bytes" => self.write_buffer.bytes = size()?,
            "early_completion" => self.write_buffer.early_completion = boolv()?,
            "op" => self.op = parse_fraction(key, value)?,
            "gc_policy" => self.gc.policy = VictimKind::parse(value)?,
            "gc_threshold_lines" => self.gc.threshold_lines = u32v()?,
            "gc_pacing" => self.gc.pacing = boolv()?,
            "gc_idle" => {
                self.gc.idle_ns = match value {
                    "off" | "no" => 0,
                    v => parse_duration_ns(v)?,
                }
            }
            "gc_idle_free" => {
                self.gc.idle_free = match value {
                    "auto" => None,
                    v => Some(parse_fraction(key, v)?),
                }
            }
            "store" => self.store = StoreKind::parse(value)?,
            "clock" => self.clock = ClockKind::parse(value)?,
            "bw_bin_ns" => self.bw_bin_ns = dur()?,
            "capacity" => {
                let cap = size()?;
                *self = self.clone().with_capacity(cap)?;
            }
            "preset" => *self = Self::preset(value)?,
            "ftl" => self.ftl = FtlKind::parse(value)?,
            "vop_degree" => match &mut self.ftl {
                FtlKind::Coupled(c) => {
                    c.degree = value
                        .parse::<f64>()
                        .ok()
                        .filter(|d| d.is_finite() && (0.5..=64.0).contains(d))
                        .ok_or_else(|| bad("expected a degree in 0.5..=64 (e.g. 1.4)"))?
                }
                _ => return Err(bad("set ftl=coupled first")),
            },
            "conventional_bytes" => match &mut self.ftl {
                FtlKind::Coupled(c) => c.conventional_bytes = size()?,
                FtlKind::Zoned(z) => z.conventional_bytes = size()?,
                _ => return Err(bad("set ftl=zoned or ftl=coupled first")),
            },
            "upcall_pairs" => match &mut self.ftl {
                FtlKind::Coupled(c) => {
                    c.upcall_pairs = usize::try_from(size()?)
                        .ok()
                        .filter(|n| (1..=flashlog_dev::MAX_UPCALL_PAIRS).contains(n))
                        .ok_or_else(|| bad("expected 1..=256"))?
                }
                _ => return Err(bad("set ftl=coupled first")),
            },
            "vop_free_zones" => match &mut self.ftl {
                FtlKind::Coupled(c) => c.regular_free_zones = u32v()?,
                _ => return Err(bad("set ftl=coupled first")),
            },
            "vop_streams" => match &mut self.ftl {
                FtlKind::Coupled(c) => c.block_type_streams = boolv()?,
                _ => return Err(bad("set ftl=coupled first")),
            },
            "map_node_blocks"
            | "zone_map_nodes"
            | "root_region_bits"
            | "compaction_threshold"
            | "compaction_period"
            | "compaction_node_ns"
            | "compaction_entry_ns"
            | "min_region_blocks"
            | "max_map_bytes" => {
                let FtlKind::Interval(cur) = &mut self.ftl else {
                    return Err(bad("set ftl=interval first"));
                };
                // Change a copy: a refused value leaves the configuration as it was.
                let mut c = cur.clone();
                match key {
                    "map_node_blocks" => c.map_node_blocks = size()?,
                    "zone_map_nodes" => c.zone_map_nodes = size()?,
                    "min_region_blocks" => c.min_region_blocks = size()?,
                    "max_map_bytes" => c.max_map_bytes = size()?,
                    "root_region_bits" => {
                        c.root_region_bits = value
                            .parse()
                            .map_err(|_| bad("expected a bit count such as 56"))?
                    }
                    "compaction_threshold" => c.compaction_threshold = parse_fraction(key, value)?,
                    "compaction_period" => c.compaction_period_ns = dur()?,
                    "compaction_node_ns" => c.compaction_node_ns = dur()?,
                    _ => c.compaction_entry_ns = dur()?,
                }
                c.validate().map_err(|why| bad(&why))?;
                *cur = c;
            }
            _ => return Err(ConfigError::UnknownKey(key.to_string())),
        }
        Ok(())
    }

    /// Apply a `key=value` override.
    pub fn set_kv(&mut self, kv: &str) -> Result<(), ConfigError> {
        match kv.split_once('=') {
            Some((k, v)) => self.set(k.trim(), v.trim()),
            None => Err(ConfigError::BadValue {
                key: kv.to_string(),
                value: String::new(),
                why: "expected KEY=VALUE".into(),
            }),
        }
    }
}

/// Parse an overprovisioning-style fraction (`0.07`, or `7%`).
pub fn parse_fraction(key: &str, s: &str) -> Result<f64, ConfigError> {
    let bad = || ConfigError::BadValue {
        key: key.to_string(),
        value: s.to_string(),
        why: "expected a fraction such as 0.07 or 7%".into(),
    };
    let (num, scale) = match s.trim().strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s.trim(), 1.0),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(v * scale)
}

/// Parse a size: `4096`, `4KiB`, `1.5GiB`, `800MB`. Binary units for `K/M/G/T` and `KiB…`,
/// decimal for `KB/MB/GB/TB`.
pub fn parse_size(s: &str) -> Result<u64, ConfigError> {
    let bad = || ConfigError::BadSize(s.to_string());
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| bad())?;
        let bytes = v * mult as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(bad());
        }
        Ok(bytes.round() as u64)
    } else {
        let v: u64 = num.parse().map_err(|_| bad())?;
        v.checked_mul(mult).ok_or_else(bad)
    }
}

/// Parse a duration into nanoseconds: `185000`, `185us`, `3ms`, `1s` (plain number = ns).
pub fn parse_duration_ns(s: &str) -> Result<u64, ConfigError> {
    let bad = || ConfigError::BadDuration(s.to_string());
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: f64 = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = v * mult;
    if !ns.is_finite() || ns < 0.0 || ns > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_have_expected_shapes() {
        for name in SsdConfig::PRESETS {
            let c = SsdConfig::preset(name).unwrap();
            c.validate().unwrap();
        }
        let p = SsdConfig::preset("970pro-like").unwrap();
        assert_eq!(p.geometry.line_bytes(), 32 * MIB);
        assert_eq!(p.geometry.physical_bytes(), 256 << 30);
        let t = SsdConfig::preset("test").unwrap();
        assert_eq!(t.geometry.slots_per_line(), 128);
        let tiny = SsdConfig::preset("tiny").unwrap();
        assert_eq!(tiny.geometry.slots_per_line(), 32);
        assert_eq!(tiny.geometry.lines(), 32);
        assert!(matches!(
            SsdConfig::preset("nope"),
            Err(ConfigError::UnknownPreset(_))
        ));
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1.5 MiB").unwrap(), 3 << 19);
        assert_eq!(parse_size("800MB").unwrap(), 800_000_000);
        assert_eq!(parse_size("16k").unwrap(), 16384);
        for bad in ["", "GiB", "4XB", "-1", "1..2G", "99999999999999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration_ns("185us").unwrap(), 185_000);
        assert_eq!(parse_duration_ns("3ms").unwrap(), 3_000_000);
        assert_eq!(parse_duration_ns("42").unwrap(), 42);
        assert!(parse_duration_ns("3 parsecs").is_err());
        assert!((parse_fraction("op", "7%").unwrap() - 0.07).abs() < 1e-12);
        assert!(parse_fraction("op", "x").is_err());
    }

    #[test]
    fn capacity_scaler_keeps_timing_and_enough_lines() {
        for gib in [1u64, 2, 4, 8] {
            let c = SsdConfig::preset("970pro-like")
                .unwrap()
                .with_capacity(gib << 30)
                .unwrap();
            assert!(c.logical_bytes() >= gib << 30);
            assert!(c.geometry.lines() >= MIN_LINES_WHEN_SCALED, "{gib} GiB");
            assert_eq!(c.geometry.dies(), 16);
            assert_eq!(c.timing.program_ns, 185_000);
            // Not more than one line of rounding slack beyond OP.
            let want_phys = (gib << 30) as f64 * 1.07;
            assert!(
                (c.geometry.physical_bytes() as f64)
                    < want_phys + 2.0 * c.geometry.line_bytes() as f64
            );
        }
        assert!(SsdConfig::preset("test").unwrap().with_capacity(0).is_err());
    }

    #[test]
    fn overrides_work_and_bad_values_are_refused() {
        let mut c = SsdConfig::preset("test").unwrap();
        c.set_kv("program_ns=200us").unwrap();
        assert_eq!(c.timing.program_ns, 200_000);
        c.set_kv("read_4k_ns=10us,20us").unwrap();
        assert_eq!(c.timing.read_4k_ns, vec![10_000, 20_000]);
        c.set_kv("channel_bytes_per_s=800MiB").unwrap();
        c.set_kv("gc_policy=cost-benefit").unwrap();
        for p in [
            "greedy",
            "cost-benefit",
            "fifo",
            "random",
            "d-choices",
            "d-choices:7",
        ] {
            c.set_kv(&format!("gc_policy={p}")).unwrap();
            assert_eq!(c.gc.policy.name(), p);
        }
        assert_eq!(VictimKind::parse("rga:3").unwrap(), VictimKind::DChoices(3));
        for bad in ["d-choices:0", "d-choices:x", "rga:2000", "lru", ""] {
            assert!(VictimKind::parse(bad).is_err(), "{bad}");
        }
        c.set_kv("gc_policy=cost-benefit").unwrap();
        c.set_kv("store=file:/tmp/x").unwrap();
        assert!(c.set_kv("bogus=1").is_err());
        assert!(c.set_kv("program_ns=fast").is_err());
        assert!(c.set_kv("noequals").is_err());
        c.validate().unwrap();
        c.op = 0.001;
        assert!(c.validate().is_err());
        let mut c = SsdConfig::preset("test").unwrap();
        c.geometry.page_bytes = 1000;
        assert!(c.validate().is_err());
    }
}
