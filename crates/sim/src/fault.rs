//! Fault injection: a device that fails (or panics on) a chosen request, and the checks
//! that the mount reacts by poisoning itself.
//!
//! Owns [`FaultDevice`] and [`run_fault`]. The fault model: request number `at` of one kind
//! (reads, writes or flushes, each counted separately from 0) fails with
//! `DevError::Injected` and has no effect on the device; or the write `at` panics inside the
//! file system's call (a bug in a background worker, as the checkpoint thread would see it).
//!
//! What must hold after a write or flush fault (docs/TESTING.md, "Fault injection"):
//! 1. the failing operation returns an error, and every later mutating operation returns
//!    `Error::Poisoned` (the mount is read-only with a clear reason);
//! 2. the mount issues no write, discard or flush after the fault (it never writes over a
//!    state it does not know), and unmount refuses;
//! 3. nothing already durable is lost: the device image without the failed request, both
//!    as the last flush left it and with every completed write kept, passes fsck and the
//!    model check.
//!
//! After a read fault the operation (or mount) fails with a typed error and the same image
//! checks hold.

use crate::crash::{check_image, Failure};
use crate::image::{base_image, sim_mount_options};
use crate::model::Model;
use crate::workload::{apply, Outcome, Workload};
use flashlog_core::{Error, Fs, GcPolicy, MountOptions, ROOT_INO};
use flashlog_dev::{
    BlockDevice, Capabilities, Completion, CrashMode, DevError, DevResult, SimDevice, WriteHint,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Read,
    Write,
    Flush,
    /// The write numbered `at` panics.
    PanicOnWrite,
}

impl FaultKind {
    pub const ALL: [FaultKind; 3] = [FaultKind::Read, FaultKind::Write, FaultKind::Flush];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Read => "read",
            FaultKind::Write => "write",
            FaultKind::Flush => "flush",
            FaultKind::PanicOnWrite => "panic",
        }
    }

    pub fn parse(s: &str) -> Result<FaultKind, String> {
        match s {
            "read" => Ok(FaultKind::Read),
            "write" => Ok(FaultKind::Write),
            "flush" => Ok(FaultKind::Flush),
            "panic" => Ok(FaultKind::PanicOnWrite),
            _ => Err(format!(
                "unknown fault kind {s:?} (expected read, write, flush or panic)"
            )),
        }
    }
}

/// A device that injects one fault, then refuses (and counts) every mutating request. Over
/// any device: the RAM images here, the emulated interval SSD in `gc_none`.
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    kind: FaultKind,
    at: u64,
    armed: AtomicBool,
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    fired: AtomicBool,
    /// Writes, discards and flushes the file system issued after the fault.
    after_fault: AtomicU64,
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, kind: FaultKind, at: u64) -> Self {
        FaultDevice {
            inner,
            kind,
            at,
            armed: AtomicBool::new(true),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            fired: AtomicBool::new(false),
            after_fault: AtomicU64::new(0),
        }
    }

    /// Start counting requests from zero now (and arm the fault if `on`).
    pub fn arm(&self, on: bool) {
        self.reads.store(0, Ordering::SeqCst);
        self.writes.store(0, Ordering::SeqCst);
        self.flushes.store(0, Ordering::SeqCst);
        self.armed.store(on, Ordering::SeqCst);
    }

    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    pub fn requests_after_fault(&self) -> u64 {
        self.after_fault.load(Ordering::SeqCst)
    }

    /// Requests counted so far: (reads, writes, flushes).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.reads.load(Ordering::SeqCst),
            self.writes.load(Ordering::SeqCst),
            self.flushes.load(Ordering::SeqCst),
        )
    }

    /// Count a request of `kind`; true if it is the one to fail.
    fn hit(&self, counter: &AtomicU64, kind: FaultKind) -> bool {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let want =
            self.kind == kind || (self.kind == FaultKind::PanicOnWrite && kind == FaultKind::Write);
        if want
            && n == self.at
            && self.armed.load(Ordering::SeqCst)
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            return true;
        }
        false
    }

    fn refuse_after_fault(&self) -> DevResult<()> {
        if self.fired() {
            self.after_fault.fetch_add(1, Ordering::SeqCst);
            return Err(DevError::Injected(
                "request after the injected fault".into(),
            ));
        }
        Ok(())
    }

    fn fail(&self, what: &str) -> DevError {
        if self.kind == FaultKind::PanicOnWrite {
            panic!("injected panic on {what} {}", self.at);
        }
        DevError::Injected(format!("{what} {}", self.at))
    }
}

impl BlockDevice for FaultDevice {
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        if self.hit(&self.reads, FaultKind::Read) {
            return Err(self.fail("read"));
        }
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.write_hinted(addr, buf, WriteHint::None)
    }
    fn write_hinted(&self, addr: u64, buf: &[u8], hint: WriteHint) -> DevResult<Completion> {
        self.refuse_after_fault()?;
        if self.hit(&self.writes, FaultKind::Write) {
            return Err(self.fail("write"));
        }
        self.inner.write_hinted(addr, buf, hint)
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.refuse_after_fault()?;
        self.inner.discard(addr, count)
    }
    fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<Completion> {
        self.refuse_after_fault()?;
        self.inner.discard_many(ranges)
    }
    fn flush(&self) -> DevResult<Completion> {
        self.refuse_after_fault()?;
        if self.hit(&self.flushes, FaultKind::Flush) {
            return Err(self.fail("flush"));
        }
        self.inner.flush()
    }
    fn ack_migrations(&self, upto: u64) -> DevResult<()> {
        self.refuse_after_fault()?;
        self.inner.ack_migrations(upto)
    }
    fn resend_migrations(&self) -> DevResult<()> {
        self.refuse_after_fault()?;
        self.inner.resend_migrations()
    }
}

/// What one fault case did.
#[derive(Debug, Default, Clone, Copy)]
pub struct FaultOutcome {
    /// The fault was reached (the workload issued at least `at + 1` requests of the kind).
    pub fired: bool,
    /// The fault hit the first mount (not the workload).
    pub in_mount: bool,
}

fn replay_command(seed: u64, kind: FaultKind, at: u64, policy: GcPolicy) -> String {
    format!(
        "cargo run -p flashlog-sim --release -- fault --seed {seed} --kind {} --at {at} --policy {}",
        kind.name(),
        crate::policy_name(policy)
    )
}

fn failure(
    seed: u64,
    kind: FaultKind,
    at: u64,
    policy: GcPolicy,
    mut what: Vec<String>,
    ops: Vec<String>,
) -> Failure {
    what.push(format!(
        "fault: {} number {at}; replay: {}",
        kind.name(),
        replay_command(seed, kind, at, policy)
    ));
    Failure {
        case: None,
        seed,
        what,
        ops,
    }
}

/// The checks every mount must pass once a write or flush failed under it.
pub(crate) fn check_poisoned(fs: &Fs, dev: &FaultDevice) -> Vec<String> {
    let mut bad = Vec::new();
    match fs.create(ROOT_INO, b"after-the-fault", 0o644, 0, 0) {
        Err(Error::Poisoned(why)) if !why.is_empty() => {}
        Err(Error::Poisoned(_)) => bad.push("the mount is poisoned but gives no reason".into()),
        Err(e) => bad.push(format!(
            "create after the fault returned {e}, expected Poisoned"
        )),
        Ok(_) => bad.push("create after the fault succeeded: the mount is not poisoned".into()),
    }
    match fs.sync() {
        Err(Error::Poisoned(_)) => {}
        r => bad.push(format!(
            "sync after the fault returned {r:?}, expected Poisoned"
        )),
    }
    let n = dev.requests_after_fault();
    if n > 0 {
        bad.push(format!(
            "the mount issued {n} write/discard/flush requests after the fault"
        ));
    }
    bad
}

/// Run `seed`'s workload with a fault at request `at` of `kind`, then check poisoning and
/// durability.
pub fn run_fault(
    seed: u64,
    kind: FaultKind,
    at: u64,
    policy: GcPolicy,
) -> Result<FaultOutcome, Failure> {
    let sim = Arc::new(SimDevice::from_image(base_image()));
    let fdev = Arc::new(FaultDevice::new(sim.clone(), kind, at));
    let mut out = FaultOutcome::default();
    let mut m = Model::new();
    let mut log = Vec::new();
    let fail =
        |what: Vec<String>, ops: &[String]| failure(seed, kind, at, policy, what, ops.to_vec());
    match Fs::mount(fdev.clone(), sim_mount_options(policy)) {
        Err(e) => {
            if !fdev.fired() {
                return Err(fail(
                    vec![format!("mount failed without a fault: {e}")],
                    &log,
                ));
            }
            out.fired = true;
            out.in_mount = true;
        }
        Ok(fs) => {
            let mut w = Workload::new(seed);
            for _ in 0..crate::crash::ops_for(seed) {
                let op = w.next_op(&m);
                log.push(op.to_string());
                match apply(&fs, &mut m, &op) {
                    Outcome::Done => {}
                    Outcome::Mismatch(msg) => return Err(fail(vec![msg], &log)),
                    Outcome::Cut(e) => {
                        if !fdev.fired() {
                            return Err(fail(
                                vec![format!("{op}: device error without a fault: {e}")],
                                &log,
                            ));
                        }
                        if !matches!(e, Error::Device(DevError::Injected(_)) | Error::Poisoned(_)) {
                            return Err(fail(
                                vec![format!("{op}: unexpected error for an injected fault: {e}")],
                                &log,
                            ));
                        }
                        out.fired = true;
                        break;
                    }
                }
            }
            if out.fired && kind != FaultKind::Read {
                let bad = check_poisoned(&fs, &fdev);
                if !bad.is_empty() {
                    return Err(fail(bad, &log));
                }
            }
            fs.abandon();
        }
    }
    // Nothing durable may be lost: the image as the last flush left it, and with every
    // completed write kept.
    sim.cut_now();
    for (what, img) in [
        (
            "last flush",
            sim.crash_image(CrashMode::DropUnflushed, seed),
        ),
        ("all completed writes", sim.clean_image()),
    ] {
        if let Err(bad) = check_image(img, &m, policy) {
            return Err(fail(
                bad.into_iter()
                    .map(|b| format!("image at the {what}: {b}"))
                    .collect(),
                &log,
            ));
        }
    }
    Ok(out)
}

/// A panicking checkpoint thread must poison the mount like a failed write. Mounts with a
/// short checkpoint interval, dirties the volume, makes the next device write panic, and
/// waits for the poisoning.
pub fn run_background_panic(policy: GcPolicy) -> Result<(), String> {
    let sim = Arc::new(SimDevice::from_image(base_image()));
    let fdev = Arc::new(FaultDevice::new(sim.clone(), FaultKind::PanicOnWrite, 0));
    fdev.arm(false);
    let opts = MountOptions {
        cp_interval: Some(Duration::from_millis(20)),
        ..sim_mount_options(policy)
    };
    let fs = Fs::mount(fdev.clone(), opts).map_err(|e| format!("mount: {e}"))?;
    let durable = fs
        .create(ROOT_INO, b"durable", 0o644, 0, 0)
        .map_err(|e| format!("create: {e}"))?
        .ino;
    fs.write(durable, 0, b"before the panic")
        .map_err(|e| format!("write: {e}"))?;
    fs.sync().map_err(|e| format!("sync: {e}"))?;
    // Quiet the expected panic message; restore the hook afterwards.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    fdev.arm(true);
    let start = Instant::now();
    let mut poisoned = None;
    for i in 0u32.. {
        if start.elapsed() > Duration::from_secs(10) {
            break;
        }
        match fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0) {
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
            Err(Error::Poisoned(why)) => {
                poisoned = Some(why);
                break;
            }
            Err(e) => {
                std::panic::set_hook(hook);
                return Err(format!(
                    "create while waiting for the checkpoint thread: {e}"
                ));
            }
        }
    }
    std::panic::set_hook(hook);
    let Some(why) = poisoned else {
        return Err(format!(
            "the checkpoint thread panicked (fired: {}) but the mount was not poisoned within 10 s",
            fdev.fired()
        ));
    };
    if !why.contains("panic") {
        return Err(format!("poison reason does not mention the panic: {why:?}"));
    }
    if fs.unmount().is_ok() {
        return Err("unmount of a poisoned mount succeeded".into());
    }
    if fdev.requests_after_fault() > 0 {
        return Err(format!(
            "{} requests after the panic",
            fdev.requests_after_fault()
        ));
    }
    // Files created after the sync may or may not be there; allow them.
    let img = sim.crash_image(CrashMode::DropUnflushed, 0);
    let fs2 =
        Fs::mount(Arc::new(img), sim_mount_options(policy)).map_err(|e| format!("remount: {e}"))?;
    let got = fs2
        .read_file("/durable")
        .map_err(|e| format!("read /durable after the panic: {e}"))?;
    fs2.unmount().map_err(|e| format!("unmount: {e}"))?;
    if got != b"before the panic" {
        return Err(format!(
            "durable file changed: {:?}",
            String::from_utf8_lossy(&got)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashlog_dev::{HintLog, RamDevice};

    /// `FaultDevice` passes each write's hint on unchanged, and a write fault still fires on
    /// a hinted write (then nothing more reaches the device).
    #[test]
    fn fault_device_forwards_write_hints() {
        let log = Arc::new(HintLog::new(RamDevice::new(16)));
        let dev = FaultDevice::new(log.clone(), FaultKind::Write, 4);
        let b = vec![0u8; 4096];
        for (i, h) in WriteHint::ALL.into_iter().enumerate() {
            dev.write_hinted(i as u64, &b, h).unwrap();
        }
        let got: Vec<WriteHint> = log.writes().iter().map(|w| w.hint).collect();
        assert_eq!(got, WriteHint::ALL);
        assert!(dev.write_hinted(9, &b, WriteHint::Node).is_err());
        assert!(dev.fired());
        assert!(dev.write(10, &b).is_err());
        assert_eq!(log.writes().len(), WriteHint::ALL.len());
    }
}
