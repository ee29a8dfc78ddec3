#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Inside the Debian 6.1 guest (see run.sh): a sandbox with x = 42, then a dump
# of it with Debian 12's criu 3.17.1, then with the patched 4.1.1.
export PATH=/bin:/nsbox/bin
mkdir -p /tmp/st
nsboxd --socket /run/s.sock --state-dir /tmp/st --image-dir /var/lib/nsbox/images >/tmp/d.log 2>&1 &
D=$!
for i in $(seq 100); do [ -S /run/s.sock ] && break; sleep 0.1; done
id=$(nsbox --socket /run/s.sock create --pool 0 2>/dev/null || nsbox --socket /run/s.sock create)
nsbox --socket /run/s.sock python --stateful "$id" -c 'x = 42' >/dev/null
echo "VM: sandbox $id: x = $(nsbox --socket /run/s.sock python --stateful "$id" -c 'print(x)')"
# The init: the parent of the interpreter's supervisor.
PY=$(ps -o pid,args | awk '/driver[.]py/ {print $1; exit}')
S=$(awk '{print $4}' /proc/$PY/stat)
I=$(awk '{print $4}' /proc/$S/stat)
echo "VM: init $I"
for c in $(pgrep -P "$I"); do
	g=$(pgrep -P "$c")
	[ -n "$g" ] && [ "$(cat /proc/$g/comm)" = "memfd:nsbox-ini" ] && kill -9 "$c"
done
sleep 0.3
criu check >/tmp/check.out 2>&1; echo "VM: criu 3.17 check rc=$?"; sed 's/^/VM:   /' /tmp/check.out | grep -v ptmx | tail -3
EXT=""
for p in $I $(pgrep -P $I) $(for c in $(pgrep -P $I); do pgrep -P $c; done); do
	for f in /proc/$p/fd/*; do
		l=$(readlink $f)
		case $l in socket:*) ino=${l#socket:[}; EXT="$EXT --external unix[${ino%]}]";; esac
	done
done
run() {
	name=$1; shift
	rm -rf /tmp/img; mkdir -p /tmp/img
	"$@" -t "$I" -D /tmp/img -v4 -o dump.log --leave-running --network-lock nftables --external 'mnt[]' --ext-unix-sk $EXT 2>/tmp/stderr
	echo "VM: $name dump rc=$?"
	[ -s /tmp/img/dump.log ] || sed 's/^/VM:   stderr: /' /tmp/stderr | head -3
	tail -3 /tmp/img/dump.log | sed 's/^/VM:   tail: /'
	grep -E 'Error' /tmp/img/dump.log | grep -v -e RLIMIT | sed 's/^/VM:   /' | head -8
}
run "criu 3.17.1" criu dump
CRIU_EXP_SKIP_USERNS_CHECK=1 CRIU_EXP_HOST_SOCKETS=1 run "criu 4.1.1 patched" /nsbox/bin/criu41 dump
echo VM-DONE
