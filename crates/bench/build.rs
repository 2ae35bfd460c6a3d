//! Records the git revision of the source tree the bench is built from
//! (`FLASHLOG_BUILD_REV`, "-dirty" with uncommitted changes to tracked files, empty outside a
//! git checkout), so a report names the code that ran even when the binary is copied to
//! another machine or the checkout moves on after the build (`report::git_revision`).
//!
//! Reruns when HEAD, the index, the refs or any file under crates/ change.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let root = Path::new(&manifest).join("../..");
    for dir in ["crates", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let rev = match git(&root, &["rev-parse", "--short=12", "HEAD"]) {
        Some(h) => {
            // HEAD, the ref it points at and the index change with every commit and checkout.
            for args in [
                &["rev-parse", "--git-dir"][..],
                &["rev-parse", "--git-common-dir"],
            ] {
                if let Some(d) = git(&root, args) {
                    let d = root.join(d);
                    for f in ["HEAD", "index", "refs", "packed-refs"] {
                        if d.join(f).exists() {
                            println!("cargo:rerun-if-changed={}", d.join(f).display());
                        }
                    }
                }
            }
            let dirty = git(&root, &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{h}-dirty")
            } else {
                h
            }
        }
        None => String::new(),
    };
    println!("cargo:rustc-env=FLASHLOG_BUILD_REV={rev}");
}
