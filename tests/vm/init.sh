#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the test guest. pivot_root (which every sandbox does) refuses to
# leave the initramfs' rootfs, so stage 1 copies itself into a tmpfs and
# switch_roots there; stage 2 sets up the machine and runs the tests.
/bin/busybox mkdir -p /proc /sys /dev
/bin/busybox mount -t proc proc /proc
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

while read -r ko; do
	insmod "/lib/modules/$ko" 2>/dev/null
done </lib/modules/order
# The image disk (read-only; sandboxes write to their own tmpfs).
for i in $(seq 50); do
	[ -b /dev/vda ] && break
	sleep 0.1
done
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
