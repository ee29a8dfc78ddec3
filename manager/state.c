/* SPDX-License-Identifier: Apache-2.0 */
/* Sandbox records under the state dir, and recovery after a crash of nsboxd. */
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"
#include "json_file.h"
#include "daemon.h"
#include "json_cleanup.h"
#include "log.h"
#include "removals.h"
#include "rootfs.h"
#include "sandbox.h"
#include "userns.h"

#define RECORD_NAME  "sandbox.json"
#define KILL_WAIT_MS 5000

static void sandboxes_dir(char *path, size_t size)
{
        snprintf(path, size, "%s/sandboxes", nsboxd.config.state_dir);
}

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks.
 * With the pid it names one process, never a later one that reused it. */
unsigned long long state_process_start_time(pid_t pid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        if (p == NULL)
                return 0;
        unsigned long long start = 0;
        /* after ") " come fields 3..; starttime is field 22 */
        if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                   &start) != 1)
                return 0;
        return start;
}

/* The policy as sandbox.create's params, which policy_from_json reads back
 * at adoption: one parser for what a client and a record say. */
static json_t *policy_params(const struct sandbox_policy *p)
{
        json_t *params = json_pack("{s:s, s:s, s:s, s:o, s:s}", "image", p->image, "seccomp_profile",
                                   p->seccomp_profile, "network", p->network, "limits",
                                   policy_limits_to_json(&p->limits), "idle_action", p->idle_action);
        if (params == NULL)
                return NULL;
        if (p->session_id[0] != '\0')
                json_object_set_new(params, "session_id", json_string(p->session_id));
        if (p->idle_timeout_seconds > 0)
                json_object_set_new(params, "idle_timeout_seconds", json_integer(p->idle_timeout_seconds));
        if (p->paused_timeout_seconds > 0)
                json_object_set_new(params, "paused_timeout_seconds",
                                    json_integer(p->paused_timeout_seconds));
        if (p->network_custom != NULL)
                json_object_set(params, "network", p->network_custom);
        if (p->env != NULL)
                json_object_set(params, "env", p->env);
        if (p->labels != NULL)
                json_object_set(params, "labels", p->labels);
        /* Already mounted in the sandbox: kept so that a volume in use stays so. */
        if (p->mounts != NULL)
                json_object_set(params, "mounts", p->mounts);
        /* Never its secrets' values: its init keeps them (secrets_keep.h). */
        if (p->secrets != NULL)
                json_object_set_new(params, "has_secrets", json_true());
        return params;
}

bool state_process_in_sandbox(pid_t pid, const char *id)
{
        if (cgroup_mode() == CGROUP_NONE)
                return true; /* nothing but its start time to go by */
        char path[64], buf[8192];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        size_t len = strlen(id);
        for (char *p = strstr(buf, id); p != NULL; p = strstr(p + 1, id)) {
                if (p > buf && p[-1] == '/' && (p[len] == '\n' || p[len] == '/' || p[len] == '\0'))
                        return true;
        }
        return false;
}

int state_save(const struct sandbox *sb, nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", sb->dir, RECORD_NAME);
        /* Everything the next nsboxd needs to adopt the sandbox (live
         * restore) is here, and nothing it would have to trust: paths
         * (its dir, its cgroups) follow from the id, never from the record. */
        _cleanup_json_ json_t *record = json_pack(
            "{s:i, s:s, s:I, s:s?, s:I, s:I, s:I, s:I, s:s, s:O?, s:b, s:b, s:s, s:o?}", "version", 1,
            "sandbox_id", sb->id, "owner", (json_int_t)sb->owner, "session_id",
            sb->policy.session_id[0] ? sb->policy.session_id : NULL, "pid", (json_int_t)sb->pid,
            "pid_start_time", (json_int_t)state_process_start_time(sb->pid), "host_uid_base",
            (json_int_t)sb->host_uid_base, "created_at_ms", (json_int_t)sb->created_at_ms, "image",
            sb->policy.image, "mounts", sb->policy.mounts, "live_restore", sb->lease_fd >= 0, "pooled",
            sb->pooled, "snapshot_id", sb->snapshot_id, "policy", policy_params(&sb->policy));
        if (record == NULL)
                return nsbox_error(err, ENOMEM, "sandbox record");
        /* Live restore: a pause carries on (paused_timeout_seconds from its
         * start); the idle timer too, from a record written as nsboxd
         * stopped (after a crash the record's last activity is older than
         * the sandbox's: its idle timer starts over instead). */
        if (sb->paused)
                json_object_set_new(record, "paused_at_ms", json_integer(sb->paused_at_ms));
        if (sb->n_mount_ids > 0) {
                json_t *ids = json_array();
                for (unsigned i = 0; i < sb->n_mount_ids; i++)
                        json_array_append_new(ids, json_integer((json_int_t)sb->mount_ids[i]));
                json_object_set_new(record, "mount_ids", ids);
        }
        if (nsboxd.stopping)
                json_object_set_new(
                    record, "last_active_ms",
                    json_integer(now_realtime_ms() - (now_monotonic_ms() - sb->last_active_mono)));
        /* Not durable: a record only has to outlive a crash of nsboxd, which
         * the page cache does; after a crash of the machine no init is left
         * to find, and a torn record is quarantined at start. Creates do not
         * wait for the disk. */
        return json_file_replace(path, record, JSON_COMPACT, false, err);
}

#define STATE_LOCK_WAIT_MS 3000

int state_lock(nsbox_error_t **err)
{
        static int lock_fd = -1; /* held until the process exits */
        char path[4096];
        if (lock_fd >= 0)
                return 0;
        if (mkdir(nsboxd.config.state_dir, 0711) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", nsboxd.config.state_dir);
        snprintf(path, sizeof(path), "%s/nsboxd.lock", nsboxd.config.state_dir);
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return nsbox_error(err, errno, "open %s", path);
        /* A previous nsboxd killed a moment ago may still have children
         * holding the lock (a sandbox being set up, a worker) until its
         * death reaches them: wait for those a little. */
        long long give_up = now_monotonic_ms() + STATE_LOCK_WAIT_MS;
        int r;
        while ((r = flock(fd, LOCK_EX | LOCK_NB)) < 0 && errno == EWOULDBLOCK && now_monotonic_ms() < give_up)
                usleep(20 * 1000);
        if (r < 0) {
                if (errno != EWOULDBLOCK)
                        return nsbox_error(err, errno, "lock %s", path);
                char pid[32] = "";
                ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
                pid[n > 0 ? n : 0] = '\0';
                pid[strcspn(pid, "\n")] = '\0';
                return nsbox_error(err, EBUSY,
                                   "state dir %s is in use by another nsboxd (pid %s); refusing to start, "
                                   "or its sandboxes would be taken for leftovers and killed",
                                   nsboxd.config.state_dir, pid[0] ? pid : "unknown");
        }
        char text[32];
        int len = snprintf(text, sizeof(text), "%d\n", (int)getpid());
        if (ftruncate(fd, 0) < 0 || pwrite(fd, text, len, 0) != len)
                return nsbox_error(err, errno ? errno : EIO, "write %s", path);
        lock_fd = steal_fd(&fd);
        return 0;
}

/* Kill the init a previous run left (if it is still that process) and wait for it. */
static void kill_leftover_init(pid_t pid, unsigned long long start_time, const char *id)
{
        if (pid <= 1 || start_time == 0 || state_process_start_time(pid) != start_time)
                return;
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0 || state_process_start_time(pid) != start_time)
                return; /* gone, or the pid was reused in between */
        if (!state_process_in_sandbox(pid, id)) {
                log_warn(
                    "sandbox %s: the record names process %d, which is in none of its cgroups: not killed",
                    id, pid);
                return;
        }
        log_warn("sandbox %s: killing init %d left by a previous run", id, pid);
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        if (poll(&p, 1, KILL_WAIT_MS) <= 0)
                log_error("sandbox %s: init %d did not die", id, pid);
}

/* The record alone, where the sandbox's dir cannot be moved (from the
 * runtime tmpfs to the state dir's file system): to/RECORD_NAME. */
static int copy_record(const char *from, const char *to)
{
        _cleanup_close_ int src = open(from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0 || mkdir(to, 0700) < 0)
                return -errno;
        _cleanup_close_ int dst = open(to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dst < 0)
                return -errno;
        return rootfs_copy_file(src, dst, RECORD_NAME);
}

static void quarantine(const char *sandboxes, const char *name)
{
        char from[4096], dir[4096], to[4096];
        snprintf(from, sizeof(from), "%s/%s", sandboxes, name);
        snprintf(dir, sizeof(dir), "%s/quarantine", nsboxd.config.state_dir);
        mkdir(dir, 0700);
        snprintf(to, sizeof(to), "%s/%s.%lld", dir, name, now_realtime_ms());
        rootfs_detach(from);
        int r = rename(from, to) == 0 ? 0 : -errno;
        if (r == -EXDEV) {
                _cleanup_error_ nsbox_error_t *err = NULL;
                if ((r = copy_record(from, to)) < 0)
                        rootfs_remove_dir(to, &err); /* no half copy at each start */
                else if (rootfs_remove_dir(from, &err) < 0)
                        log_error("state: %s", err->message);
        }
        if (r == 0)
                log_warn("state: unreadable sandbox record in %s; moved it to %s", from, to);
        else
                log_error("state: unreadable sandbox record in %s, and moving it failed: %s", from,
                          strerror(-r));
}

json_t *state_record_read(const char *name, const char **why)
{
        char sandboxes[4096], dir[4096], path[4096];
        sandboxes_dir(sandboxes, sizeof(sandboxes));
        snprintf(dir, sizeof(dir), "%s/%s", sandboxes, name);
        snprintf(path, sizeof(path), "%s/%s", dir, RECORD_NAME);
        struct stat st;
        /* A symlink (to a dir elsewhere, to a file of someone else's) is
         * no record of ours: nothing under it is read. */
        if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || lstat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
                *why = "its dir or record is missing, or not a plain dir and file";
                return NULL;
        }
        json_t *record = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
        json_t *id = json_object_get(record, "sandbox_id");
        if (!json_is_object(record) || !json_is_string(id) || strcmp(json_string_value(id), name) != 0) {
                *why = "its record does not name the sandbox of its dir";
                json_decref(record);
                return NULL;
        }
        return record;
}

/* A client's sandbox that recovery removes goes into the record of
 * removals: a call naming it hears that it went with the run that made it,
 * not that it never was. */
static void record_left(json_t *record, const char *name)
{
        json_t *owner = json_object_get(record, "owner"), *session = json_object_get(record, "session_id");
        if (json_is_true(json_object_get(record, "pooled")) || !json_is_integer(owner) ||
            json_integer_value(owner) < 0 || json_integer_value(owner) >= (json_int_t)(uid_t)-1 ||
            strcmp(json_string_value(json_object_get(record, "sandbox_id")), name) != 0)
                return;
        sandbox_removal_record_left(name, (uid_t)json_integer_value(owner),
                                    json_is_string(session) ? json_string_value(session) : "",
                                    "nsboxd stopped without removing it (a crash or a kill, without live "
                                    "restore), and its next start removed it");
}

static void recover_one(const char *sandboxes, const char *name)
{
        char dir[4096], record_path[4096];
        snprintf(dir, sizeof(dir), "%s/%s", sandboxes, name);
        snprintf(record_path, sizeof(record_path), "%s/%s", dir, RECORD_NAME);

        _cleanup_json_ json_t *record = NULL;
        struct stat st;
        if (lstat(record_path, &st) == 0) {
                record = json_load_file(record_path, JSON_REJECT_DUPLICATES, NULL);
                if (!json_is_object(record) || !json_is_string(json_object_get(record, "sandbox_id")) ||
                    !json_is_integer(json_object_get(record, "pid"))) {
                        quarantine(sandboxes, name);
                        return;
                }
                kill_leftover_init(
                    (pid_t)json_integer_value(json_object_get(record, "pid")),
                    (unsigned long long)json_integer_value(json_object_get(record, "pid_start_time")), name);
                record_left(record, name);
        }
        /* No record: the previous run died between mkdir and clone; its child,
         * if any, dies with it (PR_SET_PDEATHSIG) or when the sync socket closes. */
        _cleanup_error_ nsbox_error_t *err = NULL;
        rootfs_detach(dir);
        if (rootfs_remove_dir(dir, &err) < 0) {
                log_error("state: %s", err->message);
                return;
        }
        log_info("sandbox %s: removed, left by a previous run", name);
}

void state_recover(void)
{
        char sandboxes[4096];
        sandboxes_dir(sandboxes, sizeof(sandboxes));
        DIR *d = opendir(sandboxes);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.')
                        continue;
                if (sandbox_lookup(de->d_name, 0) != NULL)
                        continue; /* adopted (live restore) */
                recover_one(sandboxes, de->d_name);
        }
        closedir(d);
}

/* Set when the sandboxes dir is a tmpfs mount of ours (made by this run or
 * left by one that crashed), to unmount at a clean stop. */
static bool runtime_fs_ours;

void state_runtime_fs(void)
{
        char path[4096];
        if (userns_active())
                return;
        sandboxes_dir(path, sizeof(path));
        struct statfs fs;
        struct statx stx;
        if (statfs(path, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
                /* Ours from a run that crashed, or a state dir on a tmpfs. */
                runtime_fs_ours = statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) == 0 &&
                                  (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
                return;
        }
        if (mount("nsbox-sandboxes", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") < 0) {
                log_warn("state: no tmpfs on %s (%s): sandbox records stay on the state dir's file system",
                         path, strerror(errno));
                return;
        }
        runtime_fs_ours = true;
}

void state_runtime_fs_release(void)
{
        char path[4096];
        if (!runtime_fs_ours)
                return;
        sandboxes_dir(path, sizeof(path));
        DIR *d = opendir(path);
        if (d == NULL)
                return;
        struct dirent *de;
        bool empty = true;
        while (empty && (de = readdir(d)) != NULL)
                empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
        closedir(d);
        /* What is left there is for the next start to recover. */
        if (empty && umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
                log_warn("state: unmount %s: %s", path, strerror(errno));
}
