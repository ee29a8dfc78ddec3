#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The systemd guest suite, run by nsbox-vm-test.service with systemd as PID 1
# (tests/vm/run-vm.sh systemd): nsboxd under its shipped unit, with the
# live-restore drop-in a restart and a crash (Restart=) leave a sandbox, its
# background job and its interpreter's variables running, adopted by the next
# nsboxd, their cgroups in a transient scope beside the unit; without it a
# stop removes every sandbox and leaves nothing running, and no scope.
# Prints "ok N" / "FAIL N" lines and the VM-RESULT line, then powers off.
export NSBOX_SOCKET=/run/nsbox/nsbox.sock
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh"
CG=/sys/fs/cgroup
UNIT_CG=$CG/nsbox.slice/nsboxd.service
DROPIN_DIR=/etc/systemd/system/nsboxd.service.d
DROPIN=/usr/local/share/nsbox/systemd/nsboxd-live-restore.conf
t0=$(uptime_ms)

finish() {
	echo "# systemd guest suite: $n checks, $fails failed, $(($(uptime_ms) - t0)) ms"
	if [ $fails -ne 0 ]; then
		echo "# nsboxd's journal:"
		journalctl -u nsboxd --no-pager -o cat | grep -v "audit: " | tail -150 | sed 's/^/# /'
	fi
	if [ $fails -eq 0 ] && [ $n -gt 0 ]; then echo "VM-RESULT: PASS"; else echo "VM-RESULT: FAIL ($fails)"; fi
	sync
	systemctl poweroff --force --force
}
main_pid() { systemctl show -p MainPID --value nsboxd; }
journal() { journalctl -u nsboxd --no-pager -o cat | tail -15; }
# up OLD_PID: waits (up to 60 s) for nsboxd to be active under a main pid
# other than OLD_PID and to answer.
up() {
	for i in $(seq 300); do
		p=$(main_pid)
		if [ "$(systemctl is-active nsboxd)" = active ] && [ "$p" != 0 ] && [ "$p" != "$1" ] &&
			nsbox status >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	return 1
}
# The pids of a cgroup tree, sorted, on one line.
tree_pids() { cat $(find "$1" -name cgroup.procs 2>/dev/null) 2>/dev/null | sort -n | tr '\n' ' '; }
sandbox_cg() { find $CG/nsbox.slice -type d -name "$1" 2>/dev/null | head -1; }
# The sandboxes' scopes systemd knows of.
scopes() { systemctl list-units --all --plain --no-legend 'nsbox-*.scope' | awk '{ print $1 }'; }
# No process of the sandbox whose pids were $1 is left.
all_gone() {
	for p in $1; do [ -d /proc/$p ] && return 1; done
	return 0
}
# Waits up to 10 s for CONDITION (a shell expression).
eventually() {
	for i in $(seq 50); do
		eval "$1" && return 0
		sleep 0.2
	done
	return 1
}
ticks() { nsbox logs "$SB" "$JOB" 2>/dev/null | tail -1 | cut -d' ' -f2; }

# one sandbox with a background job and a variable, then an event ($1)
# that nsboxd must outlive
setup_sandbox() {
	SB=$(nsbox create --memory 256M)
	check "a sandbox is created" '[ -n "$SB" ] && [ -n "$(sandbox_cg "$SB")" ]' "$SB" "$(journal)"
	JOB=$(nsbox exec -d "$SB" -- sh -c 'i=0; while :; do i=$((i + 1)); echo "tick $i"; sleep 1; done')
	r=$(nsbox python --stateful "$SB" -c 'x = 6 * 7; print(x)')
	check "a background job and a stateful variable" '[ -n "$JOB" ] && [ "$r" = 42 ]' "job $JOB, x: $r"
	PIDS=$(tree_pids "$(sandbox_cg "$SB")")
	LASTING=$(lasting "$SB")
	eventually '[ -n "$(ticks)" ]'
}
# The sandbox's init (the one whose parent is outside it) and its job's shell.
lasting() {
	all=$(tree_pids "$(sandbox_cg "$1")")
	for p in $all; do
		pp=$(awk '$1 == "PPid:" { print $2 }' /proc/$p/status 2>/dev/null)
		case " $all " in *" $pp "*) ;; *) echo $p ;; esac
		grep -q tick /proc/$p/cmdline 2>/dev/null && [ "$(cat /proc/$p/comm)" = sh ] && echo $p
	done | sort -n | tr '\n' ' '
}
# adopted WHAT OLD_MAIN_PID OLD_PIDS: the next nsboxd has the sandbox, its
# processes, job and variable, and of the unit's processes before (OLD_PIDS)
# only the sandbox's are left
adopted() {
	what=$1
	check "nsboxd is back after $what" 'up "$2"' "$(systemctl status nsboxd --no-pager 2>&1 | tail -5)" "$(journal)"
	check "the sandbox is adopted after $what" 'nsbox ls -q | grep -qx "$SB"' "$(nsbox ls)" "$(journal)"
	now=$(lasting "$SB")
	check "its init and its job's process are the same after $what" '[ "$now" = "$LASTING" ]' \
		"before: $LASTING" "after: $now"
	r=$(nsbox python --stateful "$SB" -c 'print(x)' 2>&1)
	check "the stateful variable is kept after $what" '[ "$r" = 42 ]' "$r"
	before=$(ticks)
	check "the background job runs on after $what" \
		'nsbox ps "$SB" | grep "$JOB" | grep -q running && eventually "[ \"\$(ticks)\" -gt \"$before\" ]"' \
		"$(nsbox ps "$SB")" "last tick: $before, now $(ticks)"
	all=$(tree_pids "$UNIT_CG")
	stray=$(for p in $all; do case " $3 " in *" $p "*) case " $PIDS " in *" $p "*) ;; *) echo $p ;; esac ;; esac; done)
	check "of the previous run only the sandbox's processes run on after $what (no nsboxd, helper or pool)" \
		'[ -z "$stray" ]' "left: $stray" "before: $3" "now: $all" "the sandbox: $PIDS"
}

trap finish EXIT
echo "VM systemd $(systemctl --version | head -1), booted in $(uptime_ms) ms"

# 1. with the live-restore drop-in
mkdir -p $DROPIN_DIR
ln -s $DROPIN $DROPIN_DIR/
systemctl daemon-reload
systemctl start nsboxd
check "nsboxd starts under its unit with the live-restore drop-in" 'up 0' "$(journal)"
check "live restore is on" 'nsbox --json status | grep -q live-restore' "$(nsbox --json status)"
setup_sandbox
SCOPE=$(scopes)
check "the sandbox's cgroup is in a scope systemd made, outside the unit" \
	'[ -n "$SCOPE" ] && case "$(sandbox_cg "$SB")" in $CG/nsbox.slice/$SCOPE/*) true ;; *) false ;; esac' \
	"scope: $SCOPE" "$(sandbox_cg "$SB")" "$(journal)"
echo "# ready at $(uptime_ms) ms"

old=$(main_pid) was=$(tree_pids "$UNIT_CG")
systemctl restart nsboxd
adopted "systemctl restart" "$old" "$was"

old=$(main_pid) was=$(tree_pids "$UNIT_CG")
systemctl kill --kill-whom=main -s KILL nsboxd
adopted "a crash (SIGKILL, Restart=on-failure)" "$old" "$was"

old=$(main_pid) was=$(tree_pids "$UNIT_CG")
systemctl stop nsboxd
check "the sandbox lives while nsboxd is stopped" '! all_gone "$PIDS"' "$PIDS"
systemctl start nsboxd
adopted "systemctl stop and start" "$old" "$was"
echo "# live restore done at $(uptime_ms) ms"

# 2. without the drop-in (the default): a stop removes every sandbox
rm $DROPIN_DIR/nsboxd-live-restore.conf
systemctl daemon-reload
old=$(main_pid)
systemctl restart nsboxd
check "nsboxd is back without the drop-in" 'up "$old"' "$(journal)"
check "live restore is off" '! nsbox --json status | grep -q live-restore'
check "the kept sandbox's processes ended with the switch" 'eventually "all_gone \"\$PIDS\""' "$PIDS"
check "and the new nsboxd does not list it" '! nsbox ls -q | grep -qx "$SB"' "$(nsbox ls)"
check "and its scope is gone" 'eventually "[ -z \"\$(scopes)\" ]"' "$(scopes)"
setup_sandbox
systemctl stop nsboxd
check "a stop stops the unit" '[ "$(systemctl is-active nsboxd)" = inactive ]' "$(systemctl status nsboxd --no-pager)"
check "a stop ends every process of the sandbox" 'eventually "all_gone \"\$PIDS\""' "$PIDS"
check "and leaves no process in the unit's cgroup" '[ -z "$(tree_pids "$UNIT_CG")" ]' "$(tree_pids "$UNIT_CG")"
check "and no sandbox cgroup" '[ -z "$(sandbox_cg "$SB")" ]' "$(find $CG/nsbox.slice -type d)"
check "and no sandbox record" '[ -z "$(ls /var/lib/nsbox/sandboxes 2>/dev/null)" ]' \
	"$(ls -la /var/lib/nsbox/sandboxes)"
check "and no scope" '[ -z "$(scopes)" ]' "$(scopes)"

# 3. the drop-in, but nsboxd cannot reach systemd over D-Bus for the scope:
# it turns live restore off rather than strand its sandboxes in its unit's
# cgroup, where systemd could not start the next nsboxd
ln -s $DROPIN $DROPIN_DIR/
printf '[Service]\nInaccessiblePaths=/run/systemd/private -/run/dbus\n' >$DROPIN_DIR/zz-no-dbus.conf
systemctl daemon-reload
systemctl start nsboxd
check "nsboxd starts in its unit's own cgroup" 'up 0' "$(journal)"
check "and turns live restore off, saying why" \
	'! nsbox --json status | grep -q live-restore &&
	 journalctl -u nsboxd -o cat | grep -q "live_restore is off: nsboxd runs in its systemd unit"' "$(journal)"
setup_sandbox
old=$(main_pid)
systemctl restart nsboxd
check "a restart brings nsboxd back there" 'up "$old"' "$(journal)"
check "and ends the sandbox (removed at the stop)" 'eventually "all_gone \"\$PIDS\""' "$PIDS"
systemctl stop nsboxd
