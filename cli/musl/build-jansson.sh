#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds jansson for musl, for the nsbox CLI (Makefile: CLI_LIBC=musl).
#
#   cli/musl/build-jansson.sh OUT
#
# Debian ships no musl build of jansson, so this takes Debian's own source
# package of it (apt-get source, from the deb-src twins of this host's Debian
# entries, checked by apt against the archive's signed index) and builds it
# with musl-gcc (musl-tools) and cmake into OUT/lib/libjansson.a and
# OUT/include. OUT/include also gets the kernel's headers (linux/, asm/,
# asm-generic/ from linux-libc-dev), which musl-gcc leaves out of its path.
# A source tarball in JANSSON_SRC (jansson-*.tar.gz) is used instead of apt:
# for a host without a Debian mirror.
set -eu

out=${1:?usage: build-jansson.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/src
rm -rf "$work" && mkdir -p "$work"

command -v musl-gcc >/dev/null || { echo "build-jansson: musl-gcc is missing: apt-get install musl-tools (or build with CLI_LIBC=glibc)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "build-jansson: cmake is missing: apt-get install cmake" >&2; exit 1; }

if [ -n "${JANSSON_SRC:-}" ]; then
        tar -xzf "$JANSSON_SRC" -C "$work"
else
        # deb-src lines for this host's Debian suites (bookworm, bookworm-updates,
        # bookworm-security, ...), in apt state of their own: the host's apt
        # configuration and lists are left as they are.
        . /etc/os-release
        apt_dir=$work/apt
        mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
        apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' |
                sort -u | while read -r uri release component; do
                case $release in
                "$VERSION_CODENAME" | "$VERSION_CODENAME"-*) echo "deb-src $uri $release $component" ;;
                esac
        done >"$apt_dir/sources/debian-src.list"
        [ -s "$apt_dir/sources/debian-src.list" ] || {
                echo "build-jansson: no Debian $VERSION_CODENAME entry in apt's sources to take jansson's source from (set JANSSON_SRC, or build with CLI_LIBC=glibc)" >&2
                exit 1
        }
        apt="apt-get -q -o Dir::Etc::SourceList=$apt_dir/sources/debian-src.list -o Dir::Etc::SourceParts=/dev/null
             -o Dir::State::Lists=$apt_dir/lists -o Dir::Cache=$apt_dir/cache -o APT::Sandbox::User=root"
        $apt update >"$apt_dir/update.log" 2>&1 || { cat "$apt_dir/update.log" >&2; exit 1; }
        (cd "$work" && $apt source --download-only jansson >"$apt_dir/source.log" 2>&1) ||
                { cat "$apt_dir/source.log" >&2; exit 1; }
        (cd "$work" && dpkg-source -x jansson_*.dsc jansson >"$apt_dir/extract.log" 2>&1) ||
                { cat "$apt_dir/extract.log" >&2; exit 1; }
fi

src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'jansson*' | head -n 1)
[ -f "$src/CMakeLists.txt" ] || { echo "build-jansson: no jansson source tree in $work" >&2; exit 1; }
mkdir -p "$work/build"
(cd "$work/build" && CC=musl-gcc cmake "$src" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$out" \
        -DJANSSON_BUILD_SHARED_LIBS=OFF -DJANSSON_BUILD_DOCS=OFF -DJANSSON_WITHOUT_TESTS=ON \
        -DJANSSON_EXAMPLES=OFF >cmake.log 2>&1 && make -j"$(nproc)" install >make.log 2>&1) || {
        cat "$work/build/cmake.log" "$work/build/make.log" >&2 2>/dev/null
        exit 1
}
ln -sfn /usr/include/linux "$out/include/linux"
ln -sfn /usr/include/asm-generic "$out/include/asm-generic"
ln -sfn "/usr/include/$(gcc -print-multiarch)/asm" "$out/include/asm"
rm -rf "$work"
