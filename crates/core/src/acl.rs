//! POSIX ACL semantics: how the access and default ACLs of an inode relate to its mode bits,
//! as Linux file systems keep them (fs/posix_acl.c). The bytes are `flashlog_format::acl`'s.
//!
//! Owns the three rules a file system (not the kernel) applies, even when the kernel checks
//! permissions against the ACLs itself (FUSE's POSIX_ACL capability):
//! - setting an access ACL sets the mode's permission bits from it (owner from USER_OBJ,
//!   group from MASK or else GROUP_OBJ, other from OTHER), and an ACL that says no more
//!   than those bits is not stored at all ([`from_access`], `posix_acl_update_mode`);
//! - chmod rewrites the USER_OBJ, MASK (or GROUP_OBJ) and OTHER entries of a stored access
//!   ACL ([`chmod`], `posix_acl_chmod`);
//! - a new inode in a directory with a default ACL gets that ACL as its access ACL, masked by
//!   the requested mode, which is masked by it in turn; directories also inherit the default
//!   ACL itself; the umask applies only when the parent has no default ACL ([`inherit`],
//!   `posix_acl_create`). Symbolic links take no part.
//!
//! Invariant: every ACL stored by these rules decodes as valid (`Acl::decode`), and a stored
//! access ACL is never equivalent to the mode bits.
//!
//! Pure functions: no I/O, no locks.

use crate::cell::libc_mode::*;
use flashlog_format::acl::{tag, Acl, ACCESS_NAME, DEFAULT_NAME, PERM_RWX};

/// Permission bits of a mode that ACLs describe (rwx for owner, group, other).
pub const PERM_BITS: u32 = 0o777;

/// Which ACL an xattr name is, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclKind {
    Access,
    Default,
}

pub fn kind_of(name: &[u8]) -> Option<AclKind> {
    if name == ACCESS_NAME {
        Some(AclKind::Access)
    } else if name == DEFAULT_NAME {
        Some(AclKind::Default)
    } else {
        None
    }
}

/// The permission bits an ACL implies and whether it says more than they can (named
/// entries or a mask): Linux's `posix_acl_equiv_mode`.
pub fn equiv_mode(acl: &Acl) -> (u32, bool) {
    let mut mode = 0u32;
    let mut extended = false;
    for e in &acl.entries {
        let p = (e.perm & PERM_RWX) as u32;
        match e.tag {
            tag::USER_OBJ => mode |= p << 6,
            tag::GROUP_OBJ => mode |= p << 3,
            tag::OTHER => mode |= p,
            tag::MASK => {
                // Entries are in tag order, so the mask comes after GROUP_OBJ and wins.
                mode = (mode & !0o070) | (p << 3);
                extended = true;
            }
            _ => extended = true,
        }
    }
    (mode, extended)
}

/// Setting access ACL `acl` on an inode of mode `mode`: the new mode, and the ACL to store
/// (None: the ACL is equivalent to the mode bits, or empty, and no attribute is kept).
pub fn from_access(acl: &Acl, mode: u32) -> (u32, Option<Acl>) {
    if acl.is_empty() {
        // A header without entries removes the ACL and leaves the mode alone.
        return (mode, None);
    }
    let (perm, extended) = equiv_mode(acl);
    ((mode & !PERM_BITS) | perm, extended.then(|| acl.clone()))
}

/// chmod of an inode whose access ACL is `acl`: Linux's `posix_acl_chmod`.
pub fn chmod(acl: &mut Acl, mode: u32) {
    let has_mask = acl.entries.iter().any(|e| e.tag == tag::MASK);
    for e in &mut acl.entries {
        let shift = match e.tag {
            tag::USER_OBJ => 6,
            tag::MASK => 3,
            tag::GROUP_OBJ if !has_mask => 3,
            tag::OTHER => 0,
            _ => continue,
        };
        e.perm = ((mode >> shift) & 0o7) as u16;
    }
}

/// Mask a copy of a default ACL by the requested mode and the mode by it (Linux's
/// `posix_acl_create_masq`). Returns the new permission bits and whether the ACL says more
/// than them.
fn create_masq(acl: &mut Acl, mode: u32) -> (u32, bool) {
    let mut mode = mode & PERM_BITS;
    let mut extended = false;
    let mut group = None;
    let mut mask = None;
    for (i, e) in acl.entries.iter_mut().enumerate() {
        match e.tag {
            tag::USER_OBJ => {
                e.perm &= ((mode >> 6) & 0o7) as u16;
                mode &= ((e.perm as u32) << 6) | !0o700;
            }
            tag::OTHER => {
                e.perm &= (mode & 0o7) as u16;
                mode &= e.perm as u32 | !0o007;
            }
            tag::GROUP_OBJ => group = Some(i),
            tag::MASK => {
                mask = Some(i);
                extended = true;
            }
            _ => extended = true,
        }
    }
    // A valid ACL has GROUP_OBJ; the mask, when present, stands for the group class.
    if let Some(i) = mask.or(group) {
        let e = &mut acl.entries[i];
        e.perm &= ((mode >> 3) & 0o7) as u16;
        mode &= ((e.perm as u32) << 3) | !0o070;
    }
    (mode & PERM_BITS, extended)
}

/// What a new inode of `mode` (type and permission bits) gets in a directory whose default
/// ACL is `parent_default`: its mode, and the ACL attributes to store with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inherited {
    pub mode: u32,
    /// (name, value) pairs for the new inode's xattrs.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Linux's `posix_acl_create`: with a default ACL the umask is ignored and the ACL masks the
/// mode; without one the umask applies.
pub fn inherit(parent_default: Option<&Acl>, mode: u32, umask: u32) -> Inherited {
    let kind = mode & S_IFMT;
    let default = parent_default.filter(|d| !d.is_empty() && kind != S_IFLNK);
    let Some(default) = default else {
        let mode = if kind == S_IFLNK {
            mode
        } else {
            mode & !(umask & PERM_BITS)
        };
        return Inherited {
            mode,
            xattrs: Vec::new(),
        };
    };
    let mut access = default.clone();
    let (perm, extended) = create_masq(&mut access, mode);
    let mut xattrs = Vec::new();
    if extended {
        xattrs.push((ACCESS_NAME.to_vec(), access.encode()));
    }
    if kind == S_IFDIR {
        xattrs.push((DEFAULT_NAME.to_vec(), default.encode()));
    }
    Inherited {
        mode: (mode & !PERM_BITS) | perm,
        xattrs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashlog_format::acl::{AclEntry, UNDEFINED_ID};

    fn e(tag: u16, perm: u16) -> AclEntry {
        AclEntry {
            tag,
            perm,
            id: UNDEFINED_ID,
        }
    }
    fn named(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }
    fn acl(entries: &[AclEntry]) -> Acl {
        let a = Acl {
            entries: entries.to_vec(),
        };
        a.validate().expect("test ACLs are valid");
        a
    }
    /// u::rw-,g::r--,o::r-- (what `cp -p` of a 0644 file writes).
    fn plain(u: u16, g: u16, o: u16) -> Acl {
        acl(&[e(tag::USER_OBJ, u), e(tag::GROUP_OBJ, g), e(tag::OTHER, o)])
    }
    /// u::rwx,u:1000:r-x,g::r-x,g:50:-w-,m::m,o::---.
    fn extended(m: u16) -> Acl {
        acl(&[
            e(tag::USER_OBJ, 7),
            named(tag::USER, 5, 1000),
            e(tag::GROUP_OBJ, 5),
            named(tag::GROUP, 2, 50),
            e(tag::MASK, m),
            e(tag::OTHER, 0),
        ])
    }

    #[test]
    fn equivalent_acl_becomes_mode_bits() {
        // cp -p of a 0644 file onto a 0600 file: mode 0644, no ACL kept.
        assert_eq!(
            from_access(&plain(6, 4, 4), S_IFREG | 0o600),
            (S_IFREG | 0o644, None)
        );
        // setuid/setgid/sticky bits survive.
        assert_eq!(
            from_access(&plain(7, 5, 5), S_IFDIR | S_ISGID | 0o700),
            (S_IFDIR | S_ISGID | 0o755, None)
        );
        // An empty ACL removes, mode untouched.
        assert_eq!(
            from_access(&Acl::default(), S_IFREG | 0o640),
            (S_IFREG | 0o640, None)
        );
    }

    #[test]
    fn extended_acl_is_kept_and_mask_is_group_bits() {
        let a = extended(6);
        assert_eq!(from_access(&a, S_IFREG), (S_IFREG | 0o760, Some(a)));
        // A mask alone (no named entries) is still more than the mode bits.
        let m = acl(&[
            e(tag::USER_OBJ, 6),
            e(tag::GROUP_OBJ, 4),
            e(tag::MASK, 0),
            e(tag::OTHER, 4),
        ]);
        assert_eq!(equiv_mode(&m), (0o604, true));
    }

    #[test]
    fn chmod_rewrites_owner_mask_other() {
        let mut a = extended(7);
        chmod(&mut a, 0o640);
        assert_eq!(a, {
            let mut x = extended(4);
            x.entries[0].perm = 6;
            x
        });
        // The named entries and GROUP_OBJ keep their permissions; mode reads back.
        assert_eq!(equiv_mode(&a), (0o640, true));
        // Without a mask, GROUP_OBJ takes the group bits.
        let mut p = plain(7, 7, 7);
        chmod(&mut p, 0o751);
        assert_eq!(p, plain(7, 5, 1));
    }

    #[test]
    fn inheritance_ignores_umask_and_masks_mode() {
        let d = extended(7);
        // open(O_CREAT, 0666) under umask 022 in a directory with default ACL d.
        let f = inherit(Some(&d), S_IFREG | 0o666, 0o022);
        assert_eq!(
            f.mode,
            S_IFREG | 0o660,
            "mask rw- (the umask is ignored), other ---"
        );
        assert_eq!(f.xattrs.len(), 1, "a file gets the access ACL only");
        let got = Acl::decode(&f.xattrs[0].1).unwrap();
        assert_eq!(f.xattrs[0].0, ACCESS_NAME);
        let mut want = extended(6);
        want.entries[0].perm = 6;
        assert_eq!(got, want);
        // mkdir 0777: the directory also inherits the default ACL unchanged.
        let dir = inherit(Some(&d), S_IFDIR | 0o777, 0o077);
        assert_eq!(dir.mode, S_IFDIR | 0o770);
        assert_eq!(dir.xattrs[1], (DEFAULT_NAME.to_vec(), d.encode()));
        // A default ACL equivalent to mode bits yields no access ACL on a file.
        let f = inherit(Some(&plain(7, 5, 0)), S_IFREG | 0o666, 0o022);
        assert_eq!(
            f,
            Inherited {
                mode: S_IFREG | 0o640,
                xattrs: vec![]
            }
        );
    }

    #[test]
    fn without_default_acl_the_umask_applies() {
        assert_eq!(inherit(None, S_IFREG | 0o666, 0o022).mode, S_IFREG | 0o644);
        assert_eq!(
            inherit(Some(&Acl::default()), S_IFDIR | 0o777, 0o027).mode,
            S_IFDIR | 0o750
        );
        // Symbolic links: no umask, no ACL.
        let l = inherit(Some(&extended(7)), S_IFLNK | 0o777, 0o022);
        assert_eq!(
            l,
            Inherited {
                mode: S_IFLNK | 0o777,
                xattrs: vec![]
            }
        );
    }
}
