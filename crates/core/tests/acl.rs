//! POSIX ACLs through the `Fs` API: the mode bits follow an access ACL, chmod rewrites it,
//! default ACLs are inherited with the umask ignored, bad ACL bytes are EINVAL, `noacl`
//! refuses ACLs, and everything survives a remount and a crash after fsync (fsck clean).

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::acl::{tag, Acl, AclEntry, ACCESS_NAME, DEFAULT_NAME, UNDEFINED_ID};
use std::sync::Arc;

const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

fn opts(acl: bool) -> MountOptions {
    MountOptions {
        cp_interval: None,
        acl,
        ..Default::default()
    }
}

fn volume() -> Arc<dyn BlockDevice> {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    dev
}

fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
    AclEntry { tag, perm, id }
}

/// What `setfacl -m u:1000:rwx` on a 0640 file sends: u::rw-,u:1000:rwx,g::r--,m::rwx,o::---.
fn named_acl() -> Vec<u8> {
    Acl {
        entries: vec![
            e(tag::USER_OBJ, 6, UNDEFINED_ID),
            e(tag::USER, 7, 1000),
            e(tag::GROUP_OBJ, 4, UNDEFINED_ID),
            e(tag::MASK, 7, UNDEFINED_ID),
            e(tag::OTHER, 0, UNDEFINED_ID),
        ],
    }
    .encode()
}

/// u::rw-,g::r--,o::r-- (what `cp -p` writes for a 0644 source).
fn plain_acl(u: u16, g: u16, o: u16) -> Vec<u8> {
    Acl {
        entries: vec![
            e(tag::USER_OBJ, u, UNDEFINED_ID),
            e(tag::GROUP_OBJ, g, UNDEFINED_ID),
            e(tag::OTHER, o, UNDEFINED_ID),
        ],
    }
    .encode()
}

fn perm(fs: &Fs, ino: Ino) -> u32 {
    fs.getattr(ino).unwrap().mode & 0o7777
}

#[test]
fn access_acl_sets_mode_and_equivalent_acl_is_not_kept() {
    let dev = volume();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let root = fs.root();
    // cp -p: the file is created 0600, then the source's permissions arrive as an ACL.
    let f = fs.create(root, b"f", 0o600, 0, 0).unwrap().ino;
    fs.setxattr(f, ACCESS_NAME, &plain_acl(6, 4, 4), XattrMode::Any)
        .unwrap();
    assert_eq!(perm(&fs, f), 0o644, "mode follows the ACL");
    assert!(
        matches!(fs.getxattr(f, ACCESS_NAME), Err(Error::NoAttr)),
        "an ACL equivalent to the mode bits is not stored"
    );
    assert!(fs.listxattr(f).unwrap().is_empty());
    // A named entry: stored, group bits are the mask.
    fs.setxattr(f, ACCESS_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    assert_eq!(perm(&fs, f), 0o670);
    assert_eq!(fs.getxattr(f, ACCESS_NAME).unwrap(), named_acl());
    // chmod rewrites owner, mask and other, keeps the named entry.
    fs.setattr(
        f,
        &SetAttr {
            mode: Some(0o2750),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(perm(&fs, f), 0o2750);
    let after = Acl::decode(&fs.getxattr(f, ACCESS_NAME).unwrap()).unwrap();
    assert_eq!(
        after.entries,
        vec![
            e(tag::USER_OBJ, 7, UNDEFINED_ID),
            e(tag::USER, 7, 1000),
            e(tag::GROUP_OBJ, 4, UNDEFINED_ID),
            e(tag::MASK, 5, UNDEFINED_ID),
            e(tag::OTHER, 0, UNDEFINED_ID),
        ]
    );
    // Removing the ACL leaves the mode alone (setfacl -b then chmods explicitly).
    fs.removexattr(f, ACCESS_NAME).unwrap();
    assert_eq!(perm(&fs, f), 0o2750);
    // Other xattrs are untouched by all this.
    fs.setxattr(f, b"user.k", b"v", XattrMode::Any).unwrap();
    fs.setxattr(f, ACCESS_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    fs.setxattr(f, ACCESS_NAME, &plain_acl(7, 0, 0), XattrMode::Any)
        .unwrap();
    assert_eq!(perm(&fs, f), 0o2700);
    assert_eq!(fs.listxattr(f).unwrap(), vec![b"user.k".to_vec()]);
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
}

#[test]
fn default_acl_is_inherited_and_umask_ignored() {
    let dev = volume();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    // setfacl -d -m u:1000:rwx d  =>  default u::rwx,u:1000:rwx,g::r-x,m::rwx,o::r-x
    let default = Acl {
        entries: vec![
            e(tag::USER_OBJ, 7, UNDEFINED_ID),
            e(tag::USER, 7, 1000),
            e(tag::GROUP_OBJ, 5, UNDEFINED_ID),
            e(tag::MASK, 7, UNDEFINED_ID),
            e(tag::OTHER, 5, UNDEFINED_ID),
        ],
    }
    .encode();
    fs.setxattr(d, DEFAULT_NAME, &default, XattrMode::Any)
        .unwrap();
    assert_eq!(
        perm(&fs, d),
        0o755,
        "a default ACL does not change the mode"
    );
    let who = Creator {
        uid: 0,
        gid: 0,
        umask: 0o077,
    };
    let f = fs.make_node(d, b"f", S_IFREG | 0o666, 0, who).unwrap();
    assert_eq!(
        f.mode & 0o777,
        0o664,
        "umask 077 ignored, mask rw-, other r--"
    );
    let fa = Acl::decode(&fs.getxattr(f.ino, ACCESS_NAME).unwrap()).unwrap();
    assert_eq!(fa.entries[1], e(tag::USER, 7, 1000));
    assert_eq!(fa.entries[3], e(tag::MASK, 6, UNDEFINED_ID));
    assert!(matches!(
        fs.getxattr(f.ino, DEFAULT_NAME),
        Err(Error::NoAttr)
    ));
    let sub = fs.make_node(d, b"sub", S_IFDIR | 0o777, 0, who).unwrap();
    assert_eq!(sub.mode & 0o777, 0o775);
    assert_eq!(fs.getxattr(sub.ino, DEFAULT_NAME).unwrap(), default);
    // Grandchildren inherit through the inherited default ACL.
    let g = fs
        .make_node(sub.ino, b"g", S_IFREG | 0o600, 0, who)
        .unwrap();
    assert_eq!(g.mode & 0o777, 0o600);
    // Without a default ACL the umask applies; symlinks are never masked.
    let plain = fs.make_node(root, b"p", S_IFREG | 0o666, 0, who).unwrap();
    assert_eq!(plain.mode & 0o777, 0o600);
    assert!(fs.listxattr(plain.ino).unwrap().is_empty());
    let l = fs.symlink(d, b"l", b"target", 0, 0).unwrap();
    assert_eq!(l.mode & 0o777, 0o777);
    assert!(fs.listxattr(l.ino).unwrap().is_empty());
    // Removing the default ACL stops inheritance.
    fs.removexattr(d, DEFAULT_NAME).unwrap();
    let h = fs.make_node(d, b"h", S_IFREG | 0o666, 0, who).unwrap();
    assert_eq!(h.mode & 0o777, 0o600);
    // Across a remount.
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let f = fs.resolve("/d/f").unwrap();
    assert_eq!(perm(&fs, f), 0o664);
    assert_eq!(
        Acl::decode(&fs.getxattr(f, ACCESS_NAME).unwrap()).unwrap(),
        fa
    );
    let sub = fs.resolve("/d/sub").unwrap();
    assert_eq!(fs.getxattr(sub, DEFAULT_NAME).unwrap(), default);
    fs.unmount().unwrap();
}

#[test]
fn inherited_acl_survives_a_crash_after_fsync() {
    let dev = volume();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
    let default = named_acl();
    fs.setxattr(d, DEFAULT_NAME, &default, XattrMode::Any)
        .unwrap();
    fs.sync().unwrap();
    let f = fs
        .make_node(d, b"f", S_IFREG | 0o666, 0, Creator::default())
        .unwrap();
    fs.write(f.ino, 0, b"data").unwrap();
    fs.fsync(f.ino, false).unwrap();
    fs.abandon(); // power cut: nothing after the fsync reaches the device
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let f2 = fs.resolve("/d/f").unwrap();
    assert_eq!(perm(&fs, f2), f.mode & 0o7777);
    assert!(
        fs.getxattr(f2, ACCESS_NAME).is_ok(),
        "the inherited ACL is durable with the inode it was created with"
    );
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
}

#[test]
fn bad_acl_bytes_are_einval_and_change_nothing() {
    let dev = volume();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let f = fs.create(fs.root(), b"f", 0o640, 0, 0).unwrap().ino;
    let d = fs.mkdir(fs.root(), b"d", 0o750, 0, 0).unwrap().ino;
    let mut bad_version = plain_acl(6, 4, 4);
    bad_version[0] = 1;
    let mut missing_other = plain_acl(6, 4, 4);
    missing_other.truncate(4 + 16);
    let mut torn = plain_acl(6, 4, 4);
    torn.pop();
    let mut perm_bits = plain_acl(6, 4, 4);
    perm_bits[4 + 2] = 0x40;
    for v in [bad_version, missing_other, torn, perm_bits, vec![2, 0]] {
        for (ino, name) in [(f, ACCESS_NAME), (d, DEFAULT_NAME)] {
            assert!(
                matches!(
                    fs.setxattr(ino, name, &v, XattrMode::Any),
                    Err(Error::Invalid(_))
                ),
                "{v:?}"
            );
        }
    }
    assert_eq!(perm(&fs, f), 0o640);
    assert!(fs.listxattr(f).unwrap().is_empty() && fs.listxattr(d).unwrap().is_empty());
    // A default ACL on a file, an ACL on a symlink.
    assert!(fs
        .setxattr(f, DEFAULT_NAME, &named_acl(), XattrMode::Any)
        .is_err());
    let l = fs.symlink(fs.root(), b"l", b"f", 0, 0).unwrap().ino;
    assert!(matches!(
        fs.setxattr(l, ACCESS_NAME, &named_acl(), XattrMode::Any),
        Err(Error::NotSupported(_))
    ));
    // A bare header or an empty value removes.
    fs.setxattr(f, ACCESS_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    fs.setxattr(f, ACCESS_NAME, &[2, 0, 0, 0], XattrMode::Any)
        .unwrap();
    assert!(fs.listxattr(f).unwrap().is_empty());
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
}

#[test]
fn noacl_refuses_acls_and_hides_stored_ones() {
    let dev = volume();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let f = fs.create(fs.root(), b"f", 0o600, 0, 0).unwrap().ino;
    fs.setxattr(f, ACCESS_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    fs.setxattr(f, b"user.k", b"v", XattrMode::Any).unwrap();
    let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(d, DEFAULT_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), opts(false)).unwrap();
    let f = fs.resolve("/f").unwrap();
    for name in [ACCESS_NAME, DEFAULT_NAME] {
        assert!(matches!(
            fs.setxattr(f, name, &plain_acl(6, 4, 4), XattrMode::Any),
            Err(Error::NotSupported(_))
        ));
        assert!(matches!(fs.getxattr(f, name), Err(Error::NotSupported(_))));
        assert!(matches!(
            fs.removexattr(f, name),
            Err(Error::NotSupported(_))
        ));
    }
    assert_eq!(fs.listxattr(f).unwrap(), vec![b"user.k".to_vec()]);
    // No inheritance either: the creator's mode (already masked by the kernel) stands.
    let d = fs.resolve("/d").unwrap();
    let g = fs.create(d, b"g", 0o644, 0, 0).unwrap();
    assert_eq!(g.mode & 0o777, 0o644);
    assert!(fs.listxattr(g.ino).unwrap().is_empty());
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
}

#[test]
fn fsck_checks_stored_acls() {
    use flashlog_core::fsck::Severity;
    use flashlog_format::codec::seal;
    use flashlog_format::{tag as block_tag, BLOCK_SIZE};
    let ram = Arc::new(RamDevice::new((128 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = ram.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let f = fs.create(fs.root(), b"f", 0o600, 0, 0).unwrap().ino;
    fs.setxattr(f, ACCESS_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    let xnid = fs.inner().cell(f).unwrap().state.lock().hdr.xattr_nid;
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean() && r.findings.is_empty(), "{r}");
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let xaddr = fs.inner().nat.addr(xnid);
    fs.abandon();
    // Rewrite one byte of the stored ACL value in place (resealing the node block).
    let pos = {
        let mut b = [0u8; BLOCK_SIZE];
        ram.read(xaddr, &mut b).unwrap();
        let acl = named_acl();
        b.windows(acl.len())
            .position(|w| w == acl.as_slice())
            .expect("the ACL value is in the xattr node")
    };
    let poke = |at: usize, v: u8| {
        let mut b = [0u8; BLOCK_SIZE];
        ram.read(xaddr, &mut b).unwrap();
        b[pos + at] = v;
        seal(&mut b, block_tag::NODE);
        ram.write(xaddr, &b).unwrap();
    };
    // OTHER (entry 4) rwx while the mode says ---: allowed, but a warning.
    poke(4 + 4 * 8 + 2, 7);
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    assert!(
        r.findings
            .iter()
            .any(|x| x.severity == Severity::Warning && x.area == "acl"),
        "{r}"
    );
    // A permission bit that does not exist: corruption.
    poke(4 + 4 * 8 + 2, 0x40);
    let r = fsck(&*dev).unwrap();
    assert!(
        r.findings
            .iter()
            .any(|x| x.severity == Severity::Error && x.area == "acl"),
        "{r}"
    );
    // The mount reports it as corruption (EIO) instead of using it, and does not panic.
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let f = fs.resolve("/f").unwrap();
    assert!(matches!(
        fs.setattr(
            f,
            &SetAttr {
                mode: Some(0o644),
                ..Default::default()
            }
        ),
        Err(Error::Corrupt(_))
    ));
    assert_eq!(perm(&fs, f), 0o670, "a failed chmod changes nothing");
    fs.abandon();
}

/// ACL changes on a volume whose user space is full: each setfacl-like setxattr, chmod
/// with a stored ACL, ACL removal and creation with an inherited default ACL either
/// succeeds or gets ENOSPC (a refused one leaves the mode as it was); none poisons the
/// mount or overcommits the space budget, syncs in between succeed, and the modes survive
/// a remount with fsck clean. (The user-block limit is what refuses here; the space
/// budget keeps headroom, so this does not by itself show that the paths reserve from it:
/// that was checked by review, see the commit.)
#[test]
fn acl_changes_on_a_full_volume_never_poison_the_mount() {
    const BS: u64 = 4096;
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(d, DEFAULT_NAME, &named_acl(), XattrMode::Any)
        .unwrap();
    let files: Vec<Ino> = (0..16)
        .map(|i| {
            fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        })
        .collect();
    let mut expect = vec![0o644u32; files.len()];
    // Fill the user space.
    let big = fs.create(root, b"big", 0o644, 0, 0).unwrap().ino;
    let chunk = vec![0xa5u8; 16 * BS as usize];
    let mut off = 0u64;
    loop {
        match fs.write(big, off, &chunk) {
            Ok(_) => off += chunk.len() as u64,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    loop {
        match fs.write(big, off, &chunk[..BS as usize]) {
            Ok(_) => off += BS,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, 0);

    let ok_or_nospc = |r: Result<()>, what: &str| -> bool {
        match r {
            Ok(()) => true,
            Err(Error::NoSpace) => false,
            Err(e) => panic!("{what}: {e} ({:?})", fs.stats()),
        }
    };
    let who = Creator {
        uid: 0,
        gid: 0,
        umask: 0o022,
    };
    let (mut done, mut refused) = (0u32, 0u32);
    for i in 0..600usize {
        let k = i % files.len();
        let f = files[k];
        let r = match i / files.len() % 4 {
            // setfacl -m u:1000:rwx: an xattr node, which needs a user block.
            0 => fs
                .setxattr(f, ACCESS_NAME, &named_acl(), XattrMode::Any)
                .map(|()| expect[k] = 0o670),
            // chmod: rewrites a stored ACL in place.
            1 => {
                let set = SetAttr {
                    mode: Some(0o750),
                    ..Default::default()
                };
                fs.setattr(f, &set).map(|_| expect[k] = 0o750)
            }
            // setfacl -b equivalent: an ACL the mode bits say removes the stored one.
            2 => fs
                .setxattr(f, ACCESS_NAME, &plain_acl(6, 4, 0), XattrMode::Any)
                .map(|()| expect[k] = 0o640),
            // A file inheriting d's default ACL (inode + xattr node), removed again.
            _ => fs
                .make_node(d, format!("n{i}").as_bytes(), S_IFREG | 0o666, 0, who)
                .and_then(|_| fs.unlink(d, format!("n{i}").as_bytes())),
        };
        if ok_or_nospc(r, &format!("op {i}")) {
            done += 1;
        } else {
            refused += 1;
        }
        if i % 50 == 49 {
            let s = fs.sync();
            assert!(s.is_ok(), "sync after op {i}: {s:?}");
        }
    }
    eprintln!("ACL ops on the full volume: {done} done, {refused} ENOSPC");
    assert!(done > 0, "no ACL operation succeeded on the full volume");
    assert!(
        refused > 0,
        "the volume was never full for these operations"
    );
    assert_eq!(fs.stats().space_overcommit_blocks, 0);
    for (k, &f) in files.iter().enumerate() {
        assert_eq!(perm(&fs, f), expect[k], "file {k} before remount");
    }
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts(true)).unwrap();
    for (k, &f) in files.iter().enumerate() {
        assert_eq!(perm(&fs, f), expect[k], "file {k} after remount");
    }
    fs.unmount().unwrap();
}
