#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# dump.sh: checkpoint the sandbox whose init is $W/init.pid into $W/img
# (the processes die, as after a real pause to disk).
# CRIU=path to a criu >= 4.1 (Debian 12's 3.17 cannot start on this kernel).
set -u
W=${W:-/tmp/cx}
CRIU=${CRIU:-/tmp/criu-src/criu-4.1.1/criu/criu}
HERE=$(cd "$(dirname "$0")" && pwd)
I=$(cat "$W/init.pid")
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
# 1. The warm exec slot: its child shares the supervisor's memory (clone
#    CLONE_VM without exec), which CRIU refuses ("Can't make VM id").
for c in $(pgrep -P "$I"); do
        g=$(pgrep -P "$c")
        if [ -n "$g" ] && [ "$(cat /proc/$g/comm)" = "memfd:nsbox-ini" ]; then kill -9 "$c"; fi
done
sleep 0.3
# 2. Keep the sandbox's root (overlay over its tmpfs upper) alive on the host.
mkdir -p "$W/root"
umount -l "$W/root" 2>/dev/null
[ -x "$W/holdroot" ] || cc -O2 -o "$W/holdroot" "$HERE/holdroot.c"
"$W/holdroot" "$I" "$W/root" || exit 1
# 3. Every fd of the tree that is a socket or pipe: external candidates.
: >"$W/fds"
EXT=()
for p in $(tree "$I"); do
        for f in /proc/$p/fd/*; do
                l=$(readlink "$f")
                case $l in
                socket:* | pipe:*)
                        ino=${l#*[}; ino=${ino%]}
                        flags=$(awk '/^flags:/{print $2}' "/proc/$p/fdinfo/${f##*/}")
                        echo "$p ${f##*/} $l $flags" >>"$W/fds"
                        case $l in socket:*) EXT+=(--external "unix[$ino]") ;; esac
                        ;;
                esac
        done
done
cat "$W/fds"
rm -rf "$W/img"; mkdir -p "$W/img"
CRIU_EXP_HOST_SOCKETS=1 CRIU_EXP_SKIP_USERNS_CHECK=1 "$CRIU" dump -t "$I" -D "$W/img" -v4 -o dump.log \
        --network-lock skip --external 'mnt[]' --ext-unix-sk "${EXT[@]}" ${DUMP_EXTRA:-}
rc=$?
echo "dump rc=$rc"; grep -E 'Error|Warn' "$W/img/dump.log" | grep -v RLIMIT_NOFILE | head -20
du -sh "$W/img"
exit $rc
