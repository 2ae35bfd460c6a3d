//! File data cases: read/write round trips, holes, truncate/ftruncate,
//! fallocate modes, SEEK_DATA/SEEK_HOLE, fsync/fdatasync and the lifetime of
//! unlinked-but-open files.

use anyhow::Result;

use super::{cases, check, expect_err, make_file, ok, read_file, Case, Ctx, Outcome};
use crate::sys;

pub fn cases() -> Vec<Case> {
    cases![
        "data/write_read_roundtrip" => roundtrip,
        "data/unaligned_overwrites" => unaligned_overwrites,
        "data/write_past_eof_hole" => write_past_eof_hole,
        "data/large_offset" => large_offset,
        "data/read_at_eof" => read_at_eof,
        "truncate/grow_zeros" => truncate_grow,
        "truncate/shrink" => truncate_shrink,
        "truncate/shrink_then_grow_zeros" => shrink_then_grow,
        "truncate/ftruncate" => ftruncate_case,
        "truncate/errors" => truncate_errors,
        "fsync/file" => fsync_file,
        "fsync/directory" => fsync_dir,
        "unlink/open_file_stays_readable" => unlink_open_file,
        "fallocate/mode0" => fallocate_mode0,
        "fallocate/keep_size" => fallocate_keep_size,
        "fallocate/punch_hole" => fallocate_punch,
        "fallocate/punch_requires_keep_size" => fallocate_punch_needs_keep,
        "seek/data_hole" => seek_data_hole,
        "seek/basic" => seek_basic,
    ]
}

/// A deterministic, non-zero pattern for `len` bytes tagged by `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + seed as usize * 13) % 251) as u8 + 1)
        .collect()
}

fn size_of(p: &std::path::Path) -> Result<i64> {
    Ok(ok(sys::stat(p), "stat")?.st_size)
}

fn roundtrip(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let data = pattern(1, 3 * 1024 * 1024 + 123);
    make_file(&f, &data)?;
    check!(
        size_of(&f)? == data.len() as i64,
        "size {} want {}",
        size_of(&f)?,
        data.len()
    );
    let got = read_file(&f)?;
    if let Some(i) = got.iter().zip(&data).position(|(a, b)| a != b) {
        anyhow::bail!("content differs at byte {i}");
    }
    check!(
        got.len() == data.len(),
        "read {} bytes want {}",
        got.len(),
        data.len()
    );
    let st = ok(sys::stat(&f), "stat")?;
    check!(
        st.st_blocks * 512 >= data.len() as i64 / 2,
        "st_blocks {} too small for {} bytes of data",
        st.st_blocks,
        data.len()
    );
    Ok(Outcome::Pass)
}

fn unaligned_overwrites(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let mut shadow = pattern(2, 100_000);
    make_file(&f, &shadow)?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    for (k, (off, len)) in [
        (1usize, 1usize),
        (4095, 2),
        (4097, 8191),
        (65535, 3),
        (99_990, 30),
        (12345, 54321),
    ]
    .into_iter()
    .enumerate()
    {
        let d = pattern(10 + k as u8, len);
        ok(sys::pwrite_all(&fd, &d, off as u64), "pwrite")?;
        if shadow.len() < off + len {
            shadow.resize(off + len, 0);
        }
        shadow[off..off + len].copy_from_slice(&d);
        let mut back = vec![0u8; len];
        ok(sys::pread_exact(&fd, &mut back, off as u64), "pread")?;
        check!(back == d, "pread after pwrite at {off}+{len} differs");
    }
    let got = ok(sys::read_all(&fd), "read")?;
    check!(
        got == shadow,
        "final content differs from the expected image"
    );
    Ok(Outcome::Pass)
}

fn write_past_eof_hole(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"head")?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    ok(sys::pwrite_all(&fd, b"tail", 1_000_000), "pwrite past EOF")?;
    let got = ok(sys::read_all(&fd), "read")?;
    check!(got.len() == 1_000_004, "size {}", got.len());
    check!(
        &got[..4] == b"head" && &got[1_000_000..] == b"tail",
        "data around the hole"
    );
    if let Some(i) = got[4..1_000_000].iter().position(|b| *b != 0) {
        anyhow::bail!("hole byte {} is {:#x}, want 0", i + 4, got[i + 4]);
    }
    Ok(Outcome::Pass)
}

fn large_offset(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let fd = ok(sys::open(&f, libc::O_CREAT | libc::O_RDWR, 0o644), "create")?;
    let off = 5u64 << 30; // 5 GiB: needs 64-bit offsets end to end
    match sys::pwrite_all(&fd, b"far", off) {
        Err(e) if [libc::EFBIG, libc::ENOSPC].contains(&sys::errno_of(&e)) => {
            return Ok(Outcome::Skip(format!(
                "cannot write at 5 GiB ({})",
                sys::errno_name(sys::errno_of(&e))
            )));
        }
        r => ok(r, "pwrite at 5 GiB")?,
    }
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        st.st_size as u64 == off + 3,
        "size {} want {}",
        st.st_size,
        off + 3
    );
    let mut b = [0u8; 3];
    ok(sys::pread_exact(&fd, &mut b, off), "pread at 5 GiB")?;
    check!(&b == b"far", "data at 5 GiB");
    let mut z = vec![1u8; 4096];
    ok(
        sys::pread_exact(&fd, &mut z, off - 4096),
        "pread before 5 GiB",
    )?;
    check!(z.iter().all(|b| *b == 0), "hole below 5 GiB is not zero");
    ok(sys::ftruncate(&fd, 0), "truncate back")?;
    Ok(Outcome::Pass)
}

fn read_at_eof(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"12345")?;
    let fd = ok(sys::open(&f, libc::O_RDONLY, 0), "open")?;
    let mut b = [0u8; 10];
    check!(
        ok(sys::pread(&fd, &mut b, 5), "pread at EOF")? == 0,
        "read at EOF returned data"
    );
    check!(
        ok(sys::pread(&fd, &mut b, 100), "pread past EOF")? == 0,
        "read past EOF returned data"
    );
    check!(
        ok(sys::pread(&fd, &mut b, 3), "pread across EOF")? == 2,
        "short read across EOF"
    );
    Ok(Outcome::Pass)
}

fn truncate_grow(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    ok(sys::truncate(&f, 70_000), "truncate grow")?;
    let got = read_file(&f)?;
    check!(got.len() == 70_000, "size {} after grow", got.len());
    check!(&got[..3] == b"abc", "data before the grown range changed");
    check!(
        got[3..].iter().all(|b| *b == 0),
        "grown range is not zero-filled"
    );
    Ok(Outcome::Pass)
}

fn truncate_shrink(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let data = pattern(3, 50_000);
    make_file(&f, &data)?;
    ok(sys::truncate(&f, 4097), "truncate shrink")?;
    let got = read_file(&f)?;
    check!(
        got == data[..4097],
        "content after shrink (len {})",
        got.len()
    );
    ok(sys::truncate(&f, 0), "truncate 0")?;
    check!(size_of(&f)? == 0, "size after truncate 0");
    Ok(Outcome::Pass)
}

fn shrink_then_grow(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let data = pattern(4, 20_000);
    make_file(&f, &data)?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    ok(sys::ftruncate(&fd, 10), "shrink to 10")?;
    ok(sys::ftruncate(&fd, 20_000), "grow to 20000")?;
    let got = ok(sys::read_all(&fd), "read")?;
    check!(got[..10] == data[..10], "kept prefix changed");
    if let Some(i) = got[10..].iter().position(|b| *b != 0) {
        anyhow::bail!("old data resurfaced at byte {} after shrink+grow", i + 10);
    }
    // Same via an mmap-free partial page: shrink mid-page then extend by write.
    ok(sys::ftruncate(&fd, 5), "shrink to 5")?;
    ok(sys::pwrite_all(&fd, b"Z", 9000), "write past EOF")?;
    let got = ok(sys::read_all(&fd), "read")?;
    check!(
        got[5..9000].iter().all(|b| *b == 0),
        "old data resurfaced after shrink+write past EOF"
    );
    Ok(Outcome::Pass)
}

fn ftruncate_case(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let fd = ok(sys::open(&f, libc::O_CREAT | libc::O_RDWR, 0o644), "create")?;
    ok(sys::pwrite_all(&fd, b"0123456789", 0), "write")?;
    ok(sys::ftruncate(&fd, 4), "ftruncate shrink")?;
    check!(
        ok(sys::fstat(&fd), "fstat")?.st_size == 4,
        "size after shrink"
    );
    ok(sys::ftruncate(&fd, 8), "ftruncate grow")?;
    check!(
        ok(sys::read_all(&fd), "read")? == b"0123\0\0\0\0",
        "content after shrink+grow"
    );
    // The file offset is not changed by ftruncate.
    ok(sys::lseek(&fd, 6, libc::SEEK_SET), "lseek")?;
    ok(sys::ftruncate(&fd, 2), "ftruncate")?;
    check!(
        ok(sys::lseek(&fd, 0, libc::SEEK_CUR), "lseek")? == 6,
        "ftruncate moved the offset"
    );
    ok(sys::write(&fd, b"X"), "write at offset 6")?;
    check!(
        ok(sys::read_all(&fd), "read")? == b"01\0\0\0\0X",
        "write after ftruncate below offset"
    );
    Ok(Outcome::Pass)
}

fn truncate_errors(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    expect_err(sys::truncate(&f, -1), &[libc::EINVAL], "truncate to -1")?;
    expect_err(
        sys::truncate(&ctx.dir, 0),
        &[libc::EISDIR],
        "truncate of a dir",
    )?;
    expect_err(
        sys::truncate(&ctx.p("missing"), 0),
        &[libc::ENOENT],
        "truncate of missing file",
    )?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    expect_err(sys::ftruncate(&fd, -5), &[libc::EINVAL], "ftruncate to -5")?;
    Ok(Outcome::Pass)
}

fn fsync_file(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let fd = ok(sys::open(&f, libc::O_CREAT | libc::O_RDWR, 0o644), "create")?;
    ok(sys::pwrite_all(&fd, &pattern(5, 100_000), 0), "write")?;
    ok(sys::fsync(&fd), "fsync")?;
    ok(sys::fdatasync(&fd), "fdatasync")?;
    ok(sys::ftruncate(&fd, 10), "truncate")?;
    ok(sys::fdatasync(&fd), "fdatasync after truncate")?;
    let ro = ok(sys::open(&f, libc::O_RDONLY, 0), "open O_RDONLY")?;
    ok(sys::fsync(&ro), "fsync on an O_RDONLY fd")?;
    check!(
        ok(sys::read_all(&ro), "read")? == pattern(5, 10),
        "content after fsync"
    );
    let fd = ok(
        sys::open(&f, libc::O_WRONLY | libc::O_SYNC, 0),
        "open O_SYNC",
    )?;
    ok(sys::pwrite_all(&fd, b"sync", 0), "O_SYNC write")?;
    let fd = ok(
        sys::open(&f, libc::O_WRONLY | libc::O_DSYNC, 0),
        "open O_DSYNC",
    )?;
    ok(sys::pwrite_all(&fd, b"dsync", 4), "O_DSYNC write")?;
    check!(&read_file(&f)?[..9] == b"syncdsync", "O_SYNC/O_DSYNC data");
    Ok(Outcome::Pass)
}

fn fsync_dir(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"x")?;
    let dfd = ok(
        sys::open(&ctx.dir, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        "open dir",
    )?;
    ok(sys::fsync(&dfd), "fsync of a directory")?;
    ok(sys::fdatasync(&dfd), "fdatasync of a directory")?;
    Ok(Outcome::Pass)
}

fn unlink_open_file(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let data = pattern(6, 200_000);
    make_file(&f, &data)?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    ok(sys::unlink(&f), "unlink while open")?;
    expect_err(sys::stat(&f), &[libc::ENOENT], "stat after unlink")?;
    let st = ok(sys::fstat(&fd), "fstat of unlinked file")?;
    check!(
        st.st_nlink == 0,
        "unlinked open file has nlink {}",
        st.st_nlink
    );
    check!(
        ok(sys::read_all(&fd), "read unlinked file")? == data,
        "content of unlinked open file"
    );
    ok(
        sys::pwrite_all(&fd, b"more", 200_000),
        "write to unlinked file",
    )?;
    ok(sys::ftruncate(&fd, 100), "truncate unlinked file")?;
    check!(
        ok(sys::read_all(&fd), "read")? == data[..100],
        "content after truncate of unlinked file"
    );
    // A new file under the same name is independent.
    make_file(&f, b"new")?;
    check!(
        ok(sys::fstat(&fd), "fstat")?.st_size == 100,
        "new file affected the unlinked one"
    );
    check!(read_file(&f)? == b"new", "new file content");
    Ok(Outcome::Pass)
}

fn falloc_unsupported(e: &std::io::Error) -> bool {
    [libc::EOPNOTSUPP, libc::ENOSYS].contains(&sys::errno_of(e))
}

macro_rules! try_falloc {
    ($r:expr, $what:expr) => {
        match $r {
            Err(e) if falloc_unsupported(&e) => {
                return Ok(Outcome::Skip(format!(
                    "{} unsupported ({})",
                    $what,
                    sys::errno_name(sys::errno_of(&e))
                )));
            }
            r => ok(r, $what)?,
        }
    };
}

fn fallocate_mode0(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    try_falloc!(sys::fallocate(&fd, 0, 0, 1 << 20), "fallocate mode 0");
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        st.st_size == 1 << 20,
        "size {} after fallocate to 1 MiB",
        st.st_size
    );
    check!(
        st.st_blocks * 512 >= 1 << 20,
        "st_blocks {} does not cover the allocation",
        st.st_blocks
    );
    let got = ok(sys::read_all(&fd), "read")?;
    check!(
        &got[..3] == b"abc" && got[3..].iter().all(|b| *b == 0),
        "fallocated range is not zero / data changed"
    );
    // Inside the file: size unchanged.
    try_falloc!(sys::fallocate(&fd, 0, 100, 1000), "fallocate inside");
    check!(
        ok(sys::fstat(&fd), "fstat")?.st_size == 1 << 20,
        "fallocate inside the file changed the size"
    );
    Ok(Outcome::Pass)
}

fn fallocate_keep_size(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    let b = ok(sys::fstat(&fd), "fstat")?;
    try_falloc!(
        sys::fallocate(&fd, libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20),
        "fallocate KEEP_SIZE"
    );
    let a = ok(sys::fstat(&fd), "fstat")?;
    check!(
        a.st_size == 3,
        "KEEP_SIZE changed the size to {}",
        a.st_size
    );
    check!(a.st_blocks >= b.st_blocks, "KEEP_SIZE reduced st_blocks");
    check!(
        ok(sys::read_all(&fd), "read")? == b"abc",
        "content after KEEP_SIZE"
    );
    // Extending later exposes zeros, not stale data.
    ok(sys::ftruncate(&fd, 8192), "extend")?;
    let got = ok(sys::read_all(&fd), "read")?;
    check!(
        got[3..].iter().all(|b| *b == 0),
        "preallocated range is not zero after extension"
    );
    Ok(Outcome::Pass)
}

fn fallocate_punch(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let data = pattern(7, 256 * 1024);
    make_file(&f, &data)?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // Aligned and unaligned holes.
    for (off, len) in [(65536u64, 65536u64), (1000, 5000), (200_000, 100_000)] {
        try_falloc!(
            sys::fallocate(&fd, mode, off, len),
            "fallocate PUNCH_HOLE|KEEP_SIZE"
        );
    }
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        st.st_size == data.len() as i64,
        "punch changed the size to {}",
        st.st_size
    );
    let got = ok(sys::read_all(&fd), "read")?;
    let mut want = data.clone();
    for (off, len) in [(65536usize, 65536usize), (1000, 5000), (200_000, 100_000)] {
        let end = (off + len).min(want.len());
        want[off..end].fill(0);
    }
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        anyhow::bail!("byte {i} is {:#x} after punch, want {:#x}", got[i], want[i]);
    }
    Ok(Outcome::Pass)
}

fn fallocate_punch_needs_keep(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, &pattern(8, 8192))?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    expect_err(
        sys::fallocate(&fd, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
        &[libc::EOPNOTSUPP, libc::EINVAL],
        "PUNCH_HOLE without KEEP_SIZE",
    )?;
    check!(
        read_file(&f)? == pattern(8, 8192),
        "refused punch changed data"
    );
    let ro = ok(sys::open(&f, libc::O_RDONLY, 0), "open O_RDONLY")?;
    expect_err(
        sys::fallocate(&ro, 0, 0, 4096),
        &[libc::EBADF],
        "fallocate on O_RDONLY fd",
    )?;
    Ok(Outcome::Pass)
}

fn seek_data_hole(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let fd = ok(sys::open(&f, libc::O_CREAT | libc::O_RDWR, 0o644), "create")?;
    ok(sys::pwrite_all(&fd, &pattern(9, 4096), 0), "write head")?;
    ok(
        sys::pwrite_all(&fd, &pattern(9, 4096), 4 << 20),
        "write tail",
    )?;
    let size = (4 << 20) + 4096i64;
    match sys::lseek(&fd, 0, libc::SEEK_DATA) {
        Err(e) if sys::errno_of(&e) == libc::EINVAL => {
            return Ok(Outcome::Skip("SEEK_DATA unsupported (EINVAL)".into()));
        }
        r => {
            let d = ok(r, "SEEK_DATA 0")?;
            check!(d == 0, "SEEK_DATA from 0 returned {d}, want 0");
        }
    }
    let h = ok(sys::lseek(&fd, 0, libc::SEEK_HOLE), "SEEK_HOLE 0")?;
    check!(
        (4096..=size).contains(&h),
        "SEEK_HOLE from 0 returned {h}, want in [4096, {size}]"
    );
    let d = ok(sys::lseek(&fd, 8192, libc::SEEK_DATA), "SEEK_DATA in hole")?;
    check!(
        (8192..=4 << 20).contains(&d),
        "SEEK_DATA from 8192 returned {d}"
    );
    let h = ok(
        sys::lseek(&fd, (4 << 20) + 10, libc::SEEK_HOLE),
        "SEEK_HOLE in tail",
    )?;
    check!(
        h == size,
        "SEEK_HOLE in last extent returned {h}, want EOF {size}"
    );
    expect_err(
        sys::lseek(&fd, size, libc::SEEK_DATA),
        &[libc::ENXIO],
        "SEEK_DATA at EOF",
    )?;
    expect_err(
        sys::lseek(&fd, size + 100, libc::SEEK_HOLE),
        &[libc::ENXIO],
        "SEEK_HOLE past EOF",
    )?;
    Ok(Outcome::Pass)
}

fn seek_basic(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"0123456789")?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    check!(
        ok(sys::lseek(&fd, -3, libc::SEEK_END), "SEEK_END")? == 7,
        "SEEK_END -3"
    );
    let mut b = [0u8; 3];
    ok(sys::read(&fd, &mut b), "read")?;
    check!(&b == b"789", "read after SEEK_END");
    check!(
        ok(sys::lseek(&fd, 100, libc::SEEK_SET), "SEEK_SET past EOF")? == 100,
        "seek past EOF"
    );
    expect_err(
        sys::lseek(&fd, -1, libc::SEEK_SET),
        &[libc::EINVAL],
        "seek to negative offset",
    )?;
    Ok(Outcome::Pass)
}
