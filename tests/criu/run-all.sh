#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run-all.sh: setup.sh, dump.sh, restore.py in a row, with timings.
# CODE: what the stateful interpreter runs before the dump (default x = 42).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
W=${W:-/tmp/cx}
"$HERE/setup.sh" || exit 1
if [ -n "${CODE:-}" ]; then
        "$HERE/../../build/nsbox" --socket "$W/s.sock" python --stateful "$(cat "$W/id")" -c "$CODE" >/dev/null
fi
I=$(cat "$W/init.pid")
rss=0; for p in $(pgrep -g "$(ps -o pgid= -p "$I")" ; pgrep -s "$(pgrep -P "$(pgrep -P "$I" | head -1)" | head -1)"); do
        rss=$((rss + $(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null || echo 0))); done
echo "sandbox RSS before the dump: ${rss} kB"
t0=$(date +%s.%N); "$HERE/dump.sh" >"$W/dump.out" 2>&1; rc=$?; t1=$(date +%s.%N)
echo "dump rc=$rc in $(echo "$t1 - $t0" | bc) s, image $(du -sh "$W/img" | cut -f1)"
[ $rc = 0 ] || { cat "$W/dump.out"; exit 1; }
t0=$(date +%s.%N)
CRIU_EXP_MEMFD_EXE=1 /usr/bin/python3 "$HERE/restore.py" >"$W/restore.out" 2>&1; rc=$?
t1=$(date +%s.%N)
echo "restore + one call rc=$rc in $(echo "$t1 - $t0" | bc) s"
grep 'interpreter replied' -A1 "$W/restore.out"
umount -l "$W/root"
