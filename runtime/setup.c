/* SPDX-License-Identifier: Apache-2.0 */
/* The child side of sandbox creation, between clone() and the exec of nsbox-init. */
#include "setup.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "mounts.h"
#include "network.h"
#include "proto.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static __attribute__((noreturn)) void setup_fail(int sync_fd, nsbox_error_t *err)
{
        struct ctl_failed msg = { .hdr = { CTL_FAILED, 0 }, .errnum = err ? err->errnum : EIO };
        snprintf(msg.message, sizeof(msg.message), "%s",
                 err && err->message ? err->message : "sandbox setup");
        ctl_send(sync_fd, &msg, sizeof(msg), NULL, 0, NULL, 0);
        _exit(1);
}

/* The sandbox's mounts, as they came after the go. */
struct setup_mounts {
        int fd[POLICY_MAX_MOUNTS];
        char path[POLICY_MAX_MOUNTS][SETUP_MOUNT_PATH_MAX];
        unsigned n;
};

/* Returns the root's mount (detached) or a negative errno; the mounts
 * that follow it into *mounts. */
static int wait_for_go(int sync_fd, struct setup_mounts *mounts, nsbox_error_t **err)
{
        struct setup_go go;
        unsigned nfds;
        int tree = -1;
        ssize_t n = ctl_recv(sync_fd, &go, sizeof(go), &tree, 1, &nfds);
        if (n < 0)
                return nsbox_error(err, (int)-n, "wait for the manager");
        if (n != sizeof(go) || go.magic != SETUP_GO_MAGIC || nfds != 1 || go.n_mounts > POLICY_MAX_MOUNTS) {
                if (nfds == 1)
                        close(tree);
                return nsbox_error(err, EPROTO, "manager went away during setup");
        }
        for (mounts->n = 0; mounts->n < go.n_mounts; mounts->n++) {
                struct setup_mount m;
                int fd = -1;
                n = ctl_recv(sync_fd, &m, sizeof(m), &fd, 1, &nfds);
                if (n != sizeof(m) || m.magic != SETUP_MOUNT_MAGIC || nfds != 1 ||
                    m.path[sizeof(m.path) - 1] != '\0') {
                        if (n > 0 && nfds == 1)
                                close(fd);
                        close(tree);
                        return nsbox_error(err, EPROTO, "manager went away during setup (mounts)");
                }
                mounts->fd[mounts->n] = fd;
                memcpy(mounts->path[mounts->n], m.path, sizeof(m.path));
        }
        return tree;
}

/* Per-process limits of everything in the sandbox, set on the init and
 * inherited by every exec; no process inside holds CAP_SYS_RESOURCE in the
 * host's namespace to raise them. Most bound a pool that is the host's,
 * counted per uid or globally, whatever the sandbox's cgroups say:
 *  - open files: the host's file table (fs.file-max) is one count; a
 *    sandbox holds at most this times its pids limit;
 *  - core dumps: written by the kernel wherever core_pattern says, outside
 *    the sandbox's disk limit when it names a host helper;
 *  - locked memory (mlock, SHM_LOCK): unevictable pages, which the host's
 *    reclaim cannot touch; the kernel's own default;
 *  - pending signals: queued signals are kernel memory; the host's default
 *    scales with its RAM (tens of thousands);
 *  - POSIX message queues: the kernel's default bytes per uid. */
static const struct {
        int resource;
        rlim_t value;
        const char *name;
} sandbox_rlimits[] = {
        { RLIMIT_NOFILE, SANDBOX_NOFILE, "RLIMIT_NOFILE" }, { RLIMIT_CORE, 0, "RLIMIT_CORE" },
        { RLIMIT_MEMLOCK, 8 << 20, "RLIMIT_MEMLOCK" },      { RLIMIT_SIGPENDING, 4096, "RLIMIT_SIGPENDING" },
        { RLIMIT_MSGQUEUE, 819200, "RLIMIT_MSGQUEUE" },
};

/* Soft and hard limit to `value`, or to the hard limit we have if lower:
 * raising it would take CAP_SYS_RESOURCE in the host's namespace. */
static int lower_rlimit(int resource, rlim_t value)
{
        struct rlimit now;
        if (getrlimit(resource, &now) < 0)
                return -1;
        if (now.rlim_max != RLIM_INFINITY && now.rlim_max < value)
                value = now.rlim_max;
        struct rlimit limit = { value, value };
        return setrlimit(resource, &limit);
}

/* Put `fd` at `target`, without CLOEXEC, whatever number it has now. */
static int place_fd(int fd, int target)
{
        if (fd == target)
                return fcntl(fd, F_SETFD, 0);
        return dup3(fd, target, 0) < 0 ? -1 : 0;
}

static int enter_namespaces(const struct sandbox_setup *setup, int tree, const struct setup_mounts *mounts,
                            nsbox_error_t **err)
{
        /* The cgroup namespace comes now, so its root is the sandbox's cgroup
         * where the manager has already placed us. */
        int flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;
        if (unshare(flags) < 0)
                return nsbox_error(err, errno, "unshare mount, net, uts, ipc and cgroup namespaces");
        /* A time namespace applies to the children of the init, where the
         * kernel has one; older kernels lack it and that is not fatal. */
        if (unshare(CLONE_NEWTIME) < 0 && errno != EINVAL)
                return nsbox_error(err, errno, "unshare time namespace");
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, SETUP_ROOT_AT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return nsbox_error(err, errno, "attach the root at " SETUP_ROOT_AT);
        /* After the attach, so that it covers the root too: no mount made
         * below is a peer of one outside this namespace. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return nsbox_error(err, errno, "make / private");
        if (fchdir(tree) < 0)
                return nsbox_error(err, errno, "chdir into the root");
        close(tree);

        /* uid 0 of the new user namespace, i.e. the unprivileged base of
         * this sandbox's host range; files created from here on are owned
         * by ids that exist in the sandbox. */
        if (setresgid(0, 0, 0) < 0)
                return nsbox_error(err, errno, "setresgid 0 in the user namespace");
        if (setresuid(0, 0, 0) < 0)
                return nsbox_error(err, errno, "setresuid 0 in the user namespace");

        if (sethostname(setup->hostname, strlen(setup->hostname)) < 0)
                return nsbox_error(err, errno, "set hostname");
        int r = network_loopback_up(err);
        if (r < 0)
                return r;
        if ((r = mounts_enter_root(".", setup->shm_bytes, err)) < 0)
                return r;
        /* Inside the root (chrooted): a path in the sandbox resolves to
         * nothing of the host's, whatever the image or a snapshot holds. */
        for (unsigned i = 0; i < mounts->n; i++) {
                if ((r = mounts_attach(mounts->fd[i], mounts->path[i], err)) < 0)
                        return r;
                close(mounts->fd[i]);
        }
        return 0;
}

/* Through the legacy oom_adj file (-17, "disabled", is -1000): a write
 * to oom_score_adj by a holder of CAP_SYS_RESOURCE also sets the floor
 * (oom_score_adj_min) that every process forked after inherits, and each
 * exec's processes, which start from their supervisor's value and are
 * raised to 0 by it (supervisor.c), could then lower themselves back out
 * of the OOM killer's reach. The legacy file leaves the floor as it was. */
int sandbox_setup_protect(pid_t pid, nsbox_error_t **err)
{
        static bool warned;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/oom_adj", pid);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0 && write(fd, "-17", 3) == 3)
                return 0;
        if (fd >= 0 && errno == EACCES) {
                /* A manager without CAP_SYS_RESOURCE (some VMs' and
                 * containers' root): the supervisors stay at the manager's
                 * value, still out of the sandbox's reach; if the OOM killer
                 * takes one, the init ends what it leaves (init.c). */
                if (!warned)
                        log_info(
                            "no CAP_SYS_RESOURCE: exec supervisors are not protected from the OOM killer "
                            "(their exec dies with them anyway)");
                warned = true;
                return 0;
        }
        return nsbox_error(err, errno, "keep the sandbox init out of the OOM killer's choice");
}

void sandbox_setup_child(const struct sandbox_setup *setup)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        int sync_fd = setup->sync_fd;

        /* Die with the manager while still being set up. */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        int tree = -1;
        static struct setup_mounts mounts;
        if ((setup->prepare != NULL && setup->prepare(setup->prepare_ctx, &err) < 0) ||
            (tree = wait_for_go(sync_fd, &mounts, &err)) < 0 ||
            enter_namespaces(setup, tree, &mounts, &err) < 0)
                setup_fail(sync_fd, err);

        /* fds 3 and 4 are the init's contract; move the memfd out of the way first. */
        int init_fd = fcntl(setup->init_memfd, F_DUPFD_CLOEXEC, 10);
        int seccomp_fd = setup->seccomp_fd >= 0 ? fcntl(setup->seccomp_fd, F_DUPFD_CLOEXEC, 10) : -1;
        int ctl_fd = fcntl(sync_fd, F_DUPFD_CLOEXEC, 10);
        if (init_fd < 0 || ctl_fd < 0 || (setup->seccomp_fd >= 0 && seccomp_fd < 0)) {
                nsbox_error(&err, errno, "duplicate init fds");
                setup_fail(sync_fd, err);
        }
        if (place_fd(ctl_fd, NSBOX_INIT_CTL_FD) < 0 ||
            (seccomp_fd >= 0 && place_fd(seccomp_fd, NSBOX_INIT_SECCOMP_FD) < 0)) {
                nsbox_error(&err, errno, "arrange init fds");
                setup_fail(sync_fd, err);
        }
        sync_fd = NSBOX_INIT_CTL_FD;
        int first_other = seccomp_fd >= 0 ? NSBOX_INIT_SECCOMP_FD + 1 : NSBOX_INIT_CTL_FD + 1;
        for (int fd = 0; fd < 3; fd++) {
                int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (devnull >= 0 && devnull != fd) {
                        dup2(devnull, fd);
                        close(devnull);
                } else if (devnull == fd) {
                        fcntl(fd, F_SETFD, 0);
                }
        }
        /* Everything else closes at execve (close_range with CLOEXEC keeps
         * the init memfd usable for the execveat below). */
        if (syscall(SYS_close_range, first_other, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) < 0) {
                nsbox_error(&err, errno, "close_range");
                setup_fail(sync_fd, err);
        }
        /* The manager raised its own fd limit; sandboxes get the usual one.
         * Only now: until the execve this process holds every fd it was
         * cloned with (a manager with hundreds of sandboxes holds more than
         * 1024), and a lower limit would fail every open before this. */
        for (size_t i = 0; i < ARRAY_SIZE(sandbox_rlimits); i++) {
                if (lower_rlimit(sandbox_rlimits[i].resource, sandbox_rlimits[i].value) < 0) {
                        nsbox_error(&err, errno, "set %s", sandbox_rlimits[i].name);
                        setup_fail(sync_fd, err);
                }
        }
        prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);

        char *const argv[] = { "nsbox-init", NULL };
        char *const envp[] = { "PATH=/usr/local/bin:/usr/bin:/bin", NULL };
        syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
        nsbox_error(&err, errno, "exec nsbox-init");
        setup_fail(sync_fd, err);
}
