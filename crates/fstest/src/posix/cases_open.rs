//! open(2) flag cases: O_CREAT/O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY,
//! O_NOFOLLOW, access-mode enforcement (EBADF), EISDIR/ENOENT/ENOTDIR and the
//! optional O_TMPFILE.

use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::Result;

use super::{cases, check, expect_err, make_file, ok, read_file, tick, Case, Ctx, Outcome};
use crate::sys;

pub fn cases() -> Vec<Case> {
    cases![
        "open/creat_mode" => creat_mode,
        "open/creat_excl" => creat_excl,
        "open/creat_excl_dangling_symlink" => creat_excl_dangling_symlink,
        "open/creat_existing_keeps_data" => creat_existing_keeps_data,
        "open/trunc" => trunc,
        "open/append" => append,
        "open/directory_flag" => directory_flag,
        "open/nofollow" => nofollow,
        "open/rdonly_write_ebadf" => rdonly_write_ebadf,
        "open/wronly_read_ebadf" => wronly_read_ebadf,
        "open/dir_for_write_eisdir" => dir_for_write_eisdir,
        "open/enoent" => enoent,
        "open/enotdir_component" => enotdir_component,
        "open/creat_through_symlink" => creat_through_symlink,
        "open/tmpfile" => tmpfile,
    ]
}

fn creat_mode(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let fd = ok(
        sys::open(&f, libc::O_CREAT | libc::O_WRONLY, 0o640),
        "create",
    )?;
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        sys::file_type(st.st_mode) == libc::S_IFREG,
        "created file is not S_IFREG"
    );
    check!(
        st.st_mode & 0o7777 == 0o640,
        "mode {:o}, want 640",
        st.st_mode & 0o7777
    );
    check!(
        st.st_size == 0 && st.st_nlink == 1,
        "size {} nlink {}",
        st.st_size,
        st.st_nlink
    );
    check!(
        st.st_uid == unsafe { libc::geteuid() },
        "owner is not the creator"
    );
    let (a, m, c) = sys::times_ns(&st);
    check!(
        a == m && m == c,
        "new file times differ: atime {a} mtime {m} ctime {c}"
    );
    let now = sys::now_ns();
    check!(
        (now - m).abs() < 60_000_000_000,
        "new file mtime {m} is far from now {now}"
    );
    Ok(Outcome::Pass)
}

fn creat_excl(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    ok(
        sys::open(&f, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644),
        "first O_EXCL create",
    )?;
    expect_err(
        sys::open(&f, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644),
        &[libc::EEXIST],
        "second O_EXCL create",
    )?;
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    expect_err(
        sys::open(
            &ctx.p("d"),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDONLY,
            0o644,
        ),
        &[libc::EEXIST],
        "O_EXCL create over a directory",
    )?;
    Ok(Outcome::Pass)
}

fn creat_excl_dangling_symlink(ctx: &Ctx) -> Result<Outcome> {
    let l = ctx.p("l");
    ok(sys::symlink(Path::new("missing"), &l), "symlink")?;
    expect_err(
        sys::open(&l, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644),
        &[libc::EEXIST],
        "O_CREAT|O_EXCL through a dangling symlink",
    )?;
    expect_err(
        sys::stat(&ctx.p("missing")),
        &[libc::ENOENT],
        "symlink target must not be created",
    )?;
    Ok(Outcome::Pass)
}

fn creat_existing_keeps_data(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"hello")?;
    ok(sys::chmod(&f, 0o600), "chmod")?;
    let fd = ok(
        sys::open(&f, libc::O_CREAT | libc::O_RDWR, 0o777),
        "O_CREAT on existing",
    )?;
    check!(
        ok(sys::read_all(&fd), "read")? == b"hello",
        "O_CREAT without O_TRUNC lost data"
    );
    let m = ok(sys::stat(&f), "stat")?.st_mode & 0o7777;
    check!(
        m == 0o600,
        "O_CREAT on an existing file changed its mode to {m:o}"
    );
    Ok(Outcome::Pass)
}

fn trunc(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, &[7u8; 10000])?;
    let before = ok(sys::stat(&f), "stat")?;
    tick();
    let fd = ok(
        sys::open(&f, libc::O_WRONLY | libc::O_TRUNC, 0),
        "open O_TRUNC",
    )?;
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(st.st_size == 0, "size {} after O_TRUNC", st.st_size);
    let (_, m0, c0) = sys::times_ns(&before);
    let (_, m1, c1) = sys::times_ns(&st);
    check!(m1 > m0 && c1 > c0, "O_TRUNC did not advance mtime/ctime");
    ok(sys::pwrite_all(&fd, b"ab", 0), "write")?;
    drop(fd);
    check!(read_file(&f)? == b"ab", "content after truncate+write");
    Ok(Outcome::Pass)
}

fn append(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"0123")?;
    let fd = ok(
        sys::open(&f, libc::O_WRONLY | libc::O_APPEND, 0),
        "open O_APPEND",
    )?;
    ok(sys::lseek(&fd, 0, libc::SEEK_SET), "lseek 0")?;
    ok(sys::write(&fd, b"abc"), "append write")?;
    let pos = ok(sys::lseek(&fd, 0, libc::SEEK_CUR), "lseek cur")?;
    check!(pos == 7, "offset after append is {pos}, want 7");
    // A second writer extends the file; the next append must land after it.
    let other = ok(sys::open(&f, libc::O_WRONLY, 0), "open")?;
    ok(sys::pwrite_all(&other, b"XY", 7), "pwrite")?;
    ok(sys::lseek(&fd, 1, libc::SEEK_SET), "lseek 1")?;
    ok(sys::write(&fd, b"!"), "append write")?;
    check!(
        read_file(&f)? == b"0123abcXY!",
        "content {:?}",
        String::from_utf8_lossy(&read_file(&f)?)
    );
    Ok(Outcome::Pass)
}

fn directory_flag(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    expect_err(
        sys::open(&f, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        &[libc::ENOTDIR],
        "O_DIRECTORY on a file",
    )?;
    let fd = ok(
        sys::open(&ctx.dir, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        "O_DIRECTORY on a dir",
    )?;
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        sys::file_type(st.st_mode) == libc::S_IFDIR,
        "O_DIRECTORY fd is not a directory"
    );
    let l = ctx.p("l");
    ok(sys::symlink(Path::new("f"), &l), "symlink")?;
    expect_err(
        sys::open(&l, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        &[libc::ENOTDIR],
        "O_DIRECTORY via symlink to file",
    )?;
    Ok(Outcome::Pass)
}

fn nofollow(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    let l = ctx.p("l");
    ok(sys::symlink(Path::new("f"), &l), "symlink")?;
    expect_err(
        sys::open(&l, libc::O_RDONLY | libc::O_NOFOLLOW, 0),
        &[libc::ELOOP],
        "O_NOFOLLOW on a symlink",
    )?;
    ok(
        sys::open(&f, libc::O_RDONLY | libc::O_NOFOLLOW, 0),
        "O_NOFOLLOW on a regular file",
    )?;
    // O_PATH|O_NOFOLLOW opens the link itself.
    let fd = ok(
        sys::open(&l, libc::O_PATH | libc::O_NOFOLLOW, 0),
        "O_PATH|O_NOFOLLOW",
    )?;
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        sys::file_type(st.st_mode) == libc::S_IFLNK,
        "O_PATH|O_NOFOLLOW fd is not the link"
    );
    Ok(Outcome::Pass)
}

fn rdonly_write_ebadf(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let fd = ok(sys::open(&f, libc::O_RDONLY, 0), "open")?;
    expect_err(
        sys::write(&fd, b"x"),
        &[libc::EBADF],
        "write on O_RDONLY fd",
    )?;
    expect_err(
        sys::pwrite(&fd, b"x", 0),
        &[libc::EBADF],
        "pwrite on O_RDONLY fd",
    )?;
    expect_err(
        sys::ftruncate(&fd, 0),
        &[libc::EINVAL, libc::EBADF],
        "ftruncate on O_RDONLY fd",
    )?;
    check!(read_file(&f)? == b"abc", "file changed through O_RDONLY fd");
    Ok(Outcome::Pass)
}

fn wronly_read_ebadf(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let fd = ok(sys::open(&f, libc::O_WRONLY, 0), "open")?;
    let mut b = [0u8; 3];
    expect_err(
        sys::read(&fd, &mut b),
        &[libc::EBADF],
        "read on O_WRONLY fd",
    )?;
    Ok(Outcome::Pass)
}

fn dir_for_write_eisdir(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    expect_err(
        sys::open(&d, libc::O_WRONLY, 0),
        &[libc::EISDIR],
        "open dir O_WRONLY",
    )?;
    expect_err(
        sys::open(&d, libc::O_RDWR, 0),
        &[libc::EISDIR],
        "open dir O_RDWR",
    )?;
    let fd = ok(sys::open(&d, libc::O_RDONLY, 0), "open dir O_RDONLY")?;
    let mut b = [0u8; 8];
    expect_err(
        sys::read(&fd, &mut b),
        &[libc::EISDIR],
        "read(2) on a directory fd",
    )?;
    Ok(Outcome::Pass)
}

fn enoent(ctx: &Ctx) -> Result<Outcome> {
    expect_err(
        sys::open(&ctx.p("missing"), libc::O_RDONLY, 0),
        &[libc::ENOENT],
        "open missing file",
    )?;
    expect_err(
        sys::open(&ctx.p("nodir/f"), libc::O_CREAT | libc::O_WRONLY, 0o644),
        &[libc::ENOENT],
        "O_CREAT in a missing directory",
    )?;
    expect_err(
        sys::open(Path::new(""), libc::O_RDONLY, 0),
        &[libc::ENOENT],
        "open of empty path",
    )?;
    Ok(Outcome::Pass)
}

fn enotdir_component(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    expect_err(
        sys::open(&ctx.p("f/x"), libc::O_RDONLY, 0),
        &[libc::ENOTDIR],
        "open file/x",
    )?;
    expect_err(
        sys::open(&ctx.p("f/x"), libc::O_CREAT | libc::O_WRONLY, 0o644),
        &[libc::ENOTDIR],
        "create file/x",
    )?;
    expect_err(
        sys::stat(&ctx.p("f/")),
        &[libc::ENOTDIR],
        "stat of file with trailing slash",
    )?;
    expect_err(
        sys::mkdir(&ctx.p("f/d"), 0o755),
        &[libc::ENOTDIR],
        "mkdir file/d",
    )?;
    Ok(Outcome::Pass)
}

fn creat_through_symlink(ctx: &Ctx) -> Result<Outcome> {
    let l = ctx.p("l");
    ok(sys::symlink(Path::new("target"), &l), "symlink")?;
    let fd = ok(
        sys::open(&l, libc::O_CREAT | libc::O_WRONLY, 0o644),
        "O_CREAT through dangling symlink",
    )?;
    ok(sys::pwrite_all(&fd, b"via link", 0), "write")?;
    check!(
        read_file(&ctx.p("target"))? == b"via link",
        "target not created through the symlink"
    );
    Ok(Outcome::Pass)
}

fn tmpfile(ctx: &Ctx) -> Result<Outcome> {
    let fd = match sys::open(&ctx.dir, libc::O_TMPFILE | libc::O_RDWR, 0o600) {
        Ok(fd) => fd,
        Err(e) if [libc::EOPNOTSUPP, libc::EISDIR, libc::EINVAL].contains(&sys::errno_of(&e)) => {
            return Ok(Outcome::Skip(format!(
                "O_TMPFILE unsupported ({})",
                sys::errno_name(sys::errno_of(&e))
            )));
        }
        Err(e) => return Err(anyhow::anyhow!("open O_TMPFILE: {e}")),
    };
    ok(sys::pwrite_all(&fd, b"anonymous", 0), "write to O_TMPFILE")?;
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(st.st_nlink == 0, "O_TMPFILE file has nlink {}", st.st_nlink);
    let names: Vec<_> = ok(std::fs::read_dir(&ctx.dir), "readdir")?.collect();
    check!(names.is_empty(), "O_TMPFILE file is visible in readdir");
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let target = ctx.p("linked");
    let (cp, ct) = (sys::cstr(Path::new(&proc)), sys::cstr(&target));
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            cp.as_ptr(),
            libc::AT_FDCWD,
            ct.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    check!(
        r == 0,
        "linkat of O_TMPFILE fd: {}",
        std::io::Error::last_os_error()
    );
    check!(
        read_file(&target)? == b"anonymous",
        "linked O_TMPFILE content differs"
    );
    check!(
        ok(sys::fstat(&fd), "fstat")?.st_nlink == 1,
        "nlink after linkat is not 1"
    );
    Ok(Outcome::Pass)
}
