#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The cgroup v2 suite, for real: boot Debian's kernel under qemu (TCG, no KVM)
# with cgroup2 as the only hierarchy, run nsboxd and tests/vm/guest-tests.sh
# inside, and fail when any guest test fails.
#
#   tests/vm/run-vm.sh BUILD_DIR IMAGE_DIR CACHE_DIR [systemd]
#
# With "systemd", the guest boots a small Debian (debootstrap minbase with
# systemd-sysv, on an ext4 disk cached under CACHE_DIR/vm by what it holds)
# with systemd as PID 1, nsbox installed as `make install` lays it out with
# the shipped units, and runs tests/vm/guest-systemd.sh from a oneshot unit:
# nsboxd under its unit, restarted, killed and stopped.
#
# The image rootfs goes on an ext4 disk (nsbox needs idmapped mounts of it,
# which 9p and tmpfs do not support), cached under CACHE_DIR/vm by the image's
# manifest input_hash. The binaries, their libraries, busybox, the kernel
# modules and the test driver go into an initramfs built on every run.
set -eu

BUILD=$(cd "${1:?build dir}" && pwd)
IMAGE_DIR=${2:?image dir}
CACHE=${3:?cache dir}/vm
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=$IMAGE_DIR/python
MODE=${4:-}
TIMEOUT=${NSBOX_VM_TIMEOUT:-900}

KVER=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1)
KERNEL=/boot/vmlinuz-$KVER
[ -n "$KVER" ] && [ -r "$KERNEL" ] || { echo "test-vm: no Debian amd64 kernel (apt install linux-image-amd64)" >&2; exit 1; }
for f in nsboxd nsbox nsbox-init nsbox-egress; do
	[ -x "$BUILD/$f" ] || { echo "test-vm: $BUILD/$f missing (make all)" >&2; exit 1; }
done
[ -f "$IMAGE/manifest.json" ] || { echo "test-vm: no image at $IMAGE (make image)" >&2; exit 1; }

start=$(date +%s)
mkdir -p "$CACHE"
WORK=$(mktemp -d /tmp/nsbox-vm.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- the image disk, cached -------------------------------------------------
hash=$(sed -n 's/.*"input_hash": *"\([0-9a-f]*\)".*/\1/p' "$IMAGE/manifest.json" | head -1)
[ -n "$hash" ] || hash=$(stat -c %Y "$IMAGE/manifest.json")
# The disk's root is an image dir holding python/ (nsboxd probes idmapped
# mounts on its image dir); a bind mount in a private mount namespace lays
# that out without copying.
DISK=$CACHE/images-$hash.ext4
if [ ! -f "$DISK" ]; then
	echo "test-vm: building the image disk $DISK"
	kib=$(du -sk "$IMAGE" | cut -f1)
	size=$((kib * 5 / 4 + 128 * 1024))
	rm -f "$CACHE"/image-*.ext4 "$CACHE"/images-*.ext4 "$CACHE"/*.tmp
	mkdir -p "$WORK/images/python"
	unshare -m --propagation private sh -c 'mount --bind "$1" "$2/images/python" &&
		mkfs.ext4 -q -F -L nsbox-images -E root_owner=0:0 -d "$2/images" "$3" "$4"' \
		sh "$IMAGE" "$WORK" "$DISK.tmp" "${size}k"
	mv "$DISK.tmp" "$DISK"
fi

# --- the initramfs ------------------------------------------------------------
ROOT=$WORK/root
mkdir -p "$ROOT/bin" "$ROOT/nsbox/bin" "$ROOT/nsbox/seccomp-profiles" "$ROOT/lib/modules"
cp /bin/busybox "$ROOT/bin/busybox"
cp "$BUILD/nsboxd" "$BUILD/nsbox" "$BUILD/nsbox-init" "$ROOT/nsbox/bin/"
cp "$REPO"/seccomp-profiles/*.json "$ROOT/nsbox/seccomp-profiles/"
cp "$HERE/init.sh" "$ROOT/init"
cp "$HERE/guest-lib.sh" "$HERE/guest-tests.sh" "$ROOT/nsbox/"
chmod 755 "$ROOT/init" "$ROOT/nsbox/guest-tests.sh"
for lib in $(for b in nsboxd nsbox; do ldd "$BUILD/$b"; done |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
	mkdir -p "$ROOT$(dirname "$lib")"
	cp -L "$lib" "$ROOT$lib"
done
# In dependency order, as modprobe would load them.
modprobe -S "$KVER" -D -a virtio_pci virtio_blk crc32c_generic ext4 overlay 2>/dev/null |
	awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$ROOT/lib/modules/order"
while read -r ko; do
	cp "$ko" "$ROOT/lib/modules/"
done <"$ROOT/lib/modules/order"
sed -i 's|.*/||' "$ROOT/lib/modules/order"

# --- systemd mode: the system disk, cached, and what init.sh installs on it ---
DRIVES="-drive file=$DISK,format=raw,if=virtio,readonly=on"
APPEND="console=ttyS0 panic=-1 quiet loglevel=3 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1"
WHAT="cgroup v2 only"
if [ "$MODE" = systemd ]; then
	# Debian 12 (systemd 252), the platform nsbox targets.
	SUITE=bookworm
	PACKAGES=systemd-sysv,libc-ares2,libcap2,libjansson4,libmnl0,libnftables1,libnftnl11,libnl-3-200,libnl-route-3-200,libseccomp2,libssl3,libsystemd0,libuuid1,libxtables12
	MIRROR=${NSBOX_VM_MIRROR:-http://deb.debian.org/debian}
	key=$(printf '%s\n' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-16)
	SYSDISK=$CACHE/system-$SUITE-$key.ext4
	if [ ! -f "$SYSDISK" ]; then
		echo "test-vm: building the system disk $SYSDISK (debootstrap $SUITE)"
		rm -f "$CACHE"/system-*.ext4 "$CACHE"/system-*.tmp
		mkdir -p "$CACHE/debs-$SUITE"
		# A second try: the mirror sometimes fails a fetch (the .debs
		# fetched stay in the cache dir).
		for try in 1 2; do
			rm -rf "$WORK/sysroot"
			debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE/debs-$SUITE" \
				"$SUITE" "$WORK/sysroot" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 && break
			tail -20 "$WORK/debootstrap.log" >&2
			[ $try = 2 ] && exit 1
			sleep 10
		done
		kib=$(du -sk "$WORK/sysroot" | cut -f1)
		mkfs.ext4 -q -F -L nsbox-system -d "$WORK/sysroot" "$SYSDISK.tmp" "$((kib * 5 / 4 + 256 * 1024))k"
		rm -rf "$WORK/sysroot"
		mv "$SYSDISK.tmp" "$SYSDISK"
	fi
	# The units as make install writes them (PREFIX /usr/local), the test
	# unit and its script; init.sh copies them onto the disk.
	S=$ROOT/nsbox/systemd
	mkdir -p "$S"
	for u in nsboxd.service.in nsbox-http.service.in nsboxd-live-restore.conf; do
		sed -e 's#@PREFIX@#/usr/local#g' "$REPO/manager/systemd/$u" >"$S/${u%.in}"
	done
	cp "$REPO"/manager/systemd/nsbox.slice "$REPO"/manager/systemd/nsboxd.socket \
		"$HERE/nsbox-vm-test.service" "$HERE/guest-systemd.sh" "$S/"
	cp "$BUILD/nsbox-egress" "$ROOT/nsbox/bin/"
	# The disk is written through a snapshot qemu drops at exit.
	DRIVES="$DRIVES -drive file=$SYSDISK,format=raw,if=virtio,snapshot=on"
	APPEND="$APPEND systemd.unit=nsbox-vm-test.service systemd.show_status=error"
	WHAT="systemd as PID 1 ($SUITE)"
fi
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.gz"

# --- boot ---------------------------------------------------------------------
echo "test-vm: booting $KVER under qemu (TCG) with $WHAT"
LOG=$WORK/console.log
set +e
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 3072 \
	-nographic -no-reboot -serial stdio -monitor none \
	-kernel "$KERNEL" -initrd "$WORK/initrd.gz" \
	-append "$APPEND" $DRIVES \
	</dev/null >"$LOG" 2>&1
qemu_rc=$?
set -e
tr -d '\r' <"$LOG" | grep -E '^(VM|ok|FAIL|#)' || true
elapsed=$(($(date +%s) - start))

if [ $qemu_rc -eq 124 ]; then
	echo "test-vm: the guest did not finish within ${TIMEOUT}s; console:" >&2
	tail -50 "$LOG" >&2
	exit 1
fi
if ! tr -d '\r' <"$LOG" | grep -q '^VM-RESULT: PASS'; then
	echo "test-vm: FAILED after ${elapsed}s (qemu exit $qemu_rc); console tail:" >&2
	tr -d '\r' <"$LOG" | tail -60 >&2
	exit 1
fi
echo "test-vm: ${MODE:+$MODE }passed in ${elapsed}s"
