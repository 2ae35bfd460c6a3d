#!/usr/bin/env bash
# Set up Flashlog on a fresh Debian/Ubuntu machine (idempotent; run as root):
#   - installs fuse3 (fusermount3, /etc/fuse.conf) when fusermount3 is missing,
#   - loads the fuse module when /dev/fuse is missing,
#   - builds the release binaries (cargo build --release),
#   - installs `flashlog` in /usr/local/bin and the mount(8) helpers
#     /sbin/mount.flashlog and /sbin/mount.fuse.flashlog (symlinks to it), so that
#     `mount -t fuse.flashlog IMAGE DIR` and fstab lines work.
# Needs Rust (cargo) installed. Environment: FLASHLOG_NO_INSTALL=1 skips the symlinks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

say() { echo "setup: $*"; }

if ! command -v cargo >/dev/null 2>&1; then
    [[ -x $HOME/.cargo/bin/cargo ]] && export PATH=$HOME/.cargo/bin:$PATH
fi
command -v cargo >/dev/null 2>&1 || { say "cargo not found: install Rust first (https://rustup.rs)"; exit 1; }

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        say "need root for: $*"; return 1
    fi
}

# apt_install PKG...: install Debian packages that are missing (one apt-get update first).
apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || { say "no apt-get: install $* with your package manager"; return 1; }
    if [[ $apt_updated == 0 ]]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    say "installed $*"
}

if ! command -v fusermount3 >/dev/null 2>&1; then
    apt_install fuse3
fi
# The bench's fio experiment measures peers: fio drives the jobs, libfuse3-dev ships the
# passthrough example it builds. Optional: the bench falls back without them.
if [[ ${FLASHLOG_NO_BENCH_TOOLS:-0} != 1 ]]; then
    want=()
    command -v fio >/dev/null 2>&1 || want+=(fio)
    [[ -e /usr/include/fuse3/fuse.h ]] || want+=(libfuse3-dev)
    command -v pkg-config >/dev/null 2>&1 || want+=(pkg-config)
    ((${#want[@]})) && { apt_install "${want[@]}" || say "could not install ${want[*]}; the fio experiment will run without its peers"; }
fi
if [[ ! -e /dev/fuse ]]; then
    as_root modprobe fuse 2>/dev/null || true
    [[ -e /dev/fuse ]] || { say "/dev/fuse is missing and 'modprobe fuse' did not create it (in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN)"; exit 1; }
fi

say "building (cargo build --release)"
cargo build --release --workspace --quiet

if [[ ${FLASHLOG_NO_INSTALL:-0} != 1 ]]; then
    bin=${CARGO_TARGET_DIR:-$root/target}/release/flashlog
    as_root ln -sfn "$bin" /usr/local/bin/flashlog
    for helper in /sbin/mount.flashlog /sbin/mount.fuse.flashlog; do
        as_root ln -sfn "$bin" "$helper"
    done
    say "installed /usr/local/bin/flashlog and the mount helpers /sbin/mount.flashlog, /sbin/mount.fuse.flashlog"
fi
say "ready: $("${CARGO_TARGET_DIR:-$root/target}/release/flashlog" --version)"
