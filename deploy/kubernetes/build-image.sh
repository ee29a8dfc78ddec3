#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build the nsbox container image (Containerfile) with buildah, from what
# `make` built and the Python sandbox image; no registry is involved (FROM
# scratch: the binaries' shared libraries are copied from this Debian host).
#
#   build-image.sh --build build --image-dir /var/lib/nsbox/images \
#                  --cache /var/cache/nsbox [--tag localhost/nsbox] [--force]
#
# The image is tagged TAG:KEY, KEY a hash of every input (binaries, libraries,
# seccomp profiles, Containerfile, entrypoint, the Python image's manifest),
# and TAG:latest. With unchanged inputs the build is skipped; the key of the
# last build is kept in CACHE/container/. Prints TAG:KEY.
set -Eeuo pipefail
umask 022

SELF=$(readlink -f -- "${BASH_SOURCE[0]}")
HERE=$(dirname -- "$SELF")
REPO=$(readlink -f -- "$HERE/../..")
BUILD=$REPO/build
IMAGE_DIR=/var/lib/nsbox/images
CACHE=/var/cache/nsbox
TAG=localhost/nsbox
FORCE=0

die() {
        printf 'build-container: %s\n' "$*" >&2
        exit 1
}

while [ $# -gt 0 ]; do
        case "$1" in
        --build) BUILD=$(readlink -f -- "${2:?--build needs a value}"); shift 2 ;;
        --image-dir) IMAGE_DIR=${2:?--image-dir needs a value}; shift 2 ;;
        --cache) CACHE=${2:?--cache needs a value}; shift 2 ;;
        --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
        --force) FORCE=1; shift ;;
        -h | --help) sed -n '2,12p' "$SELF"; exit 0 ;;
        *) die "unknown argument '$1'" ;;
        esac
done

PYIMG=$IMAGE_DIR/python
[ -f "$PYIMG/manifest.json" ] && [ -d "$PYIMG/rootfs" ] || die "no Python image in $PYIMG (make image)"
for b in nsboxd nsbox nsbox-tar nsbox-init nsbox-egress; do
        [ -x "$BUILD/$b" ] || die "$BUILD/$b missing (make all)"
done
command -v buildah >/dev/null || die "buildah not installed (make deps-test)"

# What goes under /usr/local: binaries that exist in this build. nsbox-http
# (the HTTP front) is included once it is built.
BINS=(nsboxd nsbox)
[ -x "$BUILD/nsbox-http" ] && BINS+=(nsbox-http)
LIBEXEC=(nsbox-init nsbox-egress nsbox-tar)
# Host tools the entrypoint and nsboxd run (nsboxd's shared uid mode runs cp -a).
TOOLS=(/bin/bash /bin/dash /bin/cp /bin/mkdir /bin/mv /bin/rm /bin/sleep)

# Shared libraries of every dynamic binary, and the loader, by their resolved path.
libs_of() {
        ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' | sort -u
}
# The CLI is static; nsbox-tar (its tar streams) brings libarchive and what it loads.
mapfile -t LIBS < <(libs_of "${BINS[@]/#/$BUILD/}" "${LIBEXEC[@]/#/$BUILD/}" "${TOOLS[@]}" | sort -u)

KEY=$( {
        sha256sum "$SELF" "$HERE/Containerfile" "$HERE/entrypoint.sh" "$PYIMG/manifest.json" \
                "${BINS[@]/#/$BUILD/}" "${LIBEXEC[@]/#/$BUILD/}" "$REPO"/seccomp-profiles/*.json \
                "${TOOLS[@]}" "${LIBS[@]}" | awk '{ print $1 }'
        # The image's tree itself: names, sizes and times, not contents (500 MB).
        find "$PYIMG/rootfs" -xdev -printf '%P %s %T@ %m %U %G\n' | sort | sha256sum
} | sha256sum | cut -c1-16)

mkdir -p "$CACHE/container"
# One build at a time on this machine (a CI clone and a work tree may build
# at once); a build of the same key that finished meanwhile is used.
exec 9>"$CACHE/container/build.lock"
flock 9
if [ "$FORCE" = 0 ] && podman image exists "$TAG:$KEY" 2>/dev/null; then
        podman tag "$TAG:$KEY" "$TAG:latest"
        echo "$TAG:$KEY"
        exit 0
fi

STAGE=$(mktemp -d "$CACHE/container/stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
R=$STAGE/rootfs
install -d "$R/usr/local/bin" "$R/usr/local/libexec/nsbox" "$R/usr/local/share/nsbox/seccomp" \
        "$R/bin" "$R/etc/nsbox" "$R/run/nsbox" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" \
        "$R/var/lib/nsbox/images" "$R/var/lib/nsbox/state"
chmod 1777 "$R/tmp"
for b in "${BINS[@]}"; do install -m 0755 "$BUILD/$b" "$R/usr/local/bin/"; done
for b in "${LIBEXEC[@]}"; do install -m 0755 "$BUILD/$b" "$R/usr/local/libexec/nsbox/"; done
install -m 0644 "$REPO"/seccomp-profiles/*.json "$R/usr/local/share/nsbox/seccomp/"
install -m 0755 "$HERE/entrypoint.sh" "$R/usr/local/bin/nsbox-entrypoint"
for t in "${TOOLS[@]}"; do install -m 0755 "$t" "$R$t"; done
ln -s dash "$R/bin/sh"
# Debian 12 is usr-merged: /lib and /lib64 are links to usr/; keep them so.
install -d "$R/usr/lib/x86_64-linux-gnu" "$R/usr/lib64"
ln -s usr/lib "$R/lib"
ln -s usr/lib64 "$R/lib64"
for l in "${LIBS[@]}"; do
        real=$(readlink -f -- "$l")
        dest=$R/usr${l#/usr}
        install -D -m 0755 "$real" "$dest"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$R/etc/passwd"
printf 'root:x:0:\nnsbox:x:999:\nnogroup:x:65534:\n' >"$R/etc/group"
printf 'hosts: files dns\npasswd: files\ngroup: files\n' >"$R/etc/nsswitch.conf"

buildah bud --quiet --layers --isolation chroot -f "$HERE/Containerfile" \
        --build-context python="$PYIMG" -t "$TAG:$KEY" "$STAGE" >/dev/null
podman tag "$TAG:$KEY" "$TAG:latest"
echo "$KEY" >"$CACHE/container/last-key"
# Earlier builds of this tag go (each is half a gigabyte), once a day old:
# another checkout's tests may be about to run theirs.
podman images --filter "reference=$TAG:*" --filter until=24h --format '{{.Repository}}:{{.Tag}}' | grep -vx -e "$TAG:$KEY" -e "$TAG:latest" |
        xargs -r podman rmi >/dev/null 2>&1 || true
echo "$TAG:$KEY"
