#!/usr/bin/env bash
# Build what scripts/many-cores.sh runs on a machine without a Rust toolchain, into DIR
# (default .dev-run; added to .git/info/exclude, since the device tool carries only ignored
# paths, 64 MiB in all): the release `flashlog` binary and the core's race-test binaries
# under their plain names (chaos, powercut, flusher, gc_races, space, mlogs, op_path_locks,
# scale_commit, iplfs, device_gc, races_new, scale_full, background_gc), debug info
# stripped: about 40 MiB. A perf copy with its
# libraries (for the profile phases) is another ~33 MiB: carry it in a folder of its own,
# and only when a phase needs it.
#
#   scripts/many-cores-bin.sh [DIR]
#   then, on the many-core machine: scripts/many-cores.sh next DIR/flashlog OUTDIR
set -euo pipefail
dir=${1:-.dev-run}
tests=(chaos powercut flusher gc_races space mlogs op_path_locks scale_commit iplfs device_gc races_new scale_full background_gc)
cd "$(dirname "$0")/.."
mkdir -p "$dir"
if [ -d .git/info ] && ! grep -qx "/$dir/" .git/info/exclude 2>/dev/null; then
    echo "/$dir/" >>.git/info/exclude
fi
cargo build --release --bin flashlog
install -m 755 target/release/flashlog "$dir/flashlog"
args=()
for t in "${tests[@]}"; do args+=(--test "$t"); done
# cargo names each test executable in its JSON messages: no guessing at hash suffixes.
cargo test --release -p flashlog-core "${args[@]}" --no-run --message-format=json |
    python3 -c '
import json, sys, shutil
dest, want = sys.argv[1], set(sys.argv[2:])
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in want:
        shutil.copy(m["executable"], dest + "/" + m["target"]["name"])
        print("copied", m["target"]["name"])
' "$dir" "${tests[@]}"
strip --strip-debug "$dir/flashlog" "${tests[@]/#/$dir/}"
du -sh "$dir"
