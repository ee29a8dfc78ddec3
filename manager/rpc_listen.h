/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's listening sockets. */
#pragma once

#include <sys/types.h>

#include "error.h"

/* The socket's directory is root's and only root may write it; else EPERM. */
int rpc_listen_check_dir(const char *socket_path, nsbox_error_t **err);
/* A listening socket at path, owned by uid:gid with mode (bound under a
 * temporary name, then renamed into place; a live socket there is never
 * replaced). The fd, or -errno. */
int rpc_listen_bind(const char *path, uid_t uid, gid_t gid, mode_t mode, nsbox_error_t **err);
/* Root's operator socket beside socket_path, in a 0700 directory of
 * nsboxd's uid: the fd and its path (*path_out, malloc'd), or -errno
 * (-ENAMETOOLONG, logged: too long a path, root shares the one socket). */
int rpc_listen_operator(const char *socket_path, char **path_out, nsbox_error_t **err);
