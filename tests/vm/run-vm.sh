#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The cgroup v2 suite, for real: boot Debian's kernel under qemu (TCG, no KVM)
# with cgroup2 as the only hierarchy, run nsboxd and tests/vm/guest-tests.sh
# inside, and fail when any guest test fails.
#
#   tests/vm/run-vm.sh BUILD_DIR IMAGE_DIR CACHE_DIR
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
TIMEOUT=${NSBOX_VM_TIMEOUT:-900}

KVER=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1)
KERNEL=/boot/vmlinuz-$KVER
[ -n "$KVER" ] && [ -r "$KERNEL" ] || { echo "test-vm: no Debian amd64 kernel (apt install linux-image-amd64)" >&2; exit 1; }
for f in nsboxd nsbox nsbox-init; do
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
cp "$HERE/guest-tests.sh" "$ROOT/nsbox/guest-tests.sh"
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
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.gz"

# --- boot ---------------------------------------------------------------------
echo "test-vm: booting $KVER under qemu (TCG) with cgroup v2 only"
LOG=$WORK/console.log
set +e
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 3072 \
	-nographic -no-reboot -serial stdio -monitor none \
	-kernel "$KERNEL" -initrd "$WORK/initrd.gz" \
	-append "console=ttyS0 panic=-1 quiet loglevel=3 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1" \
	-drive "file=$DISK,format=raw,if=virtio,readonly=on" \
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
echo "test-vm: passed in ${elapsed}s"
