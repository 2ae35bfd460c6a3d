#!/usr/bin/env bash
# Run every Flashlog test on this machine (Debian/Ubuntu, as root): installs what is
# missing (fuse3, sqlite3, git, python3, acl, attr, rsync, stress-ng, losetup, e2fsprogs), builds, runs the unit and property tests, then the tests
# through a real FUSE mount (scripts/mount-tests.sh). Exit status 0 only if all passed.
# This is what CI runs (.ci/run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t0=$SECONDS
say() { echo "== test: $*"; }

if ! command -v cargo >/dev/null 2>&1 && [[ -x $HOME/.cargo/bin/cargo ]]; then
    export PATH=$HOME/.cargo/bin:$PATH
fi

missing=()
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v diff >/dev/null 2>&1 || missing+=(diffutils)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)
command -v setfattr >/dev/null 2>&1 || missing+=(attr)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)
command -v losetup >/dev/null 2>&1 || missing+=(mount)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v chattr >/dev/null 2>&1 || missing+=(e2fsprogs)
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

say "setup (build + mount helpers)"
scripts/setup.sh

say "unit and property tests (cargo test --workspace --release)"
log=$(mktemp /tmp/flashlog-cargo-test.XXXXXX)
if timeout 1500 cargo test --workspace --release >"$log" 2>&1; then
    n=$(grep -E '^test result: ok' "$log" | awk '{s += $4} END {print s + 0}')
    say "PASS unit and property tests: $n tests ($((SECONDS - t0)) s so far)"
    rm -f "$log"
else
    grep -E '^(test .* FAILED|---- .* stdout ----|thread .* panicked|error(\[E[0-9]+\])?:)' "$log" | head -n 40 || true
    tail -n 40 "$log"
    say "FAIL unit/property tests (full log: $log; rerun: cargo test --workspace --release)"
    exit 1
fi

say "tests through a FUSE mount (scripts/mount-tests.sh)"
scripts/mount-tests.sh
say "all tests passed in $((SECONDS - t0)) s"
