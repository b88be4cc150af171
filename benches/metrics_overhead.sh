#!/usr/bin/env bash
# The `metrics` feature's cost, in one sitting: builds benches/metrics.rs without and with the
# feature, runs the two builds one after the other RUNS times (default 5; each run prints
# TRIALS trials, default 3, and counts its best), and prints the medians of the runs and the
# ratio of pairs/s with the feature (a Prometheus recorder installed) to without.
# Target: >= 0.97. Printed, never asserted.
#
#     benches/metrics_overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}

binary() {
    cargo bench --no-run --bench metrics "$@" 2>&1 \
        | grep -o 'target/[^ )]*/deps/metrics-[0-9a-f]*' | tail -1
}
off=$(binary)
on=$(binary --features metrics)
[ -x "$off" ] && [ -x "$on" ] || { echo "metrics_overhead.sh: could not build the bench" >&2; exit 1; }

best() { # the best trial's pairs/s and its CPU per pair
    "$1" | awk '{ split($2, p, "="); split($3, c, "=");
                  if (p[2] > best) { best = p[2]; cpu = c[2] } }
                END { print best, cpu }'
}
: > /tmp/relock-metrics-off.txt
: > /tmp/relock-metrics-on.txt
for run in $(seq 1 "$runs"); do
    echo "run $run/$runs" >&2
    best "$off" >> /tmp/relock-metrics-off.txt
    best "$on" >> /tmp/relock-metrics-on.txt
done
median() { sort -n -k"$2" "$1" | awk -v k="$2" '{ v[NR] = $k } END { print v[int((NR + 1) / 2)] }'; }
off_pairs=$(median /tmp/relock-metrics-off.txt 1)
on_pairs=$(median /tmp/relock-metrics-on.txt 1)
off_cpu=$(median /tmp/relock-metrics-off.txt 2)
on_cpu=$(median /tmp/relock-metrics-on.txt 2)
awk -v op="$off_pairs" -v np="$on_pairs" -v oc="$off_cpu" -v nc="$on_cpu" -v runs="$runs" 'BEGIN {
    ratio = np / op
    printf "metrics overhead: 32 tasks x lock + unlock, default runtime, medians of %d runs (best of each run'"'"'s trials)\n", runs
    printf "  feature off:                       %8.0f pairs/s  %6.2f us client CPU per pair\n", op, oc
    printf "  feature on, Prometheus recorder:   %8.0f pairs/s  %6.2f us client CPU per pair\n", np, nc
    printf "  pairs/s on / off: %.3f  (target >= 0.97: %s)   client CPU on / off: %.3f\n", ratio, (ratio >= 0.97 ? "✓" : "✗"), nc / oc
}'
