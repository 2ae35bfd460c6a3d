//! Permission and ownership cases: chmod/chown rules, set-id bit clearing,
//! access checks as an unprivileged uid, set-gid directory inheritance, umask
//! and sticky directories. Unprivileged checks run in a forked child that
//! drops to the test uid with setgroups/setgid/setuid.

use anyhow::Result;

use super::{cases, check, expect_err, make_file, ok, tick, Case, Ctx, Outcome};
use crate::sys;

pub fn cases() -> Vec<Case> {
    cases![
        "perm/chmod_basic" => chmod_basic,
        "perm/chmod_special_bits" => chmod_special_bits,
        "perm/fchmod" => fchmod,
        "perm/chown_root" => chown_root,
        "perm/chown_clears_setid" => chown_clears_setid,
        "perm/chown_nonroot_eperm" => chown_nonroot_eperm,
        "perm/chmod_nonowner_eperm" => chmod_nonowner_eperm,
        "perm/write_clears_setid" => write_clears_setid,
        "perm/truncate_clears_setid" => truncate_clears_setid,
        "perm/fallocate_clears_setid" => fallocate_clears_setid,
        "perm/write_by_outsider_clears_setgid" => write_by_outsider_clears_setgid,
        "perm/access_read_denied" => access_read_denied,
        "perm/access_write_denied" => access_write_denied,
        "perm/owner_class_wins" => owner_class_wins,
        "perm/group_class" => group_class,
        "perm/exec_bits" => exec_bits,
        "perm/dir_search_denied" => dir_search_denied,
        "perm/dir_write_denied" => dir_write_denied,
        "perm/new_file_owner" => new_file_owner,
        "perm/setgid_dir_inherit" => setgid_dir_inherit,
        "perm/chmod_sgid_nonmember" => chmod_sgid_nonmember,
        "perm/umask" => umask,
        "perm/utimens_permissions" => utimens_permissions,
        "perm/sticky_other_eperm" => sticky_other_eperm,
        "perm/sticky_dir_owner" => sticky_dir_owner,
    ]
}

fn mode_of(p: &std::path::Path) -> Result<u32> {
    Ok(ok(sys::stat(p), "stat")?.st_mode & 0o7777)
}

macro_rules! need_unpriv {
    ($ctx:expr) => {
        if let Some(skip) = $ctx.need_unpriv() {
            return Ok(skip);
        }
    };
}

fn chmod_basic(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    let before = ok(sys::stat(&f), "stat")?;
    tick();
    ok(sys::chmod(&f, 0o600), "chmod 0600")?;
    let after = ok(sys::stat(&f), "stat")?;
    check!(
        after.st_mode & 0o7777 == 0o600,
        "mode is {:o}, want 600",
        after.st_mode & 0o7777
    );
    let (_, m0, c0) = sys::times_ns(&before);
    let (_, m1, c1) = sys::times_ns(&after);
    check!(c1 > c0, "chmod did not advance ctime ({c0} -> {c1})");
    check!(m1 == m0, "chmod changed mtime ({m0} -> {m1})");
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    ok(sys::chmod(&d, 0o711), "chmod dir 0711")?;
    check!(
        mode_of(&d)? == 0o711,
        "dir mode is {:o}, want 711",
        mode_of(&d)?
    );
    Ok(Outcome::Pass)
}

fn chmod_special_bits(ctx: &Ctx) -> Result<Outcome> {
    if !ctx.is_root {
        return Ok(Outcome::Skip("needs root".into()));
    }
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    for m in [0o4755, 0o2755, 0o1755, 0o7777, 0o0000, 0o0644] {
        ok(sys::chmod(&f, m), &format!("chmod {m:o}"))?;
        let got = mode_of(&f)?;
        check!(got == m, "file mode is {got:o} after chmod {m:o}");
    }
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    for m in [0o1777, 0o2755, 0o0700] {
        ok(sys::chmod(&d, m), &format!("chmod dir {m:o}"))?;
        let got = mode_of(&d)?;
        check!(got == m, "dir mode is {got:o} after chmod {m:o}");
    }
    Ok(Outcome::Pass)
}

fn fchmod(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    let fd = ok(sys::open(&f, libc::O_CREAT | libc::O_RDWR, 0o600), "create")?;
    ok(sys::fchmod(&fd, 0o640), "fchmod")?;
    check!(
        mode_of(&f)? == 0o640,
        "mode {:o} after fchmod 640",
        mode_of(&f)?
    );
    let st = ok(sys::fstat(&fd), "fstat")?;
    check!(
        st.st_mode & 0o7777 == 0o640,
        "fstat mode {:o}",
        st.st_mode & 0o7777
    );
    Ok(Outcome::Pass)
}

fn chown_root(ctx: &Ctx) -> Result<Outcome> {
    if !ctx.is_root {
        return Ok(Outcome::Skip("needs root".into()));
    }
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    let before = ok(sys::stat(&f), "stat")?;
    tick();
    ok(sys::chown(&f, ctx.uid, ctx.gid), "chown")?;
    let st = ok(sys::stat(&f), "stat")?;
    check!(
        st.st_uid == ctx.uid && st.st_gid == ctx.gid,
        "owner {}:{}",
        st.st_uid,
        st.st_gid
    );
    check!(
        sys::times_ns(&st).2 > sys::times_ns(&before).2,
        "chown did not advance ctime"
    );
    ok(sys::chown(&f, u32::MAX, u32::MAX), "chown(-1,-1)")?;
    let st = ok(sys::stat(&f), "stat")?;
    check!(
        st.st_uid == ctx.uid && st.st_gid == ctx.gid,
        "chown(-1,-1) changed owner"
    );
    ok(sys::chown(&f, u32::MAX, 0), "chown(-1,0)")?;
    let st = ok(sys::stat(&f), "stat")?;
    check!(
        st.st_uid == ctx.uid && st.st_gid == 0,
        "chown(-1,0) gave {}:{}",
        st.st_uid,
        st.st_gid
    );
    // lchown changes the link itself, not its target.
    let l = ctx.p("l");
    ok(sys::symlink(&f, &l), "symlink")?;
    ok(sys::lchown(&l, ctx.uid2, ctx.gid), "lchown")?;
    let lst = ok(sys::lstat(&l), "lstat")?;
    let tst = ok(sys::stat(&f), "stat")?;
    check!(
        lst.st_uid == ctx.uid2,
        "lchown did not change the link owner"
    );
    check!(tst.st_uid == ctx.uid, "lchown changed the target owner");
    Ok(Outcome::Pass)
}

fn chown_clears_setid(ctx: &Ctx) -> Result<Outcome> {
    if !ctx.is_root {
        return Ok(Outcome::Skip("needs root".into()));
    }
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(sys::chmod(&f, 0o6755), "chmod 6755")?;
    ok(sys::chown(&f, ctx.uid, ctx.gid), "chown")?;
    let m = mode_of(&f)?;
    check!(m & libc::S_ISUID == 0, "chown kept S_ISUID (mode {m:o})");
    check!(
        m & libc::S_ISGID == 0,
        "chown kept S_ISGID on a group-executable file (mode {m:o})"
    );
    check!(
        m & 0o777 == 0o755,
        "chown changed permission bits (mode {m:o})"
    );
    // An unprivileged owner changing only the group must clear the bits too.
    if ctx.need_unpriv().is_none() {
        ok(sys::chmod(&f, 0o6755), "chmod 6755")?;
        let p = f.clone();
        let gid = ctx.gid;
        ctx.as_user(ctx.uid, ctx.gid, move || {
            ok(sys::chown(&p, u32::MAX, gid), "chown(-1, own gid) as owner")?;
            Ok(())
        })?;
        let m = mode_of(&f)?;
        check!(
            m & (libc::S_ISUID | libc::S_ISGID) == 0,
            "non-root chown kept set-id bits (mode {m:o})"
        );
    }
    Ok(Outcome::Pass)
}

fn chown_nonroot_eperm(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(sys::chown(&f, ctx.uid, ctx.gid), "chown")?;
    let (uid2, gid) = (ctx.uid2, ctx.gid);
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            sys::chown(&p, uid2, u32::MAX),
            &[libc::EPERM],
            "chown to another uid as owner",
        )?;
        expect_err(
            sys::chown(&p, u32::MAX, 0),
            &[libc::EPERM],
            "chown to a foreign group",
        )?;
        ok(sys::chown(&p, u32::MAX, gid), "chown to own group")?;
        Ok(())
    })?;
    let st = ok(sys::stat(&f), "stat")?;
    check!(st.st_uid == ctx.uid, "owner changed to {}", st.st_uid);
    Ok(Outcome::Pass)
}

fn chmod_nonowner_eperm(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(sys::chmod(&f, 0o666), "chmod")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            sys::chmod(&p, 0o777),
            &[libc::EPERM],
            "chmod of root's file",
        )
    })?;
    check!(mode_of(&f)? == 0o666, "mode changed to {:o}", mode_of(&f)?);
    Ok(Outcome::Pass)
}

fn write_clears_setid(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"original")?;
    ok(sys::chown(&f, ctx.uid, ctx.gid), "chown")?;
    ok(sys::chmod(&f, 0o6775), "chmod 6775")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        let fd = ok(sys::open(&p, libc::O_WRONLY, 0), "open for write")?;
        ok(sys::pwrite_all(&fd, b"changed", 0), "write")?;
        Ok(())
    })?;
    let m = mode_of(&f)?;
    check!(
        m & libc::S_ISUID == 0,
        "unprivileged write kept S_ISUID (mode {m:o})"
    );
    check!(
        m & libc::S_ISGID == 0,
        "unprivileged write kept S_ISGID (mode {m:o})"
    );
    check!(
        m & 0o777 == 0o775,
        "write changed permission bits (mode {m:o})"
    );
    Ok(Outcome::Pass)
}

/// truncate(2) clears setuid and a group-executable setgid when the caller lacks
/// CAP_FSETID, and keeps them for root (Linux's setattr_should_drop_suidgid). Over FUSE with
/// HANDLE_KILLPRIV_V2 the file system makes this decision, not the kernel.
fn truncate_clears_setid(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"original")?;
    ok(sys::chown(&f, ctx.uid, ctx.gid), "chown")?;
    ok(sys::chmod(&f, 0o6775), "chmod 6775")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        ok(sys::truncate(&p, 3), "truncate as owner")?;
        Ok(())
    })?;
    let m = mode_of(&f)?;
    check!(
        m == 0o775,
        "unprivileged truncate left mode {m:o} (expected 775)"
    );
    ok(sys::chmod(&f, 0o6775), "chmod 6775")?;
    ok(sys::truncate(&f, 1), "truncate as root")?;
    let m = mode_of(&f)?;
    check!(m == 0o6775, "root's truncate changed mode to {m:o}");
    check!(
        ok(sys::stat(&f), "stat")?.st_size == 1,
        "size after truncate"
    );
    Ok(Outcome::Pass)
}

/// fallocate(2) (allocate, punch a hole) by a caller without CAP_FSETID clears setuid and
/// setgid, as a write does (Linux's `file_modified`). Over FUSE with HANDLE_KILLPRIV_V2 the
/// kernel leaves it to the file system (found by a differential run against tmpfs,
/// 2026-11-28: Flashlog kept mode 6757 where tmpfs and ext4 gave 757).
fn fallocate_clears_setid(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    for (what, mode, off, len) in [
        ("allocate", 0, 0, 8192),
        (
            "punch",
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            4096,
        ),
    ] {
        let f = ctx.p(what);
        make_file(&f, &[7u8; 8192])?;
        ok(sys::chmod(&f, 0o6757), "chmod 6757")?;
        let p = f.clone();
        ctx.as_user(ctx.uid, ctx.gid, move || {
            let fd = ok(sys::open(&p, libc::O_WRONLY, 0), "open for write")?;
            ok(sys::fallocate(&fd, mode, off, len), "fallocate")?;
            Ok(())
        })?;
        let m = mode_of(&f)?;
        check!(
            m == 0o757,
            "unprivileged fallocate ({what}) left mode {m:o} (expected 757)"
        );
    }
    Ok(Outcome::Pass)
}

/// A write by a caller outside the file's group clears setgid even without group execute
/// (Linux 6.2's `setattr_should_drop_sgid`; before, that combination was the mandatory-
/// locking mark and stayed); a member of the group keeps it. Found by a differential run
/// against tmpfs and ext4, 2026-11-28.
fn write_by_outsider_clears_setgid(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    if !kernel_at_least(6, 2) {
        return Ok(Outcome::Skip(
            "kernel before 6.2 keeps setgid without group execute".into(),
        ));
    }
    let outside = ctx.p("outside");
    make_file(&outside, b"x")?;
    ok(sys::chmod(&outside, 0o2666), "chmod 2666")?;
    let member = ctx.p("member");
    make_file(&member, b"x")?;
    ok(sys::chown(&member, 0, ctx.gid), "chown to the test group")?;
    ok(sys::chmod(&member, 0o2666), "chmod 2666")?;
    let (po, pm) = (outside.clone(), member.clone());
    ctx.as_user(ctx.uid, ctx.gid, move || {
        for p in [&po, &pm] {
            let fd = ok(sys::open(p, libc::O_WRONLY, 0), "open for write")?;
            ok(sys::pwrite_all(&fd, b"changed", 0), "write")?;
        }
        Ok(())
    })?;
    let m = mode_of(&outside)?;
    check!(
        m == 0o666,
        "write by a non-member left mode {m:o} (expected 666)"
    );
    let m = mode_of(&member)?;
    check!(
        m == 0o2666,
        "write by a member of the group changed mode to {m:o} (expected 2666)"
    );
    Ok(Outcome::Pass)
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = r
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (major, minor)
}

fn access_read_denied(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"secret")?;
    ok(sys::chmod(&f, 0o600), "chmod")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            sys::open(&p, libc::O_RDONLY, 0),
            &[libc::EACCES],
            "open O_RDONLY of 0600 root file",
        )?;
        expect_err(sys::access(&p, libc::R_OK), &[libc::EACCES], "access(R_OK)")?;
        ok(sys::access(&p, libc::F_OK), "access(F_OK)")?;
        Ok(())
    })?;
    Ok(Outcome::Pass)
}

fn access_write_denied(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"data")?;
    ok(sys::chmod(&f, 0o644), "chmod")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        ok(
            sys::open(&p, libc::O_RDONLY, 0),
            "open O_RDONLY of 0644 file",
        )?;
        expect_err(
            sys::open(&p, libc::O_WRONLY, 0),
            &[libc::EACCES],
            "open O_WRONLY",
        )?;
        expect_err(
            sys::open(&p, libc::O_RDWR | libc::O_TRUNC, 0),
            &[libc::EACCES],
            "open O_TRUNC",
        )?;
        expect_err(sys::truncate(&p, 0), &[libc::EACCES], "truncate")?;
        expect_err(sys::access(&p, libc::W_OK), &[libc::EACCES], "access(W_OK)")?;
        Ok(())
    })?;
    check!(super::read_file(&f)? == b"data", "file content changed");
    Ok(Outcome::Pass)
}

fn owner_class_wins(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"data")?;
    ok(sys::chown(&f, ctx.uid, ctx.gid), "chown")?;
    ok(sys::chmod(&f, 0o077), "chmod 077")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            sys::open(&p, libc::O_RDONLY, 0),
            &[libc::EACCES],
            "owner open of mode 077 file (owner class must apply, not group/other)",
        )
    })?;
    Ok(Outcome::Pass)
}

fn group_class(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"data")?;
    ok(sys::chown(&f, 0, ctx.gid), "chown")?;
    ok(sys::chmod(&f, 0o640), "chmod 640")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        ok(
            sys::open(&p, libc::O_RDONLY, 0),
            "group member read of 0640 file",
        )?;
        expect_err(
            sys::open(&p, libc::O_WRONLY, 0),
            &[libc::EACCES],
            "group member write of 0640",
        )?;
        Ok(())
    })?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid.wrapping_add(1), move || {
        expect_err(
            sys::open(&p, libc::O_RDONLY, 0),
            &[libc::EACCES],
            "non-member read of 0640",
        )
    })?;
    Ok(Outcome::Pass)
}

fn exec_bits(ctx: &Ctx) -> Result<Outcome> {
    let f = ctx.p("f");
    make_file(&f, b"#!/bin/sh\n")?;
    ok(sys::chmod(&f, 0o644), "chmod")?;
    expect_err(
        sys::access(&f, libc::X_OK),
        &[libc::EACCES],
        "access(X_OK) on 0644 (even root needs an x bit)",
    )?;
    ok(sys::chmod(&f, 0o744), "chmod")?;
    ok(sys::access(&f, libc::X_OK), "access(X_OK) on 0744")?;
    if ctx.need_unpriv().is_none() {
        let p = f.clone();
        ctx.as_user(ctx.uid, ctx.gid, move || {
            expect_err(
                sys::access(&p, libc::X_OK),
                &[libc::EACCES],
                "other access(X_OK) on 0744",
            )
        })?;
    }
    Ok(Outcome::Pass)
}

fn dir_search_denied(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    make_file(&d.join("f"), b"x")?;
    ok(sys::chmod(&d, 0o744), "chmod dir 744")?;
    let dd = d.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            sys::stat(&dd.join("f")),
            &[libc::EACCES],
            "stat through dir without x",
        )?;
        expect_err(
            sys::open(&dd.join("f"), libc::O_RDONLY, 0),
            &[libc::EACCES],
            "open through dir without x",
        )?;
        ok(
            std::fs::read_dir(&dd).map(drop),
            "readdir of a readable dir",
        )?;
        Ok(())
    })?;
    ok(sys::chmod(&d, 0o700), "chmod dir 700")?;
    let dd = d.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            std::fs::read_dir(&dd).map(drop),
            &[libc::EACCES],
            "opendir of 0700 dir",
        )
    })?;
    Ok(Outcome::Pass)
}

fn dir_write_denied(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o755), "mkdir")?;
    make_file(&d.join("f"), b"x")?;
    ok(sys::chmod(&d.join("f"), 0o666), "chmod")?;
    let dd = d.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        expect_err(
            sys::open(&dd.join("new"), libc::O_CREAT | libc::O_WRONLY, 0o644),
            &[libc::EACCES],
            "create in 0755 root dir",
        )?;
        expect_err(
            sys::mkdir(&dd.join("sub"), 0o755),
            &[libc::EACCES],
            "mkdir in 0755 root dir",
        )?;
        expect_err(
            sys::unlink(&dd.join("f")),
            &[libc::EACCES],
            "unlink in 0755 root dir",
        )?;
        expect_err(
            sys::rename(&dd.join("f"), &dd.join("g")),
            &[libc::EACCES],
            "rename in 0755 root dir",
        )?;
        expect_err(
            sys::symlink(std::path::Path::new("f"), &dd.join("l")),
            &[libc::EACCES],
            "symlink in 0755 root dir",
        )?;
        // The file itself is writable: writing is allowed.
        let fd = ok(
            sys::open(&dd.join("f"), libc::O_WRONLY, 0),
            "open 0666 file for write",
        )?;
        ok(sys::pwrite_all(&fd, b"y", 0), "write")?;
        Ok(())
    })?;
    Ok(Outcome::Pass)
}

fn new_file_owner(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    ok(sys::chmod(&ctx.dir, 0o777), "chmod case dir")?;
    let (f, d) = (ctx.p("f"), ctx.p("d"));
    let (ff, dd) = (f.clone(), d.clone());
    ctx.as_user(ctx.uid, ctx.gid, move || {
        ok(
            sys::open(&ff, libc::O_CREAT | libc::O_WRONLY, 0o644),
            "create",
        )?;
        ok(sys::mkdir(&dd, 0o755), "mkdir")?;
        Ok(())
    })?;
    for p in [&f, &d] {
        let st = ok(sys::stat(p), "stat")?;
        check!(
            st.st_uid == ctx.uid && st.st_gid == ctx.gid,
            "{} owned by {}:{}, want {}:{}",
            p.display(),
            st.st_uid,
            st.st_gid,
            ctx.uid,
            ctx.gid
        );
    }
    Ok(Outcome::Pass)
}

fn setgid_dir_inherit(ctx: &Ctx) -> Result<Outcome> {
    if !ctx.is_root {
        return Ok(Outcome::Skip("needs root".into()));
    }
    let d = ctx.p("d");
    ok(sys::mkdir(&d, 0o777), "mkdir")?;
    ok(sys::chown(&d, 0, ctx.gid), "chown dir")?;
    ok(sys::chmod(&d, 0o2777), "chmod 2777")?;
    make_file(&d.join("f"), b"x")?;
    ok(sys::mkdir(&d.join("sub"), 0o755), "mkdir sub")?;
    let fst = ok(sys::stat(&d.join("f")), "stat f")?;
    let sst = ok(sys::stat(&d.join("sub")), "stat sub")?;
    check!(
        fst.st_gid == ctx.gid,
        "file in set-gid dir has gid {}, want {}",
        fst.st_gid,
        ctx.gid
    );
    check!(
        sst.st_gid == ctx.gid,
        "subdir in set-gid dir has gid {}, want {}",
        sst.st_gid,
        ctx.gid
    );
    check!(
        sst.st_mode & libc::S_ISGID != 0,
        "subdir of set-gid dir lacks S_ISGID (mode {:o})",
        sst.st_mode & 0o7777
    );
    Ok(Outcome::Pass)
}

fn chmod_sgid_nonmember(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let f = ctx.p("f");
    make_file(&f, b"x")?;
    ok(sys::chown(&f, ctx.uid, 0), "chown uid:0")?;
    let p = f.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || match sys::chmod(&p, 0o2755) {
        Ok(()) => {
            let m = ok(sys::stat(&p), "stat")?.st_mode & 0o7777;
            check!(
                m & libc::S_ISGID == 0,
                "non-member set S_ISGID (mode {m:o})"
            );
            check!(m == 0o755, "mode {m:o}, want 755");
            Ok(())
        }
        r => expect_err(r, &[libc::EPERM], "chmod g+s by non-member"),
    })?;
    Ok(Outcome::Pass)
}

fn umask(ctx: &Ctx) -> Result<Outcome> {
    let old = sys::umask(0o027);
    let r = (|| {
        ok(
            sys::open(&ctx.p("f"), libc::O_CREAT | libc::O_WRONLY, 0o777),
            "create",
        )?;
        ok(sys::mkdir(&ctx.p("d"), 0o777), "mkdir")?;
        ok(sys::mkfifo(&ctx.p("p"), 0o666), "mkfifo")?;
        Ok::<_, anyhow::Error>(())
    })();
    sys::umask(old);
    r?;
    for (n, want) in [("f", 0o750), ("d", 0o750), ("p", 0o640)] {
        let m = mode_of(&ctx.p(n))?;
        check!(m == want, "{n}: mode {m:o} with umask 027, want {want:o}");
    }
    Ok(Outcome::Pass)
}

fn utimens_permissions(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let (w, r) = (ctx.p("w"), ctx.p("r"));
    make_file(&w, b"x")?;
    make_file(&r, b"x")?;
    ok(sys::chmod(&w, 0o666), "chmod")?;
    ok(sys::chmod(&r, 0o644), "chmod")?;
    let (ww, rr) = (w.clone(), r.clone());
    ctx.as_user(ctx.uid, ctx.gid, move || {
        ok(
            sys::utimensat(&ww, None, 0),
            "utimensat(NULL) with write access",
        )?;
        expect_err(
            sys::utimensat(&ww, Some([(1000, 0), (1000, 0)]), 0),
            &[libc::EPERM],
            "explicit times by non-owner",
        )?;
        expect_err(
            sys::utimensat(&rr, None, 0),
            &[libc::EACCES],
            "utimensat(NULL) without write access",
        )?;
        Ok(())
    })?;
    Ok(Outcome::Pass)
}

fn sticky_other_eperm(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let d = ctx.p("sticky");
    ok(sys::mkdir(&d, 0o777), "mkdir")?;
    ok(sys::chmod(&d, 0o1777), "chmod 1777")?;
    make_file(&d.join("roots"), b"x")?;
    ok(sys::chmod(&d.join("roots"), 0o666), "chmod")?;
    let dd = d.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        let perm = [libc::EPERM, libc::EACCES];
        expect_err(
            sys::unlink(&dd.join("roots")),
            &perm,
            "unlink of another user's file in sticky dir",
        )?;
        expect_err(
            sys::rename(&dd.join("roots"), &dd.join("moved")),
            &perm,
            "rename of another user's file in sticky dir",
        )?;
        make_file(&dd.join("mine"), b"y")?;
        ok(
            sys::rename(&dd.join("mine"), &dd.join("mine2")),
            "rename own file in sticky dir",
        )?;
        ok(
            sys::unlink(&dd.join("mine2")),
            "unlink own file in sticky dir",
        )?;
        Ok(())
    })?;
    ok(sys::stat(&d.join("roots")), "root's file must survive")?;
    Ok(Outcome::Pass)
}

fn sticky_dir_owner(ctx: &Ctx) -> Result<Outcome> {
    need_unpriv!(ctx);
    let d = ctx.p("sticky");
    ok(sys::mkdir(&d, 0o777), "mkdir")?;
    ok(sys::chown(&d, ctx.uid, ctx.gid), "chown dir")?;
    ok(sys::chmod(&d, 0o1777), "chmod 1777")?;
    make_file(&d.join("roots"), b"x")?;
    let dd = d.clone();
    ctx.as_user(ctx.uid, ctx.gid, move || {
        ok(
            sys::unlink(&dd.join("roots")),
            "sticky dir owner unlinks another user's file",
        )
    })?;
    expect_err(
        sys::stat(&d.join("roots")),
        &[libc::ENOENT],
        "stat after unlink",
    )?;
    Ok(Outcome::Pass)
}
