//! Namespace cases: link/unlink, rename (incl. renameat2 flags), mkdir/rmdir,
//! symlinks, mknod of special files, and name/path length limits.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{cases, check, expect_err, make_file, ok, read_file, tick, Case, Ctx, Outcome};
use crate::sys;

pub fn cases() -> Vec<Case> {
    cases![
        "link/count" => link_count,
        "link/dir_eperm" => link_dir_eperm,
        "link/eexist" => link_eexist,
        "link/enoent" => link_enoent,
        "link/symlink_not_followed" => link_symlink_not_followed,
        "unlink/basic" => unlink_basic,
        "unlink/dir_eisdir" => unlink_dir_eisdir,
        "unlink/enoent" => unlink_enoent,
        "rename/file" => rename_file,
        "rename/over_file" => rename_over_file,
        "rename/over_empty_dir" => rename_over_empty_dir,
        "rename/over_nonempty_dir" => rename_over_nonempty_dir,
        "rename/file_over_dir_eisdir" => rename_file_over_dir,
        "rename/dir_over_file_enotdir" => rename_dir_over_file,
        "rename/into_own_subdir_einval" => rename_into_own_subdir,
        "rename/hardlinks_same_inode" => rename_hardlinks_same_inode,
        "rename/dir_across_parents" => rename_dir_across_parents,
        "rename/enoent" => rename_enoent,
        "rename/open_fd_survives" => rename_open_fd_survives,
        "rename/noreplace" => rename_noreplace,
        "rename/exchange" => rename_exchange,
        "mkdir/basic" => mkdir_basic,
        "mkdir/eexist" => mkdir_eexist,
        "mkdir/enoent" => mkdir_enoent,
        "rmdir/basic" => rmdir_basic,
        "rmdir/enotempty" => rmdir_enotempty,
        "rmdir/dot_einval" => rmdir_dot,
        "rmdir/enotdir" => rmdir_enotdir,
        "symlink/readlink" => symlink_readlink,
        "symlink/dangling" => symlink_dangling,
        "symlink/eloop" => symlink_eloop,
        "symlink/stat_vs_lstat" => symlink_stat_vs_lstat,
        "symlink/eexist" => symlink_eexist,
        "symlink/readlink_einval" => readlink_einval,
        "symlink/long_target" => symlink_long_target,
        "symlink/dir_traversal" => symlink_dir_traversal,
        "mknod/fifo" => mknod_fifo,
        "mknod/socket" => mknod_socket,
        "names/name_max" => name_max,
        "names/name_too_long" => name_too_long,
        "names/path_max" => path_max,
        "names/special_chars" => special_chars,
    ]
}

fn st(p: &Path) -> Result<libc::stat> {
    ok(sys::lstat(p), &format!("lstat {}", p.display()))
}

fn link_count(ctx: &Ctx) -> Result<Outcome> {
    let (a, b, c) = (ctx.p("a"), ctx.p("b"), ctx.p("c"));
    make_file(&a, b"data")?;
    check!(st(&a)?.st_nlink == 1, "new file nlink {}", st(&a)?.st_nlink);
    let before = st(&a)?;
    let dbefore = st(&ctx.dir)?;
    tick();
    ok(sys::link(&a, &b), "link a b")?;
    ok(sys::link(&b, &c), "link b c")?;
    let (sa, sb, sc) = (st(&a)?, st(&b)?, st(&c)?);
    check!(
        sa.st_ino == sb.st_ino && sb.st_ino == sc.st_ino,
        "hard links have different inode numbers"
    );
    check!(
        sa.st_nlink == 3,
        "nlink {} after two links, want 3",
        sa.st_nlink
    );
    check!(
        sys::times_ns(&sa).2 > sys::times_ns(&before).2,
        "link did not advance the file's ctime"
    );
    let d = st(&ctx.dir)?;
    check!(
        sys::times_ns(&d).1 > sys::times_ns(&dbefore).1,
        "link did not advance the dir's mtime"
    );
    ok(sys::unlink(&a), "unlink a")?;
    check!(
        st(&b)?.st_nlink == 2,
        "nlink {} after unlink, want 2",
        st(&b)?.st_nlink
    );
    check!(read_file(&c)? == b"data", "content via remaining link");
    ok(sys::unlink(&b), "unlink b")?;
    check!(st(&c)?.st_nlink == 1, "nlink {} want 1", st(&c)?.st_nlink);
    Ok(Outcome::Pass)
}

fn link_dir_eperm(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    expect_err(
        sys::link(&d, &ctx.p("d2")),
        &[libc::EPERM],
        "link of a directory",
    )?;
    Ok(Outcome::Pass)
}

fn link_eexist(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("a"), b"1")?;
    make_file(&ctx.p("b"), b"2")?;
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    expect_err(
        sys::link(&ctx.p("a"), &ctx.p("b")),
        &[libc::EEXIST],
        "link over an existing file",
    )?;
    expect_err(
        sys::link(&ctx.p("a"), &ctx.p("d")),
        &[libc::EEXIST],
        "link over an existing dir",
    )?;
    check!(read_file(&ctx.p("b"))? == b"2", "target clobbered");
    Ok(Outcome::Pass)
}

fn link_enoent(ctx: &Ctx) -> Result<Outcome> {
    expect_err(
        sys::link(&ctx.p("missing"), &ctx.p("x")),
        &[libc::ENOENT],
        "link of a missing file",
    )?;
    make_file(&ctx.p("a"), b"1")?;
    expect_err(
        sys::link(&ctx.p("a"), &ctx.p("nodir/x")),
        &[libc::ENOENT],
        "link into a missing dir",
    )?;
    Ok(Outcome::Pass)
}

fn link_symlink_not_followed(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"1")?;
    ok(sys::symlink(Path::new("f"), &ctx.p("l")), "symlink")?;
    ok(sys::link(&ctx.p("l"), &ctx.p("l2")), "link of a symlink")?;
    let (a, b) = (st(&ctx.p("l"))?, st(&ctx.p("l2"))?);
    check!(
        sys::file_type(b.st_mode) == libc::S_IFLNK,
        "link(2) followed the symlink"
    );
    check!(
        a.st_ino == b.st_ino && b.st_nlink == 2,
        "link of symlink: ino/nlink mismatch"
    );
    Ok(Outcome::Pass)
}

fn unlink_basic(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(sys::link(&f, &ctx.p("g")), "link")?;
    let before = st(&ctx.dir)?;
    let fbefore = st(&f)?;
    tick();
    ok(sys::unlink(&f), "unlink")?;
    expect_err(sys::lstat(&f), &[libc::ENOENT], "lstat after unlink")?;
    let d = st(&ctx.dir)?;
    let (_, m0, c0) = sys::times_ns(&before);
    let (_, m1, c1) = sys::times_ns(&d);
    check!(
        m1 > m0 && c1 > c0,
        "unlink did not advance the parent's mtime/ctime"
    );
    let g = st(&ctx.p("g"))?;
    check!(
        sys::times_ns(&g).2 > sys::times_ns(&fbefore).2,
        "unlink did not advance the remaining link's ctime"
    );
    Ok(Outcome::Pass)
}

fn unlink_dir_eisdir(ctx: &Ctx) -> Result<Outcome> {
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    expect_err(
        sys::unlink(&ctx.p("d")),
        &[libc::EISDIR, libc::EPERM],
        "unlink of a directory",
    )?;
    ok(sys::lstat(&ctx.p("d")), "dir must survive")?;
    Ok(Outcome::Pass)
}

fn unlink_enoent(ctx: &Ctx) -> Result<Outcome> {
    expect_err(
        sys::unlink(&ctx.p("missing")),
        &[libc::ENOENT],
        "unlink of a missing file",
    )?;
    make_file(&ctx.p("f"), b"x")?;
    expect_err(
        sys::unlink(&ctx.p("f/x")),
        &[libc::ENOTDIR],
        "unlink file/x",
    )?;
    Ok(Outcome::Pass)
}

fn rename_file(ctx: &Ctx) -> Result<Outcome> {
    let (a, b) = (ctx.p("a"), ctx.p("b"));
    make_file(&a, b"content")?;
    let ino = st(&a)?.st_ino;
    let dbefore = st(&ctx.dir)?;
    tick();
    ok(sys::rename(&a, &b), "rename")?;
    expect_err(sys::lstat(&a), &[libc::ENOENT], "old name after rename")?;
    let sb = st(&b)?;
    check!(sb.st_ino == ino, "rename changed the inode number");
    check!(sb.st_nlink == 1, "nlink {} after rename", sb.st_nlink);
    check!(read_file(&b)? == b"content", "content after rename");
    let d = st(&ctx.dir)?;
    check!(
        sys::times_ns(&d).1 > sys::times_ns(&dbefore).1,
        "rename did not advance the dir's mtime"
    );
    Ok(Outcome::Pass)
}

fn rename_over_file(ctx: &Ctx) -> Result<Outcome> {
    let (a, b, b2) = (ctx.p("a"), ctx.p("b"), ctx.p("b2"));
    make_file(&a, b"new")?;
    make_file(&b, b"old")?;
    ok(sys::link(&b, &b2), "link")?;
    let ino_a = st(&a)?.st_ino;
    ok(sys::rename(&a, &b), "rename over file")?;
    check!(
        st(&b)?.st_ino == ino_a,
        "target does not refer to the source inode"
    );
    check!(read_file(&b)? == b"new", "target content");
    check!(
        st(&b2)?.st_nlink == 1,
        "replaced inode's nlink {} want 1",
        st(&b2)?.st_nlink
    );
    check!(
        read_file(&b2)? == b"old",
        "replaced inode's other link content"
    );
    let names: Vec<_> = ok(std::fs::read_dir(&ctx.dir), "readdir")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    check!(
        names.len() == 2,
        "dir has {} entries after rename over file, want 2",
        names.len()
    );
    Ok(Outcome::Pass)
}

fn rename_over_empty_dir(ctx: &Ctx) -> Result<Outcome> {
    let (a, b) = (ctx.p("a"), ctx.p("b"));
    ok(sys::mkdir(&a, 0o755), "mkdir a")?;
    make_file(&a.join("inner"), b"x")?;
    ok(sys::mkdir(&b, 0o755), "mkdir b")?;
    let ino = st(&a)?.st_ino;
    let parent_links = st(&ctx.dir)?.st_nlink;
    ok(sys::rename(&a, &b), "rename dir over empty dir")?;
    check!(st(&b)?.st_ino == ino, "target is not the source dir");
    check!(read_file(&b.join("inner"))? == b"x", "content of moved dir");
    let pl = st(&ctx.dir)?.st_nlink;
    check!(
        pl == parent_links - 1,
        "parent nlink {pl}, want {}",
        parent_links - 1
    );
    Ok(Outcome::Pass)
}

fn rename_over_nonempty_dir(ctx: &Ctx) -> Result<Outcome> {
    let (a, b) = (ctx.p("a"), ctx.p("b"));
    ok(sys::mkdir(&a, 0o755), "mkdir a")?;
    ok(sys::mkdir(&b, 0o755), "mkdir b")?;
    make_file(&b.join("x"), b"x")?;
    expect_err(
        sys::rename(&a, &b),
        &[libc::ENOTEMPTY, libc::EEXIST],
        "rename dir over non-empty dir",
    )?;
    ok(sys::lstat(&a), "source must survive")?;
    ok(sys::lstat(&b.join("x")), "target content must survive")?;
    Ok(Outcome::Pass)
}

fn rename_file_over_dir(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"x")?;
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    expect_err(
        sys::rename(&ctx.p("f"), &ctx.p("d")),
        &[libc::EISDIR],
        "rename file over dir",
    )?;
    Ok(Outcome::Pass)
}

fn rename_dir_over_file(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"x")?;
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    expect_err(
        sys::rename(&ctx.p("d"), &ctx.p("f")),
        &[libc::ENOTDIR],
        "rename dir over file",
    )?;
    Ok(Outcome::Pass)
}

fn rename_into_own_subdir(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    ok(sys::mkdir(&d.join("sub"), 0o755), "mkdir sub")?;
    expect_err(
        sys::rename(&d, &d.join("sub/moved")),
        &[libc::EINVAL],
        "rename dir into its own subdir",
    )?;
    expect_err(
        sys::rename(&d, &d.join("moved")),
        &[libc::EINVAL],
        "rename dir into itself",
    )?;
    expect_err(
        sys::rename(&ctx.p("d/."), &ctx.p("x")),
        &[libc::EINVAL, libc::EBUSY],
        "rename of '.'",
    )?;
    Ok(Outcome::Pass)
}

fn rename_hardlinks_same_inode(ctx: &Ctx) -> Result<Outcome> {
    let (a, b) = (ctx.p("a"), ctx.p("b"));
    make_file(&a, b"x")?;
    ok(sys::link(&a, &b), "link")?;
    ok(sys::rename(&a, &b), "rename between links of one inode")?;
    ok(
        sys::lstat(&a),
        "POSIX: rename of two links to the same file does nothing; source",
    )?;
    ok(sys::lstat(&b), "target")?;
    check!(
        st(&a)?.st_nlink == 2,
        "nlink changed to {}",
        st(&a)?.st_nlink
    );
    ok(sys::rename(&a, &a), "rename to itself")?;
    ok(sys::lstat(&a), "file after rename to itself")?;
    Ok(Outcome::Pass)
}

fn rename_dir_across_parents(ctx: &Ctx) -> Result<Outcome> {
    let (p1, p2) = (ctx.p("p1"), ctx.p("p2"));
    ok(sys::mkdir(&p1, 0o755), "mkdir p1")?;
    ok(sys::mkdir(&p2, 0o755), "mkdir p2")?;
    ok(sys::mkdir(&p1.join("d"), 0o755), "mkdir p1/d")?;
    make_file(&p1.join("d/f"), b"payload")?;
    let (b1, b2) = (st(&p1)?, st(&p2)?);
    tick();
    ok(
        sys::rename(&p1.join("d"), &p2.join("e")),
        "rename p1/d p2/e",
    )?;
    let (a1, a2) = (st(&p1)?, st(&p2)?);
    check!(
        a1.st_nlink == b1.st_nlink - 1,
        "old parent nlink {} want {}",
        a1.st_nlink,
        b1.st_nlink - 1
    );
    check!(
        a2.st_nlink == b2.st_nlink + 1,
        "new parent nlink {} want {}",
        a2.st_nlink,
        b2.st_nlink + 1
    );
    let dotdot = ok(sys::stat(&p2.join("e/..")), "stat e/..")?;
    check!(
        dotdot.st_ino == a2.st_ino,
        "'..' of the moved dir is not the new parent"
    );
    check!(
        read_file(&p2.join("e/f"))? == b"payload",
        "content of moved dir"
    );
    for (name, b, a) in [("old", &b1, &a1), ("new", &b2, &a2)] {
        check!(
            sys::times_ns(a).1 > sys::times_ns(b).1,
            "{name} parent mtime not advanced"
        );
        check!(
            sys::times_ns(a).2 > sys::times_ns(b).2,
            "{name} parent ctime not advanced"
        );
    }
    // A file moves across parents too.
    make_file(&p1.join("g"), b"g")?;
    ok(
        sys::rename(&p1.join("g"), &p2.join("e/g")),
        "rename file across dirs",
    )?;
    check!(read_file(&p2.join("e/g"))? == b"g", "moved file content");
    Ok(Outcome::Pass)
}

fn rename_enoent(ctx: &Ctx) -> Result<Outcome> {
    expect_err(
        sys::rename(&ctx.p("missing"), &ctx.p("x")),
        &[libc::ENOENT],
        "rename of missing source",
    )?;
    make_file(&ctx.p("f"), b"x")?;
    expect_err(
        sys::rename(&ctx.p("f"), &ctx.p("nodir/x")),
        &[libc::ENOENT],
        "rename into a missing dir",
    )?;
    Ok(Outcome::Pass)
}

fn rename_open_fd_survives(ctx: &Ctx) -> Result<Outcome> {
    let (a, b) = (ctx.p("a"), ctx.p("b"));
    make_file(&a, b"12345")?;
    let fd = ok(sys::open(&a, libc::O_RDWR, 0), "open")?;
    ok(sys::rename(&a, &b), "rename")?;
    ok(
        sys::pwrite_all(&fd, b"ab", 5),
        "write through fd after rename",
    )?;
    check!(read_file(&b)? == b"12345ab", "content via new name");
    Ok(Outcome::Pass)
}

fn renameat2_unsupported(e: &std::io::Error) -> bool {
    [libc::EINVAL, libc::ENOSYS, libc::EOPNOTSUPP].contains(&sys::errno_of(e))
}

fn rename_noreplace(ctx: &Ctx) -> Result<Outcome> {
    let (a, b, c) = (ctx.p("a"), ctx.p("b"), ctx.p("c"));
    make_file(&a, b"a")?;
    make_file(&b, b"b")?;
    match sys::renameat2(&a, &c, sys::RENAME_NOREPLACE) {
        Err(e) if renameat2_unsupported(&e) => {
            return Ok(Outcome::Skip(format!(
                "RENAME_NOREPLACE unsupported ({})",
                sys::errno_name(sys::errno_of(&e))
            )))
        }
        r => ok(r, "RENAME_NOREPLACE to a free name")?,
    }
    expect_err(
        sys::renameat2(&c, &b, sys::RENAME_NOREPLACE),
        &[libc::EEXIST],
        "RENAME_NOREPLACE over existing",
    )?;
    check!(
        read_file(&b)? == b"b" && read_file(&c)? == b"a",
        "contents changed by a refused rename"
    );
    Ok(Outcome::Pass)
}

fn rename_exchange(ctx: &Ctx) -> Result<Outcome> {
    let (f, d) = (ctx.p("f"), ctx.p("d"));
    make_file(&f, b"file")?;
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    make_file(&d.join("inner"), b"in")?;
    let (fi, di) = (st(&f)?.st_ino, st(&d)?.st_ino);
    match sys::renameat2(&f, &d, sys::RENAME_EXCHANGE) {
        Err(e) if renameat2_unsupported(&e) => {
            return Ok(Outcome::Skip(format!(
                "RENAME_EXCHANGE unsupported ({})",
                sys::errno_name(sys::errno_of(&e))
            )))
        }
        r => ok(r, "RENAME_EXCHANGE file<->dir")?,
    }
    let (sf, sd) = (st(&f)?, st(&d)?);
    check!(
        sf.st_ino == di && sys::file_type(sf.st_mode) == libc::S_IFDIR,
        "'f' is not the old dir after exchange"
    );
    check!(
        sd.st_ino == fi && sys::file_type(sd.st_mode) == libc::S_IFREG,
        "'d' is not the old file after exchange"
    );
    check!(
        read_file(&f.join("inner"))? == b"in" && read_file(&d)? == b"file",
        "contents after exchange"
    );
    expect_err(
        sys::renameat2(&f, &ctx.p("missing"), sys::RENAME_EXCHANGE),
        &[libc::ENOENT],
        "RENAME_EXCHANGE with missing target",
    )?;
    Ok(Outcome::Pass)
}

fn mkdir_basic(ctx: &Ctx) -> Result<Outcome> {
    let before = st(&ctx.dir)?;
    tick();
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o751), "mkdir")?;
    let s = st(&d)?;
    check!(sys::file_type(s.st_mode) == libc::S_IFDIR, "not a dir");
    check!(
        s.st_mode & 0o7777 == 0o751,
        "mode {:o} want 751",
        s.st_mode & 0o7777
    );
    check!(s.st_nlink == 2, "new dir nlink {} want 2", s.st_nlink);
    let after = st(&ctx.dir)?;
    check!(
        after.st_nlink == before.st_nlink + 1,
        "parent nlink {} want {}",
        after.st_nlink,
        before.st_nlink + 1
    );
    check!(
        sys::times_ns(&after).1 > sys::times_ns(&before).1,
        "mkdir did not advance parent mtime"
    );
    check!(
        sys::times_ns(&after).2 > sys::times_ns(&before).2,
        "mkdir did not advance parent ctime"
    );
    let dotdot = ok(sys::stat(&d.join("..")), "stat d/..")?;
    check!(dotdot.st_ino == after.st_ino, "'..' is not the parent");
    let dot = ok(sys::stat(&d.join(".")), "stat d/.")?;
    check!(dot.st_ino == s.st_ino, "'.' is not the dir itself");
    Ok(Outcome::Pass)
}

fn mkdir_eexist(ctx: &Ctx) -> Result<Outcome> {
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    make_file(&ctx.p("f"), b"x")?;
    ok(sys::symlink(Path::new("nowhere"), &ctx.p("l")), "symlink")?;
    for n in ["d", "f", "l"] {
        expect_err(
            sys::mkdir(&ctx.p(n), 0o755),
            &[libc::EEXIST],
            &format!("mkdir over existing {n}"),
        )?;
    }
    expect_err(sys::mkdir(&ctx.p("."), 0o755), &[libc::EEXIST], "mkdir .")?;
    Ok(Outcome::Pass)
}

fn mkdir_enoent(ctx: &Ctx) -> Result<Outcome> {
    expect_err(
        sys::mkdir(&ctx.p("a/b"), 0o755),
        &[libc::ENOENT],
        "mkdir with a missing parent",
    )?;
    Ok(Outcome::Pass)
}

fn rmdir_basic(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    let before = st(&ctx.dir)?;
    tick();
    ok(sys::rmdir(&d), "rmdir")?;
    expect_err(sys::lstat(&d), &[libc::ENOENT], "lstat after rmdir")?;
    let after = st(&ctx.dir)?;
    check!(
        after.st_nlink == before.st_nlink - 1,
        "parent nlink {} want {}",
        after.st_nlink,
        before.st_nlink - 1
    );
    check!(
        sys::times_ns(&after).1 > sys::times_ns(&before).1,
        "rmdir did not advance parent mtime"
    );
    expect_err(sys::rmdir(&d), &[libc::ENOENT], "second rmdir")?;
    Ok(Outcome::Pass)
}

fn rmdir_enotempty(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    make_file(&d.join("f"), b"x")?;
    expect_err(
        sys::rmdir(&d),
        &[libc::ENOTEMPTY, libc::EEXIST],
        "rmdir of dir with a file",
    )?;
    ok(sys::unlink(&d.join("f")), "unlink")?;
    ok(sys::mkdir(&d.join("sub"), 0o755), "mkdir sub")?;
    expect_err(
        sys::rmdir(&d),
        &[libc::ENOTEMPTY, libc::EEXIST],
        "rmdir of dir with a subdir",
    )?;
    ok(sys::rmdir(&d.join("sub")), "rmdir sub")?;
    ok(sys::rmdir(&d), "rmdir of now-empty dir")?;
    Ok(Outcome::Pass)
}

fn rmdir_dot(ctx: &Ctx) -> Result<Outcome> {
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    expect_err(sys::rmdir(&d.join(".")), &[libc::EINVAL], "rmdir d/.")?;
    expect_err(
        sys::rmdir(&d.join("..")),
        &[libc::ENOTEMPTY, libc::EEXIST, libc::EBUSY, libc::EINVAL],
        "rmdir d/..",
    )?;
    ok(sys::lstat(&d), "dir must survive")?;
    Ok(Outcome::Pass)
}

fn rmdir_enotdir(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"x")?;
    expect_err(sys::rmdir(&ctx.p("f")), &[libc::ENOTDIR], "rmdir of a file")?;
    ok(sys::symlink(Path::new("."), &ctx.p("l")), "symlink")?;
    expect_err(
        sys::rmdir(&ctx.p("l")),
        &[libc::ENOTDIR],
        "rmdir of a symlink to a dir",
    )?;
    Ok(Outcome::Pass)
}

fn symlink_readlink(ctx: &Ctx) -> Result<Outcome> {
    let l = ctx.p("l");
    let target = "some/relative/../target with spaces";
    ok(sys::symlink(Path::new(target), &l), "symlink")?;
    let got = ok(sys::readlink(&l), "readlink")?;
    check!(
        got == target.as_bytes(),
        "readlink returned {:?}",
        String::from_utf8_lossy(&got)
    );
    let s = st(&l)?;
    check!(
        sys::file_type(s.st_mode) == libc::S_IFLNK,
        "lstat type is not S_IFLNK"
    );
    check!(
        s.st_size as usize == target.len(),
        "symlink st_size {} want {}",
        s.st_size,
        target.len()
    );
    Ok(Outcome::Pass)
}

fn symlink_dangling(ctx: &Ctx) -> Result<Outcome> {
    let l = ctx.p("l");
    ok(sys::symlink(Path::new("missing"), &l), "symlink")?;
    expect_err(sys::stat(&l), &[libc::ENOENT], "stat of dangling symlink")?;
    ok(sys::lstat(&l), "lstat of dangling symlink")?;
    ok(sys::unlink(&l), "unlink of dangling symlink")?;
    Ok(Outcome::Pass)
}

fn symlink_eloop(ctx: &Ctx) -> Result<Outcome> {
    ok(sys::symlink(Path::new("b"), &ctx.p("a")), "symlink a->b")?;
    ok(sys::symlink(Path::new("a"), &ctx.p("b")), "symlink b->a")?;
    expect_err(
        sys::stat(&ctx.p("a")),
        &[libc::ELOOP],
        "stat of a symlink loop",
    )?;
    expect_err(
        sys::open(&ctx.p("a"), libc::O_RDONLY, 0),
        &[libc::ELOOP],
        "open of a symlink loop",
    )?;
    expect_err(
        sys::stat(&ctx.p("a/x")),
        &[libc::ELOOP],
        "loop as a path component",
    )?;
    ok(sys::symlink(Path::new("s"), &ctx.p("s")), "self loop")?;
    expect_err(
        sys::stat(&ctx.p("s")),
        &[libc::ELOOP],
        "stat of a self loop",
    )?;
    Ok(Outcome::Pass)
}

fn symlink_stat_vs_lstat(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"12345")?;
    ok(sys::symlink(Path::new("f"), &ctx.p("l")), "symlink")?;
    let s = ok(sys::stat(&ctx.p("l")), "stat")?;
    let l = st(&ctx.p("l"))?;
    let f = st(&ctx.p("f"))?;
    check!(
        s.st_ino == f.st_ino && s.st_size == 5,
        "stat did not follow the link"
    );
    check!(
        l.st_ino != f.st_ino && sys::file_type(l.st_mode) == libc::S_IFLNK,
        "lstat followed the link"
    );
    check!(read_file(&ctx.p("l"))? == b"12345", "read through symlink");
    Ok(Outcome::Pass)
}

fn symlink_eexist(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"x")?;
    expect_err(
        sys::symlink(Path::new("t"), &ctx.p("f")),
        &[libc::EEXIST],
        "symlink over a file",
    )?;
    ok(sys::symlink(Path::new("t"), &ctx.p("l")), "symlink")?;
    expect_err(
        sys::symlink(Path::new("t"), &ctx.p("l")),
        &[libc::EEXIST],
        "symlink over a symlink",
    )?;
    Ok(Outcome::Pass)
}

fn readlink_einval(ctx: &Ctx) -> Result<Outcome> {
    make_file(&ctx.p("f"), b"x")?;
    expect_err(
        sys::readlink(&ctx.p("f")),
        &[libc::EINVAL],
        "readlink of a regular file",
    )?;
    expect_err(
        sys::readlink(&ctx.dir),
        &[libc::EINVAL],
        "readlink of a dir",
    )?;
    Ok(Outcome::Pass)
}

fn symlink_long_target(ctx: &Ctx) -> Result<Outcome> {
    let target: String = "abcdefghij/".repeat(372) + "end";
    check!(
        target.len() == 4095,
        "test bug: target length {}",
        target.len()
    );
    ok(
        sys::symlink(Path::new(&target), &ctx.p("l")),
        "symlink with a 4095-byte target",
    )?;
    let got = ok(sys::readlink(&ctx.p("l")), "readlink")?;
    check!(
        got == target.as_bytes(),
        "long target read back as {} bytes",
        got.len()
    );
    expect_err(
        sys::symlink(Path::new(&(target + "x")), &ctx.p("l2")),
        &[libc::ENAMETOOLONG],
        "symlink with a 4096-byte target",
    )?;
    Ok(Outcome::Pass)
}

fn symlink_dir_traversal(ctx: &Ctx) -> Result<Outcome> {
    ok(sys::mkdir(&ctx.p("d"), 0o755), "mkdir")?;
    make_file(&ctx.p("d/f"), b"inside")?;
    ok(
        sys::symlink(Path::new("d"), &ctx.p("rel")),
        "relative dir symlink",
    )?;
    ok(
        sys::symlink(&ctx.p("d"), &ctx.p("abs")),
        "absolute dir symlink",
    )?;
    check!(
        read_file(&ctx.p("rel/f"))? == b"inside",
        "read through relative dir symlink"
    );
    check!(
        read_file(&ctx.p("abs/f"))? == b"inside",
        "read through absolute dir symlink"
    );
    ok(
        sys::symlink(Path::new("../f"), &ctx.p("d/up")),
        "symlink with ..",
    )?;
    make_file(&ctx.p("f"), b"top")?;
    check!(
        read_file(&ctx.p("d/up"))? == b"top",
        "'..' in a symlink is resolved from the link's dir"
    );
    Ok(Outcome::Pass)
}

fn mknod_fifo(ctx: &Ctx) -> Result<Outcome> {
    ok(sys::mkfifo(&ctx.p("p"), 0o640), "mkfifo")?;
    let s = st(&ctx.p("p"))?;
    check!(
        sys::file_type(s.st_mode) == libc::S_IFIFO,
        "mkfifo did not create a FIFO"
    );
    check!(
        s.st_mode & 0o7777 == 0o640,
        "fifo mode {:o}",
        s.st_mode & 0o7777
    );
    ok(
        sys::mknod(&ctx.p("q"), libc::S_IFIFO | 0o600, 0),
        "mknod S_IFIFO",
    )?;
    check!(
        sys::file_type(st(&ctx.p("q"))?.st_mode) == libc::S_IFIFO,
        "mknod did not create a FIFO"
    );
    expect_err(
        sys::mkfifo(&ctx.p("p"), 0o640),
        &[libc::EEXIST],
        "mkfifo over existing",
    )?;
    // A FIFO really works as a pipe (the fs only stores the node).
    let r = ok(
        sys::open(&ctx.p("p"), libc::O_RDONLY | libc::O_NONBLOCK, 0),
        "open fifo for read",
    )?;
    let w = ok(
        sys::open(&ctx.p("p"), libc::O_WRONLY | libc::O_NONBLOCK, 0),
        "open fifo for write",
    )?;
    ok(sys::write(&w, b"ping"), "write fifo")?;
    let mut b = [0u8; 4];
    let n = ok(sys::read(&r, &mut b), "read fifo")?;
    check!(&b[..n] == b"ping", "fifo transported {:?}", &b[..n]);
    check!(st(&ctx.p("p"))?.st_size == 0, "fifo st_size is not 0");
    Ok(Outcome::Pass)
}

fn mknod_socket(ctx: &Ctx) -> Result<Outcome> {
    let p = ctx.p("sock");
    let listener = match std::os::unix::net::UnixListener::bind(&p) {
        Ok(l) => l,
        Err(e)
            if e.raw_os_error() == Some(libc::ENAMETOOLONG)
                || e.kind() == std::io::ErrorKind::InvalidInput =>
        {
            return Ok(Outcome::Skip("socket path longer than sun_path".into()));
        }
        Err(e) => return Err(anyhow::anyhow!("bind unix socket: {e}")),
    };
    check!(
        sys::file_type(st(&p)?.st_mode) == libc::S_IFSOCK,
        "bound socket node is not S_IFSOCK"
    );
    drop(listener);
    ok(sys::unlink(&p), "unlink socket")?;
    Ok(Outcome::Pass)
}

fn name_max(ctx: &Ctx) -> Result<Outcome> {
    let n255 = "n".repeat(255);
    let p = ctx.p(&n255);
    make_file(&p, b"long")?;
    check!(read_file(&p)? == b"long", "content of 255-byte name");
    let names: Vec<_> = ok(std::fs::read_dir(&ctx.dir), "readdir")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    check!(
        names.len() == 1 && names[0].len() == 255,
        "readdir did not return the 255-byte name intact"
    );
    let d = ctx.p(&"d".repeat(255));
    ok(sys::mkdir(&d, 0o755), "mkdir 255-byte name")?;
    ok(
        sys::rename(&p, &d.join("m".repeat(255))),
        "rename to 255-byte name",
    )?;
    ok(
        sys::symlink(Path::new("x"), &ctx.p(&"s".repeat(255))),
        "symlink with 255-byte name",
    )?;
    ok(
        sys::link(&d.join("m".repeat(255)), &ctx.p(&"h".repeat(255))),
        "link with 255-byte name",
    )?;
    // Multi-byte UTF-8: 255 bytes is the limit, not 255 characters.
    let utf = "é".repeat(127) + "x";
    check!(utf.len() == 255, "test bug");
    make_file(&ctx.p(&utf), b"u")?;
    Ok(Outcome::Pass)
}

fn name_too_long(ctx: &Ctx) -> Result<Outcome> {
    let long = ctx.p(&"n".repeat(256));
    let e = &[libc::ENAMETOOLONG];
    make_file(&ctx.p("f"), b"x")?;
    expect_err(
        sys::open(&long, libc::O_CREAT | libc::O_WRONLY, 0o644),
        e,
        "create 256-byte name",
    )?;
    expect_err(sys::mkdir(&long, 0o755), e, "mkdir 256-byte name")?;
    expect_err(
        sys::symlink(Path::new("x"), &long),
        e,
        "symlink 256-byte name",
    )?;
    expect_err(sys::link(&ctx.p("f"), &long), e, "link to 256-byte name")?;
    expect_err(
        sys::rename(&ctx.p("f"), &long),
        e,
        "rename to 256-byte name",
    )?;
    expect_err(sys::stat(&long), e, "stat 256-byte name")?;
    expect_err(sys::mkfifo(&long, 0o644), e, "mkfifo 256-byte name")?;
    let utf = "é".repeat(128);
    expect_err(
        sys::open(&ctx.p(&utf), libc::O_CREAT | libc::O_WRONLY, 0o644),
        e,
        "create 256-byte UTF-8 name",
    )?;
    Ok(Outcome::Pass)
}

/// Builds nested directories so that a relative path from the case dir has
/// exactly `len` bytes, and returns it (the last component is a file name).
fn deep_path(ctx: &Ctx, len: usize) -> Result<PathBuf> {
    let comp = "p".repeat(250);
    let mut rel = String::new();
    let dfd = ok(
        sys::open(&ctx.dir, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        "open case dir",
    )?;
    while rel.len() + 251 + 10 < len {
        rel.push_str(&comp);
        let c = sys::cstr(Path::new(&rel));
        let r = unsafe { libc::mkdirat(dfd.as_raw_fd(), c.as_ptr(), 0o755) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            anyhow::bail!("mkdirat of a deep dir: {}", std::io::Error::last_os_error());
        }
        rel.push('/');
    }
    let name_len = len - rel.len();
    check!(name_len <= 255, "test bug: name {name_len}");
    rel.push_str(&"f".repeat(name_len));
    Ok(PathBuf::from(rel))
}

fn path_max(ctx: &Ctx) -> Result<Outcome> {
    let dfd = ok(
        sys::open(&ctx.dir, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        "open case dir",
    )?;
    // PATH_MAX (4096) includes the terminating NUL: 4095 bytes must work.
    let ok_path = deep_path(ctx, 4095)?;
    check!(
        ok_path.as_os_str().len() == 4095,
        "test bug: {}",
        ok_path.as_os_str().len()
    );
    let fd = ok(
        sys::openat(
            dfd.as_raw_fd(),
            &ok_path,
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        ),
        "create with a 4095-byte relative path",
    )?;
    ok(sys::pwrite_all(&fd, b"deep", 0), "write deep file")?;
    drop(fd);
    // 4096 bytes: the same file with one extra slash.
    let s = ok_path.to_string_lossy().replacen('/', "//", 1);
    check!(s.len() == 4096, "test bug");
    expect_err(
        sys::openat(dfd.as_raw_fd(), Path::new(&s), libc::O_RDONLY, 0),
        &[libc::ENAMETOOLONG],
        "open with a 4096-byte path",
    )?;
    let fd = ok(
        sys::openat(dfd.as_raw_fd(), &ok_path, libc::O_RDONLY, 0),
        "reopen deep file",
    )?;
    check!(
        ok(sys::read_all(&fd), "read")? == b"deep",
        "deep file content"
    );
    Ok(Outcome::Pass)
}

fn special_chars(ctx: &Ctx) -> Result<Outcome> {
    let names = [
        "with space",
        "tab\there",
        "new\nline",
        "ünïcödé-名前",
        ".hidden",
        "...",
        "-dash",
        "a:b;c*?",
        "\u{7f}\u{1}",
    ];
    for n in names {
        make_file(&ctx.p(n), n.as_bytes())?;
    }
    let mut got: Vec<String> = ok(std::fs::read_dir(&ctx.dir), "readdir")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    check!(got == want, "readdir names {got:?} want {want:?}");
    for n in names {
        check!(read_file(&ctx.p(n))? == n.as_bytes(), "content of {n:?}");
    }
    Ok(Outcome::Pass)
}
