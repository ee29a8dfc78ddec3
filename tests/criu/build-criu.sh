#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# build-criu.sh: build CRIU 4.1.1 (Debian trixie's source package, via apt)
# in /tmp/criu-src with the three EXPERIMENT changes described in docs/design/criu.md,
# each switched on by an environment variable so that without them the
# binary behaves as released:
#   CRIU_EXP_SKIP_USERNS_CHECK  skip check_user_ns() at dump
#   CRIU_EXP_HOST_SOCKETS       also collect unix sockets of criu's own netns
#   CRIU_EXP_MEMFD_EXE          restore an exe link that is a memfd
# Debian 12's own criu (3.17.1) cannot start on this host's kernel at all.
set -eu
S=/tmp/criu-src
mkdir -p "$S/tlists/partial" "$S/tcache/archives/partial"
cd "$S"
cat >trixie.list <<'L'
deb-src http://deb.debian.org/debian trixie main
L
T="-o Dir::Etc::SourceList=$S/trixie.list -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$S/tlists -o Dir::Cache=$S/tcache"
apt-get $T update >/dev/null
# Only the upstream tarball is needed (the Debian diff is packaging; the
# .dsc and debian.tar.xz answer 404 through this host's mirror).
apt-get $T source --download-only criu || true
[ -f criu_4.1.1.orig.tar.xz ] || { echo "no criu_4.1.1.orig.tar.xz"; exit 1; }
rm -rf criu-4.1.1 && tar xf criu_4.1.1.orig.tar.xz
apt-get install -y --no-install-recommends libprotobuf-c-dev protobuf-c-compiler protobuf-compiler \
        libprotobuf-dev libnl-3-dev libnl-route-3-dev libnet1-dev libcap-dev pkg-config python3-protobuf \
        libbsd-dev libgnutls28-dev libnftables-dev uuid-dev iptables >/dev/null
cd criu-4.1.1
python3 - <<'P'
import re
def edit(path, old, new):
    s = open(path).read()
    assert old in s, (path, old)
    open(path, "w").write(s.replace(old, new, 1))
edit("criu/namespaces.c", "\tif (check_user_ns(pid))",
     '\tif (!getenv("CRIU_EXP_SKIP_USERNS_CHECK") && check_user_ns(pid))')
edit("criu/net.c", """int collect_net_namespaces(bool for_dump)
{
	return walk_namespaces(&net_ns_desc, collect_net_ns, (void *)(for_dump ? 1UL : 0));""",
"""int collect_net_namespaces(bool for_dump)
{
	int ret = walk_namespaces(&net_ns_desc, collect_net_ns, (void *)(for_dump ? 1UL : 0));
	if (ret == 0 && for_dump && getenv("CRIU_EXP_HOST_SOCKETS")) {
		static struct ns_id hostns;
		hostns.type = NS_CRIU;
		hostns.nd = &net_ns_desc;
		hostns.id = 0xfffe;
		hostns.ns_pid = getpid();
		hostns.net.nlsk = socket(PF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG);
		if (hostns.net.nlsk < 0)
			return -1;
		ret = collect_sockets(&hostns);
	}
	return ret;""")
edit("criu/files-reg.c", """	fd = find_file_desc_raw(FD_TYPES__REG, id);
	if (fd == NULL) {
		pr_err("Can't find regfile for %#x\\n", id);""",
"""	fd = find_file_desc_raw(FD_TYPES__REG, id);
	if (fd == NULL && getenv("CRIU_EXP_MEMFD_EXE")) {
		u32 flags = 0;
		fd = find_file_desc_raw(FD_TYPES__MEMFD, id);
		if (fd != NULL)
			return memfd_open(fd, &flags, false);
	}
	if (fd == NULL) {
		pr_err("Can't find regfile for %#x\\n", id);""")
edit("criu/files-reg.c", """	fdesc = find_file_desc_raw(FD_TYPES__REG, id);
	if (fdesc == NULL) {
		if (!optional)""",
"""	fdesc = find_file_desc_raw(FD_TYPES__REG, id);
	if (fdesc == NULL && getenv("CRIU_EXP_MEMFD_EXE"))
		fdesc = find_file_desc_raw(FD_TYPES__MEMFD, id);
	if (fdesc == NULL) {
		if (!optional)""")
edit("criu/files-reg.c", '#include "files-reg.h"', '#include "files-reg.h"\n#include "memfd.h"')
edit("criu/memfd.c", """	if (mie->has_mode)
		ret = cr_fchperm(fd, mie->uid, mie->gid, mie->mode);""",
"""	if (mie->has_mode && (int)mie->uid == -1 && getenv("CRIU_EXP_MEMFD_EXE"))
		ret = fchmod(fd, mie->mode & 07777);
	else if (mie->has_mode)
		ret = cr_fchperm(fd, mie->uid, mie->gid, mie->mode);""")
P
nice make -j2 criu >"$S/build.log" 2>&1
./criu/criu --version
