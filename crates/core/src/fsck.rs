//! fsck placeholder
pub struct FsckReport;
pub fn fsck() {}
