//! Node blocks: footer check, inode header, xattrs, address and nid slots, and the inline
//! area of an inode read as a directory.
#![no_main]
use flashlog_format::dir::INLINE_LAYOUT;
use flashlog_format::node::{self, InodeHdr, ADDRS_PER_BLOCK, ADDRS_PER_INODE, INODE_NIDS_COUNT, NIDS_PER_BLOCK};
use flashlog_format::tag;
use libfuzzer_sys::fuzz_target;
include!("common.rs");

fuzz_target!(|data: &[u8]| {
    let b = block_of(data);
    for blk in [b.clone(), resealed(&b, tag::NODE)] {
        let Ok(f) = node::check_node(&blk, None) else { continue };
        let _ = f.kind();
        let _ = node::dnode_range(f.ofs);
        if let Ok(h) = InodeHdr::read(&blk) {
            let mut c = Box::new(*blk);
            h.write(&mut c);
            let _ = InodeHdr::read(&c);
            let _ = INLINE_LAYOUT.entries(node::inode_area(&blk));
        }
        if let Ok(x) = node::xattrs(&blk) {
            if node::xattrs_size(&x) <= node::XATTR_SPACE {
                let mut c = Box::new(*blk);
                node::set_xattrs(&mut c, &x);
                assert_eq!(node::xattrs(&c).expect("re-encoded xattrs decode"), x);
            }
        }
        for i in 0..ADDRS_PER_INODE {
            let _ = node::inode_addr(&blk, i);
        }
        for i in 0..INODE_NIDS_COUNT {
            let _ = node::inode_nid(&blk, i);
        }
        for i in 0..ADDRS_PER_BLOCK {
            let _ = node::dnode_addr(&blk, i);
        }
        for i in 0..NIDS_PER_BLOCK {
            let _ = node::indirect_nid(&blk, i);
        }
    }
    let _ = node::node_path(index_of(data));
});
