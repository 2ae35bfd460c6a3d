//! POSIX ACL values: the bytes of the `system.posix_acl_access` and
//! `system.posix_acl_default` extended attributes (docs/FORMAT.md, "POSIX ACLs").
//!
//! Owns: decoding, validating and encoding an ACL value. The encoding is the one Linux passes
//! through the xattr interface (`struct posix_acl_xattr_header` + `posix_acl_xattr_entry`,
//! little-endian), so the value the kernel hands the file system is stored as it came, and
//! handed back unchanged; there is no second, private ACL encoding to keep in step.
//!
//! Invariants of an [`Acl`] that [`Acl::decode`] accepts (Linux's `posix_acl_valid`): entries
//! in tag order USER_OBJ, USER*, GROUP_OBJ, GROUP*, MASK?, OTHER; exactly one each of
//! USER_OBJ, GROUP_OBJ and OTHER; a MASK whenever a named USER or GROUP entry is present;
//! permissions only r, w, x; named entries with a real id (not 0xFFFF_FFFF). Decoding never
//! panics on any input; the entry count is bounded by the value's length.
//!
//! No I/O and no locks here.

use crate::codec::{FormatError, FormatResult};

/// Attribute names (as the xattr interface spells them).
pub const ACCESS_NAME: &[u8] = b"system.posix_acl_access";
pub const DEFAULT_NAME: &[u8] = b"system.posix_acl_default";

/// The only header version Linux knows (`POSIX_ACL_XATTR_VERSION`).
pub const VERSION: u32 = 2;
/// Header bytes (the version).
pub const HEADER_BYTES: usize = 4;
/// Bytes of one entry: tag u16, perm u16, id u32.
pub const ENTRY_BYTES: usize = 8;
/// The id stored in entries that name no user or group (`ACL_UNDEFINED_ID`).
pub const UNDEFINED_ID: u32 = u32::MAX;

/// Entry tags (`ACL_USER_OBJ` ...), as stored.
pub mod tag {
    pub const USER_OBJ: u16 = 0x01;
    pub const USER: u16 = 0x02;
    pub const GROUP_OBJ: u16 = 0x04;
    pub const GROUP: u16 = 0x08;
    pub const MASK: u16 = 0x10;
    pub const OTHER: u16 = 0x20;
}

/// Permission bits of an entry (`ACL_READ`, `ACL_WRITE`, `ACL_EXECUTE`).
pub const PERM_RWX: u16 = 0o7;

/// One entry. `id` is the user or group id of a USER or GROUP entry, else [`UNDEFINED_ID`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A decoded, valid ACL (see the module invariants). May be empty: a header without entries
/// means "no ACL" to Linux.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<AclEntry>,
}

fn bad(field: &'static str, value: u64) -> FormatError {
    FormatError::BadField {
        what: "POSIX ACL",
        field,
        value,
    }
}

impl Acl {
    /// Decode and validate an ACL value. An empty value or a bare header is the empty ACL.
    pub fn decode(v: &[u8]) -> FormatResult<Acl> {
        if v.is_empty() {
            return Ok(Acl::default());
        }
        if v.len() < HEADER_BYTES || (v.len() - HEADER_BYTES) % ENTRY_BYTES != 0 {
            return Err(FormatError::BadLength {
                what: "POSIX ACL",
                len: v.len(),
                expected: HEADER_BYTES
                    + ENTRY_BYTES * ((v.len().saturating_sub(HEADER_BYTES)) / ENTRY_BYTES),
            });
        }
        let version = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        if version != VERSION {
            return Err(bad("version", version as u64));
        }
        let entries: Vec<AclEntry> = v[HEADER_BYTES..]
            .chunks_exact(ENTRY_BYTES)
            .map(|e| AclEntry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let acl = Acl { entries };
        acl.validate()?;
        Ok(acl.canonical())
    }

    /// Check the module invariants (Linux's `posix_acl_valid`, state machine and all).
    pub fn validate(&self) -> FormatResult<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        // States: which tags may come next.
        #[derive(PartialEq)]
        enum S {
            UserObj,
            Users,
            Groups,
            Other,
            Done,
        }
        let mut s = S::UserObj;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !PERM_RWX != 0 {
                return Err(bad("permission", e.perm as u64));
            }
            s = match (e.tag, s) {
                (tag::USER_OBJ, S::UserObj) => S::Users,
                (tag::USER, S::Users) | (tag::GROUP, S::Groups) => {
                    if e.id == UNDEFINED_ID {
                        return Err(bad("named entry id", e.id as u64));
                    }
                    needs_mask = true;
                    if e.tag == tag::USER {
                        S::Users
                    } else {
                        S::Groups
                    }
                }
                (tag::GROUP_OBJ, S::Users) => S::Groups,
                (tag::MASK, S::Groups) => S::Other,
                (tag::OTHER, S::Other) => S::Done,
                (tag::OTHER, S::Groups) if !needs_mask => S::Done,
                (t, _) => return Err(bad("entry tag (or its position)", t as u64)),
            };
        }
        if s != S::Done {
            return Err(bad(
                "entry count (USER_OBJ, GROUP_OBJ and OTHER are required)",
                self.entries.len() as u64,
            ));
        }
        Ok(())
    }

    /// The same ACL with the ids of unnamed entries set to [`UNDEFINED_ID`], as Linux writes it.
    fn canonical(mut self) -> Acl {
        for e in &mut self.entries {
            if e.tag != tag::USER && e.tag != tag::GROUP {
                e.id = UNDEFINED_ID;
            }
        }
        self
    }

    /// Encode (header + entries). The empty ACL encodes as a bare header.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_BYTES + ENTRY_BYTES * self.entries.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    fn acl(entries: &[AclEntry]) -> Acl {
        Acl {
            entries: entries.to_vec(),
        }
    }

    #[test]
    fn round_trip() {
        let a = acl(&[
            e(tag::USER_OBJ, 7, UNDEFINED_ID),
            e(tag::USER, 5, 1000),
            e(tag::GROUP_OBJ, 5, UNDEFINED_ID),
            e(tag::GROUP, 1, 50),
            e(tag::MASK, 7, UNDEFINED_ID),
            e(tag::OTHER, 0, UNDEFINED_ID),
        ]);
        let bytes = a.encode();
        assert_eq!(bytes.len(), 4 + 6 * 8);
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        assert_eq!(Acl::decode(&bytes).unwrap(), a);
        assert_eq!(Acl::decode(&[]).unwrap(), Acl::default());
        assert_eq!(Acl::decode(&[2, 0, 0, 0]).unwrap(), Acl::default());
    }

    #[test]
    fn unnamed_ids_are_canonical() {
        let mut a = acl(&[
            e(tag::USER_OBJ, 6, 17),
            e(tag::GROUP_OBJ, 4, 0),
            e(tag::OTHER, 4, 99),
        ]);
        let d = Acl::decode(&a.encode()).unwrap();
        for x in &mut a.entries {
            x.id = UNDEFINED_ID;
        }
        assert_eq!(d, a);
    }

    #[test]
    fn invalid_acls_are_refused() {
        let base = [
            e(tag::USER_OBJ, 6, UNDEFINED_ID),
            e(tag::GROUP_OBJ, 4, UNDEFINED_ID),
            e(tag::OTHER, 4, UNDEFINED_ID),
        ];
        let refused = |entries: &[AclEntry]| Acl::decode(&acl(entries).encode()).is_err();
        assert!(!refused(&base));
        // Missing OTHER, missing USER_OBJ, wrong order, duplicate USER_OBJ.
        assert!(refused(&base[..2]));
        assert!(refused(&base[1..]));
        assert!(refused(&[base[1], base[0], base[2]]));
        assert!(refused(&[base[0], base[0], base[1], base[2]]));
        // A named entry without a mask; with an undefined id; a bad permission; a bad tag.
        assert!(refused(&[base[0], e(tag::USER, 4, 5), base[1], base[2]]));
        assert!(refused(&[
            base[0],
            e(tag::USER, 4, UNDEFINED_ID),
            base[1],
            e(tag::MASK, 4, UNDEFINED_ID),
            base[2]
        ]));
        assert!(refused(&[
            e(tag::USER_OBJ, 8, UNDEFINED_ID),
            base[1],
            base[2]
        ]));
        assert!(refused(&[base[0], base[1], e(0x40, 4, 0), base[2]]));
        // Two masks, mask before GROUP_OBJ, entries after OTHER.
        let m = e(tag::MASK, 7, UNDEFINED_ID);
        assert!(refused(&[base[0], base[1], m, m, base[2]]));
        assert!(refused(&[base[0], m, base[1], base[2]]));
        assert!(refused(&[base[0], base[1], base[2], base[2]]));
        // Bad version and lengths.
        let mut v = acl(&base).encode();
        v[0] = 1;
        assert!(Acl::decode(&v).is_err());
        assert!(Acl::decode(&[2, 0, 0]).is_err());
        assert!(Acl::decode(&[2, 0, 0, 0, 1, 0, 6, 0]).is_err());
    }

    #[test]
    fn hostile_bytes_never_panic() {
        // Every value up to 3 entries long from a small alphabet, plus random-ish noise.
        let mut x = 0x1234_5678u64;
        for len in 0..40usize {
            for _ in 0..200 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        [0u8, 1, 2, 4, 7, 8, 0x10, 0x20, 0xff][(x % 9) as usize]
                    })
                    .collect();
                let mut v = v;
                if v.len() >= 4 && x & 1 == 1 {
                    v[..4].copy_from_slice(&VERSION.to_le_bytes());
                }
                if let Ok(a) = Acl::decode(&v) {
                    assert!(a.validate().is_ok());
                    assert_eq!(Acl::decode(&a.encode()).unwrap(), a);
                }
            }
        }
    }
}
