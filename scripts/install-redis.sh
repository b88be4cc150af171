#!/usr/bin/env bash
# Installs what relock's demo, examples and tests need: `redis-server` (with `redis-cli`) and
# `redis-sentinel`, from apt on Debian or Ubuntu, and `tmux`, the real terminal the `relock`
# command line's live views are tested in. Does nothing when they are already there, so it
# is safe to run every time. Runs apt-get directly as root, through sudo otherwise, and fails with
# a message saying what to do when neither works.
#
#     scripts/install-redis.sh && cargo run --example demo
set -euo pipefail

fail() {
    echo "install-redis.sh: $*" >&2
    exit 1
}

missing=()
for tool in redis-server redis-cli redis-sentinel tmux; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# Only builtins up to here, so the checks work whatever PATH holds.
command -v apt-get >/dev/null 2>&1 \
    || fail "${missing[*]} not found, and there is no apt-get to install them with: install Redis 7 (redis-server, redis-cli, redis-sentinel) and tmux with your system's package manager"

sudo=""
if [ "$EUID" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 \
        || fail "${missing[*]} not found, and installing them needs root: run this script as root or with sudo installed, or as root run: apt-get install redis-server redis-sentinel tmux"
    sudo="sudo"
fi

echo "install-redis.sh: ${missing[*]} not found; installing redis-server, redis-sentinel and tmux with ${sudo:+sudo }apt-get" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
    || fail "apt-get update failed (see above)"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel tmux >/dev/null \
    || fail "apt-get install redis-server redis-sentinel tmux failed (see above)"

for tool in redis-server redis-cli redis-sentinel tmux; do
    command -v "$tool" >/dev/null 2>&1 \
        || fail "apt-get installed the packages but $tool is still not on PATH ($PATH)"
done
