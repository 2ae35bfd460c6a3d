//! Block devices for Flashlog.
//!
//! Owns: the [`BlockDevice`] trait every layer above talks to, the simple backends
//! (RAM, image file / block device, power-cut simulation), [`HintLog`] (lists each write's
//! hint, for tests) and [`UpcallTap`], the host end of D2FS migration upcalls. The flash SSD
//! emulator lives in `flashlog-ssd` and implements the same trait.
//!
//! Write hints: [`BlockDevice::write_hinted`] carries a [`WriteHint`] (the kind of block
//! written: file-system metadata, data, node), D2FS's "block type in the I/O command" (FAST '25
//! §6). Hints are advisory: a device may ignore them and must return the same contents either
//! way. A wrapper device forwards `write_hinted` to its inner device with the hint unchanged
//! (the default implementation drops the hint, which is right only for a backend).
//!
//! Invariants: all I/O is in whole 4 KiB blocks ([`BLOCK_SIZE`]) at 64-bit block addresses;
//! a buffer whose length is not a multiple of the block size is refused with
//! [`DevError::Misaligned`]; an access past [`Capabilities::block_count`] is refused with
//! [`DevError::OutOfRange`]. A write is durable only after a later `flush` returned `Ok`.
//!
//! Lock order: each backend has only leaf locks (no backend calls back into the caller while
//! holding a lock).

mod file;
mod gated;
mod hint;
mod ram;
mod sim;
mod upcall;

pub use file::{FileDevice, DIRECT_ALIGN};
pub use gated::Gated;
pub use hint::{HintLog, HintedWrite};
pub use ram::RamDevice;
pub use sim::{CrashMode, SimDevice, SimOp};
pub use upcall::{Upcall, UpcallTap, MAX_QUEUED_UPCALLS};

use std::sync::Arc;

/// Size of one block, the unit of every device request.
pub const BLOCK_SIZE: usize = 4096;
/// `BLOCK_SIZE` as u64, for address arithmetic.
pub const BLOCK_SIZE_U64: u64 = BLOCK_SIZE as u64;

/// The kind of block a write carries, sent with the write (an NVMe stream id in the paper's
/// artifact). Advisory: it never changes what a read returns. A device that separates
/// streams (the D2FS coupled FTL keeps one GC destination per block type) places blocks of
/// different kinds apart; every other device ignores it.
///
/// One value per stream id; more kinds (e.g. hot/warm/cold data) would be new variants with
/// new ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WriteHint {
    /// No hint (a plain [`BlockDevice::write`]).
    #[default]
    None,
    /// File-system metadata rewritten in place (checkpoint, NAT, SIT, SSA).
    Meta,
    /// File data (the paper's "data block").
    Data,
    /// Node blocks: inodes and the file map (the paper's "filemap block").
    Node,
}

impl WriteHint {
    /// Every hint, in stream-id order.
    pub const ALL: [WriteHint; 4] = [
        WriteHint::None,
        WriteHint::Meta,
        WriteHint::Data,
        WriteHint::Node,
    ];

    /// The stream id the hint travels as (0 = none), dense from 0.
    pub const fn stream_id(self) -> u8 {
        self as u8
    }

    /// The hint of a stream id; None for an id no hint has.
    pub fn from_stream_id(id: u8) -> Option<WriteHint> {
        WriteHint::ALL.get(usize::from(id)).copied()
    }

    /// Short name, for reports.
    pub const fn name(self) -> &'static str {
        match self {
            WriteHint::None => "none",
            WriteHint::Meta => "meta",
            WriteHint::Data => "data",
            WriteHint::Node => "node",
        }
    }
}

/// What a device declares about itself. The file system adapts to these, never to the
/// backend's concrete type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Number of addressable 4 KiB blocks (the logical space, which may exceed physical
    /// capacity on devices with virtual overprovisioning).
    pub block_count: u64,
    /// Discard (TRIM) is meaningful: the device frees space on discard.
    pub discard: bool,
    /// Reads of discarded blocks return zeros.
    pub discard_zeroes: bool,
    /// Completions may carry [`DeviceEvent::Migrated`] records (D2FS coupled GC).
    pub migration_upcalls: bool,
    /// The logical space is effectively infinite (IPLFS): addresses are never reused.
    pub infinite_space: bool,
    /// Blocks the device can really hold mapped at once: `block_count` on an ordinary
    /// device; on an infinite space the physical capacity it exposes (a `gc=none` volume
    /// sizes its user space and its ENOSPC from it).
    pub capacity_blocks: u64,
    /// Contents survive the process (file, block device).
    pub persistent: bool,
    /// Opened for reading only: writes, discards and flushes of new data fail (a mount on
    /// it must be read-only).
    pub read_only: bool,
    /// Blocks per zone on a zoned device (writes in a zone must follow its rules: sequential
    /// for ZNS-style zones, append-only for D2FS's block-associative zones), else 0.
    pub zone_blocks: u64,
    /// Blocks at the start of the device that accept writes anywhere (conventional,
    /// page-mapped); `block_count` on an ordinary device.
    pub conventional_blocks: u64,
    /// Blocks at the end of the device that only the device allocates (D2FS coupled GC: the
    /// GC region, one device capacity, where the device packs the pages it migrates); the
    /// host never writes there but must track the blocks pairs move there. 0 elsewhere.
    pub gc_region_blocks: u64,
    /// Human-readable kind, for reports.
    pub kind: String,
}

impl Capabilities {
    /// Capabilities of a plain device of `block_count` blocks.
    pub fn plain(kind: &str, block_count: u64) -> Self {
        Capabilities {
            block_count,
            discard: true,
            discard_zeroes: true,
            migration_upcalls: false,
            infinite_space: false,
            capacity_blocks: block_count,
            persistent: false,
            read_only: false,
            zone_blocks: 0,
            conventional_blocks: block_count,
            gc_region_blocks: 0,
            kind: kind.to_string(),
        }
    }
}

/// One migration record: the device moved the block at `old` to `new` during its own GC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationPair {
    pub old: u64,
    pub new: u64,
}

/// Most ranges in one [`BlockDevice::discard_many`] request (NVMe DSM: 256 ranges).
pub const MAX_DISCARD_RANGES: usize = 256;

/// Most pairs in one upcall (D2FS: 256 16-byte pairs, one 4 KiB page).
pub const MAX_UPCALL_PAIRS: usize = 256;

/// An event a device reports to the host, piggybacked on an ordinary completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// A D2FS migration upcall: the device moved these blocks during its own garbage
    /// collection (coupled GC) and the host must remap them, in order. Upcall ids increase by
    /// one per upcall; record ids are `first_record..first_record + pairs.len()`. The device
    /// keeps the records (and may deliver the same upcall again after a restart) until the host
    /// acknowledges it with [`BlockDevice::ack_migrations`]; applying a pair twice must be
    /// harmless.
    Migrated {
        upcall: u64,
        first_record: u64,
        pairs: Vec<MigrationPair>,
    },
}

/// What a finished request returns: possibly some device events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub events: Vec<DeviceEvent>,
}

impl Completion {
    pub const fn empty() -> Self {
        Completion { events: Vec::new() }
    }
}

impl From<std::io::Error> for DevError {
    fn from(e: std::io::Error) -> Self {
        DevError::Io(e)
    }
}

/// Device errors. Every error is final for that request; callers poison the mount on a
/// failed write or flush.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The message includes the OS error's; it is not also the `source` (an error chain
    /// printed with `{:#}` would say it twice).
    #[error("I/O error: {0}")]
    Io(std::io::Error),
    #[error(
        "request at block {addr} (+{count}) is past the end of the device ({block_count} blocks)"
    )]
    OutOfRange {
        addr: u64,
        count: u64,
        block_count: u64,
    },
    #[error("buffer of {len} bytes is not a whole number of 4 KiB blocks")]
    Misaligned { len: usize },
    #[error("power was cut: the device accepts no more requests")]
    PowerCut,
    #[error("injected fault: {0}")]
    Injected(String),
    #[error("device is read-only")]
    ReadOnly,
    #[error("not supported by this device: {0}")]
    Unsupported(String),
    /// The device refused a request that breaks its rules (e.g. a non-sequential write in a
    /// zone); nothing changed.
    #[error("refused by the device: {0}")]
    Refused(String),
    /// The image file or block device is locked by another user of the volume (a mount,
    /// mkfs or fsck, in this process or another): see [`FileDevice::open`].
    #[error("{0} is in use: another flashlog mount, mkfs or fsck holds it (in this process or another); unmount it first")]
    InUse(String),
    /// A block device that the kernel or another program holds exclusively (a mounted
    /// file system, a device-mapper or RAID member): refused for writing.
    #[error("{0} is busy: the kernel or another program holds it exclusively (a mounted file system, a device-mapper or RAID member); nothing was written")]
    Busy(String),
    /// A block device the kernel marks read-only, asked for writing.
    #[error("{0} is a read-only block device; it can only be opened read-only (mount -o ro)")]
    ReadOnlyDevice(String),
}

pub type DevResult<T> = Result<T, DevError>;

/// A 4 KiB-block device with 64-bit addresses.
///
/// Implementations are shared between threads (`&self` everywhere) and must allow
/// concurrent requests to different blocks.
pub trait BlockDevice: Send + Sync {
    fn capabilities(&self) -> &Capabilities;
    /// Read `buf.len() / 4096` blocks starting at `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion>;
    /// Write `buf.len() / 4096` blocks starting at `addr`. Not durable until `flush`.
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion>;
    /// `write` with the kind of block written ([`WriteHint`], advisory). The default drops
    /// the hint and calls `write`: right for a backend that does not separate streams, wrong
    /// for a wrapper, which must forward the hint to its inner device's `write_hinted`.
    fn write_hinted(&self, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Completion> {
        let _ = hint;
        self.write(addr, buf)
    }
    /// `write_hinted` that calls `accepted` once the device has taken the request in its
    /// order: a write of another thread that starts after `accepted` returned reaches the
    /// device after this one. A device that queues may call it before the write completes
    /// (the emulated SSD on the wall clock: once the request is scheduled, before its time
    /// has passed), so that a caller writing in a fixed order (one zone's buffers) can
    /// start the next one meanwhile. The default calls it after the write returns; it is
    /// not called when the write fails before being accepted. Wrappers forward it.
    fn write_hinted_ordered(
        &self,
        addr: u64,
        buf: &[u8],
        hint: WriteHint,
        accepted: &mut dyn FnMut(),
    ) -> DevResult<Completion> {
        let r = self.write_hinted(addr, buf, hint)?;
        accepted();
        Ok(r)
    }
    /// Tell the device `count` blocks from `addr` no longer hold data.
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion>;
    /// Make every completed write durable.
    fn flush(&self) -> DevResult<Completion>;
    /// Read several extents with as many requests in flight as the device allows. The default
    /// issues them one by one; devices with internal parallelism override it.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        let mut all = Completion::empty();
        for (addr, buf) in reqs.iter_mut() {
            let c = self.read(*addr, buf)?;
            all.events.extend(c.events);
        }
        Ok(all)
    }
    /// Discard several extents `(addr, count)` in one request (NVMe Dataset Management carries
    /// up to [`MAX_DISCARD_RANGES`] ranges per command). Ranges are applied in order; on an
    /// error the ranges before the failing one are discarded. The default issues them one
    /// by one; devices with a per-command cost override it.
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        let mut all = Completion::empty();
        for &(addr, count) in ranges {
            let c = self.discard(addr, count)?;
            all.events.extend(c.events);
        }
        Ok(all)
    }
    /// The host applied and checkpointed every migration upcall with id `<= upto`; the device
    /// may forget their records. Devices without `migration_upcalls` refuse.
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        let _ = upto;
        Err(DevError::Unsupported(
            "migration upcalls (D2FS device-driven GC)".into(),
        ))
    }
    /// Deliver every sent but unacknowledged upcall again, in order (host restart). Devices
    /// without `migration_upcalls` refuse.
    fn resend_migrations(&self) -> DevResult<()> {
        Err(DevError::Unsupported(
            "migration upcalls (D2FS device-driven GC)".into(),
        ))
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for Arc<T> {
    fn capabilities(&self) -> &Capabilities {
        (**self).capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        (**self).read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        (**self).write(addr, buf)
    }
    fn write_hinted(&self, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Completion> {
        (**self).write_hinted(addr, buf, hint)
    }
    fn write_hinted_ordered(
        &self,
        addr: u64,
        buf: &[u8],
        hint: WriteHint,
        accepted: &mut dyn FnMut(),
    ) -> DevResult<Completion> {
        (**self).write_hinted_ordered(addr, buf, hint, accepted)
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        (**self).discard(addr, count)
    }
    fn flush(&self) -> DevResult<Completion> {
        (**self).flush()
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> DevResult<Completion> {
        (**self).read_many(reqs)
    }
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        (**self).discard_many(ranges)
    }
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        (**self).ack_migrations(upto)
    }
    fn resend_migrations(&self) -> DevResult<()> {
        (**self).resend_migrations()
    }
}

/// Check a request against the device size and the block granularity; returns the number
/// of blocks. Shared by every backend so that all refuse bad requests the same way.
pub fn check_request(caps: &Capabilities, addr: u64, len: usize) -> DevResult<u64> {
    if len % BLOCK_SIZE != 0 {
        return Err(DevError::Misaligned { len });
    }
    let count = (len / BLOCK_SIZE) as u64;
    check_range(caps, addr, count)?;
    Ok(count)
}

/// Check that `addr..addr+count` lies inside the device.
pub fn check_range(caps: &Capabilities, addr: u64, count: u64) -> DevResult<()> {
    match addr.checked_add(count) {
        Some(end) if end <= caps.block_count => Ok(()),
        _ => Err(DevError::OutOfRange {
            addr,
            count,
            block_count: caps.block_count,
        }),
    }
}
