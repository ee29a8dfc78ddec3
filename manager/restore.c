/* SPDX-License-Identifier: Apache-2.0 */
/* Live restore at startup: the sandboxes a previous nsboxd left running with
 * a lease (docs/design/live-restore.md) are checked and adopted. */
#include "restore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"
#include "io.h"
#include "daemon.h"
#include "egress.h"
#include "fs_staging.h"
#include "json_cleanup.h"
#include "log.h"
#include "proto.h"
#include "sandbox_life.h"
#include "secrets.h"
#include "secrets_keep.h"
#include "state.h"

#define KILL_WAIT_MS 5000

/* The record of a sandbox to adopt, or NULL with *why. */
static json_t *adoptable_record(const char *name, const char **why)
{
        *why = NULL;
        if (!nsboxd.config.live_restore) {
                *why = "live_restore is off";
                return NULL;
        }
        _cleanup_json_ json_t *record = state_record_read(name, why);
        if (record == NULL)
                return NULL;
        json_t *pid = json_object_get(record, "pid"), *start = json_object_get(record, "pid_start_time");
        if (!json_is_true(json_object_get(record, "live_restore"))) {
                *why = "it was made without live restore";
                return NULL;
        }
        if (json_is_true(json_object_get(record, "pooled"))) {
                *why = "it was in the warm pool";
                return NULL;
        }
        if (!json_is_integer(pid) || json_integer_value(pid) <= 1 || json_integer_value(pid) > INT32_MAX ||
            !json_is_integer(start) || json_integer_value(start) <= 0) {
                *why = "its record names no init";
                return NULL;
        }
        if (state_process_start_time((pid_t)json_integer_value(pid)) !=
            (unsigned long long)json_integer_value(start)) {
                *why = "its init is gone (or its pid is another process's now)";
                return NULL;
        }
        if (!state_process_in_sandbox((pid_t)json_integer_value(pid), name)) {
                *why = "the process its record names is not in the sandbox's cgroup";
                return NULL;
        }
        return steal_pointer(&record);
}

bool restore_keep(const char *sandbox_id)
{
        const char *why;
        _cleanup_json_ json_t *record = adoptable_record(sandbox_id, &why);
        return record != NULL;
}

static bool get_uint(json_t *record, const char *key, unsigned long long max, unsigned long long *out)
{
        json_t *v = json_object_get(record, key);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (unsigned long long)json_integer_value(v) > max)
                return false;
        *out = (unsigned long long)json_integer_value(v);
        return true;
}

/* What the init said to the previous nsboxd and it never read (a slot that
 * failed) is about execs of that run: none of it is ours. */
static void drain_stale_messages(int ctl)
{
        union ctl_message msg;
        int fds[4];
        unsigned nfds;
        fcntl(ctl, F_SETFL, O_NONBLOCK);
        for (int i = 0; i < 4096; i++) {
                nfds = 0;
                ssize_t n = ctl_recv(ctl, &msg, sizeof(msg), fds, 4, &nfds);
                for (unsigned k = 0; k < nfds; k++)
                        close(fds[k]);
                if (n <= 0)
                        return;
        }
}

/* An init may not have read the lease (or the secrets) nsboxd sent it just
 * before it died: the message waits in its socket, and the fd comes when
 * the init runs. So a kept fd that is not there yet is asked for again, for
 * at most KEPT_WAIT_MS over the whole restore. */
#define KEPT_WAIT_MS 2000

static int take_kept_fd(int pidfd, int target)
{
        static long long deadline;
        if (deadline == 0)
                deadline = now_monotonic_ms() + KEPT_WAIT_MS;
        for (;;) {
                int fd = io_pidfd_take(pidfd, target);
                if (fd >= 0 || errno != EBADF || now_monotonic_ms() >= deadline)
                        return fd;
                struct pollfd none = { .fd = -1 };
                poll(&none, 0, 10);
        }
}

/* The secrets its init keeps (egress_keep_secrets), checked as a create's;
 * the memfd into *fd, for the adopted sandbox to rewrite in place. */
static int take_secrets(int pidfd, int *fd, json_t **secrets, nsbox_error_t **err)
{
        *fd = take_kept_fd(pidfd, NSBOX_INIT_SECRETS_FD);
        if (*fd < 0)
                return nsbox_error(err, errno, "take its kept secrets from its init");
        struct egress_ca ca = { 0 }; /* its network's to take (egress_reattach) */
        int r = secrets_keep_read(*fd, secrets, &ca, err);
        egress_ca_clear(&ca);
        if (r == 0 && json_object_size(*secrets) == 0)
                r = nsbox_error(err, ENOENT, "its secrets were not kept");
        return r;
}

/* Each secret's placeholder is the one its processes have in their env. */
static bool placeholders_in_env(json_t *secrets, json_t *env)
{
        const char *name;
        json_t *secret;
        json_object_foreach(secrets, name, secret)
        {
                char key[sizeof(POLICY_SECRET_ENV_PREFIX) + POLICY_SECRET_NAME_MAX];
                snprintf(key, sizeof(key), "%s%s", POLICY_SECRET_ENV_PREFIX, name);
                if (!json_equal(json_object_get(env, key), json_object_get(secret, "placeholder")))
                        return false;
        }
        return true;
}

/* Adopt sandbox `name`, or say why not (then it is for state_recover). */
static int adopt_one(const char *name, nsbox_error_t **err)
{
        const char *why;
        _cleanup_json_ json_t *record = adoptable_record(name, &why);
        if (record == NULL)
                return nsbox_error(err, ESRCH, "%s", why);
        pid_t pid = (pid_t)json_integer_value(json_object_get(record, "pid"));
        unsigned long long start =
            (unsigned long long)json_integer_value(json_object_get(record, "pid_start_time"));
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
                return nsbox_error(err, errno, "pidfd_open its init %d", pid);
        /* Checked again with the pidfd held: the pid cannot be reused now. */
        if (state_process_start_time(pid) != start || !state_process_in_sandbox(pid, name))
                return nsbox_error(err, ESRCH, "its init %d ended as it was being adopted", pid);

        struct sandbox_adoption a = {
                .id = name, .pid = pid, .pidfd = -1, .ctl_fd = -1, .disk_fd = -1, .secrets_fd = -1
        };
        unsigned long long owner, base, created;
        json_t *snapshot = json_object_get(record, "snapshot_id");
        if (!get_uint(record, "owner", UINT32_MAX - 1, &owner) ||
            !get_uint(record, "host_uid_base", UINT32_MAX, &base) ||
            !get_uint(record, "created_at_ms", INT64_MAX, &created) || !json_is_string(snapshot) ||
            json_string_length(snapshot) >= 37)
                return nsbox_error(err, EINVAL, "its record is not one nsboxd writes");
        a.owner = (uid_t)owner;
        a.host_uid_base = (uid_t)base;
        a.created_at_ms = (long long)created;
        a.snapshot_id = json_string_value(snapshot);
        json_t *active = json_object_get(record, "last_active_ms"),
               *paused = json_object_get(record, "paused_at_ms");
        a.last_active_ms = json_is_integer(active) ? json_integer_value(active) : 0;
        a.paused_at_ms = json_is_integer(paused) ? json_integer_value(paused) : 0;
        /* The mounts fs.* may cross into: ids of mounts its init still holds. */
        uint64_t mount_ids[POLICY_MAX_MOUNTS];
        json_t *ids = json_object_get(record, "mount_ids"), *id;
        size_t k;
        json_array_foreach(ids, k, id)
        {
                if (json_is_integer(id) && json_integer_value(id) > 0 && a.n_mount_ids < POLICY_MAX_MOUNTS)
                        mount_ids[a.n_mount_ids++] = (uint64_t)json_integer_value(id);
        }
        a.mount_ids = mount_ids;
        /* Its secrets' values are never written down: its init keeps them. */
        _cleanup_json_ json_t *params = json_deep_copy(json_object_get(record, "policy"));
        bool has_secrets = json_is_true(json_object_get(params, "has_secrets"));
        json_object_del(params, "has_secrets");
        _cleanup_close_ int kept_secrets = -1;
        _cleanup_json_ json_t *secrets = NULL;
        int r = has_secrets ? take_secrets(pidfd, &kept_secrets, &secrets, err) : 0;
        if (r < 0)
                return r;
        if ((r = policy_from_json(&nsboxd.config.defaults, NULL, params, &a.policy, err)) < 0)
                return r;
        if (secrets != NULL && !placeholders_in_env(secrets, a.policy.env)) {
                policy_clear(&a.policy);
                return nsbox_error(err, EINVAL, "its kept secrets are not the ones its record names");
        }
        a.policy.secrets = json_incref(secrets);

        /* The manager's end of its control socket, which the init kept for us. */
        _cleanup_close_ int ctl = take_kept_fd(pidfd, NSBOX_INIT_KEEP_FD);
        if (ctl < 0) {
                policy_clear(&a.policy);
                return nsbox_error(err, errno, "take its control socket from its init");
        }
        if (!io_socket_is(ctl, AF_UNIX, SOCK_SEQPACKET)) {
                policy_clear(&a.policy);
                return nsbox_error(err, EPROTO, "its init holds no control socket where it should");
        }
        drain_stale_messages(ctl);
        if ((r = cgroup_sandbox_adopt(name, &a.cgroup, err)) < 0) {
                policy_clear(&a.policy);
                return r;
        }
        /* Its writable layer, which the init kept too: snapshots and commits of it. */
        _cleanup_close_ int disk = io_pidfd_take(pidfd, NSBOX_INIT_DISK_FD);
        struct statfs fs;
        if (disk >= 0 && (fstatfs(disk, &fs) < 0 || fs.f_type != TMPFS_MAGIC))
                close(steal_fd(&disk));
        a.pidfd = pidfd;
        a.ctl_fd = ctl;
        a.disk_fd = disk;
        a.secrets_fd = kept_secrets;
        r = sandbox_adopt(&a, err);
        if (a.secrets_fd < 0)
                steal_fd(&kept_secrets);
        if (a.disk_fd < 0)
                steal_fd(&disk);
        if (a.pidfd < 0)
                steal_fd(&pidfd);
        if (a.ctl_fd < 0)
                steal_fd(&ctl);
        return r;
}

/* Not adopted: nothing of it may live on. Its init is killed (if it still is
 * the record's process) and its cgroups removed here; its dir is
 * state_recover's to remove. */
static void abandon(const char *name)
{
        const char *why;
        _cleanup_json_ json_t *record = state_record_read(name, &why);
        json_t *pid = json_object_get(record, "pid"), *start = json_object_get(record, "pid_start_time");
        if (json_is_integer(pid) && json_integer_value(pid) > 1 && json_integer_value(pid) <= INT32_MAX &&
            json_is_integer(start) && state_process_in_sandbox((pid_t)json_integer_value(pid), name)) {
                pid_t p = (pid_t)json_integer_value(pid);
                _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, p, 0);
                if (pidfd >= 0 &&
                    state_process_start_time(p) == (unsigned long long)json_integer_value(start)) {
                        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                        struct pollfd pfd = { .fd = pidfd, .events = POLLIN };
                        poll(&pfd, 1, KILL_WAIT_MS);
                }
        }
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct sandbox_cgroup *cg = NULL;
        if (cgroup_sandbox_adopt(name, &cg, &err) == 0 && cg != NULL) {
                cgroup_sandbox_kill(cg);
                cgroup_sandbox_destroy(cg);
        }
}

void restore_adopt_all(void)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/sandboxes", nsboxd.config.state_dir);
        _cleanup_closedir_ DIR *d = opendir(path);
        if (d == NULL)
                return;
        unsigned adopted = 0, abandoned = 0;
        long long began = now_monotonic_ms();
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_error_ nsbox_error_t *err = NULL;
                const char *why;
                _cleanup_json_ json_t *record = state_record_read(de->d_name, &why);
                if (record == NULL) {
                        if (nsboxd.config.live_restore)
                                log_warn("sandbox %s: not adopted: %s; it is removed", de->d_name, why);
                        continue; /* state_recover's, as without live restore */
                }
                if (!json_is_true(json_object_get(record, "live_restore")))
                        continue;
                bool kept = restore_keep(de->d_name); /* what cgroup_init left alive */
                if (adopt_one(de->d_name, &err) == 0) {
                        adopted++;
                        log_info("sandbox %s: adopted (live restore)", de->d_name);
                        struct sandbox *sb = sandbox_lookup(de->d_name, 0);
                        if (sb != NULL)
                                fs_staging_restore(sb);
                        continue;
                }
                abandoned++;
                log_warn("sandbox %s: not adopted: %s; it is removed", de->d_name, err->message);
                if (kept)
                        abandon(de->d_name);
        }
        if (adopted > 0 || abandoned > 0)
                log_info("live restore: %u sandbox(es) adopted, %u not, in %lld ms", adopted, abandoned,
                         now_monotonic_ms() - began);
}

void restore_networks(void)
{
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->egress != NULL || strcmp(sb->policy.network, "none") == 0 ||
                    sb->state != SANDBOX_RUNNING)
                        continue;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (egress_reattach(sb, &err) == 0) {
                        log_info("sandbox %s: network %s given back (live restore)", sb->id,
                                 sb->policy.network);
                        continue;
                }
                char why[512];
                snprintf(why, sizeof(why), "its network could not be given back after nsboxd's restart: %s",
                         err->message);
                log_warn("sandbox %s: %s", sb->id, why);
                sandbox_remove(sb, why, NULL, NULL);
        }
        egress_reattach_done();
}
