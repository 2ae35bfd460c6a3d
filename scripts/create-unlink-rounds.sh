#!/usr/bin/env bash
# Alternating rounds of `flashlog bench fio`'s create+unlink job (2 threads, each in its own
# directory, create f0..f63 in turn with O_WRONLY|O_CREAT|O_TRUNC, write 4 KiB, close,
# unlink), re-implemented in C so that it also reports what a noisy machine blurs less than
# ops/s: per-burst throughput (64 files), the application's CPU and voluntary context
# switches (= synchronous FUSE round trips) per file, and the daemon's CPU per file.
# Each round mounts every Flashlog binary given, then libfuse's passthrough_ll, fresh, in
# turn (docs/BENCHMARKS.md, "create+unlink: requests per file").
#
#   scripts/create-unlink-rounds.sh ROUNDS SECONDS FLASHLOG_BIN...    # root, fuse3, libfuse3-dev
set -euo pipefail
rounds=$1 secs=$2
shift 2
work=$(mktemp -d /tmp/flashlog-cu.XXXXXX)
trap 'umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/mnt"
cat >"$work/cu.c" <<'C'
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define MAXB (1 << 20)
static const char *dir;
static double secs, t0, bursts[2][MAXB];
static long nb[2];
static char buf[4096];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static void *run(void *arg) {
    long t = (long)arg, n = 0;
    char d[4096], p[4200];
    snprintf(d, sizeof d, "%s/d%ld", dir, t);
    mkdir(d, 0755);
    while (now() < t0 + secs) {
        double b0 = now();
        for (int i = 0; i < 64; i++) {
            snprintf(p, sizeof p, "%s/f%d", d, i);
            int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
            if (fd < 0 || write(fd, buf, sizeof buf) != sizeof buf || close(fd) || unlink(p)) { perror(p); exit(1); }
            n += 2;
        }
        if (nb[t] < MAXB) bursts[t][nb[t]++] = now() - b0;
    }
    return (void *)n;
}
int main(int argc, char **argv) {
    (void)argc;
    dir = argv[1];
    secs = atof(argv[2]);
    memset(buf, 'x', sizeof buf);
    pthread_t th[2];
    t0 = now();
    for (long t = 0; t < 2; t++) pthread_create(&th[t], 0, run, (void *)t);
    long ops = 0;
    for (int t = 0; t < 2; t++) { void *r; pthread_join(th[t], &r); ops += (long)r; }
    double el = now() - t0;
    static double all[2 * MAXB];
    long k = 0;
    for (int t = 0; t < 2; t++) for (long i = 0; i < nb[t]; i++) all[k++] = bursts[t][i];
    qsort(all, k, sizeof(double), cmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    double files = ops / 2.0;
    printf("%.0f %.0f %.0f %.1f %.2f %.0f\n", ops / el, 2 * 128 / all[k / 2], 2 * 128 / all[k / 10],
           cpu * 1e6 / files, ru.ru_nvcsw / files, files);
    return 0;
}
C
cc -O2 -pthread -o "$work/cu" "$work/cu.c"
cc -O2 -o "$work/passthrough_ll" /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c $(pkg-config fuse3 --cflags --libs)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "# per mount: ops/s, median-burst ops/s, p90-burst ops/s, app CPU us/file, app voluntary ctx switches/file, daemon CPU us/file"
for r in $(seq "$rounds"); do
    line="round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    i=0
    for m in "$@" passthrough_ll; do
        i=$((i + 1))
        if [[ $m == passthrough_ll ]]; then
            rm -rf "$work/src" && mkdir -p "$work/src"
            "$work/passthrough_ll" -o source="$work/src" "$work/mnt"
            pid=$(pgrep -n -x passthrough_ll)
        else
            rm -f "$work/vol.img"
            "$m" mkfs --size 1G "$work/vol.img" >/dev/null
            "$m" mount --daemon --pid-file "$work/pid" --log "$work/log" "$work/vol.img" "$work/mnt" >/dev/null
            pid=$(cat "$work/pid")
        fi
        mkdir "$work/mnt/job"
        c0=$(cpu_ticks "$pid")
        read -r ops med p90 appcpu vcsw files < <("$work/cu" "$work/mnt/job" "$secs")
        c1=$(cpu_ticks "$pid")
        dcpu=$(awk -v t=$((c1 - c0)) -v f="$files" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.0f", t / hz * 1e6 / f}')
        umount "$work/mnt"
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
        sync
        line="$line | $([[ $m == passthrough_ll ]] && echo ll || echo "bin$i") $ops $med $p90 $appcpu $vcsw $dcpu"
    done
    echo "$line"
done
