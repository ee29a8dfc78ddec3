#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Start an nsboxd from this worktree's build on its own socket/state dir under
# $W (default /tmp/cx), create a sandbox, set x = 42 in its stateful
# interpreter, and print the sandbox id and its init's host pid.
set -eu
W=${W:-/tmp/cx}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
B=$REPO/build
if [ -f "$W/d.pid" ] && kill -0 "$(cat "$W/d.pid")" 2>/dev/null; then
        kill "$(cat "$W/d.pid")"; sleep 1
fi
mkdir -p "$W"; rm -rf "$W/st"
setsid "$B/nsboxd" --socket "$W/s.sock" --state-dir "$W/st" --image-dir /var/lib/nsbox/images \
        --log-level debug >"$W/d.log" 2>&1 </dev/null &
echo $! >"$W/d.pid"
for _ in $(seq 50); do [ -S "$W/s.sock" ] && break; sleep 0.1; done
id=$("$B/nsbox" --socket "$W/s.sock" create)
"$B/nsbox" --socket "$W/s.sock" python --stateful "$id" -c 'x = 42' >/dev/null
echo "$id" >"$W/id"
# The init of this sandbox: nsboxd's child whose state dir is this sandbox's.
for p in $(pgrep -P "$(cat "$W/d.pid")"); do
        if grep -q "$id" "/proc/$p/cgroup" 2>/dev/null; then echo "$p" >"$W/init.pid"; fi
done
echo "sandbox $id init $(cat "$W/init.pid")"
