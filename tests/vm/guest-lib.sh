# SPDX-License-Identifier: Apache-2.0
# The guest suites' helpers (tests/vm/guest-tests.sh, guest-systemd.sh):
# "ok N - ..." / "FAIL N - ..." lines, a count of failures, and small readers.
n=0
fails=0

ok() {
	n=$((n + 1))
	echo "ok $n - $1"
}
fail() {
	n=$((n + 1))
	fails=$((fails + 1))
	echo "FAIL $n - $1"
	shift
	for line in "$@"; do
		echo "# $line"
	done
}
# check DESCRIPTION CONDITION [DETAIL...]: CONDITION is a shell expression.
check() {
	desc=$1
	cond=$2
	shift 2
	if eval "$cond"; then ok "$desc"; else fail "$desc" "condition: $cond" "$@"; fi
}
# no_dir DIR: waits up to 10 s for DIR to go (a remove is answered before
# the kernel has ended the sandbox and nsboxd removed its cgroup); true once gone.
no_dir() {
	for i in $(seq 100); do
		[ -d "$1" ] || return 0
		sleep 0.1
	done
	return 1
}
# jget JSON KEY: the first value of KEY (numbers, booleans, null, plain strings).
jget() {
	printf '%s' "$1" | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}
keyed() { # keyed FILE KEY
	awk -v k="$2" '$1 == k { print $2 }' "$1"
}
uptime_ms() {
	awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime
}
