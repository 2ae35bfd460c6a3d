//! Discard log decoder (the checkpoint's IPLFS/D2FS discard log): hostile bytes give an
//! error, never a panic, and whatever decodes re-encodes to the same commands.
#![no_main]
use flashlog_core::discard::{decode_log, encode_log};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Limits: a finite 64 MiB volume and the infinite space.
    for limit in [16384u64, u64::MAX] {
        if let Ok(cmds) = decode_log(data, limit) {
            let again = decode_log(&encode_log(&cmds), limit).expect("re-encoded log decodes");
            assert_eq!(again, cmds);
        }
    }
});
