/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox lifecycle: create (clone, id maps, overlay, handshake with
 * the init), the warm pool, remove, and the end of a sandbox. */
#include "sandbox_life.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "basens.h"
#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "egress.h"
#include "events.h"
#include "exec.h"
#include "fs_watch.h"
#include "log.h"
#include "profiles.h"
#include "removals.h"
#include "size.h"
#include "proto.h"
#include "host_mounts.h"
#include "images.h"
#include "rootfs.h"
#include "sandbox_pause.h"
#include "sandbox_uids.h"
#include "snapshot.h"
#include "setup.h"
#include "state.h"
#include "uidmode.h"
#include "userns.h"
#include "volumes.h"

/* The memory cgroup limits of every live sandbox, pooled ones included
 * (processes and the files held in RAM, cgroup_memory_max): what the host
 * has promised, bounded by memory_commit_bytes. */
static uint64_t memory_committed;

uint64_t sandbox_memory_committed(void)
{
        return memory_committed;
}

static bool commit_fits(uint64_t memory_bytes)
{
        uint64_t limit = nsboxd.config.memory_commit_bytes;
        return memory_committed <= limit && memory_bytes <= limit - memory_committed;
}

/* Each sandbox holds a few fds in nsboxd (pidfd, control socket, uid range
 * lock, the next exec's slot socket and pipes, its cgroup's OOM counter)
 * and so does each client: with the usual soft limit of 1024 creates would
 * start failing at about 150 sandboxes. */
#define FDS_PER_SANDBOX 9
#define FDS_BESIDES     256

void sandbox_ensure_fd_limit(void)
{
        rlim_t need = (rlim_t)nsboxd.config.max_sandboxes * FDS_PER_SANDBOX + nsboxd.config.max_connections +
                      nsboxd.config.warm_pool * FDS_PER_SANDBOX + FDS_BESIDES;
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) < 0 || nofile.rlim_cur >= need)
                return;
        struct rlimit raised = { .rlim_cur = need,
                                 .rlim_max = nofile.rlim_max > need ? nofile.rlim_max : need };
        if (setrlimit(RLIMIT_NOFILE, &raised) < 0)
                log_warn(
                    "RLIMIT_NOFILE is %llu, below the %llu fds that max_sandboxes %u and max_connections %u "
                    "may need, and cannot be raised: %s",
                    (unsigned long long)nofile.rlim_cur, (unsigned long long)need,
                    nsboxd.config.max_sandboxes, nsboxd.config.max_connections, strerror(errno));
}

void sandbox_warn_overcommit(void)
{
        uint64_t memory = cgroup_memory_max(&nsboxd.config.defaults.limits);
        uint64_t limit = nsboxd.config.memory_commit_bytes;
        uint64_t fit = memory > 0 ? limit / memory : 0;
        if (memory > 0 && fit < (uint64_t)nsboxd.config.max_sandboxes + nsboxd.config.warm_pool)
                log_warn(
                    "max_sandboxes %u (+ warm_pool %u) x the default sandbox's RAM %llu bytes (memory_bytes "
                    "+ disk_bytes + /dev/shm) is more than memory_commit_bytes %llu: %llu sandboxes with the "
                    "default limits fit, later creates get limit_reached",
                    nsboxd.config.max_sandboxes, nsboxd.config.warm_pool, (unsigned long long)memory,
                    (unsigned long long)limit, (unsigned long long)fit);
}

/* A sandbox's setup child shares nsboxd's fd table (CLONE_FILES) and its
 * first act is to take a copy of only the fds below child_fds_end
 * (close_range with CLOSE_RANGE_UNSHARE): copying the whole table, 5 fds
 * per live sandbox, then closing them all at the execve of the init made
 * every create slower the more sandboxes were live. The fds the child needs
 * are lent to it in these low slots, reserved at startup (on /dev/null,
 * the filler put back once the child has its own table). */
enum {
        CHILD_SLOT_SYNC,
        CHILD_SLOT_INIT,
        CHILD_SLOT_SECCOMP,
        CHILD_SLOT_CGROUP, /* cgroup v1: its cgroup.procs files, CGROUP_MAX_HIERARCHIES of them */
        CHILD_SLOTS = CHILD_SLOT_CGROUP + CGROUP_MAX_HIERARCHIES
};
static int child_slots[CHILD_SLOTS] = { [0 ... CHILD_SLOTS - 1] = -1 };
static int child_slot_filler = -1;
static unsigned child_fds_end;

/* The child says it has unshared within microseconds; this bounds a child
 * that never runs (the event loop waits for it). */
#define CHILD_UNSHARE_TIMEOUT_MS 2000

static int reserve_child_fd_slots(nsbox_error_t **err)
{
        for (size_t i = 0; i < CHILD_SLOTS; i++) {
                child_slots[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (child_slots[i] < 0)
                        return nsbox_error(err, errno, "reserve an fd slot for sandbox setup");
                if ((unsigned)child_slots[i] >= child_fds_end)
                        child_fds_end = (unsigned)child_slots[i] + 1;
        }
        child_slot_filler = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (child_slot_filler < 0)
                return nsbox_error(err, errno, "reserve an fd slot for sandbox setup");
        return 0;
}

/* dup3 replaces a slot atomically: at no time is it free for another open. */
static int lend_child_fd(unsigned slot, int fd)
{
        if (fd < 0) {
                errno = EBADF;
                return -1;
        }
        return dup3(fd, child_slots[slot], O_CLOEXEC) < 0 ? -1 : 0;
}

static void take_back_child_fds(void)
{
        for (size_t i = 0; i < CHILD_SLOTS; i++)
                dup3(child_slot_filler, child_slots[i], O_CLOEXEC);
}

int sandbox_life_init(nsbox_error_t **err)
{
        char path[4096];
        if (sandbox_uids_init() < 0)
                return nsbox_error(err, ENOMEM, "uid pool");
        if (mkdir(nsboxd.config.state_dir, 0711) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", nsboxd.config.state_dir);
        snprintf(path, sizeof(path), "%s/sandboxes", nsboxd.config.state_dir);
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", path);
        sandbox_ensure_fd_limit();
        sandbox_warn_overcommit();
        int r = snapshots_init(err);
        if (r < 0)
                return r;
        return reserve_child_fd_slots(err);
}

static int write_file(const char *path, const char *text)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = strlen(text);
        if (write(fd, text, len) != (ssize_t)len)
                return -errno;
        return 0;
}

static int write_id_maps(pid_t pid, uid_t base, nsbox_error_t **err)
{
        char path[64], map[64];
        int r;
        snprintf(map, sizeof(map), "0 %u %u\n", base, NSBOX_UID_RANGE);
        snprintf(path, sizeof(path), "/proc/%d/setgroups", pid);
        if ((r = write_file(path, "deny")) < 0)
                return nsbox_error(err, -r, "write %s", path);
        snprintf(path, sizeof(path), "/proc/%d/uid_map", pid);
        if ((r = write_file(path, userns_active() ? userns_sandbox_map(false) : map)) < 0)
                return nsbox_error(err, -r, "write %s", path);
        snprintf(path, sizeof(path), "/proc/%d/gid_map", pid);
        if ((r = write_file(path, userns_active() ? userns_sandbox_map(true) : map)) < 0)
                return nsbox_error(err, -r, "write %s", path);
        return 0;
}

static sandbox_hook_fn ready_hook;

void sandbox_on_ready(sandbox_hook_fn hook)
{
        ready_hook = hook;
}

/* A sandbox runs and is a client's: features that start work ahead (the
 * Python fork server) hear of it through the hook set at start. */
static void sandbox_ready_hook_run(struct sandbox *sb)
{
        if (ready_hook != NULL)
                ready_hook(sb);
}

static void sandbox_free(struct sandbox *sb)
{
        for (struct sandbox **p = &nsboxd.sandboxes; *p != NULL; p = &(*p)->next) {
                if (*p == sb) {
                        *p = sb->next;
                        if (sb->pooled)
                                nsboxd.n_pooled--;
                        else if (!sb->released)
                                nsboxd.n_sandboxes--;
                        memory_committed -= sb->committed;
                        break;
                }
        }
        sandbox_uids_put(sb);
        if (sb->lease_fd >= 0)
                close(sb->lease_fd);
        if (sb->disk_fd >= 0)
                close(sb->disk_fd);
        if (sb->secrets_fd >= 0)
                close(sb->secrets_fd);
        if (sb->snapshot_id[0] != '\0')
                snapshot_release(sb->snapshot_id);
        policy_clear(&sb->policy);
        exec_sandbox_free(sb->exec);
        free(sb->dir);
        free(sb->failure);
        free(sb->end_reason);
        free(sb);
}

static void pool_fill_soon(void);

/* Why a sandbox nobody asked to remove ended: its init's end, as waitid
 * tells it. A SIGKILL while the sandbox counts OOM kills names the OOM
 * killer as the likely cause (the kernel does not say whom it killed). */
static char *unasked_end_reason(struct sandbox *sb, const siginfo_t *info)
{
        char *why = NULL;
        uint64_t ooms = sb->cgroup != NULL ? cgroup_sandbox_oom_kills(sb->cgroup) : 0;
        if (info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED) {
                if (info->si_status == SIGKILL && ooms > 0)
                        asprintf(&why,
                                 "its init was killed by signal %d (%s), likely by the OOM killer (%llu OOM "
                                 "kills in the sandbox)",
                                 info->si_status, strsignal(info->si_status), (unsigned long long)ooms);
                else
                        asprintf(&why, "its init was killed by signal %d (%s) from outside the sandbox",
                                 info->si_status, strsignal(info->si_status));
        } else if (info->si_code == CLD_EXITED) {
                asprintf(&why, "its init exited with status %d", info->si_status);
        } else {
                why = strdup("its init ended");
        }
        return why;
}

/* Into the record of removals, once: as its removal starts (a session's
 * next call, made while it is still stopping, hears that it went), or as it
 * ends when nobody asked. Before its execs end, with their ids. */
static void record_removal(struct sandbox *sb)
{
        if (sb->removal_recorded || sb->pooled)
                return;
        sb->removal_recorded = true;
        struct sandbox_removal *r =
            sandbox_removal_record(sb, "%s", sb->end_reason ? sb->end_reason : "its init ended");
        exec_sandbox_record_ids(sb, r);
}

/* From now on the sandbox is removed as its clients see it: out of
 * lookups and lists, no longer counted against max_sandboxes, its owner's
 * share or the memory commit, its removal recorded and announced. A
 * remove answers here: what follows (the kernel ending every process and
 * namespace of the sandbox, then sandbox_finalize releasing its cgroups,
 * mounts and uid range) was most of a remove's time, and nothing a next
 * create, list or count needs. It still logs what fails. */
static void sandbox_release(struct sandbox *sb)
{
        if (sb->released || sb->pooled)
                return;
        sb->released = true;
        nsboxd.n_sandboxes--;
        memory_committed -= sb->committed;
        sb->committed = 0;
        record_removal(sb);
        events_emit(sb, "sandbox.removed", sb->end_reason ? sb->end_reason : "its init ended", NULL);
}

/* The init is gone (or never started): release everything and answer. */
static void sandbox_finalize(struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool failed_create = sb->state == SANDBOX_CREATING;
        bool unasked = sb->state == SANDBOX_RUNNING; /* no remove, no stop: it died */

        sb->state = SANDBOX_EXITED;
        if (sb->paused || sb->pause_timer != NULL) {
                cgroup_sandbox_thaw(sb->cgroup);
                sb->paused = false;
                sandbox_pause_end(sb, "the sandbox is gone", "unavailable");
        }
        if (sb->ctl) {
                loop_remove(nsboxd.loop, sb->ctl);
                sb->ctl = NULL;
        }
        if (sb->pidfd) {
                siginfo_t info = { 0 };
                waitid(P_PIDFD, sb->pidfd->fd, &info, WEXITED | WNOHANG);
                /* Nobody asked for its end (an OOM kill, a kill from the host,
                 * a crash): the operator hears why. */
                if (unasked && sb->end_reason == NULL)
                        sb->end_reason = unasked_end_reason(sb, &info);
                loop_remove(nsboxd.loop, sb->pidfd);
                sb->pidfd = NULL;
        }
        if (!failed_create)
                record_removal(sb);
        exec_sandbox_gone(sb);
        fs_watch_sandbox_gone(sb);
        egress_detach(sb, false);
        if (sb->cgroup != NULL) {
                cgroup_sandbox_destroy(sb->cgroup);
                sb->cgroup = NULL;
        }
        if (sb->dir != NULL) {
                rootfs_detach(sb->dir);
                if (rootfs_remove_dir(sb->dir, &err) < 0)
                        log_error("sandbox %s: %s", sb->id, err->message);
        }
        if (failed_create) {
                /* Stopping the daemon mid-create is no failure worth a warning. */
                log_write(nsboxd.stopping ? LOG_LEVEL_INFO : LOG_LEVEL_WARN, "sandbox %s: create failed: %s",
                          sb->id, sb->failure ? sb->failure : "init exited");
                sandbox_waiters_run(&sb->create_waiters, NULL,
                                    sb->failure ? sb->failure : "sandbox init exited during setup");
        } else if (unasked) {
                log_warn("sandbox %s: removed: %s", sb->id,
                         sb->end_reason ? sb->end_reason : "its init ended");
        } else {
                log_limited(log_key_uid(sb->owner).text, LOG_LEVEL_INFO, "sandbox %s: removed: %s", sb->id,
                            sb->end_reason ? sb->end_reason : "no reason given");
        }
        if (!failed_create)
                sandbox_release(sb);
        sandbox_waiters_run(&sb->remove_waiters, sb, NULL);
        sandbox_free(sb);
        pool_fill_soon();
}

static void sandbox_kill(struct sandbox *sb)
{
        if (sb->cgroup != NULL)
                cgroup_sandbox_kill(sb->cgroup);
        if (sb->pidfd != NULL)
                syscall(SYS_pidfd_send_signal, sb->pidfd->fd, SIGKILL, NULL, 0);
        /* Thawed after the kill: a frozen task keeps its SIGKILL pending on
         * cgroup v1, and wakes to die without running a single instruction
         * of its own. */
        if (sb->paused || sb->pause_timer != NULL) {
                cgroup_sandbox_thaw(sb->cgroup);
                sb->paused = false;
                sandbox_pause_end(sb, "the sandbox is being removed", "unavailable");
        }
}

static void sandbox_set_failure(struct sandbox *sb, const char *message)
{
        if (sb->failure == NULL)
                sb->failure = strdup(message);
}

static void on_pidfd(struct loop_source *source, uint32_t events)
{
        sandbox_finalize(source->data);
}

/* Live restore: a new lease for the init (see runtime/proto.h CTL_LEASE),
 * and with it a copy of our end of the control socket to keep. From now
 * on our end never hangs up, and the init outlives us by the grace. */
static int sandbox_lease(struct sandbox *sb, nsbox_error_t **err)
{
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return nsbox_error(err, errno, "socketpair for the lease");
        _cleanup_close_ int init_end = sv[1];
        struct ctl_lease msg = { .hdr = { CTL_LEASE, 0 },
                                 .grace_seconds = nsboxd.config.live_restore_grace_seconds };
        int fds[3] = { init_end, sb->ctl->fd, sb->disk_fd };
        ssize_t n = ctl_send(sb->ctl->fd, &msg, sizeof(msg), NULL, 0, fds, sb->disk_fd >= 0 ? 3 : 2);
        if (n < 0) {
                close(sv[0]);
                return nsbox_error(err, (int)-n, "send the init its lease");
        }
        if (sb->lease_fd >= 0)
                close(sb->lease_fd);
        sb->lease_fd = sv[0];
        return 0;
}

/* A sandbox that runs: with live restore it gets its lease, and its record
 * says so (which is what lets the next nsboxd adopt it). */
static void sandbox_lease_and_save(struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!nsboxd.config.live_restore)
                return;
        if (sandbox_lease(sb, &err) < 0 || state_save(sb, &err) < 0)
                log_warn("sandbox %s: it will not outlive nsboxd: %s", sb->id, err->message);
        else
                egress_keep_secrets(sb);
}

static void on_control(struct loop_source *source, uint32_t events)
{
        struct sandbox *sb = source->data;
        union ctl_message msg;
        unsigned nfds;

        for (;;) {
                ssize_t n = ctl_recv(source->fd, &msg, sizeof(msg), NULL, 0, &nfds);
                if (n == -EAGAIN)
                        return;
                if (n <= 0) {
                        /* The init closed its end: it is dying. The pidfd tells when it is gone. */
                        loop_remove(nsboxd.loop, sb->ctl);
                        sb->ctl = NULL;
                        sandbox_kill(sb);
                        return;
                }
                if ((size_t)n < sizeof(struct ctl_header))
                        continue;
                if (sb->state == SANDBOX_CREATING) {
                        if (msg.hdr.type == CTL_READY) {
                                _cleanup_error_ nsbox_error_t *net_err = NULL;
                                if (egress_attach(sb, &sb->policy, &net_err) < 0) {
                                        sandbox_set_failure(sb, net_err->message);
                                        sandbox_kill(sb);
                                        continue;
                                }
                                sb->state = SANDBOX_RUNNING;
                                egress_install_ca(sb);
                                sandbox_touch(sb);
                                sandbox_lease_and_save(sb);
                                log_limited(log_key_uid(sb->owner).text, LOG_LEVEL_INFO,
                                            "sandbox %s: created for uid %u (%s uids %u-%u%s)", sb->id,
                                            sb->owner, userns_active() ? "user namespace" : "host",
                                            sb->host_uid_base, sb->host_uid_base + NSBOX_UID_RANGE - 1,
                                            cgroup_degraded() ? "; limits-not-enforced" : "");
                                if (!sb->pooled)
                                        events_emit(sb, "sandbox.created", NULL, NULL);
                                sandbox_waiters_run(&sb->create_waiters, sb, NULL);
                                _cleanup_error_ nsbox_error_t *err = NULL;
                                if (exec_prepare_slot(sb, &err) < 0)
                                        log_debug("sandbox %s: no slot ahead: %s", sb->id, err->message);
                                sandbox_ready_hook_run(sb);
                        } else if (msg.hdr.type == CTL_FAILED && (size_t)n >= sizeof(struct ctl_failed)) {
                                msg.failed.message[sizeof(msg.failed.message) - 1] = '\0';
                                sandbox_set_failure(sb, msg.failed.message);
                                sandbox_kill(sb);
                        }
                        continue;
                }
                exec_on_control(sb, &msg, n);
        }
}

/* In the child, before its namespaces: join the sandbox's cgroups through
 * the cgroup.procs files lent to it ("0" is the writer itself). Done here,
 * the wait of a cgroup v1 move is the child's, not the event loop's. */
static int join_cgroups(void *ctx, nsbox_error_t **err)
{
        size_t n = *(size_t *)ctx;
        return cgroup_procs_join(child_slots + CHILD_SLOT_CGROUP, n, err);
}

/* A kernel that refuses CLONE_FILES here: the child copies the table, as
 * fork does. */
static bool clone_files_refused;

/* fork()-like: the child continues here, sharing nsboxd's fd table until
 * child_own_fd_table. nsboxd's only other thread parses large requests
 * (rpc.c) and touches nothing the child uses. */
static pid_t clone_sandbox_process(int *pidfd, int cgroup_fd, nsbox_error_t **err)
{
        /* Born in the base mount namespace (basens.c): its own is a copy of
         * that, not of the host's. */
        if (basens_enter(err) < 0)
                return -1;
        struct clone_args args = {
                .flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_PIDFD,
                .pidfd = (uint64_t)(uintptr_t)pidfd,
                .exit_signal = SIGCHLD,
        };
        if (!clone_files_refused)
                args.flags |= CLONE_FILES;
        if (cgroup_fd >= 0) {
                /* Born inside its cgroup: not a single allocation escapes the limits. */
                args.flags |= CLONE_INTO_CGROUP;
                args.cgroup = (uint64_t)cgroup_fd;
        }
        bool refused_now = false;
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        if (pid < 0 && errno == EINVAL && (args.flags & CLONE_FILES)) {
                args.flags &= ~(uint64_t)CLONE_FILES;
                pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
                refused_now = pid > 0;
        }
        if (pid == 0)
                return 0;
        int saved = errno;
        basens_leave();
        if (pid < 0) {
                nsbox_error(err, saved, "clone into new user and pid namespaces");
                return -1;
        }
        if (refused_now) {
                clone_files_refused = true;
                log_warn("clone3 refuses CLONE_FILES: every create copies nsboxd's fd table");
        }
        return pid;
}

/* In the child, first thing: a table of its own holding only the fds below
 * the slots' end (the lent ones, stdio and nsboxd's first few, all CLOEXEC
 * as before). A kernel without CLOSE_RANGE_UNSHARE (before 5.9) copies the
 * whole table. Then it tells the manager, which may change the table again. */
static void child_own_fd_table(void)
{
        struct setup_unshared done = { .magic = SETUP_UNSHARED_MAGIC };
        if (syscall(SYS_close_range, child_fds_end, ~0U, CLOSE_RANGE_UNSHARE) < 0 && unshare(CLONE_FILES) < 0)
                done.errnum = errno;
        if (send(child_slots[CHILD_SLOT_SYNC], &done, sizeof(done), MSG_NOSIGNAL) != sizeof(done) ||
            done.errnum != 0)
                _exit(1);
}

/* Blocks the loop for as long as a clone child takes to run its first
 * syscall; the pidfd ends the wait for one that dies before. */
static int wait_child_unshared(int parent_end, int pidfd, nsbox_error_t **err)
{
        struct pollfd fds[] = { { .fd = parent_end, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
        int n;
        do
                n = poll(fds, ARRAY_SIZE(fds), CHILD_UNSHARE_TIMEOUT_MS);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return nsbox_error(err, errno, "wait for the sandbox process to start");
        if (n == 0)
                return nsbox_error(err, ETIMEDOUT, "the sandbox process did not start within %d ms",
                                   CHILD_UNSHARE_TIMEOUT_MS);
        struct setup_unshared done;
        ssize_t got = recv(parent_end, &done, sizeof(done), MSG_DONTWAIT);
        if (got != (ssize_t)sizeof(done) || done.magic != SETUP_UNSHARED_MAGIC)
                return nsbox_error(err, ECHILD, "the sandbox process died as it started");
        if (done.errnum != 0)
                return nsbox_error(err, done.errnum, "give the sandbox process its own fd table");
        return 0;
}

struct layers {
        char *path[ROOTFS_MAX_LAYERS];
        size_t n;
};

static void layers_free(struct layers *l)
{
        for (size_t i = 0; i < l->n; i++)
                free(l->path[i]);
}

struct mount_trees {
        int fd[POLICY_MAX_MOUNTS];
        size_t n;
};

static void mount_trees_close(struct mount_trees *t)
{
        for (size_t i = 0; i < t->n; i++)
                close(t->fd[i]);
}

/* The sandbox's mounts as detached mounts, idmapped for it: a volume
 * through the sandbox's own user namespace, a host directory (opened as
 * its owner, host_mounts.c) through one that makes the owner's files the
 * sandbox user's. */
static int sandbox_mount_trees(struct sandbox *sb, pid_t pid, struct mount_trees *out, nsbox_error_t **err)
{
        if (sb->policy.mounts == NULL)
                return 0;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
        _cleanup_close_ int userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0)
                return nsbox_error(err, errno, "open %s", path);
        _cleanup_close_ int host_userns = -1;
        size_t i;
        json_t *m;
        json_array_foreach(sb->policy.mounts, i, m)
        {
                const char *volume = json_string_value(json_object_get(m, "volume"));
                const char *host = json_string_value(json_object_get(m, "host_path"));
                bool ro = json_is_true(json_object_get(m, "read_only"));
                int tree;
                if (volume != NULL) {
                        tree = volume_mount_tree(sb->owner, volume, userns, ro, err);
                } else {
                        _cleanup_close_ int dir = host_mount_open(sb->owner, host, ro, err);
                        if (dir < 0)
                                return dir;
                        uid_t user = sb->host_uid_base + VOLUME_SANDBOX_USER;
                        if (host_userns < 0 &&
                            (host_userns = host_mount_userns(sb->owner, host_mount_caller_gid(sb->owner),
                                                             user, user, err)) < 0)
                                return host_userns;
                        tree = host_mount_clone_idmapped(dir, host_userns, ro, err);
                }
                if (tree < 0)
                        return tree;
                out->fd[out->n++] = tree;
                /* move_mount attaches this very mount: its id stays. */
                struct statx stx;
                if (statx(tree, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) == 0 && (stx.stx_mask & STATX_MNT_ID))
                        sb->mount_ids[sb->n_mount_ids++] = stx.stx_mnt_id;
        }
        return 0;
}

static int send_mounts(int sock, struct sandbox *sb, const struct mount_trees *trees, nsbox_error_t **err)
{
        for (size_t i = 0; i < trees->n; i++) {
                struct setup_mount m = { .magic = SETUP_MOUNT_MAGIC };
                snprintf(m.path, sizeof(m.path), "%s",
                         json_string_value(json_object_get(json_array_get(sb->policy.mounts, i), "path")));
                ssize_t n = ctl_send(sock, &m, sizeof(m), NULL, 0, &trees->fd[i], 1);
                if (n < 0)
                        return nsbox_error(err, (int)-n, "send the sandbox setup its mounts");
        }
        return 0;
}

static int sandbox_spawn(struct sandbox *sb, nsbox_error_t **err)
{
        char path[4096];
        int r;

        if (!image_exists(sb->policy.image))
                return nsbox_error(err, ENOENT, "image \"%s\" not found in %s (build it with make image)",
                                   sb->policy.image, nsboxd.config.image_dir);
        /* Top first: the snapshot it is forked from, then the image's layers. */
        _cleanup_(layers_free) struct layers layers = { 0 };
        if (sb->snapshot_id[0] != '\0') {
                char layer[4096];
                snapshot_layer_path(sb->snapshot_id, layer, sizeof(layer));
                if ((layers.path[layers.n++] = strdup(layer)) == NULL)
                        return nsbox_error(err, ENOMEM, "layers");
        }
        size_t n_image;
        r = image_layers(sb->policy.image, layers.path + layers.n, ROOTFS_MAX_LAYERS - layers.n, &n_image,
                         err);
        layers.n += n_image;
        if (r < 0)
                return r;
        int seccomp_fd = profiles_get(sb->policy.seccomp_profile, err);
        if (seccomp_fd < 0)
                return seccomp_fd;

        if (asprintf(&sb->dir, "%s/sandboxes/%s", nsboxd.config.state_dir, sb->id) < 0) {
                sb->dir = NULL;
                return nsbox_error(err, ENOMEM, "sandbox dir");
        }
        if (mkdir(sb->dir, 0700) < 0)
                return nsbox_error(err, errno, "mkdir %s", sb->dir);
        if ((r = rootfs_prepare_upper(sb->dir, sb->policy.limits.disk_bytes, nsboxd.config.disk_inodes,
                                      sb->host_uid_base, err)) < 0)
                return r;
        snprintf(path, sizeof(path), "%s/disk", sb->dir);
        sb->disk_fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sb->disk_fd < 0)
                return nsbox_error(err, errno, "open %s", path);

        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return nsbox_error(err, errno, "socketpair");
        _cleanup_close_ int parent_end = sv[0];
        _cleanup_close_ int child_end = sv[1];

        _cleanup_close_ int cgroup_fd = -1;
        if ((r = cgroup_sandbox_create(sb->id, &sb->policy.limits, &sb->cgroup, &cgroup_fd, err)) < 0)
                return r;
        int procs[CGROUP_MAX_HIERARCHIES];
        size_t n_procs = 0;
        if ((r = cgroup_sandbox_procs_open(sb->cgroup, procs, &n_procs, err)) < 0)
                return r;
        bool lent = lend_child_fd(CHILD_SLOT_SYNC, child_end) == 0 &&
                    lend_child_fd(CHILD_SLOT_INIT, nsboxd.init_memfd) == 0 &&
                    (seccomp_fd < 0 || lend_child_fd(CHILD_SLOT_SECCOMP, seccomp_fd) == 0);
        for (size_t i = 0; i < n_procs; i++) {
                lent = lent && lend_child_fd(CHILD_SLOT_CGROUP + i, procs[i]) == 0;
                close(procs[i]);
        }
        if (!lent) {
                r = nsbox_error(err, errno, "lend the sandbox setup its fds");
                take_back_child_fds();
                return r;
        }
        int pidfd = -1;
        pid_t pid = clone_sandbox_process(&pidfd, cgroup_fd, err);
        if (pid < 0) {
                take_back_child_fds();
                return -(*err)->errnum;
        }
        if (pid == 0) {
                child_own_fd_table();
                close(parent_end);
                struct sandbox_setup setup = {
                        .sync_fd = child_slots[CHILD_SLOT_SYNC],
                        .init_memfd = child_slots[CHILD_SLOT_INIT],
                        .seccomp_fd = seccomp_fd >= 0 ? child_slots[CHILD_SLOT_SECCOMP] : -1,
                        .hostname = "sandbox",
                        .shm_bytes = sandbox_shm_bytes(sb->policy.limits.disk_bytes),
                        .prepare = join_cgroups,
                        .prepare_ctx = &n_procs,
                };
                sandbox_setup_child(&setup);
        }
        r = wait_child_unshared(parent_end, pidfd, err);
        /* A failed child is killed before the slots change: it never returns
         * to user space, so it cannot pick up what they hold next (another
         * sandbox's fds). */
        if (r < 0)
                syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        take_back_child_fds();
        if (r < 0) {
                waitpid(pid, NULL, 0);
                close(pidfd);
                return r;
        }
        sb->pid = pid;
        sb->pidfd = loop_add(nsboxd.loop, pidfd, EPOLLIN, on_pidfd, sb);
        if (sb->pidfd == NULL) {
                syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                waitpid(pid, NULL, 0);
                close(pidfd);
                return nsbox_error(err, errno, "watch the sandbox init");
        }
        /* From here on a failure kills the child; on_pidfd cleans up. The
         * record lets a restart after a crash find and kill this init. */
        if ((r = state_save(sb, err)) < 0)
                return r;
        if ((r = write_id_maps(pid, sb->host_uid_base, err)) < 0 || (r = sandbox_setup_protect(pid, err)) < 0)
                return r;
        /* The overlay goes to the child detached: its mount namespace never
         * had the host's paths, and the host's never had the overlay. */
        _cleanup_close_ int tree = rootfs_mount_overlay(sb->dir, (const char *const *)layers.path, layers.n,
                                                        pid, !uidmode_shared(), err);
        if (tree < 0)
                return tree;
        _cleanup_(mount_trees_close) struct mount_trees trees = { .n = 0 };
        if ((r = sandbox_mount_trees(sb, pid, &trees, err)) < 0)
                return r;

        fcntl(parent_end, F_SETFL, O_NONBLOCK);
        /* One exec request (argv + env, up to 1 MiB) is one packet. */
        int sndbuf = 4 << 20;
        if (setsockopt(parent_end, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
                setsockopt(parent_end, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)); /* see exec.c */
        struct setup_go go = { .magic = SETUP_GO_MAGIC, .n_mounts = (uint32_t)trees.n };
        ssize_t n = ctl_send(parent_end, &go, sizeof(go), NULL, 0, &tree, 1);
        if (n < 0)
                return nsbox_error(err, (int)-n, "start the sandbox setup");
        if ((r = send_mounts(parent_end, sb, &trees, err)) < 0)
                return r;
        sb->ctl = loop_add(nsboxd.loop, parent_end, EPOLLIN, on_control, sb);
        if (sb->ctl == NULL)
                return nsbox_error(err, errno, "watch the sandbox control socket");
        steal_fd(&parent_end);
        return 0;
}

static int sandbox_new(uid_t owner, struct sandbox_policy *policy, bool pooled, const char *snapshot_id,
                       sandbox_ready_cb done, void *data, struct sandbox **out, nsbox_error_t **err)
{
        uint64_t asked = cgroup_memory_max(&policy->limits);
        if (!commit_fits(asked)) {
                char held[SIZE_FORMAT_MAX], limit[SIZE_FORMAT_MAX], want[SIZE_FORMAT_MAX];
                size_format(asked, want, sizeof(want));
                policy_clear(policy);
                return nsbox_refuse(
                    err, EUSERS,
                    "memory commit limit reached: live sandboxes hold %s of the %s of RAM the host "
                    "may promise (memory_commit_bytes); this one asks %s (its memory, and its disk and "
                    "/dev/shm, which are in RAM: remove a sandbox, or ask for less: nsbox create "
                    "--memory, --disk)",
                    size_format(memory_committed, held, sizeof(held)),
                    size_format(nsboxd.config.memory_commit_bytes, limit, sizeof(limit)), want);
        }
        struct sandbox *sb = calloc(1, sizeof(*sb));
        if (sb != NULL && (sb->exec = exec_sandbox_new()) == NULL) {
                free(sb);
                sb = NULL;
        }
        if (sb == NULL) {
                policy_clear(policy);
                return nsbox_error(err, ENOMEM, "allocate sandbox");
        }
        sb->policy = *policy;
        memset(policy, 0, sizeof(*policy));
        sb->owner = owner;
        sb->pooled = pooled;
        sb->state = SANDBOX_CREATING;
        sb->uid_slot = UINT32_MAX;
        sb->disk_fd = -1;
        sb->secrets_fd = -1;
        sb->lease_fd = -1;
        if (snapshot_id != NULL) {
                snprintf(sb->snapshot_id, sizeof(sb->snapshot_id), "%s", snapshot_id);
                snapshot_hold(sb->snapshot_id);
        }
        sb->created_at_ms = now_realtime_ms();
        sandbox_touch(sb);
        uuid_t uuid;
        uuid_generate_random(uuid);
        uuid_unparse_lower(uuid, sb->id);

        sb->next = nsboxd.sandboxes;
        nsboxd.sandboxes = sb;
        sb->committed = cgroup_memory_max(&sb->policy.limits);
        memory_committed += sb->committed;
        if (pooled)
                nsboxd.n_pooled++;
        else
                nsboxd.n_sandboxes++;

        int r = sandbox_uids_take(sb);
        if (r < 0) {
                sandbox_free(sb);
                if (r == -ENOSPC)
                        return nsbox_error(err, EUSERS, "the uid pool is exhausted (%u ranges)",
                                           nsboxd.config.uid_pool_ranges);
                return nsbox_error(err, -r, "lock a uid range under " UID_LOCK_DIR);
        }
        r = sandbox_spawn(sb, err);
        if (r < 0) {
                /* The caller hears the error from our return, not from a waiter. */
                sandbox_set_failure(sb, (*err)->message);
                if (sb->pidfd != NULL) {
                        /* A child exists: kill it, wait for it, then tear down. */
                        sandbox_kill(sb);
                        siginfo_t info;
                        waitid(P_PIDFD, sb->pidfd->fd, &info, WEXITED);
                }
                sandbox_finalize(sb);
                return r;
        }
        if (done != NULL)
                sandbox_waiter_add(&sb->create_waiters, done, data);
        if (out != NULL)
                *out = sb;
        return 0;
}

/* A pooled sandbox is interchangeable with a fresh one only for the policy
 * it was made with: same image, profile and limits (the limits are already
 * in its cgroup and its disk tmpfs). Network is added from outside once it
 * runs (egress.c), so a pooled sandbox serves any network policy. */
static bool pool_matches(const struct sandbox *sb, const struct sandbox_policy *p)
{
        const struct sandbox_limits *a = &sb->policy.limits, *b = &p->limits;
        return strcmp(sb->policy.image, p->image) == 0 &&
               strcmp(sb->policy.seccomp_profile, p->seccomp_profile) == 0 &&
               a->memory_bytes == b->memory_bytes && a->pids == b->pids && a->cpus == b->cpus &&
               a->disk_bytes == b->disk_bytes;
}

/* A pooled sandbox that runs, or else one still starting: it is ready
 * sooner than a fresh one would be. */
static struct sandbox *pool_find(const struct sandbox_policy *policy)
{
        struct sandbox *starting = NULL;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (!sb->pooled || !pool_matches(sb, policy))
                        continue;
                if (sb->state == SANDBOX_RUNNING)
                        return sb;
                if (sb->state == SANDBOX_CREATING && sb->failure == NULL)
                        starting = sb;
        }
        return starting;
}

static struct sandbox *pool_claim(uid_t owner, struct sandbox_policy *policy)
{
        struct sandbox *sb = pool_find(policy);
        if (sb == NULL)
                return NULL;
        /* One still starting gets its network when it is ready. */
        _cleanup_error_ nsbox_error_t *net_err = NULL;
        if (sb->state == SANDBOX_RUNNING && egress_attach(sb, policy, &net_err) < 0) {
                log_warn("sandbox %s: warm pool: %s", sb->id, net_err->message);
                return NULL;
        }
        sb->pooled = false;
        nsboxd.n_pooled--;
        nsboxd.n_sandboxes++;
        sb->owner = owner;
        /* What is not in the kernel yet (env, labels, session, idle timeout) is the client's. */
        policy_clear(&sb->policy);
        sb->policy = *policy;
        memset(policy, 0, sizeof(*policy));
        sb->created_at_ms = now_realtime_ms();
        sandbox_touch(sb);
        if (sb->state == SANDBOX_RUNNING) {
                /* A pooled one still starting: both when it is ready. */
                events_emit(sb, "sandbox.created", NULL, json_pack("{s:b}", "warm_pool", 1));
                sandbox_ready_hook_run(sb);
        }
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (state_save(sb, &err) < 0)
                log_warn("sandbox %s: %s", sb->id, err->message);
        egress_keep_secrets(sb); /* leased as it was pooled: its secrets are the client's */
        log_limited(log_key_uid(owner).text, LOG_LEVEL_INFO,
                    "sandbox %s: handed from the warm pool to uid %u", sb->id, owner);
        return sb;
}

/* Without this a pool that cannot be filled (no image, say) would retry
 * as fast as its timer goes. */
#define POOL_RETRY_MS 5000
static long long pool_retry_at; /* monotonic ms */

static void pool_ready(struct sandbox *sb, const char *error, void *data)
{
        if (error != NULL && !nsboxd.stopping) {
                log_warn("warm pool: a sandbox failed to start: %s", error);
                pool_retry_at = now_monotonic_ms() + POOL_RETRY_MS;
        }
}

static struct loop_timer *pool_timer;
static long long pool_short_since; /* monotonic ms, 0 when the pool is full */

/* A refill is a whole sandbox creation: a clone, mounts, and on cgroup v1
 * moves into cgroups that wait for an RCU grace period while they hold the
 * host's cgroup mutex (so every cgroup mkdir and rmdir, ours included, waits
 * too). On a small machine it would share a CPU with the very requests the
 * pool is there to speed up: refill once clients have been quiet for a
 * moment, or after a second of steady traffic at the latest. */
#define POOL_QUIET_MS    5
#define POOL_MAX_WAIT_MS 1000

static void on_pool_timer(struct loop *loop, struct loop_timer *timer, void *data);

/* False when there is no timer: out of memory. */
static bool pool_arm(long long delay_ms)
{
        if (pool_timer != NULL)
                loop_timer_move_in(nsboxd.loop, pool_timer, delay_ms);
        else
                pool_timer = loop_timer_add_in(nsboxd.loop, delay_ms, on_pool_timer, NULL);
        return pool_timer != NULL;
}

static void on_pool_timer(struct loop *loop, struct loop_timer *timer, void *data)
{
        pool_timer = NULL; /* a one-shot timer, gone once this returns */
        long long now = now_monotonic_ms();
        long long quiet_at = nsboxd.last_request_mono + POOL_QUIET_MS;
        if (now < pool_retry_at) {
                pool_arm(pool_retry_at - now);
                return;
        }
        if (now < quiet_at && now - pool_short_since < POOL_MAX_WAIT_MS) {
                pool_arm(quiet_at - now);
                return;
        }
        sandbox_pool_fill();
}

static void pool_fill_soon(void)
{
        if (nsboxd.n_pooled >= nsboxd.config.warm_pool || nsboxd.stopping)
                return;
        if (!pool_arm(POOL_QUIET_MS)) {
                sandbox_pool_fill();
                return;
        }
        if (pool_short_since == 0)
                pool_short_since = now_monotonic_ms();
}

void sandbox_pool_fill(void)
{
        static bool filling; /* a failed create finalizes, which calls us again */
        if (filling || nsboxd.stopping)
                return;
        filling = true;
        while (nsboxd.n_pooled < nsboxd.config.warm_pool) {
                /* Clients' sandboxes come first; the pool fills again as
                 * they are removed (sandbox_finalize calls back here). */
                if (!commit_fits(cgroup_memory_max(&nsboxd.config.defaults.limits)))
                        break;
                _cleanup_error_ nsbox_error_t *err = NULL;
                struct sandbox_policy policy = nsboxd.config.defaults;
                policy.env = policy.labels = NULL;
                policy.session_id[0] = '\0';
                if (sandbox_new(0, &policy, true, NULL, pool_ready, NULL, NULL, &err) < 0) {
                        log_warn("warm pool: %s", err->message);
                        pool_retry_at = now_monotonic_ms() + POOL_RETRY_MS;
                        break;
                }
        }
        filling = false;
        if (nsboxd.n_pooled >= nsboxd.config.warm_pool)
                pool_short_since = 0;
}

/* A client's sandbox comes before the warm pool: pooled sandboxes give their
 * share of the memory commit back, and go, until `want` fits. The search
 * starts over after each removal, which may free a sandbox at once. */
static void pool_give_way(uint64_t want)
{
        while (!commit_fits(want)) {
                struct sandbox *sb = nsboxd.sandboxes;
                while (sb != NULL && !(sb->pooled && sb->committed > 0))
                        sb = sb->next;
                if (sb == NULL)
                        return;
                memory_committed -= sb->committed;
                sb->committed = 0;
                sandbox_remove(sb, "a pooled sandbox gave its memory commit to a client's", NULL, NULL);
        }
}

/* Sandboxes given to `owner`, those being created included. */
static unsigned count_owned(uid_t owner)
{
        unsigned n = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                n += !sb->pooled && !sb->released && sb->owner == owner;
        return n;
}

int sandbox_create(uid_t owner, struct sandbox_policy *policy, sandbox_ready_cb done, void *data,
                   struct sandbox **out, nsbox_error_t **err)
{
        return sandbox_create_from(owner, policy, NULL, done, data, out, err);
}

int sandbox_create_from(uid_t owner, struct sandbox_policy *policy, const char *snapshot_id,
                        sandbox_ready_cb done, void *data, struct sandbox **out, nsbox_error_t **err)
{
        if (nsboxd.n_sandboxes >= nsboxd.config.max_sandboxes) {
                policy_clear(policy);
                return nsbox_error(err, EUSERS, "at most %u sandboxes may exist (max_sandboxes)",
                                   nsboxd.config.max_sandboxes);
        }
        /* Root is the operator: its sandboxes count towards max_sandboxes only. */
        if (owner != 0 && count_owned(owner) >= nsboxd.config.max_sandboxes_per_uid) {
                policy_clear(policy);
                return nsbox_error(err, EUSERS,
                                   "uid %u has %u sandboxes, the most one user may have "
                                   "(max_sandboxes_per_uid)",
                                   (unsigned)owner, nsboxd.config.max_sandboxes_per_uid);
        }
        /* A pooled sandbox's overlay has no snapshot layer, nor mounts. */
        struct sandbox *sb = snapshot_id == NULL && policy->mounts == NULL ? pool_claim(owner, policy) : NULL;
        if (sb != NULL) {
                *out = sb;
                if (sb->state == SANDBOX_RUNNING)
                        done(sb, NULL, data);
                else
                        sandbox_waiter_add(&sb->create_waiters, done, data);
                /* Refill after this batch of events: the client's answer first. */
                pool_fill_soon();
                return 0;
        }
        pool_give_way(cgroup_memory_max(&policy->limits));
        return sandbox_new(owner, policy, false, snapshot_id, done, data, out, err);
}

static void pause_again(struct sandbox *sb, const char *error, void *data)
{
        long long *since = data;
        if (error == NULL && sb != NULL) {
                sb->paused_at_ms = *since;
                sb->paused_mono = now_monotonic_ms() - (now_realtime_ms() - *since);
        }
        free(since);
}

int sandbox_adopt(struct sandbox_adoption *a, nsbox_error_t **err)
{
        int r;
        struct sandbox *sb = calloc(1, sizeof(*sb));
        if (sb != NULL && (sb->exec = exec_sandbox_new()) == NULL) {
                free(sb);
                sb = NULL;
        }
        if (sb == NULL) {
                r = nsbox_error(err, ENOMEM, "allocate sandbox");
                goto fail_early;
        }
        snprintf(sb->id, sizeof(sb->id), "%s", a->id);
        sb->policy = a->policy;
        memset(&a->policy, 0, sizeof(a->policy));
        sb->owner = a->owner;
        sb->state = SANDBOX_RUNNING;
        sb->uid_slot = UINT32_MAX;
        sb->disk_fd = a->disk_fd; /* kept by its init: its disk is mounted in its own namespace only */
        a->disk_fd = -1;
        sb->secrets_fd = a->secrets_fd;
        a->secrets_fd = -1;
        sb->lease_fd = -1;
        sb->pid = a->pid;
        sb->created_at_ms = a->created_at_ms;
        sb->cgroup = a->cgroup;
        a->cgroup = NULL;
        for (unsigned i = 0; i < a->n_mount_ids && i < POLICY_MAX_MOUNTS; i++)
                sb->mount_ids[sb->n_mount_ids++] = a->mount_ids[i];
        sandbox_touch(sb);
        sb->next = nsboxd.sandboxes;
        nsboxd.sandboxes = sb;
        nsboxd.n_sandboxes++;
        sb->committed = cgroup_memory_max(&sb->policy.limits);
        memory_committed += sb->committed; /* already promised: over the limit or not */
        if (a->snapshot_id[0] != '\0') {
                snprintf(sb->snapshot_id, sizeof(sb->snapshot_id), "%s", a->snapshot_id);
                snapshot_hold(sb->snapshot_id);
        }
        if ((r = sandbox_uids_adopt(sb, a->host_uid_base)) < 0) {
                r = nsbox_error(err, -r, "take its uid range %u back", a->host_uid_base);
                goto fail;
        }
        if (asprintf(&sb->dir, "%s/sandboxes/%s", nsboxd.config.state_dir, sb->id) < 0) {
                sb->dir = NULL;
                r = nsbox_error(err, ENOMEM, "sandbox dir");
                goto fail;
        }
        fcntl(a->ctl_fd, F_SETFL, O_NONBLOCK);
        sb->pidfd = loop_add(nsboxd.loop, a->pidfd, EPOLLIN, on_pidfd, sb);
        if (sb->pidfd == NULL) {
                r = nsbox_error(err, errno, "watch the sandbox init");
                goto fail;
        }
        a->pidfd = -1;
        sb->ctl = loop_add(nsboxd.loop, a->ctl_fd, EPOLLIN, on_control, sb);
        if (sb->ctl == NULL) {
                r = nsbox_error(err, errno, "watch the sandbox control socket");
                goto fail;
        }
        a->ctl_fd = -1;
        if ((r = sandbox_lease(sb, err)) < 0 || (r = state_save(sb, err)) < 0)
                goto fail;
        exec_sandbox_adopt(sb);
        _cleanup_error_ nsbox_error_t *slot_err = NULL;
        if (exec_prepare_slot(sb, &slot_err) < 0)
                log_debug("sandbox %s: no slot ahead: %s", sb->id, slot_err->message);
        sandbox_ready_hook_run(sb);
        long long now_real = now_realtime_ms(), now_mono = now_monotonic_ms();
        if (a->last_active_ms > 0 && a->last_active_ms <= now_real) {
                sb->last_used_ms = a->last_active_ms;
                sb->last_active_mono = now_mono - (now_real - a->last_active_ms);
        }
        /* Thawed to be taken over (its init answers): paused again, its
         * paused_timeout_seconds counted from its first pause. */
        if (a->paused_at_ms > 0 && a->paused_at_ms <= now_real) {
                _cleanup_error_ nsbox_error_t *pause_err = NULL;
                long long *since = malloc(sizeof(*since));
                if (since != NULL)
                        *since = a->paused_at_ms;
                if (since == NULL || sandbox_pause(sb, pause_again, since, &pause_err) < 0) {
                        free(since);
                        log_warn("sandbox %s: not paused again after the restart: %s", sb->id,
                                 pause_err ? pause_err->message : "out of memory");
                }
        }
        return 0;
fail:
        /* Killed, and its dir left for state_recover: nothing of it is ours. */
        if (sb->cgroup != NULL) {
                cgroup_sandbox_kill(sb->cgroup);
                cgroup_sandbox_destroy(sb->cgroup);
                sb->cgroup = NULL;
        }
        if (sb->pidfd != NULL) {
                syscall(SYS_pidfd_send_signal, sb->pidfd->fd, SIGKILL, NULL, 0);
                loop_remove(nsboxd.loop, sb->pidfd);
        }
        if (sb->ctl != NULL)
                loop_remove(nsboxd.loop, sb->ctl);
        sandbox_free(sb);
        return r;
fail_early:
        policy_clear(&a->policy);
        return r;
}

void sandbox_when_ready(struct sandbox *sb, sandbox_ready_cb done, void *data)
{
        sandbox_waiter_add(&sb->create_waiters, done, data);
}

/* Whether nothing of the sandbox that outlives sandbox_release could make a
 * next call fail: a volume's loop device or a host directory still
 * mounted (volume.remove would find it busy), the snapshot it was made
 * from (snapshot.remove), a committed image under its root (image.remove),
 * its network (egress: its address, its exposed ports). A sandbox with any
 * of them is released once it has ended. */
static bool sandbox_ends_unseen(const struct sandbox *sb)
{
        return sb->policy.mounts == NULL && sb->snapshot_id[0] == '\0' && sb->egress == NULL &&
               !image_committed(sb->policy.image);
}

void sandbox_remove(struct sandbox *sb, const char *why, sandbox_ready_cb done, void *data)
{
        if (sb->end_reason == NULL && why != NULL)
                sb->end_reason = strdup(why);
        if (sb->state == SANDBOX_RUNNING && !sb->pooled && sandbox_ends_unseen(sb)) {
                sb->state = SANDBOX_STOPPING;
                sandbox_release(sb);
                sandbox_kill(sb);
                if (done != NULL)
                        done(sb, NULL, data);
                return;
        }
        if (done != NULL)
                sandbox_waiter_add(&sb->remove_waiters, done, data);
        if (sb->state == SANDBOX_CREATING) {
                char failure[256];
                snprintf(failure, sizeof(failure), "sandbox removed while being created (%s)",
                         why != NULL ? why : "no reason given");
                sandbox_set_failure(sb, failure);
        }
        if (sb->state == SANDBOX_RUNNING)
                record_removal(sb);
        if (sb->state != SANDBOX_EXITED)
                sb->state = sb->state == SANDBOX_CREATING ? SANDBOX_CREATING : SANDBOX_STOPPING;
        sandbox_kill(sb);
}
