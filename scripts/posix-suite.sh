#!/usr/bin/env bash
# Runs the Flashlog file-system checkers (crates/fstest) against a directory:
# the POSIX suite, a short fsx run and a short multi-process stress run.
#
#   scripts/posix-suite.sh DIR [--filter SUBSTR]...
#
# Environment: FSX_OPS (default 20000), FSX_SEED (1), STRESS_PROCS (4),
# STRESS_SECONDS (10), STRESS_SEED (1). Exit status is non-zero if any
# tool fails.
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 DIR [flashlog-posix options...]" >&2
    exit 2
fi
dir=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p flashlog-fstest --manifest-path "$root/Cargo.toml"
bin=${CARGO_TARGET_DIR:-$root/target}/release

status=0
"$bin/flashlog-posix" "$dir" "$@" || status=1
"$bin/flashlog-fsx" "$dir" --seed "${FSX_SEED:-1}" --ops "${FSX_OPS:-20000}" || status=1
"$bin/flashlog-stress" "$dir" --procs "${STRESS_PROCS:-4}" --seconds "${STRESS_SECONDS:-10}" \
    --seed "${STRESS_SEED:-1}" || status=1
exit $status
