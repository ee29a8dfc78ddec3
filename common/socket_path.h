/* SPDX-License-Identifier: Apache-2.0 */
/* Where nsboxd's operator socket is, given its socket: one place for
 * nsboxd, which makes it, and for the clients, which try it first. */
#pragma once

#include <stddef.h>

/* The directory, beside the socket, that holds the operator socket. */
#define OPERATOR_SOCKET_DIR "operator"

/* SOCKET's directory/operator/SOCKET's name ("/run/nsbox/nsbox.sock" ->
 * "/run/nsbox/operator/nsbox.sock"): a second listening socket only
 * nsboxd's own uid (root) can connect to. Other uids share the first
 * socket's listen queue, which a flood of connects can fill; this one's is
 * root's alone. Written into out (size bytes, NUL included): 0, or
 * -ENAMETOOLONG when it does not fit. */
int operator_socket_path(const char *socket_path, char *out, size_t size);
