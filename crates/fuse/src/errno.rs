//! The one place where core errors become errno values (STYLE.md habit 8).
//!
//! Every reply of the adapter that carries an error goes through [`errno_of`]; nothing else
//! in the adapter picks an errno for a core error.

use flashlog_core::Error;
use fuser::Errno;

/// The errno POSIX asks for, for one core error. Errors that mean "the volume is broken"
/// (corruption, device failure, poisoned mount) are EIO and are logged, since the caller
/// only sees EIO and the log is the only place the reason survives.
pub fn errno_of(e: &Error) -> Errno {
    match e {
        Error::NotFound => Errno::ENOENT,
        Error::Exists => Errno::EEXIST,
        Error::NotDir => Errno::ENOTDIR,
        Error::IsDir => Errno::EISDIR,
        Error::NotEmpty => Errno::ENOTEMPTY,
        Error::NoSpace => Errno::ENOSPC,
        Error::NameTooLong => Errno::ENAMETOOLONG,
        Error::Invalid(_) => Errno::EINVAL,
        Error::TooBig => Errno::EFBIG,
        Error::TooManyLinks => Errno::EMLINK,
        Error::NoAttr => Errno::ENODATA,
        Error::Range => Errno::ERANGE,
        Error::NotSupported(_) => Errno::EOPNOTSUPP,
        Error::NotPermitted => Errno::EPERM,
        Error::ReadOnly => Errno::EROFS,
        Error::Poisoned(why) => {
            tracing::error!("request refused, the volume is poisoned: {why}");
            Errno::EIO
        }
        Error::Corrupt(why) => {
            tracing::error!("corruption detected: {why} (unmount and run `flashlog fsck`)");
            Errno::EIO
        }
        Error::Device(d) => {
            tracing::error!("device error: {d}");
            Errno::EIO
        }
        Error::NoMemory(why) => {
            tracing::error!("out of memory: {why}");
            Errno::ENOMEM
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_is_posix() {
        let code = |e: Error| i32::from(errno_of(&e));
        assert_eq!(code(Error::NotFound), libc::ENOENT);
        assert_eq!(code(Error::NotEmpty), libc::ENOTEMPTY);
        assert_eq!(code(Error::NoAttr), libc::ENODATA);
        assert_eq!(code(Error::NotSupported("x")), libc::EOPNOTSUPP);
        assert_eq!(code(Error::Corrupt("x".into())), libc::EIO);
        assert_eq!(code(Error::ReadOnly), libc::EROFS);
    }
}
