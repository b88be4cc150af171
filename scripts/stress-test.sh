#!/usr/bin/env bash
# Runs relock's whole test suite on an oversubscribed machine, as shared CI runners are.
#
# Usage: scripts/stress-test.sh [RUNS] [-- extra cargo test arguments]
#
# Builds the tests first, with the machine unloaded, so the build is not what is measured. Then,
# RUNS times (default 5), runs `cargo test` while one busy loop per core (`nproc` of them) keeps
# every core occupied, and prints each run's result and wall time. Stops at the first failing
# run and keeps its log (the path is printed); the logs of passing runs are removed. The busy
# loops are killed on exit, Ctrl-C and failure alike; Ctrl-C (or SIGTERM) also stops the test
# run in progress, with the test binaries and the Redis servers they started.
#
# Extra arguments after `--` go to `cargo test`, e.g. to stress one test file:
#   scripts/stress-test.sh 3 -- --test invariants cancellation
#
# Needs redis-server on PATH (the tests start their own servers).

set -u

runs=5
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    runs=$1
    shift
fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then
    shift
fi
case $runs in
'' | *[!0-9]* | 0)
    echo "usage: $0 [RUNS] [-- cargo test arguments]" >&2
    exit 2
    ;;
esac

cd "$(dirname "$0")/.." || exit 2

busy_pids=()
test_pid=
own_group=0
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/relock-stress.XXXXXX")
keep_logs=0

stop_load() {
    local pid
    for pid in ${busy_pids[@]+"${busy_pids[@]}"}; do
        kill "$pid" 2>/dev/null
    done
    for pid in ${busy_pids[@]+"${busy_pids[@]}"}; do
        wait "$pid" 2>/dev/null
    done
    busy_pids=()
}

stop_tests() {
    if [ -n "$test_pid" ]; then
        # Its own process group where setsid exists: cargo, the test binaries and the
        # redis-servers they started. Else cargo alone.
        if [ "$own_group" = 1 ]; then
            kill -TERM -- "-$test_pid" 2>/dev/null
        else
            kill -TERM "$test_pid" 2>/dev/null
        fi
        wait "$test_pid" 2>/dev/null
        test_pid=
    fi
}

cleanup() {
    stop_tests
    stop_load
    if [ "$keep_logs" = 0 ]; then
        rm -rf "$log_dir"
    fi
}
trap cleanup EXIT
trap 'echo "interrupted; logs: $log_dir" >&2; keep_logs=1; exit 130' INT TERM

start_load() {
    local i
    for ((i = 0; i < cores; i++)); do
        sh -c 'while :; do :; done' &
        busy_pids+=($!)
    done
}

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
if command -v setsid >/dev/null 2>&1; then
    own_group=1
fi

echo "building the tests (unloaded)..."
if ! cargo test --no-run "$@" >"$log_dir/build.log" 2>&1; then
    keep_logs=1
    echo "build failed; log: $log_dir/build.log" >&2
    tail -n 30 "$log_dir/build.log" >&2
    exit 1
fi

echo "running cargo test $runs time(s) under load: $cores busy loop(s) on $cores core(s)"
passed=0
total_secs=0
for ((run = 1; run <= runs; run++)); do
    log="$log_dir/run-$run.log"
    start_load
    started=$(date +%s.%N)
    # In the background, waited for, so a signal is handled at once rather than after the run.
    if [ "$own_group" = 1 ]; then
        setsid cargo test "$@" >"$log" 2>&1 &
    else
        cargo test "$@" >"$log" 2>&1 &
    fi
    test_pid=$!
    wait "$test_pid"
    status=$?
    test_pid=
    ended=$(date +%s.%N)
    stop_load
    secs=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
    total_secs=$(awk -v a="$total_secs" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
    if [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        echo "run $run/$runs: pass in ${secs}s"
        rm -f "$log"
    else
        keep_logs=1
        echo "run $run/$runs: FAIL (exit $status) in ${secs}s; log: $log"
        grep -E '^(test .* FAILED|failures:|---- |thread .* panicked)' "$log" | head -n 20
        echo "summary: $passed of $run run(s) passed under load, stopped at run $run" \
            "(${total_secs}s in all); log: $log"
        exit 1
    fi
done
echo "summary: $passed of $runs run(s) passed under load (${total_secs}s in all)"
