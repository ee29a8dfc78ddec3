/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's listening sockets: the one every client connects to and root's
 * operator socket beside it, made safely (owner, mode, a directory only
 * root may write, no hijack of a live one). */
#include "rpc_listen.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "socket_path.h"

/* Only root may be able to replace the socket (or the directory entry a
 * client connects through), or any local user could stand in for nsboxd. */
int rpc_listen_check_dir(const char *socket_path, nsbox_error_t **err)
{
        _cleanup_free_ char *copy = strdup(socket_path);
        if (copy == NULL)
                return nsbox_error(err, ENOMEM, "socket path");
        const char *dir = dirname(copy);
        struct stat st;
        if (stat(dir, &st) < 0)
                return nsbox_error(err, errno, "socket directory %s", dir);
        if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
                return nsbox_error(err, EPERM,
                                   "socket directory %s must be owned by root and writable by root only "
                                   "(owner uid %u, mode %04o)",
                                   dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        return 0;
}

/* A listening socket at path, owned by uid:gid with mode: bound and
 * listening under a temporary name, then renamed into place. Returns the
 * listening fd or -errno. */
int rpc_listen_bind(const char *path, uid_t uid, gid_t gid, mode_t mode, nsbox_error_t **err)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof(addr.sun_path))
                return nsbox_error(err, ENAMETOOLONG, "socket path %s", path);
        strcpy(addr.sun_path, path);
        int r;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return nsbox_error(err, errno, "socket");
        /* A socket file left by a previous run: replace it only if nothing
         * answers on it (another nsboxd must not be hijacked). */
        struct stat st;
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return nsbox_error(err, EEXIST, "%s exists and is not a socket", path);
                _cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof(addr)) == 0)
                        return nsbox_error(err, EADDRINUSE, "another nsboxd is listening on %s", path);
        }
        /* Bound and listening under a temporary name, then renamed into
         * place: a client that sees the path can connect at once, and never
         * finds it with the wrong owner or mode. */
        struct sockaddr_un tmp_addr = { .sun_family = AF_UNIX };
        if (snprintf(tmp_addr.sun_path, sizeof(tmp_addr.sun_path), "%s.new", path) >=
            (int)sizeof(tmp_addr.sun_path))
                return nsbox_error(err, ENAMETOOLONG, "socket path %s", path);
        unlink(tmp_addr.sun_path);
        mode_t old = umask(~mode & 0777);
        r = bind(fd, (struct sockaddr *)&tmp_addr, sizeof(tmp_addr));
        umask(old);
        if (r < 0)
                return nsbox_error(err, errno, "bind %s", tmp_addr.sun_path);
        /* The kernel's largest queue (net.core.somaxconn caps it), as
         * systemd's Backlog= has it: a burst of connects from many clients
         * finds room instead of EAGAIN. */
        if (chown(tmp_addr.sun_path, uid, gid) < 0 || chmod(tmp_addr.sun_path, mode) < 0 ||
            listen(fd, SOMAXCONN) < 0 || rename(tmp_addr.sun_path, path) < 0) {
                r = nsbox_error(err, errno, "set up %s", path);
                unlink(tmp_addr.sun_path);
                return r;
        }

        return steal_fd(&fd);
}

/* The operator socket's directory: nsboxd's uid's alone (0700), so that no
 * other uid can connect to the socket in it, or flood its queue. Its parent
 * is the socket's directory, which only root may write (rpc_listen_check_dir):
 * no one else can put something in its place. */
static int make_operator_dir(const char *operator_path, nsbox_error_t **err)
{
        _cleanup_free_ char *copy = strdup(operator_path);
        if (copy == NULL)
                return nsbox_error(err, ENOMEM, "operator socket path");
        const char *dir = dirname(copy);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", dir);
        struct stat st;
        if (lstat(dir, &st) < 0)
                return nsbox_error(err, errno, "operator socket directory %s", dir);
        if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                return nsbox_error(err, EPERM, "operator socket directory %s must be a directory of uid %u",
                                   dir, (unsigned)geteuid());
        if ((st.st_mode & 07777) != 0700 && chmod(dir, 0700) < 0)
                return nsbox_error(err, errno, "chmod 0700 %s", dir);
        return 0;
}

/* Root's own socket (see operator_socket_path), made by nsboxd whether or
 * not systemd passed the shared one. */
int rpc_listen_operator(const char *socket_path, char **path_out, nsbox_error_t **err)
{
        int r;
        char path[PATH_MAX];
        struct sockaddr_un addr;
        if (operator_socket_path(socket_path, path, sizeof(path)) < 0 ||
            strlen(path) + strlen(".new") >= sizeof(addr.sun_path)) {
                /* Too long for a socket address: root shares the one
                 * socket, as before there was an operator socket. */
                log_warn("no operator socket: %s is too long a socket path; root's clients share %s's queue",
                         path, socket_path);
                return -ENAMETOOLONG;
        }
        if ((r = rpc_listen_check_dir(socket_path, err)) < 0 || (r = make_operator_dir(path, err)) < 0)
                return r;
        int fd = rpc_listen_bind(path, geteuid(), getegid(), 0600, err);
        if (fd < 0)
                return fd;
        *path_out = strdup(path);
        if (*path_out == NULL) {
                close(fd);
                return nsbox_error(err, ENOMEM, "operator socket path");
        }
        return fd;
}
