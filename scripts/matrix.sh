#!/usr/bin/env bash
# Runs every test runner that talks to Redis against other servers: each server's whole run is
# the workspace's test binaries (the library's unit tests, tests/api, scripts, types, invariants
# and deployments, and relock-cli's tests) with RELOCK_REDIS_SERVER set to that server, so that
# every server, sentinel and cluster node the harness starts is that server. The TLS tests are
# skipped (`--skip tls`): none of these builds has TLS, and they stay on Debian's server.
#
#     scripts/matrix.sh                        # every server scripts/servers.sh knows
#     scripts/matrix.sh redis-6.0 valkey-9.1   # some
#     MATRIX_EVALSHA=redis-8.2 scripts/matrix.sh   # redis-8.2's run with every script by EVALSHA
#
# The servers run side by side, MATRIX_JOBS at a time (default 2): the runners mostly wait on
# leases, faults and failovers. Each run's output goes to MATRIX_LOGS (default: a temporary
# folder, printed). At the end it prints a table of server × runner with each runner's
# passed / failed / ignored counts, then each failed run's output whole, and exits non-zero if
# any test failed or any runner did not finish.
#
# Builds the tests first (`cargo test --workspace --all-features --no-run`), so it can be run on
# its own; in .ci/run that build is done already and takes no time.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${MATRIX_JOBS:-2}
logs=${MATRIX_LOGS:-$(mktemp -d -t relock-matrix.XXXXXX)}
mkdir -p "$logs"

servers=$(scripts/servers.sh "$@")

# name manifest-dir executable, for each test binary of the workspace but relock-model's (the
# simulated server and the models talk to no server; its conformance mirror needs Redis 7.0 or
# later, and runs on the default server in .ci/run).
binaries=$(cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null \
    | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m.get("profile", {}).get("test") or "example" in m["target"]["kind"]:
        continue
    if os.path.basename(os.path.dirname(m["manifest_path"])) == "relock-model":
        continue
    name = m["target"]["name"]
    if "lib" in m["target"]["kind"]:
        name = "lib"
    print(name, os.path.dirname(m["manifest_path"]), m["executable"])
' | sort)
[ -n "$binaries" ] || { echo "matrix.sh: no test binaries were built" >&2; exit 1; }

# The servers (by name) whose runs build the tests' clients with functions off
# (`RELOCK_TEST_FUNCTIONS=off`, read by tests/common's `config`), so that one run covers the
# server with every script sent by EVALSHA: MATRIX_EVALSHA="redis-8.2", say.
evalsha=" ${MATRIX_EVALSHA:-} "
functions_of() { [[ "$evalsha" == *" $1 "* ]] && echo off || echo on; }

# Runs every test binary against one server, one binary after another, each to its own log.
run_server() {
    local name=$1 program=$2 runner dir exe
    local functions
    functions=$(functions_of "$name")
    while read -r runner dir exe; do
        (cd "$dir" && RELOCK_REDIS_SERVER=$program RELOCK_TEST_FUNCTIONS=$functions "$exe" --skip tls \
            >"$logs/$name.$runner.log" 2>&1) || true
    done <<<"$binaries"
    echo "matrix.sh: $name done" >&2
}

started=$(date +%s)
running=0
while read -r name version program; do
    echo "matrix.sh: $name ($version) from $program" >&2
    run_server "$name" "$program" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done <<<"$servers"
wait

# The table: one row per server, one column per runner.
runners=$(cut -d' ' -f1 <<<"$binaries" | tr '\n' ' ')
status=0
unfinished=()
failed_runs=()
printf '\n| server |'
for runner in $runners; do printf ' %s |' "$runner"; done
printf '\n|---|'
for _ in $runners; do printf -- '---|'; done
printf '\n'
while read -r name version _; do
    label=$version
    [ "$(functions_of "$name")" = off ] && label="$version, EVALSHA forced"
    printf '| %s (%s) |' "$name" "$label"
    for runner in $runners; do
        log="$logs/$name.$runner.log"
        # libtest's closing line: "test result: ok. 38 passed; 0 failed; 1 ignored; ..."
        line=$(grep -E '^test result: ' "$log" | tail -n 1 || true)
        if [ -z "$line" ]; then
            printf ' **did not finish** |'
            status=1
            unfinished+=("$name $runner")
            continue
        fi
        read -r passed failed ignored < <(sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/' <<<"$line")
        if [ "$failed" -ne 0 ]; then
            status=1
            printf ' **%s / %s / %s** |' "$passed" "$failed" "$ignored"
            failed_runs+=("$name $runner")
        else
            printf ' %s / %s / %s |' "$passed" "$failed" "$ignored"
        fi
    done
    printf '\n'
done <<<"$servers"
printf '\n(passed / failed / ignored per runner; TLS tests skipped; %s s; logs in %s)\n' \
    "$(($(date +%s) - started))" "$logs"
for run in "${unfinished[@]}"; do
    echo "---- ${run/ /: } did not finish ----"
    grep -v '^test result: ' "$logs/${run/ /.}.log"
done
for run in "${failed_runs[@]}"; do
    echo "---- ${run/ /: } failed ----"
    grep -v '^test result: ' "$logs/${run/ /.}.log"
done
# The sum of libtest's "<n> <word>;" over every run's closing line.
total() {
    grep -hE '^test result: ' "$logs"/*.log \
        | awk -v word="$1;" '{ for (i = 2; i <= NF; i++) if ($i == word) n += $(i - 1) } END { print n + 0 }'
}
echo "matrix total: $(total passed) tests passed and $(total failed) failed"
exit "$status"
