/* SPDX-License-Identifier: Apache-2.0 */
/* Host directories of a client's, checked with its own credentials and mounted idmapped. */
#include "host_mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "config.h"
#include "daemon.h"
#include "log.h"
#include "loop.h"
#include "proto.h"

#define HOST_MOUNT_MAX_GROUPS 256
#define HOST_MOUNT_TIMEOUT_MS 5000

/* What the child reports, with the fd when errnum is 0. */
struct open_result {
        int errnum;
        char why[160];
};

gid_t host_mount_caller_gid(uid_t caller)
{
        struct passwd *pw = getpwuid(caller);
        return pw != NULL ? pw->pw_gid : (gid_t)caller;
}

/* The longest root of host_mount_roots that holds `path` (the path itself
 * or a parent), copied into root; the rest of the path into *rel. */
static bool find_root(const char *path, char *root, size_t size, const char **rel)
{
        const char *list = nsboxd.config.host_mount_roots;
        size_t best = 0;
        while (list != NULL && *list != '\0') {
                size_t n = strcspn(list, ",");
                while (n > 1 && list[n - 1] == '/')
                        n--;
                if (n > 0 && list[0] == '/' && n < size && n > best && strncmp(path, list, n) == 0 &&
                    (path[n] == '/' || path[n] == '\0' || n == 1)) {
                        best = n;
                        memcpy(root, list, n);
                        root[n] = '\0';
                }
                list += strcspn(list, ",");
                list += *list == ',';
        }
        if (best == 0)
                return false;
        *rel = path + best + (path[best] == '/');
        if (best == 1)
                *rel = path + 1;
        if (**rel == '\0')
                *rel = ".";
        return true;
}

static __attribute__((noreturn)) void child_report(int sock, int errnum, int fd, const char *why)
{
        struct open_result res = { .errnum = errnum };
        snprintf(res.why, sizeof(res.why), "%s", why);
        ctl_send(sock, &res, sizeof(res), NULL, 0, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
        _exit(0);
}

/* In the child: the caller's ids, then the open and the checks. Nothing
 * here allocates (nsboxd may have had another thread at the fork). */
static __attribute__((noreturn)) void open_as_caller(int sock, int root, const char *rel, uid_t uid,
                                                     gid_t gid, const gid_t *groups, int n_groups,
                                                     bool read_only)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (setgroups((size_t)n_groups, groups) < 0 || setresgid(gid, gid, gid) < 0 ||
            setresuid(uid, uid, uid) < 0)
                child_report(sock, errno, -1, "take the caller's ids");
        struct open_how how = {
                .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                /* No other file system on the way: a FUSE (or NFS) mount
                 * below the root could hold the open for as long as its
                 * server likes. */
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        };
        int fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
        if (fd < 0)
                child_report(sock, errno, -1,
                             errno == ELOOP    ? "a symlink on the way (not followed)"
                             : errno == EXDEV  ? "it leaves the allowed root or its file system"
                             : errno == EACCES ? "the caller may not reach it"
                                               : "open it as the caller");
        struct stat st;
        if (fstat(fd, &st) < 0)
                child_report(sock, errno, -1, "stat it");
        if (uid != 0 && st.st_uid != uid)
                child_report(sock, EPERM, -1, "it is not the caller's own directory");
        int mode = R_OK | X_OK | (read_only ? 0 : W_OK);
        if (syscall(SYS_faccessat2, fd, "", mode, AT_EACCESS | AT_EMPTY_PATH) < 0)
                child_report(sock, errno, -1,
                             read_only ? "the caller may not read it" : "the caller may not write it");
        child_report(sock, 0, fd, "");
}

/* The opening child, once killed: reaped now, or by the loop when it ends
 * (one stuck in an uninterruptible wait is never waited for). */
static void on_open_child_exit(struct loop_source *source, uint32_t events)
{
        siginfo_t info = { 0 };
        waitid(P_PIDFD, source->fd, &info, WEXITED | WNOHANG);
        loop_remove(nsboxd.loop, source);
}

static void open_child_end(int pidfd)
{
        siginfo_t info = { 0 };
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        if (waitid(P_PIDFD, pidfd, &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0) {
                close(pidfd);
                return;
        }
        if (nsboxd.loop == NULL || loop_add(nsboxd.loop, pidfd, EPOLLIN, on_open_child_exit, NULL) == NULL) {
                log_warn("host mounts: a child opening a host_path does not end; left to the system");
                close(pidfd);
        }
}

int host_mount_open(uid_t caller, const char *path, bool read_only, nsbox_error_t **err)
{
        char root_path[4096];
        const char *rel;
        if (!find_root(path, root_path, sizeof(root_path), &rel))
                return nsbox_refuse(err, EPERM,
                                    "host_path %s is not below a directory of host_mount_roots (%s)", path,
                                    nsboxd.config.host_mount_roots[0] ? nsboxd.config.host_mount_roots
                                                                      : "none: the operator allows none");
        /* The root is the operator's: opened as nsboxd, symlinks and all. */
        _cleanup_close_ int root = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return nsbox_refuse(err, EPERM, "host_path %s: open the allowed root %s: %s", path, root_path,
                                    strerror(errno));
        gid_t gid = host_mount_caller_gid(caller);
        gid_t groups[HOST_MOUNT_MAX_GROUPS];
        int n_groups = HOST_MOUNT_MAX_GROUPS;
        struct passwd *pw = getpwuid(caller);
        if (pw == NULL || getgrouplist(pw->pw_name, gid, groups, &n_groups) < 0) {
                groups[0] = gid;
                n_groups = 1;
        }
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return nsbox_error(err, errno, "socketpair");
        _cleanup_close_ int parent_end = sv[0];
        _cleanup_close_ int child_end = sv[1];
        int pidfd = -1;
        struct clone_args args = { .flags = CLONE_PIDFD,
                                   .pidfd = (uint64_t)(uintptr_t)&pidfd,
                                   .exit_signal = SIGCHLD };
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        if (pid < 0)
                return nsbox_error(err, errno, "fork to open %s as uid %u", path, (unsigned)caller);
        if (pid == 0)
                open_as_caller(child_end, root, rel, caller, gid, groups, n_groups, read_only);
        close(child_end);
        child_end = -1;
        /* A few syscalls in a child: the loop waits for them as it waits
         * for a clone's first one (sandbox_life.c). */
        struct pollfd pfd = { .fd = parent_end, .events = POLLIN };
        int n;
        do
                n = poll(&pfd, 1, HOST_MOUNT_TIMEOUT_MS);
        while (n < 0 && errno == EINTR);
        struct open_result res = { .errnum = EIO };
        int fd = -1;
        unsigned nfds = 0;
        ssize_t got = n > 0 ? ctl_recv(parent_end, &res, sizeof(res), &fd, 1, &nfds) : -ETIMEDOUT;
        open_child_end(pidfd);
        if (got != (ssize_t)sizeof(res)) {
                if (nfds == 1)
                        close(fd);
                return nsbox_error(err, got < 0 ? (int)-got : EPROTO, "open %s as uid %u", path,
                                   (unsigned)caller);
        }
        res.why[sizeof(res.why) - 1] = '\0';
        if (res.errnum != 0 || nfds != 1) {
                if (nfds == 1)
                        close(fd);
                return nsbox_refuse(err, EPERM, "host_path %s refused: %s (%s)", path, res.why,
                                    strerror(res.errnum ? res.errnum : EPROTO));
        }
        return fd;
}

int host_mount_userns(uid_t disk_uid, gid_t disk_gid, uid_t uid, gid_t gid, nsbox_error_t **err)
{
        int sync_pipe[2];
        if (pipe2(sync_pipe, O_CLOEXEC) < 0)
                return nsbox_error(err, errno, "pipe");
        struct clone_args args = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) {
                char c;
                close(sync_pipe[1]);
                ssize_t ignored = read(sync_pipe[0], &c, 1); /* until the parent is done */
                (void)ignored;
                _exit(0);
        }
        close(sync_pipe[0]);
        if (pid < 0) {
                close(sync_pipe[1]);
                return nsbox_error(err, errno, "clone a user namespace for an idmapped mount");
        }
        char path[64], uid_map[64], gid_map[64];
        snprintf(uid_map, sizeof(uid_map), "%u %u 1\n", (unsigned)disk_uid, (unsigned)uid);
        snprintf(gid_map, sizeof(gid_map), "%u %u 1\n", (unsigned)disk_gid, (unsigned)gid);
        /* setgroups "deny": writing gid_map then needs no CAP_SETGID over
         * the parent namespace (nsboxd in a user namespace may lack it), and
         * nothing ever runs in this namespace to want groups. */
        static const char *const files[] = { "setgroups", "uid_map", "gid_map" };
        const char *const texts[] = { "deny", uid_map, gid_map };
        int r = 0;
        for (size_t i = 0; i < ARRAY_SIZE(files) && r == 0; i++) {
                snprintf(path, sizeof(path), "/proc/%d/%s", pid, files[i]);
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0 || write(fd, texts[i], strlen(texts[i])) < 0)
                        r = nsbox_error(err, errno, "write the %s of an idmapped mount", files[i]);
        }
        if (r == 0) {
                snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
                r = open(path, O_RDONLY | O_CLOEXEC);
                if (r < 0)
                        r = nsbox_error(err, errno, "open %s", path);
        }
        close(sync_pipe[1]);
        waitpid(pid, NULL, 0);
        return r;
}

int host_mount_idmap(int tree, int userns, bool read_only, const char *what, nsbox_error_t **err)
{
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                            (read_only ? MOUNT_ATTR_RDONLY : 0),
                .userns_fd = (uint64_t)userns,
        };
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return nsbox_error(
                    err, errno,
                    "idmap the mount of %s (this kernel or file system has no idmapped mounts, "
                    "or nsboxd runs in a user namespace that may not make them)",
                    what);
        return 0;
}

int host_mount_clone_idmapped(int dir, int userns, bool read_only, nsbox_error_t **err)
{
        _cleanup_close_ int tree =
            (int)syscall(SYS_open_tree, dir, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        if (tree < 0)
                return nsbox_error(err, errno, "clone the mount of a host directory");
        int r = host_mount_idmap(tree, userns, read_only, "a host directory", err);
        if (r < 0)
                return r;
        return steal_fd(&tree);
}
