/* SPDX-License-Identifier: Apache-2.0 */
/* Who is on the other end of an exposed port: the uid owning a loopback TCP peer (sock_diag). */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/* The sock_diag socket, opened once in nsbox-egress's (the host's) network
 * namespace. 0, or -errno. */
int peer_init(void);

/* The uid owning the other end of fd, an accepted TCP connection from a
 * socket of this host's same network namespace (the exposures listen on
 * 127.0.0.1). 0, or -errno (-ENOENT: that socket is gone). */
int peer_uid(int fd, uid_t *uid);
