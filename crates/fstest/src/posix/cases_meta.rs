//! Metadata cases: timestamp update rules and utimensat, extended attributes
//! (user.*), readdir completeness and stability, and statfs sanity.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{bail, Result};

use super::{cases, check, expect_err, make_file, ok, tick, Case, Ctx, Outcome};
use crate::sys;

pub fn cases() -> Vec<Case> {
    cases![
        "times/write_updates_mtime_ctime" => write_updates,
        "times/read_keeps_mtime_ctime" => read_keeps,
        "times/truncate_updates_mtime_ctime" => truncate_updates,
        "times/chmod_updates_ctime_only" => chmod_ctime_only,
        "times/create_updates_parent" => create_updates_parent,
        "times/rename_updates_parents" => rename_updates_parents,
        "times/utimensat_explicit_ns" => utimensat_explicit,
        "times/utimensat_now" => utimensat_now,
        "times/utimensat_omit" => utimensat_omit,
        "times/utimensat_nofollow" => utimensat_nofollow,
        "times/preserved_across_reopen" => preserved_across_reopen,
        "xattr/set_get" => xattr_set_get,
        "xattr/list" => xattr_list,
        "xattr/remove" => xattr_remove,
        "xattr/create_replace_flags" => xattr_flags,
        "xattr/size_query_erange" => xattr_size_query,
        "xattr/on_directory" => xattr_dir,
        "xattr/survive_rename" => xattr_rename,
        "readdir/empty_dir" => readdir_empty,
        "readdir/all_once" => readdir_all_once,
        "readdir/interleaved_creates" => readdir_interleaved,
        "readdir/interleaved_unlinks" => readdir_interleaved_unlinks,
        "readdir/types_and_inodes" => readdir_types,
        "readdir/rewind" => readdir_rewind,
        "statfs/sanity" => statfs_sanity,
    ]
}

fn lst(p: &Path) -> Result<libc::stat> {
    ok(sys::lstat(p), &format!("lstat {}", p.display()))
}

fn write_updates(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let fd = ok(sys::open(&f, libc::O_WRONLY, 0), "open")?;
    let b = lst(&f)?;
    tick();
    ok(sys::pwrite_all(&fd, b"x", 1), "write")?;
    let a = ok(sys::fstat(&fd), "fstat")?;
    let ((_, m0, c0), (_, m1, c1)) = (sys::times_ns(&b), sys::times_ns(&a));
    check!(m1 > m0, "write did not advance mtime ({m0} -> {m1})");
    check!(c1 > c0, "write did not advance ctime ({c0} -> {c1})");
    drop(fd);
    let a2 = lst(&f)?;
    check!(sys::times_ns(&a2).1 == m1, "mtime changed on close");
    Ok(Outcome::Pass)
}

fn read_keeps(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let b = lst(&f)?;
    tick();
    let fd = ok(sys::open(&f, libc::O_RDONLY, 0), "open")?;
    let mut buf = [0u8; 3];
    ok(sys::read(&fd, &mut buf), "read")?;
    drop(fd);
    let a = lst(&f)?;
    check!(
        sys::times_ns(&a).1 == sys::times_ns(&b).1,
        "read changed mtime"
    );
    check!(
        sys::times_ns(&a).2 == sys::times_ns(&b).2,
        "read changed ctime"
    );
    Ok(Outcome::Pass)
}

fn truncate_updates(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abcdef")?;
    for (what, len) in [("shrink", 2i64), ("grow", 100)] {
        let b = lst(&f)?;
        tick();
        ok(sys::truncate(&f, len), &format!("truncate ({what})"))?;
        let a = lst(&f)?;
        check!(
            sys::times_ns(&a).1 > sys::times_ns(&b).1,
            "truncate ({what}) did not advance mtime"
        );
        check!(
            sys::times_ns(&a).2 > sys::times_ns(&b).2,
            "truncate ({what}) did not advance ctime"
        );
    }
    let fd = ok(sys::open(&f, libc::O_WRONLY, 0), "open")?;
    let b = lst(&f)?;
    tick();
    ok(sys::ftruncate(&fd, 10), "ftruncate")?;
    let a = lst(&f)?;
    check!(
        sys::times_ns(&a).1 > sys::times_ns(&b).1,
        "ftruncate did not advance mtime"
    );
    Ok(Outcome::Pass)
}

fn chmod_ctime_only(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"abc")?;
    let b = lst(&f)?;
    tick();
    ok(sys::chmod(&f, 0o600), "chmod")?;
    let a = lst(&f)?;
    check!(
        sys::times_ns(&a).2 > sys::times_ns(&b).2,
        "chmod did not advance ctime"
    );
    check!(
        sys::times_ns(&a).1 == sys::times_ns(&b).1,
        "chmod changed mtime"
    );
    check!(
        sys::times_ns(&a).0 == sys::times_ns(&b).0,
        "chmod changed atime"
    );
    Ok(Outcome::Pass)
}

/// A namespace operation applied inside a directory.
type DirOp = fn(&Path) -> std::io::Result<()>;

fn create_updates_parent(ctx: &Ctx) -> Result<Outcome> {
    let steps: [(&str, DirOp); 4] = [
        ("create", |p| {
            sys::open(&p.join("f"), libc::O_CREAT | libc::O_WRONLY, 0o644).map(drop)
        }),
        ("mkdir", |p| sys::mkdir(&p.join("d"), 0o755)),
        ("symlink", |p| sys::symlink(Path::new("f"), &p.join("l"))),
        ("mkfifo", |p| sys::mkfifo(&p.join("p"), 0o644)),
    ];
    for (what, op) in steps {
        let b = lst(&ctx.dir)?;
        tick();
        ok(op(&ctx.dir), what)?;
        let a = lst(&ctx.dir)?;
        check!(
            sys::times_ns(&a).1 > sys::times_ns(&b).1,
            "{what} did not advance the parent's mtime"
        );
        check!(
            sys::times_ns(&a).2 > sys::times_ns(&b).2,
            "{what} did not advance the parent's ctime"
        );
    }
    Ok(Outcome::Pass)
}

fn rename_updates_parents(ctx: &Ctx) -> Result<Outcome> {
    let (p1, p2) = (ctx.p("p1"), ctx.p("p2"));
    ok(sys::mkdir(&p1, 0o755), "mkdir")?;
    ok(sys::mkdir(&p2, 0o755), "mkdir")?;
    make_file(&p1.join("f"), b"x")?;
    let (b1, b2) = (lst(&p1)?, lst(&p2)?);
    tick();
    ok(sys::rename(&p1.join("f"), &p2.join("f")), "rename")?;
    let (a1, a2) = (lst(&p1)?, lst(&p2)?);
    check!(
        sys::times_ns(&a1).1 > sys::times_ns(&b1).1,
        "source dir mtime not advanced"
    );
    check!(
        sys::times_ns(&a2).1 > sys::times_ns(&b2).1,
        "target dir mtime not advanced"
    );
    check!(
        sys::times_ns(&a1).2 > sys::times_ns(&b1).2,
        "source dir ctime not advanced"
    );
    check!(
        sys::times_ns(&a2).2 > sys::times_ns(&b2).2,
        "target dir ctime not advanced"
    );
    Ok(Outcome::Pass)
}

fn utimensat_explicit(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    let b = lst(&f)?;
    tick();
    let (at, mt) = (
        (1_000_000_000i64, 123_456_789i64),
        (1_500_000_000i64, 987_654_321i64),
    );
    ok(sys::utimensat(&f, Some([at, mt]), 0), "utimensat explicit")?;
    let a = lst(&f)?;
    check!(
        (a.st_atime, a.st_atime_nsec) == at,
        "atime is {}.{:09}, want {}.{:09}",
        a.st_atime,
        a.st_atime_nsec,
        at.0,
        at.1
    );
    check!(
        (a.st_mtime, a.st_mtime_nsec) == mt,
        "mtime is {}.{:09}, want {}.{:09}",
        a.st_mtime,
        a.st_mtime_nsec,
        mt.0,
        mt.1
    );
    check!(
        sys::times_ns(&a).2 > sys::times_ns(&b).2,
        "utimensat did not advance ctime"
    );
    // Times before 1970 and far in the future are representable.
    ok(
        sys::utimensat(&f, Some([(-1000, 5), (4_000_000_000, 999_999_999)]), 0),
        "utimensat extreme",
    )?;
    let a = lst(&f)?;
    check!(
        (a.st_atime, a.st_atime_nsec) == (-1000, 5),
        "pre-1970 atime read back as {}.{}",
        a.st_atime,
        a.st_atime_nsec
    );
    check!(
        (a.st_mtime, a.st_mtime_nsec) == (4_000_000_000, 999_999_999),
        "post-2038 mtime read back as {}.{}",
        a.st_mtime,
        a.st_mtime_nsec
    );
    expect_err(
        sys::utimensat(&f, Some([(0, 1_000_000_000), (0, 0)]), 0),
        &[libc::EINVAL],
        "utimensat with tv_nsec 1e9",
    )?;
    Ok(Outcome::Pass)
}

fn utimensat_now(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(
        sys::utimensat(&f, Some([(1000, 0), (1000, 0)]), 0),
        "set old times",
    )?;
    let t0 = sys::now_ns();
    ok(
        sys::utimensat(&f, Some([(0, libc::UTIME_NOW), (0, libc::UTIME_NOW)]), 0),
        "UTIME_NOW",
    )?;
    let a = lst(&f)?;
    let (at, mt, ct) = sys::times_ns(&a);
    let slack = 2_000_000_000;
    for (n, t) in [("atime", at), ("mtime", mt)] {
        check!(
            t >= t0 - slack && t <= sys::now_ns() + slack,
            "{n} {t} is not 'now' ({t0})"
        );
    }
    check!(
        at == mt && mt == ct,
        "UTIME_NOW gave different atime/mtime/ctime: {at} {mt} {ct}"
    );
    ok(
        sys::utimensat(&f, Some([(1000, 0), (1000, 0)]), 0),
        "set old times",
    )?;
    ok(sys::utimensat(&f, None, 0), "utimensat(NULL)")?;
    let mt = sys::times_ns(&lst(&f)?).1;
    check!(mt >= t0 - slack, "utimensat(NULL) did not set mtime to now");
    Ok(Outcome::Pass)
}

fn utimensat_omit(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(
        sys::utimensat(&f, Some([(1000, 1), (2000, 2)]), 0),
        "set times",
    )?;
    ok(
        sys::utimensat(&f, Some([(0, libc::UTIME_OMIT), (3000, 3)]), 0),
        "omit atime",
    )?;
    let a = lst(&f)?;
    check!(
        (a.st_atime, a.st_atime_nsec) == (1000, 1),
        "UTIME_OMIT changed atime to {}.{}",
        a.st_atime,
        a.st_atime_nsec
    );
    check!(
        (a.st_mtime, a.st_mtime_nsec) == (3000, 3),
        "mtime {}.{}",
        a.st_mtime,
        a.st_mtime_nsec
    );
    ok(
        sys::utimensat(&f, Some([(4000, 4), (0, libc::UTIME_OMIT)]), 0),
        "omit mtime",
    )?;
    let a = lst(&f)?;
    check!(
        (a.st_atime, a.st_atime_nsec) == (4000, 4),
        "atime {}.{}",
        a.st_atime,
        a.st_atime_nsec
    );
    check!(
        (a.st_mtime, a.st_mtime_nsec) == (3000, 3),
        "UTIME_OMIT changed mtime to {}.{}",
        a.st_mtime,
        a.st_mtime_nsec
    );
    let b = lst(&f)?;
    tick();
    ok(
        sys::utimensat(&f, Some([(0, libc::UTIME_OMIT), (0, libc::UTIME_OMIT)]), 0),
        "omit both",
    )?;
    let a = lst(&f)?;
    check!(
        sys::times_ns(&a) == sys::times_ns(&b),
        "omitting both changed some timestamp"
    );
    Ok(Outcome::Pass)
}

fn utimensat_nofollow(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(
        sys::utimensat(&f, Some([(5000, 0), (5000, 0)]), 0),
        "set file times",
    )?;
    ok(sys::symlink(Path::new("f"), &ctx.p("l")), "symlink")?;
    ok(
        sys::utimensat(
            &ctx.p("l"),
            Some([(7000, 7), (8000, 8)]),
            libc::AT_SYMLINK_NOFOLLOW,
        ),
        "utimensat AT_SYMLINK_NOFOLLOW",
    )?;
    let l = lst(&ctx.p("l"))?;
    check!(
        (l.st_mtime, l.st_mtime_nsec) == (8000, 8),
        "symlink mtime {}.{}",
        l.st_mtime,
        l.st_mtime_nsec
    );
    let t = lst(&f)?;
    check!(
        t.st_mtime == 5000,
        "AT_SYMLINK_NOFOLLOW changed the target's mtime"
    );
    ok(
        sys::utimensat(&ctx.p("l"), Some([(9000, 0), (9000, 0)]), 0),
        "utimensat following",
    )?;
    check!(
        lst(&f)?.st_mtime == 9000,
        "utimensat without NOFOLLOW did not reach the target"
    );
    Ok(Outcome::Pass)
}

fn preserved_across_reopen(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(
        sys::utimensat(&f, Some([(1234, 5678), (2345, 6789)]), 0),
        "utimensat",
    )?;
    let fd = ok(sys::open(&f, libc::O_RDWR, 0), "open")?;
    ok(sys::fsync(&fd), "fsync")?;
    drop(fd);
    let a = lst(&f)?;
    check!(
        (a.st_mtime, a.st_mtime_nsec) == (2345, 6789),
        "mtime not preserved across open/fsync/close"
    );
    Ok(Outcome::Pass)
}

// ---- xattr ----

/// Sets a probe xattr; returns a SKIP outcome if user xattrs are unsupported.
fn xattr_probe(p: &Path) -> Result<Option<Outcome>> {
    match sys::setxattr(p, "user.probe", b"1", 0) {
        Ok(()) => {
            ok(sys::removexattr(p, "user.probe"), "removexattr probe")?;
            Ok(None)
        }
        Err(e) if sys::errno_of(&e) == libc::EOPNOTSUPP => Ok(Some(Outcome::Skip(
            "user.* xattrs unsupported (EOPNOTSUPP)".into(),
        ))),
        Err(e) => bail!("setxattr probe: {e}"),
    }
}

macro_rules! need_xattr {
    ($p:expr) => {
        if let Some(skip) = xattr_probe($p)? {
            return Ok(skip);
        }
    };
}

fn xattr_set_get(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    need_xattr!(&f);
    let big: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    ok(sys::setxattr(&f, "user.small", b"value", 0), "setxattr")?;
    ok(
        sys::setxattr(&f, "user.bin", &[0, 1, 2, 255, 0], 0),
        "setxattr binary",
    )?;
    ok(
        sys::setxattr(&f, "user.big", &big, 0),
        "setxattr 3000 bytes",
    )?;
    ok(
        sys::setxattr(&f, "user.empty", b"", 0),
        "setxattr empty value",
    )?;
    check!(
        ok(sys::getxattr(&f, "user.small"), "getxattr")? == b"value",
        "user.small value"
    );
    check!(
        ok(sys::getxattr(&f, "user.bin"), "getxattr")? == [0, 1, 2, 255, 0],
        "binary value"
    );
    check!(
        ok(sys::getxattr(&f, "user.big"), "getxattr")? == big,
        "3000-byte value"
    );
    check!(
        ok(sys::getxattr(&f, "user.empty"), "getxattr")?.is_empty(),
        "empty value"
    );
    ok(sys::setxattr(&f, "user.small", b"v2", 0), "overwrite")?;
    check!(
        ok(sys::getxattr(&f, "user.small"), "getxattr")? == b"v2",
        "overwritten value (shorter) read back wrong"
    );
    expect_err(
        sys::getxattr(&f, "user.missing"),
        &[libc::ENODATA],
        "getxattr of missing name",
    )?;
    Ok(Outcome::Pass)
}

fn xattr_list(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    need_xattr!(&f);
    let mut want: Vec<String> = (0..20).map(|i| format!("user.attr{i:02}")).collect();
    for n in &want {
        ok(sys::setxattr(&f, n, n.as_bytes(), 0), "setxattr")?;
    }
    let mut got: Vec<String> = ok(sys::listxattr(&f), "listxattr")?
        .into_iter()
        .filter(|n| n.starts_with("user."))
        .collect();
    got.sort();
    want.sort();
    check!(got == want, "listxattr gave {got:?}");
    Ok(Outcome::Pass)
}

fn xattr_remove(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    need_xattr!(&f);
    ok(sys::setxattr(&f, "user.a", b"1", 0), "setxattr")?;
    ok(sys::setxattr(&f, "user.b", b"2", 0), "setxattr")?;
    ok(sys::removexattr(&f, "user.a"), "removexattr")?;
    expect_err(
        sys::getxattr(&f, "user.a"),
        &[libc::ENODATA],
        "getxattr after remove",
    )?;
    expect_err(
        sys::removexattr(&f, "user.a"),
        &[libc::ENODATA],
        "second removexattr",
    )?;
    let names = ok(sys::listxattr(&f), "listxattr")?;
    check!(
        !names.contains(&"user.a".to_string()) && names.contains(&"user.b".to_string()),
        "list after remove: {names:?}"
    );
    Ok(Outcome::Pass)
}

fn xattr_flags(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    need_xattr!(&f);
    expect_err(
        sys::setxattr(&f, "user.r", b"1", libc::XATTR_REPLACE),
        &[libc::ENODATA],
        "XATTR_REPLACE of missing name",
    )?;
    expect_err(
        sys::getxattr(&f, "user.r"),
        &[libc::ENODATA],
        "failed XATTR_REPLACE must not create",
    )?;
    ok(
        sys::setxattr(&f, "user.c", b"1", libc::XATTR_CREATE),
        "XATTR_CREATE of new name",
    )?;
    expect_err(
        sys::setxattr(&f, "user.c", b"2", libc::XATTR_CREATE),
        &[libc::EEXIST],
        "XATTR_CREATE of existing name",
    )?;
    check!(
        ok(sys::getxattr(&f, "user.c"), "getxattr")? == b"1",
        "failed XATTR_CREATE changed the value"
    );
    ok(
        sys::setxattr(&f, "user.c", b"3", libc::XATTR_REPLACE),
        "XATTR_REPLACE of existing name",
    )?;
    check!(
        ok(sys::getxattr(&f, "user.c"), "getxattr")? == b"3",
        "XATTR_REPLACE value"
    );
    Ok(Outcome::Pass)
}

fn xattr_size_query(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    need_xattr!(&f);
    ok(sys::setxattr(&f, "user.s", b"0123456789", 0), "setxattr")?;
    let (len, _) = ok(sys::getxattr_sized(&f, "user.s", 0), "getxattr size query")?;
    check!(len == 10, "size query returned {len}, want 10");
    expect_err(
        sys::getxattr_sized(&f, "user.s", 4),
        &[libc::ERANGE],
        "getxattr into a too small buffer",
    )?;
    let c = sys::cstr(&f);
    let n = unsafe { libc::listxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    check!(
        n >= "user.s\0".len() as isize,
        "listxattr size query returned {n}"
    );
    let mut tiny = [0u8; 2];
    let r = unsafe { libc::listxattr(c.as_ptr(), tiny.as_mut_ptr().cast(), tiny.len()) };
    check!(
        r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE),
        "listxattr into 2 bytes did not fail with ERANGE"
    );
    Ok(Outcome::Pass)
}

fn xattr_dir(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    need_xattr!(&d);
    ok(sys::setxattr(&d, "user.dir", b"yes", 0), "setxattr on dir")?;
    check!(
        ok(sys::getxattr(&d, "user.dir"), "getxattr")? == b"yes",
        "dir xattr value"
    );
    Ok(Outcome::Pass)
}

fn xattr_rename(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    need_xattr!(&f);
    ok(sys::setxattr(&f, "user.keep", b"me", 0), "setxattr")?;
    ok(sys::link(&f, &ctx.p("h")), "link")?;
    ok(sys::rename(&f, &ctx.p("g")), "rename")?;
    check!(
        ok(
            sys::getxattr(&ctx.p("g"), "user.keep"),
            "getxattr after rename"
        )? == b"me",
        "xattr lost by rename"
    );
    check!(
        ok(
            sys::getxattr(&ctx.p("h"), "user.keep"),
            "getxattr via hard link"
        )? == b"me",
        "xattr not shared by hard link"
    );
    Ok(Outcome::Pass)
}

// ---- readdir ----

/// A libc DIR stream, for readdir semantics with interleaved changes.
struct DirStream(*mut libc::DIR);

impl DirStream {
    fn open(p: &Path) -> Result<Self> {
        let c = sys::cstr(p);
        let d = unsafe { libc::opendir(c.as_ptr()) };
        if d.is_null() {
            bail!(
                "opendir {}: {}",
                p.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(Self(d))
    }

    /// Next entry as (name, ino, d_type), or None at the end.
    fn next(&mut self) -> Result<Option<(String, u64, u8)>> {
        unsafe { *libc::__errno_location() = 0 };
        let e = unsafe { libc::readdir64(self.0) };
        if e.is_null() {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error().unwrap_or(0) != 0 {
                bail!("readdir: {err}");
            }
            return Ok(None);
        }
        let e = unsafe { &*e };
        let name = unsafe { CStr::from_ptr(e.d_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Some((name, e.d_ino, e.d_type)))
    }

    fn rewind(&mut self) {
        unsafe { libc::rewinddir(self.0) }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        unsafe { libc::closedir(self.0) };
    }
}

fn count_all(p: &Path) -> Result<HashMap<String, usize>> {
    let mut d = DirStream::open(p)?;
    let mut m = HashMap::new();
    while let Some((n, _, _)) = d.next()? {
        *m.entry(n).or_insert(0) += 1;
    }
    Ok(m)
}

fn readdir_empty(ctx: &Ctx) -> Result<Outcome> {
    let m = count_all(&ctx.dir)?;
    let mut names: Vec<_> = m.keys().cloned().collect();
    names.sort();
    check!(names == [".", ".."], "empty dir lists {names:?}");
    check!(m.values().all(|c| *c == 1), "'.' or '..' listed twice");
    Ok(Outcome::Pass)
}

fn readdir_all_once(ctx: &Ctx) -> Result<Outcome> {
    let n = 600;
    for i in 0..n {
        let name = format!("entry-{i:04}-{}", "x".repeat(i % 40));
        if i % 5 == 0 {
            ok(sys::mkdir(&ctx.p(&name), 0o755), "mkdir")?;
        } else {
            make_file(&ctx.p(&name), b"")?;
        }
    }
    let m = count_all(&ctx.dir)?;
    check!(
        m.len() == n + 2,
        "readdir saw {} distinct names, want {}",
        m.len(),
        n + 2
    );
    if let Some((name, c)) = m.iter().find(|(_, c)| **c != 1) {
        bail!("{name} listed {c} times");
    }
    Ok(Outcome::Pass)
}

fn readdir_interleaved(ctx: &Ctx) -> Result<Outcome> {
    let n = 300;
    for i in 0..n {
        make_file(&ctx.p(&format!("old{i:04}")), b"")?;
    }
    let mut d = DirStream::open(&ctx.dir)?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut created = 0;
    while let Some((name, _, _)) = d.next()? {
        *seen.entry(name).or_insert(0) += 1;
        // Create a new entry after every few reads.
        if seen.len() % 3 == 0 && created < 200 {
            make_file(&ctx.p(&format!("new{created:04}")), b"")?;
            created += 1;
        }
    }
    for i in 0..n {
        let name = format!("old{i:04}");
        match seen.get(&name) {
            Some(1) => {}
            Some(c) => bail!("pre-existing {name} seen {c} times with interleaved creates"),
            None => bail!("pre-existing {name} not seen with interleaved creates"),
        }
    }
    if let Some((name, c)) = seen.iter().find(|(_, c)| **c > 1) {
        bail!("{name} seen {c} times");
    }
    Ok(Outcome::Pass)
}

fn readdir_interleaved_unlinks(ctx: &Ctx) -> Result<Outcome> {
    let n = 300;
    for i in 0..n {
        make_file(&ctx.p(&format!("f{i:04}")), b"")?;
    }
    let mut d = DirStream::open(&ctx.dir)?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut removed = std::collections::HashSet::new();
    let mut k = 0;
    while let Some((name, _, _)) = d.next()? {
        *seen.entry(name).or_insert(0) += 1;
        // Remove some entries not seen yet (from the end of the numbering).
        if seen.len() % 4 == 0 && k < 100 {
            let victim = format!("f{:04}", n - 1 - k);
            if !seen.contains_key(&victim) {
                ok(sys::unlink(&ctx.p(&victim)), "unlink during readdir")?;
                removed.insert(victim);
            }
            k += 1;
        }
    }
    for i in 0..n {
        let name = format!("f{i:04}");
        let c = seen.get(&name).copied().unwrap_or(0);
        if removed.contains(&name) {
            check!(c <= 1, "{name} (removed during readdir) seen {c} times");
        } else {
            check!(
                c == 1,
                "{name} (kept) seen {c} times during interleaved unlinks"
            );
        }
    }
    Ok(Outcome::Pass)
}

fn readdir_types(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("file"), b"")?;
    ok(sys::mkdir(&ctx.p("dir"), 0o755), "mkdir")?;
    ok(sys::symlink(Path::new("file"), &ctx.p("link")), "symlink")?;
    ok(sys::mkfifo(&ctx.p("fifo"), 0o644), "mkfifo")?;
    let mut d = DirStream::open(&ctx.dir)?;
    let mut n = 0;
    while let Some((name, ino, ty)) = d.next()? {
        let s = lst(&ctx.p(&name))?;
        check!(
            ino == s.st_ino,
            "{name}: d_ino {ino} != st_ino {}",
            s.st_ino
        );
        if name == "." || name == ".." {
            continue;
        }
        n += 1;
        let want = match sys::file_type(s.st_mode) {
            libc::S_IFREG => libc::DT_REG,
            libc::S_IFDIR => libc::DT_DIR,
            libc::S_IFLNK => libc::DT_LNK,
            libc::S_IFIFO => libc::DT_FIFO,
            _ => libc::DT_UNKNOWN,
        };
        check!(
            ty == want || ty == libc::DT_UNKNOWN,
            "{name}: d_type {ty} want {want}"
        );
    }
    check!(n == 4, "saw {n} entries, want 4");
    Ok(Outcome::Pass)
}

fn readdir_rewind(ctx: &Ctx) -> Result<Outcome> {
    for i in 0..50 {
        make_file(&ctx.p(&format!("f{i}")), b"")?;
    }
    let mut d = DirStream::open(&ctx.dir)?;
    let mut first = Vec::new();
    while let Some((n, _, _)) = d.next()? {
        first.push(n);
    }
    d.rewind();
    let mut second = Vec::new();
    while let Some((n, _, _)) = d.next()? {
        second.push(n);
    }
    first.sort();
    second.sort();
    check!(first.len() == 52, "first pass saw {} entries", first.len());
    check!(first == second, "rewinddir pass differs from first pass");
    Ok(Outcome::Pass)
}

fn statfs_sanity(ctx: &Ctx) -> Result<Outcome> {
    let s = ok(sys::statfs(&ctx.dir), "statfs")?;
    check!(s.f_bsize > 0, "f_bsize {}", s.f_bsize);
    check!(s.f_blocks > 0, "f_blocks is 0");
    check!(
        s.f_bfree <= s.f_blocks,
        "f_bfree {} > f_blocks {}",
        s.f_bfree,
        s.f_blocks
    );
    check!(
        s.f_bavail <= s.f_bfree,
        "f_bavail {} > f_bfree {}",
        s.f_bavail,
        s.f_bfree
    );
    check!(
        s.f_ffree <= s.f_files,
        "f_ffree {} > f_files {}",
        s.f_ffree,
        s.f_files
    );
    check!(s.f_namelen >= 255, "f_namelen {} < 255", s.f_namelen);
    let fd = ok(
        sys::open(&ctx.dir, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        "open dir",
    )?;
    let fs = ok(sys::fstatfs(&fd), "fstatfs")?;
    check!(
        fs.f_type == s.f_type && fs.f_bsize == s.f_bsize && fs.f_blocks == s.f_blocks,
        "fstatfs disagrees with statfs"
    );
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    let c = CString::new(ctx.dir.as_os_str().as_bytes())?;
    check!(
        unsafe { libc::statvfs(c.as_ptr(), &mut sv) } == 0,
        "statvfs failed"
    );
    check!(sv.f_namemax >= 255, "statvfs f_namemax {}", sv.f_namemax);
    Ok(Outcome::Pass)
}
