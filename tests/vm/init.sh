#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the test guest. pivot_root (which every sandbox does) refuses to
# leave the initramfs' rootfs, so stage 1 copies itself into a tmpfs and
# switch_roots there; stage 2 sets up the machine and runs the tests.
# With /nsbox/systemd (run-vm.sh's systemd mode), stage 1 instead installs
# nsbox on the system disk (/dev/vdb) and hands over to systemd there.
/bin/busybox mkdir -p /proc /sys /dev
/bin/busybox mount -t proc proc /proc
load_modules() {
	while read -r ko; do
		insmod "/lib/modules/$ko" 2>/dev/null
	done </lib/modules/order
}
wait_disk() {
	for i in $(seq 50); do
		[ -b "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
if [ "$$" = 1 ] && [ -d /nsbox/systemd ]; then
	/bin/busybox --install -s /bin
	mount -t devtmpfs devtmpfs /dev
	load_modules
	R=/sysroot
	mkdir -p $R
	if ! wait_disk /dev/vdb || ! mount -t ext4 /dev/vdb $R; then
		echo "VM-RESULT: FAIL (cannot mount the system disk)"
		poweroff -f
	fi
	# As make install lays it out (PREFIX /usr/local).
	L=$R/usr/local
	mkdir -p $L/bin $L/libexec/nsbox $L/share/nsbox/seccomp $L/share/nsbox/systemd $L/share/nsbox/test \
		$R/etc/nsbox $R/var/lib/nsbox/images
	cp /nsbox/bin/nsboxd /nsbox/bin/nsbox $L/bin/
	cp /nsbox/bin/nsbox-init /nsbox/bin/nsbox-egress $L/libexec/nsbox/
	cp /nsbox/seccomp-profiles/*.json $L/share/nsbox/seccomp/
	cp /nsbox/systemd/*.service /nsbox/systemd/*.slice /nsbox/systemd/*.socket $R/etc/systemd/system/
	cp /nsbox/systemd/nsboxd-live-restore.conf $L/share/nsbox/systemd/
	cp /nsbox/guest-lib.sh /nsbox/systemd/guest-systemd.sh $L/share/nsbox/test/
	# The image disk, mounted here: the minimal system has no udev, so
	# systemd would wait for /dev/vda forever.
	if ! mount -t ext4 -o ro,noload /dev/vda $R/var/lib/nsbox/images; then
		echo "VM-RESULT: FAIL (cannot mount the image disk)"
		poweroff -f
	fi
	echo nsbox-vm >$R/etc/hostname
	umount /dev /proc
	exec switch_root $R /lib/systemd/systemd
fi
if [ "$$" = 1 ] && [ ! -e /.stage2 ]; then
	/bin/busybox --install -s /bin
	mkdir -p /newroot
	mount -t tmpfs -o mode=0755 root /newroot
	cp -a /bin /lib /nsbox /init /newroot/
	[ -d /lib64 ] && cp -a /lib64 /newroot/
	[ -d /usr ] && cp -a /usr /newroot/
	touch /newroot/.stage2
	umount /proc
	exec switch_root /newroot /init
fi

export PATH=/bin:/nsbox/bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp /run /var/lib/nsbox/images /sys/fs/cgroup /etc
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
# cgroup2 as the only hierarchy (the kernel runs with cgroup_no_v1=all).
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo 'root:x:0:0:root:/:/bin/sh' >/etc/passwd
echo 'root:x:0:' >/etc/group
ip link set lo up 2>/dev/null

load_modules
# The image disk (read-only; sandboxes write to their own tmpfs).
wait_disk /dev/vda
if ! mount -t ext4 -o ro,noload /dev/vda /var/lib/nsbox/images; then
	echo "VM-RESULT: FAIL (cannot mount the image disk)"
	poweroff -f
fi

echo "VM booted: $(uname -r), $(nproc) cpus, cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
sh /nsbox/guest-tests.sh
rc=$?
if [ $rc -eq 0 ]; then
	echo "VM-RESULT: PASS"
else
	echo "VM-RESULT: FAIL ($rc)"
fi
sync
poweroff -f
