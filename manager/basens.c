/* SPDX-License-Identifier: Apache-2.0 */
/* The mount namespace every sandbox's is copied from.
 *
 * A sandbox used to copy the host's mount table and then pivot_root out of
 * it. pivot_root walks every task on the host (to move their roots and
 * working directories off the old root), so each create cost more the more
 * sandboxes were live: three tasks each, about 2 ms a create at 1000. The
 * base namespace is made once, at start, and pivot_root runs there once:
 * its root is a small read-only tmpfs holding only
 *   /root   where a sandbox attaches its overlay (a detached mount
 *           nsboxd sends it), then chroots into it: no walk;
 *   /dev/   binds of the host's null, zero, full, random, urandom and tty,
 *           which the sandbox binds into its own /dev;
 *   /proc, /sys  a procfs of a pid namespace with no process and a sysfs
 *           of a network namespace that is gone: the kernel lets a user
 *           namespace mount proc or sysfs only where one is fully visible.
 * Of the host's mounts only the kernel's first one, the initial rootfs under
 * everything, is in a sandbox's namespace (as after any pivot_root), and
 * nothing of this one is reachable from inside the chroot. nsboxd joins it
 * only to clone a sandbox process (basens_enter/basens_leave). */
#include "basens.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "mounts.h"

/* As a sandbox mounts its own procfs and sysfs (runtime/mounts.c): the
 * kernel finds one "fully visible" only if its flags are no looser. */
#define SPECIAL_FS_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

static struct {
        int base; /* the base mount namespace */
        int host; /* nsboxd's own */
        int root; /* nsboxd's root and working directory, restored after a visit */
        int cwd;
} ns = { -1, -1, -1, -1 };

/* What the helper reports: 0, or an errno and the step that failed. */
struct build_result {
        int errnum;
        char step[64];
};

static int failed(struct build_result *res, const char *step)
{
        res->errnum = errno;
        snprintf(res->step, sizeof(res->step), "%s", step);
        return -1;
}

/* procfs shows the pid namespace of its mounter: pid 1 of the new one,
 * which then ends and leaves it with no process. */
static int mount_empty_proc(const char *path, struct build_result *res)
{
        pid_t pid = fork();
        if (pid < 0)
                return failed(res, "fork pid 1 of the pid namespace");
        if (pid == 0)
                _exit(mount("proc", path, "proc", SPECIAL_FS_FLAGS, NULL) < 0 ? errno : 0);
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return failed(res, "wait for pid 1 of the pid namespace");
        errno = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
        return errno == 0 ? 0 : failed(res, "mount procfs");
}

/* In the helper, in a fresh mount, pid and network namespace: lay out the
 * tmpfs on `at` and make it the root. */
static int build(const char *at, struct build_result *res)
{
        char path[4096];
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return failed(res, "make / private");
        if (mount("nsbox-base", at, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=16k,nr_inodes=32") < 0)
                return failed(res, "mount the tmpfs");
        static const char *const dirs[] = { "root", "proc", "sys", "dev" };
        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                snprintf(path, sizeof(path), "%s/%s", at, dirs[i]);
                if (mkdir(path, 0755) < 0)
                        return failed(res, "mkdir");
        }
        for (size_t i = 0; i < MOUNTS_DEVICE_NODES; i++) {
                char host[64];
                snprintf(host, sizeof(host), "/dev/%s", mounts_device_nodes[i]);
                snprintf(path, sizeof(path), "%s/dev/%s", at, mounts_device_nodes[i]);
                _cleanup_close_ int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
                if (fd < 0 || mount(host, path, NULL, MS_BIND, NULL) < 0)
                        return failed(res, "bind a device node");
        }
        /* Where the kernel refuses it (a container whose /sys is masked),
         * sandboxes cannot mount theirs either and go without /sys, as
         * runtime/mounts.c allows. */
        snprintf(path, sizeof(path), "%s/sys", at);
        mount("sysfs", path, "sysfs", MS_RDONLY | SPECIAL_FS_FLAGS, NULL);
        snprintf(path, sizeof(path), "%s/proc", at);
        if (mount_empty_proc(path, res) < 0)
                return -1;
        if (mount(NULL, at, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "mode=0755") < 0)
                return failed(res, "make the tmpfs read-only");
        if (chdir(at) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
            chdir("/") < 0)
                return failed(res, "pivot_root into the tmpfs");
        return 0;
}

int basens_init(const char *at, nsbox_error_t **err)
{
        int ready[2];
        if (pipe2(ready, O_CLOEXEC) < 0)
                return nsbox_error(err, errno, "pipe");
        pid_t pid = fork();
        if (pid < 0) {
                int saved = errno;
                close(ready[0]);
                close(ready[1]);
                return nsbox_error(err, saved, "fork");
        }
        if (pid == 0) {
                close(ready[0]);
                prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                struct build_result res = { 0 };
                if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET) < 0)
                        failed(&res, "unshare mount, pid and network namespaces");
                else
                        build(at, &res);
                if (write(ready[1], &res, sizeof(res)) != sizeof(res))
                        _exit(1);
                /* Until nsboxd has opened the namespace and kills us. */
                for (;;)
                        pause();
        }
        close(ready[1]);
        struct build_result res = { .errnum = EPIPE };
        ssize_t n;
        while ((n = read(ready[0], &res, sizeof(res))) < 0 && errno == EINTR)
                ;
        int r = 0;
        if (n != sizeof(res))
                r = nsbox_error(err, EPIPE, "make the base mount namespace: its helper died");
        else if (res.errnum != 0)
                r = nsbox_error(err, res.errnum, "make the base mount namespace: %.64s", res.step);
        if (r == 0) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
                ns.base = open(path, O_RDONLY | O_CLOEXEC);
                ns.host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
                ns.root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                ns.cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (ns.base < 0 || ns.host < 0 || ns.root < 0 || ns.cwd < 0)
                        r = nsbox_error(err, errno, "open the mount namespaces");
        }
        /* Once now, so that what every create needs fails here if at all. */
        if (r == 0 && (unshare(CLONE_FS) < 0 || setns(ns.base, CLONE_NEWNS) < 0))
                r = nsbox_error(
                    err, errno,
                    "join the base mount namespace (nsboxd needs CAP_SYS_ADMIN and CAP_SYS_CHROOT in "
                    "its user namespace)");
        else if (r == 0)
                basens_leave();
        close(ready[0]);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        return r;
}

int basens_enter(nsbox_error_t **err)
{
        /* A mount namespace is joined by a task whose root and working
         * directory are its own: threads share them with nsboxd's. */
        if (unshare(CLONE_FS) < 0 || setns(ns.base, CLONE_NEWNS) < 0)
                return nsbox_error(err, errno, "join the base mount namespace");
        return 0;
}

void basens_leave(void)
{
        if (setns(ns.host, CLONE_NEWNS) < 0 || fchdir(ns.root) < 0 || chroot(".") < 0 || fchdir(ns.cwd) < 0) {
                /* nsboxd would make every later sandbox, and resolve every
                 * host path, in the wrong place. */
                log_error("back to nsboxd's own mount namespace: %s", strerror(errno));
                abort();
        }
}
