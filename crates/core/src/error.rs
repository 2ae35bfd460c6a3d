//! The one error type of the core. The FUSE adapter maps it to errno in one place.

use flashlog_dev::DevError;
use flashlog_format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("no space left on the volume")]
    NoSpace,
    #[error("file name too long (the limit is 255 bytes)")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("file too large")]
    TooBig,
    #[error("too many links")]
    TooManyLinks,
    #[error("no such attribute")]
    NoAttr,
    #[error("attribute value too large for the buffer")]
    Range,
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("operation not permitted")]
    NotPermitted,
    #[error("the volume is mounted read-only")]
    ReadOnly,
    #[error("the volume was poisoned by an earlier failure and is read-only now: {0}")]
    Poisoned(String),
    #[error("the volume is corrupt: {0}")]
    Corrupt(String),
    #[error("device error: {0}")]
    Device(#[from] DevError),
    /// A table sized by the volume could not be allocated (mkfs, mount, fsck of a volume
    /// larger than this machine's memory affords).
    #[error("not enough memory: {0}")]
    NoMemory(String),
}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Self {
        Error::Corrupt(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
