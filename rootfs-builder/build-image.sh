#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build an nsbox sandbox image: NAME/rootfs/ (a Debian root filesystem) and
# NAME/manifest.json, under the image directory nsboxd reads.
#
#   build-image.sh --name python --out /var/lib/nsbox/images --cache /var/cache/nsbox \
#                  --forkrun build/forkrun [--force]
#
# The image is built next to the live one and swapped in with rename(2) only
# once it is complete and has passed a smoke check, so nsboxd never sees a
# half-built rootfs.  A rebuild with unchanged inputs is a no-op.
set -Eeuo pipefail
umask 022

SELF=$(readlink -f -- "${BASH_SOURCE[0]}")
BUILDER_DIR=$(dirname -- "$SELF")
IMAGE_FILES=$BUILDER_DIR/image-files
HOST_PYTHON=/usr/bin/python3 # not whatever python3 is first in PATH (pyenv etc.)

NAME=""
OUT=""
CACHE=""
MIRROR=http://deb.debian.org/debian
FORCE=0
FORKRUN=""
DESKTOP_TOOLS=()

usage() {
        cat <<EOF
usage: $0 --name NAME --out IMAGE_DIR --cache CACHE_DIR [--mirror URL] [--force]

  --name NAME      image to build (known: python, desktop, browser)
  --out DIR        image directory; the image lands in DIR/NAME
  --cache DIR      download cache (.debs for debootstrap and apt) and build log
  --mirror URL     Debian mirror (default $MIRROR)
  --forkrun FILE   the fork server's attach client, built by make (build/forkrun)
  --force          rebuild even if the inputs are unchanged
EOF
}

die() {
        printf 'build-image: %s\n' "$*" >&2
        exit 1
}

while [ $# -gt 0 ]; do
        case "$1" in
        --name) NAME=${2:?--name needs a value}; shift 2 ;;
        --out) OUT=${2:?--out needs a value}; shift 2 ;;
        --cache) CACHE=${2:?--cache needs a value}; shift 2 ;;
        --mirror) MIRROR=${2:?--mirror needs a value}; shift 2 ;;
        --forkrun) FORKRUN=${2:?--forkrun needs a value}; shift 2 ;;
        --force) FORCE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
        esac
done
if [ -z "$NAME" ] || [ -z "$OUT" ] || [ -z "$CACHE" ] || [ -z "$FORKRUN" ]; then
        usage >&2
        die "--name, --out, --cache and --forkrun are required"
fi
[ -f "$FORKRUN" ] && [ -x "$FORKRUN" ] || die "--forkrun $FORKRUN: not an executable file (make build/forkrun)"
FORKRUN=$(realpath -- "$FORKRUN")
# Where the attach client lands in the image (manager/python.c runs it there).
FORKRUN_DEST=usr/lib/nsbox/forkrun

# One entry per image.  Only Depends are installed, never Recommends --
# python3-pandas Recommends alone would pull in scipy, sympy and a compiler.
#
# The packages are installed by apt inside the new root, not by debootstrap
# --include: debootstrap always takes the first alternative of "a | b", and
# python3-fonttools (via matplotlib) Depends "python3-scipy | python3-munkres";
# scipy Depends python3-pythran, which Depends g++, libboost-dev and
# python3-all-dev -- 1.2 GiB instead of a few hundred MB.  apt accepts the
# second alternative when it is asked for, hence python3-munkres below.
case "$NAME" in
python | desktop | browser)
        SUITE=bookworm
        VARIANT=minbase
        # libopenblas0-pthread: without it numpy falls back to the reference
        # BLAS, many times slower on any real matrix work (+43 MB).
        # The tools an agent reaches for first (docs/snapshots-and-images.md
        # lists what each costs): pytest, make, git, editors (vi, nano), a
        # pager, curl (with the CA certificates https needs), zip/unzip.
        # git is most of it (+79 MB: it Depends on perl); file was left out
        # (+8 MB, its magic database).
        PACKAGES=(python3 python3-pip python3-numpy python3-pandas python3-matplotlib
                python3-pil coreutils procps util-linux
                python3-munkres libopenblas0-pthread
                python3-pytest make git vim-tiny nano less curl ca-certificates
                unzip zip)
        # Distribution names (importlib.metadata) recorded in the manifest.
        PYTHON_DISTS=(pip numpy pandas matplotlib Pillow)
        # Modules the sandbox's fork server imports once for every stateless
        # python.run (manifest "python_preload"; manager/python.c).
        PYTHON_PRELOAD=(numpy pandas matplotlib matplotlib.pyplot PIL.Image)
        if [ "$NAME" = desktop ]; then
                # The python image plus a screen for computer use
                # (manager/desktop.c runs them; docs/desktop.md): a virtual X
                # server, a window manager, VNC and noVNC (websockify serves
                # it) for a human to watch, xdotool for input, scrot for PNG
                # screenshots, chromium and xterm to work in, x11-utils
                # (xdpyinfo: is the display up); for E2B's desktop SDK
                # (docs/e2b.md), x11-xserver-utils (xrandr: getScreenSize) and
                # libgtk-3-bin (gtk-launch: launch(app); chromium already
                # brings GTK itself).
                PACKAGES+=(xvfb openbox x11vnc novnc websockify xdotool scrot
                        chromium fonts-dejavu-core fonts-liberation xterm x11-utils
                        x11-xserver-utils libgtk-3-bin)
                # What a desktop sandbox must be able to run (smoke check).
                DESKTOP_TOOLS=(Xvfb openbox x11vnc websockify xdotool scrot
                        chromium xterm xdpyinfo xrandr gtk-launch)
        fi
        if [ "$NAME" = browser ]; then
                # The python image plus headless Chromium: Debian's chromium
                # (its Depends only: no Recommends such as chromium-sandbox,
                # whose setuid helper no_new_privs rules out anyway), a font
                # so pages have text; image-files/'s browser.py drives it
                # (manager/browser.c; docs/browser.md).
                PACKAGES+=(chromium fonts-dejavu-core)
        fi
        ;;
*)
        die "unknown image name '$NAME' (known: python, desktop, browser)"
        ;;
esac

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install -y debootstrap)"
[ -x "$HOST_PYTHON" ] || die "$HOST_PYTHON not found; it writes the manifest"
ARCH=$(dpkg --print-architecture)

mkdir -p -- "$OUT" "$CACHE/debootstrap" "$CACHE/apt-archives" "$CACHE/logs"
# debootstrap insists on an absolute --cache-dir, and the swap below must
# not depend on the caller's cwd.
OUT=$(realpath -- "$OUT")
CACHE=$(realpath -- "$CACHE")
FINAL=$OUT/$NAME
LOG=$CACHE/logs/$NAME.build.log

# --- cleanup ----------------------------------------------------------------

BUILD_DIR=""

# debootstrap and install_packages mount proc, sys and the download cache
# inside the target; if they were killed those mounts are still there, and
# a recursive delete must never walk into the host's /proc or the cache.
unmount_under() {
        local dir=$1 mnt
        # mountinfo field 5 is the mount point; the deepest ones go first.
        awk -v prefix="$dir/" 'index($5, prefix) == 1 { print $5 }' /proc/self/mountinfo |
                sort -r | while IFS= read -r mnt; do
                umount -l -- "$mnt" || true
        done
}

remove_tree() {
        unmount_under "$1"
        rm -rf --one-file-system -- "$1"
}

on_exit() {
        local status=$?
        if [ -n "$BUILD_DIR" ] && [ -d "$BUILD_DIR" ]; then
                remove_tree "$BUILD_DIR"
                [ "$status" -eq 0 ] || printf 'build-image: image %s not built; removed %s\n' "$NAME" "$BUILD_DIR" >&2
        fi
        exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'printf "build-image: line %s: command failed: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

# --- inputs -------------------------------------------------------------------

# Files from image-files/ that go into the image (the README stays behind),
# as NUL-separated paths relative to image-files/, in a stable order.
list_image_files() {
        [ -d "$IMAGE_FILES" ] || return 0
        find "$IMAGE_FILES" -mindepth 1 \( -type f -o -type l \) ! -path "$IMAGE_FILES/README" \
                -printf '%P\0' | LC_ALL=C sort -z
}

# Only the owner-execute bit of an image file is carried into the image, so
# the mode a git checkout happened to get (umask 002, ...) is not an input.
image_file_mode() {
        if [ -x "$1" ]; then echo 0755; else echo 0644; fi
}

# Everything that decides what the image contains.  Package versions on the
# mirror are deliberately not an input: picking up Debian point releases is
# a --force rebuild, not something every `make` should do.
# The base hash covers what needs debootstrap and apt; the input hash adds
# the files from image-files/, which alone can change without a full build.
compute_base_hash() {
        {
                printf 'name=%s\nsuite=%s\nvariant=%s\narch=%s\nmirror=%s\n' \
                        "$NAME" "$SUITE" "$VARIANT" "$ARCH" "$MIRROR"
                printf 'package=%s\n' "${PACKAGES[@]}"
                printf 'builder=%s\n' "$(sha256sum <"$SELF" | cut -d' ' -f1)"
        } | sha256sum | cut -d' ' -f1
}

compute_input_hash() {
        local rel path
        {
                printf 'base=%s\n' "$(compute_base_hash)"
                while IFS= read -r -d '' rel; do
                        path=$IMAGE_FILES/$rel
                        if [ -L "$path" ]; then
                                printf 'symlink %s -> %s\n' "$rel" "$(readlink -- "$path")"
                        else
                                printf 'file %s %s %s\n' "$rel" "$(image_file_mode "$path")" \
                                        "$(sha256sum <"$path" | cut -d' ' -f1)"
                        fi
                done < <(list_image_files)
                printf 'forkrun %s\n' "$(sha256sum <"$FORKRUN" | cut -d' ' -f1)"
                printf 'preload=%s\n' "${PYTHON_PRELOAD[@]}"
        } | sha256sum | cut -d' ' -f1
}

manifest_field() {
        "$HOST_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' \
                "$1" "$2" 2>/dev/null || true
}

manifest_input_hash() {
        manifest_field "$1" input_hash
}

# --- build steps ----------------------------------------------------------------

# Run a long step with its output in $LOG, saying how far it is while it
# runs: every 10 s a line with the step's newest log line (on a terminal,
# one line redrawn every second). Returns the command's status.
with_progress() {
        local what=$1 status=0 tick=10 n=0 line
        shift
        "$@" >>"$LOG" 2>&1 &
        local pid=$!
        [ -t 1 ] && tick=1
        while kill -0 "$pid" 2>/dev/null; do
                sleep 1
                n=$((n + 1))
                [ $((n % tick)) -eq 0 ] || continue
                line=$(tail -n 1 "$LOG" 2>/dev/null | tr -cd '[:print:]' | cut -c1-70)
                if [ -t 1 ]; then
                        printf '\r\033[Kimage %s: %s, %d s: %s' "$NAME" "$what" "$n" "$line"
                else
                        printf 'image %s: %s, %d s: %s\n' "$NAME" "$what" "$n" "$line"
                fi
        done
        wait "$pid" || status=$?
        [ -t 1 ] && printf '\r\033[K'
        return "$status"
}

run_debootstrap() {
        local rootfs=$1
        echo "image $NAME: debootstrap $SUITE ($VARIANT, $ARCH) from $MIRROR (log: $LOG)"
        : >"$LOG"
        if ! with_progress "debootstrap" debootstrap --variant="$VARIANT" --arch="$ARCH" \
                --cache-dir="$CACHE/debootstrap" "$SUITE" "$rootfs" "$MIRROR"; then
                # The target, and debootstrap's detailed log inside it, are
                # about to be deleted; keep the log where the message points.
                if [ -f "$rootfs/debootstrap/debootstrap.log" ]; then
                        printf '\n---- %s ----\n' "debootstrap/debootstrap.log" >>"$LOG"
                        cat "$rootfs/debootstrap/debootstrap.log" >>"$LOG"
                fi
                {
                        echo "build-image: debootstrap of $SUITE from $MIRROR failed; see $LOG"
                        echo "---- last lines of $LOG ----"
                        tail -n 25 "$LOG"
                } >&2
                exit 1
        fi
}

# apt runs inside the new root, so it resolves against the image's own dpkg
# database and the package lists debootstrap just fetched and verified (no
# `apt-get update`: same mirror, same moment).
install_packages() {
        local rootfs=$1 status=0
        echo "image $NAME: apt-get install --no-install-recommends ${PACKAGES[*]}"
        mount -t proc proc "$rootfs/proc"
        # .debs land in the host cache, so a rebuild downloads nothing.
        mount --bind "$CACHE/apt-archives" "$rootfs/var/cache/apt/archives"
        # Nothing may start a service inside the build chroot (x11-common,
        # pulled in by python3-tk, ships an init script).
        printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
        chmod 0755 "$rootfs/usr/sbin/policy-rc.d"

        # APT::Sandbox::User=root: apt would otherwise chown the partial/
        # dir of the host cache to the image's _apt uid, which means some
        # other user on the host.  Downloads are signature-checked either way.
        with_progress "apt-get install" chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
                apt-get install -y --no-install-recommends -o APT::Sandbox::User=root \
                "${PACKAGES[@]}" || status=$?

        rm -f -- "$rootfs/usr/sbin/policy-rc.d"
        umount -- "$rootfs/var/cache/apt/archives"
        umount -- "$rootfs/proc"
        if [ "$status" -ne 0 ]; then
                {
                        echo "build-image: apt-get install in the new root failed (exit $status); see $LOG"
                        echo "---- last lines of $LOG ----"
                        tail -n 25 "$LOG"
                } >&2
                exit 1
        fi
}

add_sandbox_user() {
        local rootfs=$1
        if grep -q '^sandbox:' "$rootfs/etc/passwd" || cut -d: -f3 "$rootfs/etc/passwd" | grep -qx 1000; then
                die "image already has a 'sandbox' user or uid 1000; refusing to add a second"
        fi
        # Locked password ('*'): nobody logs in, processes are started as uid 1000.
        echo 'sandbox:x:1000:1000:sandbox:/workspace:/bin/bash' >>"$rootfs/etc/passwd"
        echo 'sandbox:x:1000:' >>"$rootfs/etc/group"
        echo 'sandbox:*:::::::' >>"$rootfs/etc/shadow"
        echo 'sandbox:!::' >>"$rootfs/etc/gshadow"
}

copy_image_files() {
        local rootfs=$1 rel src dst
        while IFS= read -r -d '' rel; do
                src=$IMAGE_FILES/$rel
                dst=$rootfs/$rel
                mkdir -p -- "$(dirname -- "$dst")"
                # Replace, never write through, whatever is there: an absolute
                # symlink in the rootfs would otherwise point at the host.
                rm -f -- "$dst"
                if [ -L "$src" ]; then
                        cp -P -- "$src" "$dst"
                else
                        install -o 0 -g 0 -m "$(image_file_mode "$src")" -- "$src" "$dst"
                fi
        done < <(list_image_files)
        mkdir -p -- "$(dirname -- "$rootfs/$FORKRUN_DEST")"
        rm -f -- "$rootfs/$FORKRUN_DEST"
        install -o 0 -g 0 -m 0755 -- "$FORKRUN" "$rootfs/$FORKRUN_DEST"
}

prepare_for_sandboxes() {
        local rootfs=$1 dir

        add_sandbox_user "$rootfs"
        for dir in proc dev sys tmp workspace run; do
                mkdir -p -- "$rootfs/$dir"
        done
        chown 1000:1000 "$rootfs/workspace"
        chmod 0755 "$rootfs/workspace"
        chmod 1777 "$rootfs/tmp"

        echo sandbox >"$rootfs/etc/hostname"
        printf '127.0.0.1\tlocalhost sandbox\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
        # debootstrap copied the build host's resolver config in; a sandbox
        # must not learn the host's network from it (network is "none" anyway).
        : >"$rootfs/etc/resolv.conf"

        # Debian ships /etc/matplotlibrc (a conffile, every setting commented
        # out) and matplotlib reads it; enable just its backend line so the
        # file stays what dpkg knows plus one change.
        [ -f "$rootfs/etc/matplotlibrc" ] || die "image has no /etc/matplotlibrc (python3-matplotlib-data changed?)"
        sed -i -E 's/^#?[[:space:]]*backend[[:space:]]*:.*/backend: Agg/' "$rootfs/etc/matplotlibrc"
        grep -qx 'backend: Agg' "$rootfs/etc/matplotlibrc" || echo 'backend: Agg' >>"$rootfs/etc/matplotlibrc"

        # A login shell (E2B's SDKs run every command as `bash -l -c CMD`)
        # forked `id -u` in /etc/profile and root's `mesg n` in ~/.profile:
        # two forks and execs, half of such a command's time. Bash knows its
        # EUID (other shells still ask id), and mesg acts on a terminal on
        # stdin only: the same PATH and settings, without the forks.
        sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/' "$rootfs/etc/profile"
        [ "$(grep -c '"${EUID:-$(id -u)}"' "$rootfs/etc/profile")" -eq 2 ] ||
                die "/etc/profile does not test \"\$(id -u)\" twice (base-files changed?)"
        sed -i 's/^mesg n 2> \/dev\/null || true$/[ -t 0 ] \&\& mesg n 2> \/dev\/null || true/' "$rootfs/root/.profile"
        grep -qx '\[ -t 0 \] && mesg n 2> /dev/null || true' "$rootfs/root/.profile" ||
                die "/root/.profile has no 'mesg n 2> /dev/null || true' line (base-files changed?)"

        # Each sandbox is its own disposable system, so PEP 668's guard
        # against breaking the distro's Python only gets in the agent's way.
        rm -f -- "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
        printf '[global]\nno-cache-dir = true\ndisable-pip-version-check = true\nroot-user-action = ignore\n' \
                >"$rootfs/etc/pip.conf"

        # Sandboxes run with no_new_privs, but a setuid binary in a shared
        # read-only lower layer is still needless attack surface.
        find "$rootfs" -xdev -perm /6000 -type f -exec chmod ug-s {} +

        # Package caches, docs and translations: nothing a sandbox reads.
        rm -rf -- "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
                "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/archives/partial/* \
                "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/info \
                "$rootfs"/usr/share/locale "$rootfs/debootstrap"
        mkdir -p -- "$rootfs/var/lib/apt/lists/partial"
        # The libraries' own test suites (pandas/tests, sympy/**/tests, ...):
        # about a fifth of the image with their .pyc, and only ever loaded by
        # numpy.test()-style runners, never by an import.
        find "$rootfs/usr/lib/python3/dist-packages" -type d -name tests -prune -exec rm -rf -- {} +
        # Build-time logs; truncated, not deleted, so utmp-style files keep
        # the owner and mode their packages gave them.
        find "$rootfs/var/log" -type f -exec truncate -s 0 {} +

        copy_image_files "$rootfs"
}

# Runs the image's own python3 as the sandbox user: the import smoke check
# (fails the build) and the facts for the manifest, printed as JSON.
probe_image() {
        local rootfs=$1 dists
        dists=$(IFS=,; echo "${PYTHON_DISTS[*]}")
        chroot --userspec=1000:1000 --groups=1000 "$rootfs" \
                /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/workspace LANG=C.UTF-8 \
                MPLCONFIGDIR=/tmp/.matplotlib PYTHONDONTWRITEBYTECODE=1 \
                /usr/bin/python3 -c '
import importlib.metadata, io, json, platform, sys
import numpy, pandas, matplotlib, PIL
# The raw rc value: get_backend() would fall back to Agg on a headless
# build host anyway and so prove nothing about /etc/matplotlibrc.
backend = dict.__getitem__(matplotlib.rcParams, "backend")
if backend.lower() != "agg":
    sys.exit("matplotlib backend from %s is %r, not Agg" % (matplotlib.matplotlib_fname(), backend))
# Importing is not using: draw one chart from a DataFrame, headless.
import matplotlib.pyplot as plt
frame = pandas.DataFrame({"x": numpy.arange(5), "y": numpy.arange(5) ** 2})
frame.plot(x="x", y="y").figure.savefig(io.BytesIO(), format="png")
print(json.dumps({
    "python_version": platform.python_version(),
    "python_packages": {d: importlib.metadata.version(d) for d in sys.argv[1].split(",")},
}))' "$dists"
}

# An image with Chromium: it must render a page headless, as uid 1000, with
# the flags browser.py gives it (--no-sandbox: see docs/browser.md).
probe_chromium() {
        local rootfs=$1 status=0 dom
        [ -x "$rootfs/usr/lib/chromium/chromium" ] || return 0
        # Chromium aborts without device nodes (null, urandom, ...), and a
        # rootfs updated from a linked copy has an empty /dev (emptied below,
        # after the checks): the host's, for the probe only.
        mount --bind /dev "$rootfs/dev"
        mount -t proc proc "$rootfs/proc"
        dom=$(timeout 120 chroot --userspec=1000:1000 --groups=1000 "$rootfs" \
                /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp/.chromium-probe \
                /usr/lib/chromium/chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
                --user-data-dir=/tmp/.chromium-probe --dump-dom "data:text/html,<p>nsbox-probe</p>" \
                2>/dev/null) || status=$?
        umount -- "$rootfs/proc"
        umount -- "$rootfs/dev"
        case "$dom" in
        *nsbox-probe*) ;;
        *) die "smoke check failed: headless Chromium did not render a page (exit $status)" ;;
        esac
}

write_manifest() {
        local dest=$1 rootfs=$2 probe=$3 input_hash=$4 size=$5
        dpkg-query --admindir="$rootfs/var/lib/dpkg" -W \
                -f '${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n' |
                "$HOST_PYTHON" -c '
import json, sys
name, suite, variant, arch, mirror, build_date, input_hash, size, probe, dest, base_hash, files, preload = sys.argv[1:]
probe = json.loads(probe)
packages = []
for line in sys.stdin:
    status, package, version, architecture = line.rstrip("\n").split("\t")
    if status.strip() == "ii":
        packages.append({"name": package, "version": version, "architecture": architecture})
packages.sort(key=lambda p: p["name"])
manifest = {
    "name": name,
    "distribution": "debian",
    "suite": suite,
    "variant": variant,
    "architecture": arch,
    "mirror": mirror,
    "python_version": probe["python_version"],
    "python_packages": probe["python_packages"],
    "packages": packages,
    "build_date": build_date,
    "input_hash": input_hash,
    "base_hash": base_hash,
    "image_files": [f for f in files.split("\n") if f],
    "python_preload": [m for m in preload.split("\n") if m],
    "size_bytes": int(size),
}
# An image with Chromium says so; nsboxd reads this key for browser.* and
# sandbox.info (manager/browser.c).
chromium = [p["version"] for p in packages if p["name"] == "chromium"]
if chromium:
    manifest["browser"] = {"chromium_version": chromium[0], "executable": "/usr/bin/chromium"}
with open(dest, "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
' "$NAME" "$SUITE" "$VARIANT" "$ARCH" "$MIRROR" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
                "$input_hash" "$size" "$probe" "$dest" "$(compute_base_hash)" \
                "$(list_image_files | tr '\0' '\n')" "$(printf '%s\n' "${PYTHON_PRELOAD[@]}")"
}

# Two renames with a moment between them where NAME is absent; a sandbox
# being created in that instant fails cleanly rather than seeing a mix.
swap_into_place() {
        local new=$1 old=""
        if [ -e "$FINAL" ]; then
                old=$OUT/.$NAME.old.$$
                mv -T -- "$FINAL" "$old"
        fi
        if ! mv -T -- "$new" "$FINAL"; then
                [ -z "$old" ] || mv -T -- "$old" "$FINAL"
                die "could not move $new to $FINAL"
        fi
        BUILD_DIR="" # it is the live image now, not ours to clean up
        [ -z "$old" ] || retire_or_remove "$old"
}

# Running sandboxes use the old rootfs as their overlay lower layer: deleting
# it would pull files from under them. Keep it aside while any sandbox init
# runs on this host; a later build removes it once none does.
sandboxes_running() {
        local exe
        for exe in /proc/[0-9]*/exe; do
                case "$(readlink -- "$exe" 2>/dev/null || true)" in
                /memfd:nsbox-init*) return 0 ;;
                esac
        done
        return 1
}

retire_or_remove() {
        if sandboxes_running; then
                mv -T -- "$1" "$OUT/.$NAME.retired.$(date +%s).$$"
                echo "image $NAME: sandboxes are running on the old image; it stays in $OUT/.$NAME.retired.* until a later build"
        else
                remove_tree "$1"
        fi
}

# --- main -----------------------------------------------------------------------

# Two builds at once (make demo next to make test) would race on the swap;
# the second one waits and then usually finds the image up to date.
exec 9>"$CACHE/.$NAME.build.lock"
if ! flock -n 9; then
        echo "image $NAME: another build is running; waiting for it"
        flock 9
fi

# Leftovers of a build that was killed -9 or lost power; we hold the lock,
# so nothing else is using them.  Before the up-to-date check, because
# a killed build can leave the cache and /proc mounted inside them.
for stale in "$OUT/.$NAME.build."* "$OUT/.$NAME.old."*; do
        [ -e "$stale" ] || continue
        echo "image $NAME: removing stale $stale"
        remove_tree "$stale"
done
if ! sandboxes_running; then
        for stale in "$OUT/.$NAME.retired."*; do
                [ -e "$stale" ] || continue
                echo "image $NAME: removing retired $stale"
                remove_tree "$stale"
        done
fi

INPUT_HASH=$(compute_input_hash)
if [ "$FORCE" -eq 0 ] && [ -d "$FINAL/rootfs" ] && [ -f "$FINAL/manifest.json" ] &&
        [ "$(manifest_input_hash "$FINAL/manifest.json")" = "$INPUT_HASH" ]; then
        echo "image $NAME: up to date"
        exit 0
fi

start=$SECONDS
# Built inside OUT so that the final rename stays on one filesystem.
BUILD_DIR=$(mktemp -d "$OUT/.$NAME.build.XXXXXX")
chmod 0755 "$BUILD_DIR"
ROOTFS=$BUILD_DIR/rootfs

if [ "$FORCE" -eq 0 ] && [ -d "$FINAL/rootfs" ] && [ -f "$FINAL/manifest.json" ] &&
        [ "$(manifest_field "$FINAL/manifest.json" base_hash)" = "$(compute_base_hash)" ]; then
        # Only image-files/ changed: hard-link the live rootfs (instant, no
        # extra space) and replace just those files. copy_image_files unlinks
        # before writing, so the live image's inodes are never written through.
        echo "image $NAME: only image files changed; updating a linked copy"
        cp -al -- "$FINAL/rootfs" "$ROOTFS"
        "$HOST_PYTHON" -c '
import json, os, sys
old = json.load(open(sys.argv[1])).get("image_files", [])
keep = set(sys.argv[3:])
for rel in old:
    if rel not in keep:
        path = os.path.join(sys.argv[2], rel)
        if os.path.lexists(path):
            os.unlink(path)
' "$FINAL/manifest.json" "$ROOTFS" $(list_image_files | tr '\0' ' ')
        copy_image_files "$ROOTFS"
        # The smoke check below may rewrite matplotlib's cache: give it its own copy.
        rm -rf -- "$ROOTFS/tmp/.matplotlib"
        [ ! -d "$FINAL/rootfs/tmp/.matplotlib" ] || cp -a -- "$FINAL/rootfs/tmp/.matplotlib" "$ROOTFS/tmp/"
else
        run_debootstrap "$ROOTFS"
        install_packages "$ROOTFS"
        prepare_for_sandboxes "$ROOTFS"
fi

echo "image $NAME: smoke check (import numpy, pandas, matplotlib, PIL and plot, as uid 1000)"
PROBE=$(probe_image "$ROOTFS") || die "smoke check failed (Python error above): numpy, pandas, matplotlib and PIL must import and plot"
probe_chromium "$ROOTFS"
for tool in "${DESKTOP_TOOLS[@]}"; do
        chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/bin:/bin sh -c 'command -v "$1"' sh "$tool" >/dev/null ||
                die "smoke check failed: $tool is not in the $NAME image"
done
[ "$NAME" != desktop ] || [ -f "$ROOTFS/usr/share/novnc/vnc.html" ] ||
        die "smoke check failed: no noVNC client (/usr/share/novnc/vnc.html) in the $NAME image"
echo "image $NAME: smoke check ok"
# The probe ran in the image; it must not ship what it left behind, except
# matplotlib's font cache: sandboxes use MPLCONFIGDIR=/tmp/.matplotlib, and a
# prebuilt cache saves every sandbox's first plot about a second.
find "$ROOTFS/tmp" -mindepth 1 -maxdepth 1 ! -name .matplotlib -exec rm -rf -- {} +
find "$ROOTFS/workspace" -mindepth 1 -delete
# debootstrap's device nodes were only needed for the chroot steps.  The
# runtime mounts its own minimal /dev, and a real device node left in a
# shared lower layer is a hazard should that mount ever be missing.
find "$ROOTFS/dev" -mindepth 1 -delete

SIZE=$(du -sbx -- "$ROOTFS" | cut -f1)
write_manifest "$BUILD_DIR/manifest.json" "$ROOTFS" "$PROBE" "$INPUT_HASH" "$SIZE"

# Without this a crash just after the rename can leave the new image with
# files that were never written out.
sync -f "$BUILD_DIR"
swap_into_place "$BUILD_DIR"

PYTHON_VERSION=$("$HOST_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["python_version"])' \
        "$FINAL/manifest.json")
echo "image $NAME: built in $((SECONDS - start)) s"
echo "  path:    $FINAL"
echo "  size:    $(numfmt --to=iec-i --suffix=B "$SIZE") ($SIZE bytes)"
echo "  python:  $PYTHON_VERSION"
