#!/usr/bin/env bash
# Issue 12's many-core measurements, one phase per call, on a machine without a Rust
# toolchain (the lent 16-core machine): every command of docs/BENCHMARKS.md's 16-core
# targets, with a report per phase in OUTDIR (table, JSON, plots: what `flashlog bench`
# writes) and a summary of the machine.
#
#   scripts/many-cores.sh PHASE [BIN] [OUTDIR]
#
# PHASE:
#   fxmark     fxmark 1..16 threads, every policy, mlogs 1 against mlogs 16 (Max Fig. 6-7),
#              on the emulated 970pro-like SSD (4 GiB, 2 MiB sections: 16 mlogs reserve
#              too many of its 32 MiB lines; `device` only with one mlog, its 2.4x virtual
#              partition has no room for 16) and on a RAM device (~7 min at 16 cores)
#              (first lent machine, 2026-11-26: with the many-core fixes MWCL creates about
#              twice the files, which MWUL and each volume's fsck then read back from the
#              emulated SSD: give the SSD runs well over the 80-100 s they took before)
#   sustained  16 threads of random 4 KiB overwrites at 90 % full on 970pro-like:4GiB,
#              every policy (ScaleLFS Fig. 9; scale's p99.9; lock waits) (~6 min)
#   followup   what the first lent machine (2026-11-26) left unmeasured after its fixes, in
#              one call (estimated 8-9 minutes, not yet run): fxmark on RAM with one flusher
#              against 16 lanes, fxmark on the SSD (mlogs 16; `device` with 1), `sustained`
#              for device, none and zf2fs
#   iplfs      issue 15's `none` against f2fs in the IPLFS slides' setting (97 % full, spare
#              flash), 4 and 16 threads (~2 min on 2 cores; its own call: a call may last 10 min)
#   lent2      the second lent machine's one call (2026-11-26, ~9 min): the core's race and
#              space tests on 16 cores (test binaries built here, in BIN's folder, each run
#              twice: race_tests), fxmark on RAM (one flusher against 16 lanes), `sustained` for device,
#              none and zf2fs, the IPLFS slides' setting at 16 threads, fxmark on the SSD;
#              every run under its own time limit so that one slow run leaves the rest
#   profile    where DWAL with flusher lanes and `none` at 97 % full spend their time on
#              16 cores: `perf record` of each (PERF names the perf command, e.g. a copy
#              with its libraries; reports per thread name and symbol), then fxmark DWAL on
#              RAM with 1, 4, 8 and 16 lanes and MWCL/MWUL with 3-second phases (~6 min)
#   verify     after the fixes the profiles led to (2026-11-26): the slides' setting at 16
#              threads (none against f2fs, and a perf record of none), MWCL/MWUL on RAM,
#              `sustained` for f2fs, scale and none (~4 min)
#   next       what 2026-11-26's and 11-27's sessions built but could not measure on 16
#              cores, in priority order under a budget of 540 s (BUDGET; runs that cannot
#              finish in what is left are skipped and listed): the race tests (chaos with
#              16 threads, gc_races, scale_commit, powercut, flusher, iplfs: test binaries
#              built here, one round first, two more at the end; device_gc once; see
#              race_tests), `scale` against `scale/dnode_lock=0` on RAM (the per-dnode
#              commit lock), fxmark MWCL/MWUL on RAM, mlogs 16 and 1 (the cap relief:
#              nodes written and cells evicted without a checkpoint, with the pre-pass's
#              helpers and the op lock's gate: see the checkpoint split, cap-relief and
#              `cap_relief` wait columns), DWAL
#              of `device` on the SSD (ordered zone writes), DWAL with 4 and 16 lanes
#              (flusher visits copying with the file's cell released, 2026-11-27), on
#              `ram` and on `ram-resident` (no first-touch page faults), and with
#              writers writing back their own files (`own_writeback=1`),
#              `sustained` for device and f2fs, `none` in the slides' setting (its
#              flusher writing ahead of the checkpoints; f2fs there: 269-314 MiB/s)
#   quick      the chaos race test once, then fxmark and sustained with 1-second phases
#              and 4 threads on small devices: checks the script and the binaries on any
#              machine (~3 min on 2 cores)
#
# BUDGET=SECONDS (default: none; 540 for `next`) bounds a whole phase: a run that cannot
# finish in what is left of it is skipped, so that a call of the device tool (10 minutes at
# most) returns every report it finished.
#
# scripts/many-cores-bin.sh builds BIN and the race tests' binaries into one folder to carry
# (.dev-run). BIN defaults to target/release/flashlog, OUTDIR to bench-out/many-cores. Exit status:
# nonzero if any bench run failed (its error is in OUTDIR/PHASE.log).
set -u
phase=${1:-}
bin=${2:-target/release/flashlog}
out=${3:-bench-out/many-cores}
case "$phase" in
fxmark | sustained | followup | iplfs | lent2 | profile | verify | next | quick) ;;
*)
    sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
if [ ! -x "$bin" ]; then
    echo "many-cores: no executable flashlog at $bin (build with cargo build --release)" >&2
    exit 2
fi
mkdir -p "$out"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "cores: $(nproc)"
    grep -m1 'model name' /proc/cpuinfo || true
    grep MemTotal /proc/meminfo || true
    echo "binary: $bin ($("$bin" --version 2>/dev/null || echo '?'))"
} >"$out/machine.txt"

status=0
limit=${LIMIT:-0} # seconds per bench run (0: none); `timeout` stops a run past it
# Seconds the whole phase may take (0: no limit). The lent machine's time is counted per
# session (15 minutes in all, 10 per call, 2026-11-27), so a phase that overruns its call
# loses every report still unwritten: with a budget, a run that cannot finish in what is
# left is skipped (and said so), and a run's own limit never goes past the budget's end.
budget=${BUDGET:-0}
[ "$phase" = next ] && budget=${BUDGET:-540}
left() { # seconds of the budget left, or a large number without one
    if [ "$budget" = 0 ]; then echo 999999; else echo $((budget - SECONDS)); fi
}
# CAP [MIN]: the time limit for the next run (its own limit, cut to what the budget leaves,
# less 10 s for the kill); prints nothing and fails when less than MIN (default 30) s is left.
cap_for() {
    local need=${2:-30} rest
    rest=$(($(left) - 10))
    local c=$1
    if [ "$c" = 0 ] || [ "$c" -gt "$rest" ]; then
        [ "$budget" = 0 ] && { echo 0; return 0; }
        c=$rest
    fi
    [ "$c" -lt "$need" ] && return 1
    echo "$c"
}
skip() { # NAME: a run the budget left no time for
    echo "== $1: SKIPPED ($(left) s of the ${budget} s budget left)" | tee -a "$out/$phase.log"
}
run() { # NAME ARGS...: one bench run, its output in $out/NAME.log and report in $out/NAME/
    local name=$1
    shift
    local t
    if ! t=$(cap_for "$limit"); then
        skip "$name"
        return 0
    fi
    echo "== $name: flashlog bench $*" | tee -a "$out/$phase.log"
    local t0=$SECONDS
    local cap=()
    [ "$t" != 0 ] && cap=(timeout -s INT -k 10 "$t")
    if "${cap[@]}" "$bin" bench "$@" --out "$out/$name" >"$out/$name.log" 2>&1; then
        echo "   ok in $((SECONDS - t0)) s" | tee -a "$out/$phase.log"
    else
        echo "   FAILED (exit $?) in $((SECONDS - t0)) s, see $out/$name.log" | tee -a "$out/$phase.log"
        status=1
    fi
}

perf=${PERF:-perf}
prof() { # NAME ARGS...: perf record of one bench run, reports in $out/NAME.perf.txt
    local name=$1
    shift
    local t
    if ! t=$(cap_for 150 60); then
        skip "$name"
        return 0
    fi
    echo "== $name (perf): flashlog bench $*" | tee -a "$out/$phase.log"
    if timeout -s INT -k 10 "$t" $perf record -F 999 -o "$out/$name.data" -- \
        "$bin" bench "$@" --out "$out/$name" >"$out/$name.log" 2>&1; then
        for what in comm comm,sym; do
            $perf report -i "$out/$name.data" --sort "$what" --stdio 2>/dev/null |
                grep -v '^#' | grep -v '^$' | head -150 >>"$out/$name.perf.txt"
        done
        rm -f "$out/$name.data"
    else
        echo "   FAILED (exit $?)" | tee -a "$out/$phase.log"
        status=1
    fi
}

# Issue 15 in the IPLFS slides' setting (a file of 97 % of the user space, 2 MiB sections,
# spare flash in the device): on 2 cores `none` is CPU-bound at ~1 GiB/s and f2fs runs at
# 210-290 MiB/s while cleaning (3.9-5.2x); the device allows ~2.2 GiB/s (~45 s per run).
iplfs_slides() {
    local t
    for t in 4 16; do
        run "iplfs-slides-t$t" sustained --device 970pro-like:8GiB --ssd-set op=6 \
            --segs-per-sec 1 --fill 0.97 --write-factor 6 --duration 30 --threads "$t" \
            --policies none,f2fs
    done
}

# The core's race tests on this machine's cores: test binaries built here, copied next to
# BIN without their hash suffix (e.g. target/release/deps/chaos-HASH -> DIR/chaos), each
# run ROUNDS times with a limit of 2 minutes; `chaos` with 16 application threads and a new
# seed each round (CHAOS_SEED, CHAOS_THREADS: crates/core/tests/chaos.rs).
race_tests() { # ROUNDS TEST...
    local dir i t rounds=$1
    shift
    dir=$(dirname "$bin")
    for i in $(seq 1 "$rounds"); do
        for t in "$@"; do
            [ -x "$dir/$t" ] || continue
            local c
            if ! c=$(cap_for 120 60); then
                skip "test-$t-$i"
                continue
            fi
            # Even rounds: chaos's f2fs and scale runs on 16 mlogs, what mkfs gives a
            # 16-core machine (odd rounds: the test's own 2 and 4).
            local mlogs=
            [ $((i % 2)) -eq 0 ] && mlogs=16
            if env CHAOS_SEED="$i" CHAOS_THREADS=16 ${mlogs:+CHAOS_MLOGS=$mlogs} timeout "$c" \
                "$dir/$t" -q >"$out/test-$t-$i.log" 2>&1; then
                echo "test $t run $i: ok" | tee -a "$out/$phase.log"
            else
                echo "test $t run $i: FAILED (exit $?), see test-$t-$i.log" | tee -a "$out/$phase.log"
                status=1
            fi
        done
    done
}

policies=f2fs,f2fs-lfs,scale,device,none
case "$phase" in
fxmark)
    for m in 1 16; do
        p=f2fs,f2fs-lfs,scale,none
        [ "$m" = 1 ] && p=$policies
        run "fxmark-ssd-mlogs$m" fxmark --device 970pro-like:4GiB --segs-per-sec 1 \
            --threads 16 --duration 2 --mlogs "$m" --policies "$p"
        run "fxmark-ram-mlogs$m" fxmark --device ram:4GiB --threads 16 --duration 2 \
            --mlogs "$m" --policies f2fs,scale
    done
    ;;
sustained)
    run sustained-16 sustained --device 970pro-like:4GiB --threads 16 --duration 40 \
        --policies "$policies,zf2fs"
    ;;
followup)
    run fxmark-ram-lanes fxmark --device ram:4GiB --threads 16 --duration 2 --mlogs 16 \
        --policies f2fs,f2fs/flushers=16,scale
    run fxmark-ssd-mlogs16 fxmark --device 970pro-like:4GiB --segs-per-sec 1 --threads 16 \
        --duration 1 --mlogs 16 --policies f2fs,scale,none
    run fxmark-ssd-device fxmark --device 970pro-like:4GiB --segs-per-sec 1 --threads 16 \
        --duration 1 --mlogs 1 --policies device
    run sustained-rest sustained --device 970pro-like:4GiB --threads 16 --duration 12 \
        --policies device,none,zf2fs
    ;;
iplfs)
    iplfs_slides
    ;;
lent2)
    race_tests 2 gc_races space mlogs flusher op_path_locks scale_commit iplfs device_gc
    limit=170
    run fxmark-ram-lanes fxmark --device ram:4GiB --threads 16 --duration 2 \
        --mlogs 16 --policies f2fs,f2fs/flushers=16,scale
    limit=120
    run sustained-rest sustained --device 970pro-like:4GiB --threads 16 --duration 12 \
        --policies device,none,zf2fs
    limit=100
    run iplfs-slides-t16 sustained --device 970pro-like:8GiB --ssd-set op=6 \
        --segs-per-sec 1 --fill 0.97 --write-factor 6 --duration 30 --threads 16 \
        --policies none,f2fs
    limit=90
    run fxmark-ssd-mlogs16 fxmark --device 970pro-like:4GiB --segs-per-sec 1 --threads 16 \
        --duration 1 --mlogs 16 --policies f2fs,scale
    ;;
profile)
    prof perf-dwal-lanes fxmark --device ram:4GiB --threads 16 --duration 3 --mlogs 16 \
        --tests DWAL --policies f2fs/flushers=16
    prof perf-none-slides sustained --device 970pro-like:8GiB --ssd-set op=6 \
        --segs-per-sec 1 --fill 0.97 --write-factor 6 --duration 30 --threads 16 \
        --policies none
    limit=100
    run fxmark-ram-dwal-lanes fxmark --device ram:4GiB --threads 16 --duration 2 --mlogs 16 \
        --tests DWAL --policies f2fs,f2fs/flushers=4,f2fs/flushers=8,f2fs/flushers=16
    run fxmark-ram-meta fxmark --device ram:4GiB --threads 16 --duration 3 --mlogs 16 \
        --tests MWCL,MWUL --policies f2fs,scale
    ;;
verify)
    limit=100
    run iplfs-slides-t16 sustained --device 970pro-like:8GiB --ssd-set op=6 \
        --segs-per-sec 1 --fill 0.97 --write-factor 6 --duration 30 --threads 16 \
        --policies none,f2fs
    prof perf-none-slides sustained --device 970pro-like:8GiB --ssd-set op=6 \
        --segs-per-sec 1 --fill 0.97 --write-factor 6 --duration 30 --threads 16 \
        --policies none
    run fxmark-ram-meta fxmark --device ram:4GiB --threads 16 --duration 3 --mlogs 16 \
        --tests MWCL,MWUL --policies f2fs,scale
    run sustained-16 sustained --device 970pro-like:4GiB --threads 16 --duration 12 \
        --policies f2fs,scale,none
    ;;
next)
    # In priority order under the budget (BUDGET, default 540 s for this phase: one call
    # of at most 10 minutes, in a session's 15 device minutes): one round of the race
    # tests, then what each 2026-11-27 change should move on 16 cores, then more rounds.
    race_tests 1 chaos gc_races scale_commit powercut flusher iplfs
    limit=100
    # `scale`'s per-dnode commit against the commit under the file's cell (2026-11-27):
    # collectors' waits on file cells (file_cell_gc) and node locks (node_lock) at 16
    # workers; on 2 cores ~7,200 -> 110-128 contended cell acquisitions per 8 s.
    run scale-ram-16 sustained --device ram:2GiB --threads 16 --duration 8 \
        --policies scale,scale/dnode_lock=0
    # MWCL/MWUL with the cap relief (nodes written and cells evicted without a checkpoint).
    run fxmark-ram-meta fxmark --device ram:4GiB --threads 16 --duration 3 --mlogs 16 \
        --tests MWCL,MWUL --policies f2fs,scale
    # DWAL with flusher lanes copying with the file's cell released, and writers writing
    # back their own files.
    run fxmark-ram-dwal-lanes fxmark --device ram:4GiB --threads 16 --duration 2 --mlogs 16 \
        --tests DWAL --policies f2fs/flushers=4,f2fs/flushers=16,f2fs/own_writeback=1
    # `none`'s checkpoint tail beside operations against the old exclusive checkpoint
    # (2 cores: +15-17 %, docs/BENCHMARKS.md); f2fs there: 269-314 MiB/s.
    run iplfs-none-16 sustained --device 970pro-like:8GiB --ssd-set op=6 --segs-per-sec 1 \
        --fill 0.97 --write-factor 6 --duration 20 --threads 16 --policies none,none/cp_tail=0
    run sustained-16 sustained --device 970pro-like:4GiB --threads 16 --duration 12 \
        --policies device,f2fs
    run fxmark-ssd-device-dwal fxmark --device 970pro-like:4GiB --segs-per-sec 1 \
        --threads 16 --duration 2 --mlogs 1 --tests DWAL --policies device,f2fs
    run fxmark-ram-meta-mlogs1 fxmark --device ram:4GiB --threads 16 --duration 3 --mlogs 1 \
        --tests MWCL,MWUL --policies f2fs
    # DWAL without the kernel's first-touch page faults (a third of the CPU on 2 cores).
    run fxmark-resident-dwal-lanes fxmark --device ram-resident:4GiB --threads 16 --duration 2 \
        --mlogs 16 --tests DWAL --policies f2fs,f2fs/flushers=16
    race_tests 1 device_gc races_new scale_full background_gc
    race_tests 2 chaos gc_races scale_commit powercut flusher iplfs
    ;;
quick)
    race_tests 1 chaos
    run fxmark-quick fxmark --threads 4 --duration 1 --mlogs 2 --policies f2fs,none
    run sustained-quick sustained --device 970pro-like:512MiB --threads 4 --duration 2 \
        --policies f2fs,scale,none
    ;;
esac
echo "reports in $out ($phase.log lists the runs)"
exit $status
