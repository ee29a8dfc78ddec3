#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh: boot Debian 12's own kernel (6.1) under qemu with the test-vm
# image disk (make test-vm builds it), this worktree's nsbox, Debian's criu
# 3.17.1 and the patched criu 4.1.1 (build-criu.sh), and run guest.sh.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
BUILD=$REPO/build
KVER=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1)
DISK=$(ls /var/cache/nsbox/vm/images-*.ext4 | head -1)
W=$(mktemp -d /tmp/criu-vm.XXXXXX)
trap 'rm -rf "$W"' EXIT
R=$W/root
mkdir -p "$R/bin" "$R/nsbox/bin" "$R/nsbox/seccomp-profiles" "$R/lib/modules" "$R/sbin"
cp /bin/busybox "$R/bin/"
cp "$BUILD/nsboxd" "$BUILD/nsbox" "$BUILD/nsbox-init" "$R/nsbox/bin/"
cp /usr/sbin/criu "$R/nsbox/bin/criu"
cp /tmp/criu-src/criu-4.1.1/criu/criu "$R/nsbox/bin/criu41"
cp /usr/sbin/ip* "$R/sbin/" 2>/dev/null || true
cp "$REPO"/seccomp-profiles/*.json "$R/nsbox/seccomp-profiles/"
cp "$REPO/tests/vm/init.sh" "$R/init"
cp "$HERE/guest.sh" "$R/nsbox/guest-tests.sh"
chmod 755 "$R/init" "$R/nsbox/guest-tests.sh"
for lib in $(for b in "$BUILD/nsboxd" "$BUILD/nsbox" /usr/sbin/criu "$R/nsbox/bin/criu41"; do ldd "$b"; done |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
	mkdir -p "$R$(dirname "$lib")"; cp -L "$lib" "$R$lib"
done
modprobe -S "$KVER" -D -a virtio_pci virtio_blk crc32c_generic ext4 overlay unix_diag inet_diag tcp_diag \
	udp_diag netlink_diag af_packet_diag nfnetlink nf_tables veth tun 2>/dev/null |
	awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$R/lib/modules/order"
while read -r ko; do cp "$ko" "$R/lib/modules/"; done <"$R/lib/modules/order"
sed -i 's|.*/||' "$R/lib/modules/order"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) >"$W/initrd.gz"
timeout 600 qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 3072 -nographic -no-reboot -serial stdio \
	-monitor none -kernel "/boot/vmlinuz-$KVER" -initrd "$W/initrd.gz" \
	-append "console=ttyS0 panic=-1 quiet loglevel=3 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1" \
	-drive "file=$DISK,format=raw,if=virtio,readonly=on" </dev/null 2>&1 | tr -d '\r' | grep -E '^VM'
