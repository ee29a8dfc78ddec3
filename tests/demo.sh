#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: start nsboxd on a private socket, run Python in a fresh
# sandbox through the nsbox CLI, print what it printed, stop the daemon.
set -euo pipefail

build=${1:-build}
image_dir=${NSBOX_IMAGE_DIR:-/var/lib/nsbox/images}
work=$(mktemp -d /tmp/nsbox-demo.XXXXXX)
daemon_pid=
cleanup() {
        if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
                kill -TERM "$daemon_pid"
                wait "$daemon_pid" || true
        fi
        rm -rf "$work"
}
trap cleanup EXIT

"$build/nsboxd" --socket "$work/nsbox.sock" --state-dir "$work/state" --image-dir "$image_dir" \
        --log-level warn 2>"$work/nsboxd.log" &
daemon_pid=$!
for _ in $(seq 200); do
        [ -S "$work/nsbox.sock" ] && break
        kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/nsboxd.log" >&2; exit 1; }
        sleep 0.05
done
export NSBOX_SOCKET=$work/nsbox.sock

code='import platform, sys, os
import numpy as np
print("Hello from Python %s in an nsbox sandbox" % platform.python_version())
print("uid=%d pid=%d hostname=%s" % (os.getuid(), os.getpid(), platform.node()))
print("numpy says 6*7 =", int(np.prod([6, 7])))'

echo "\$ nsbox run -- python3 -c '...'"
start=$(date +%s%N)
"$build/nsbox" run -- python3 -c "$code"
end=$(date +%s%N)
echo "(create + run + remove took $(( (end - start) / 1000000 )) ms)"
