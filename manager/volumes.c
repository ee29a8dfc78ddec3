/* SPDX-License-Identifier: Apache-2.0 */
/* Named volumes: create, list, remove, and the loop-mounted ext4 a sandbox gets of one. */
#include "volumes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_ops.h"
#include "host_mounts.h"
#include "json_cleanup.h"
#include "json_file.h"
#include "log.h"
#include "policy.h"
#include "rootfs.h"
#include "size.h"
#include "userns.h"

#define VOLUME_RECORD "volume.json"
#define VOLUME_IMAGE  "image"

extern char **environ;

static void volume_dir(uid_t owner, const char *name, char *out, size_t size)
{
        if (name != NULL)
                snprintf(out, size, "%s/volumes/%u/%s", nsboxd.config.state_dir, (unsigned)owner, name);
        else
                snprintf(out, size, "%s/volumes/%u", nsboxd.config.state_dir, (unsigned)owner);
}

static json_t *volume_record(uid_t owner, const char *name)
{
        char path[4096];
        volume_dir(owner, name, path, sizeof(path));
        strncat(path, "/" VOLUME_RECORD, sizeof(path) - strlen(path) - 1);
        json_t *record = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(record)) {
                json_decref(record);
                return NULL;
        }
        return record;
}

bool volume_exists(uid_t owner, const char *name)
{
        if (!policy_valid_name(name))
                return false;
        _cleanup_json_ json_t *record = volume_record(owner, name);
        return record != NULL;
}

/* Live sandboxes of owner's whose mounts name the volume. */
static unsigned volume_users(uid_t owner, const char *name)
{
        unsigned n = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->pooled || sb->owner != owner || sb->policy.mounts == NULL)
                        continue;
                size_t i;
                json_t *m;
                json_array_foreach(sb->policy.mounts, i, m)
                {
                        const char *v = json_string_value(json_object_get(m, "volume"));
                        if (v != NULL && strcmp(v, name) == 0) {
                                n++;
                                break;
                        }
                }
        }
        return n;
}

/* The loop device already backed by the image (a sandbox uses it: the
 * same block device, so the same ext4 superblock), opened, or -ENOENT. */
static int loop_find(const struct stat *image, char *dev, size_t size)
{
        _cleanup_(closedirp) DIR *d = opendir("/sys/block");
        if (d == NULL)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (strncmp(de->d_name, "loop", 4) != 0)
                        continue;
                snprintf(dev, size, "/dev/%s", de->d_name);
                int fd = open(dev, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        continue;
                struct loop_info64 info;
                if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_device == image->st_dev &&
                    info.lo_inode == image->st_ino)
                        return fd;
                close(fd);
        }
        return -ENOENT;
}

/* A free loop device over the image, gone with its last user (autoclear). */
static int loop_attach(int image, char *dev, size_t size, nsbox_error_t **err)
{
        _cleanup_close_ int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (control < 0)
                return nsbox_error(err, errno, "open /dev/loop-control (volumes need loop devices)");
        for (int tries = 0; tries < 8; tries++) {
                int n = ioctl(control, LOOP_CTL_GET_FREE);
                if (n < 0)
                        return nsbox_error(err, errno, "find a free loop device");
                snprintf(dev, size, "/dev/loop%d", n);
                int fd = open(dev, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        return nsbox_error(err, errno, "open %s", dev);
                struct loop_config config = { .fd = (uint32_t)image };
                config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                if (ioctl(fd, LOOP_CONFIGURE, &config) == 0)
                        return fd;
                int saved = errno;
                close(fd);
                if (saved != EBUSY) /* taken by someone else meanwhile: another */
                        return nsbox_error(err, saved, "attach a volume image to %s", dev);
        }
        return nsbox_error(err, EBUSY, "attach a volume image to a loop device");
}

static int mount_ext4(const char *dev, nsbox_error_t **err)
{
        _cleanup_close_ int fs = (int)syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
        if (fs < 0)
                return nsbox_error(err, errno, "fsopen ext4");
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return -errno; /* the caller says what failed */
        int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mnt < 0)
                return nsbox_error(err, errno, "fsmount a volume");
        return mnt;
}

/* The ext4 of the owner's volume, whose record the caller has read,
 * mounted detached (not idmapped: on-disk ids as they are), or a negative
 * errno. */
static int volume_mount_raw(uid_t owner, const char *name, nsbox_error_t **err)
{
        char path[4096], dev[64];
        volume_dir(owner, name, path, sizeof(path));
        strncat(path, "/" VOLUME_IMAGE, sizeof(path) - strlen(path) - 1);
        _cleanup_close_ int image = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (image < 0 || fstat(image, &st) < 0)
                return nsbox_error(err, errno, "open the image of volume %s", name);
        /* The loop device found may lose its last user (autoclear) before
         * the mount: then attach another. */
        int mnt = -EIO;
        for (int tries = 0; tries < 3 && mnt < 0; tries++) {
                int loop = loop_find(&st, dev, sizeof(dev));
                if (loop < 0 && (loop = loop_attach(image, dev, sizeof(dev), err)) < 0)
                        return loop;
                mnt = mount_ext4(dev, err);
                close(loop); /* the mount holds the device now */
                if (mnt < 0 && *err != NULL)
                        return mnt;
        }
        if (mnt < 0)
                return nsbox_error(err, -mnt, "mount volume %s", name);
        return mnt;
}

int volume_mount_tree(uid_t owner, const char *name, int userns, bool read_only, nsbox_error_t **err)
{
        if (!volume_exists(owner, name))
                return nsbox_refuse(err, ENOENT, "no volume \"%s\" (nsbox volume ls lists yours)", name);
        int mnt = volume_mount_raw(owner, name, err);
        if (mnt < 0)
                return mnt;
        _cleanup_close_ int tree = mnt;
        char what[128];
        snprintf(what, sizeof(what), "volume %s", name);
        int r = host_mount_idmap(tree, userns, read_only, what, err);
        if (r < 0)
                return r;
        return steal_fd(&tree);
}

int volume_fs_open(uid_t owner, const char *name, struct fs_ctx *ctx, nsbox_error_t **err)
{
        ctx->root = -1;
        if (userns_active())
                return nsbox_refuse(err, ENOTSUP, "%s", VOLUMES_USERNS_REFUSAL);
        if (!policy_valid_name(name))
                return nsbox_refuse(err, ENOENT, "no volume \"%.64s\"", name);
        _cleanup_json_ json_t *record = volume_record(owner, name);
        if (record == NULL)
                return nsbox_refuse(err, ENOENT, "no volume \"%s\" (nsbox volume ls lists yours)", name);
        json_int_t size = json_integer_value(json_object_get(record, "size_bytes"));
        int mnt = volume_mount_raw(owner, name, err);
        if (mnt < 0)
                return mnt;
        return fs_ctx_open_volume(mnt, name, size > 0 ? (unsigned long long)size : 0, ctx, err);
}

/* A volume being made: mkfs.ext4 runs beside the loop, whose pidfd says
 * when it is done; then the record is written and the client answered. */
struct volume_making {
        struct volume_making *next;
        struct rpc_request *req;
        uid_t owner;
        char name[POLICY_MAX_VOLUME_NAME + 1];
        uint64_t size;
        pid_t pid;
};
static struct volume_making *making;

static struct volume_making *making_find(uid_t owner, const char *name)
{
        for (struct volume_making *m = making; m != NULL; m = m->next)
                if (m->owner == owner && strcmp(m->name, name) == 0)
                        return m;
        return NULL;
}

static void making_done(struct volume_making *m)
{
        for (struct volume_making **p = &making; *p != NULL; p = &(*p)->next) {
                if (*p == m) {
                        *p = m->next;
                        break;
                }
        }
        free(m);
}

/* The first line mkfs.ext4 wrote, for the message of its failure. */
static void mkfs_said(const char *log_path, char *line, size_t size)
{
        line[0] = '\0';
        FILE *f = fopen(log_path, "re");
        if (f == NULL)
                return;
        if (fgets(line, (int)size, f) != NULL)
                line[strcspn(line, "\n")] = '\0';
        fclose(f);
}

static void on_mkfs_exit(struct loop_source *source, uint32_t events)
{
        struct volume_making *m = source->data;
        _cleanup_error_ nsbox_error_t *err = NULL;
        siginfo_t info = { 0 };
        waitid(P_PIDFD, source->fd, &info, WEXITED);
        loop_remove(nsboxd.loop, source);
        char dir[4096], path[4096], line[256];
        volume_dir(m->owner, m->name, dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/mkfs.log", dir);
        int r = 0;
        if (info.si_code != CLD_EXITED || info.si_status != 0) {
                mkfs_said(path, line, sizeof(line));
                r = nsbox_refuse(&err, EIO, "mkfs.ext4 failed: %s", line[0] ? line : "no output");
        }
        unlink(path);
        _cleanup_json_ json_t *record =
            json_pack("{s:s, s:I, s:I, s:I}", "name", m->name, "owner", (json_int_t)m->owner, "size_bytes",
                      (json_int_t)m->size, "created_at_ms", (json_int_t)now_realtime_ms());
        snprintf(path, sizeof(path), "%s/" VOLUME_RECORD, dir);
        if (r == 0)
                r = json_file_replace(path, record, JSON_COMPACT, true, &err);
        if (r < 0) {
                rootfs_remove_dir(dir, NULL);
                rpc_reply_fail(m->req, "internal", "volume %s: %s", m->name, err->message);
        } else {
                log_limited(log_key_uid(m->owner).text, LOG_LEVEL_INFO,
                            "volume %s: made (%llu bytes) by uid %u", m->name, (unsigned long long)m->size,
                            m->owner);
                rpc_reply_result(m->req, json_incref(record));
        }
        making_done(m);
}

/* Start mkfs.ext4 on the sparse image in dir: its root the sandbox user's,
 * nothing reserved for root, no discard pass over the (empty) file.
 * Returns its pidfd, or a negative errno. */
static int mkfs_start(const char *dir, pid_t *pid, nsbox_error_t **err)
{
        char image[4096], log_path[4096], owner[64];
        snprintf(image, sizeof(image), "%s/" VOLUME_IMAGE, dir);
        snprintf(log_path, sizeof(log_path), "%s/mkfs.log", dir);
        snprintf(owner, sizeof(owner), "nodiscard,root_owner=%d:%d", VOLUME_SANDBOX_USER,
                 VOLUME_SANDBOX_USER);
        char *const argv[] = { "mkfs.ext4", "-q", "-F", "-m", "0", "-i", "16384", "-E", owner, image, NULL };
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_adddup2(&actions, 1, 2);
        int r = posix_spawnp(pid, "mkfs.ext4", &actions, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
        if (r != 0)
                return nsbox_error(err, r, "run mkfs.ext4 (is e2fsprogs installed?)");
        int pidfd = (int)syscall(SYS_pidfd_open, *pid, 0);
        if (pidfd < 0) {
                r = nsbox_error(err, errno, "pidfd of mkfs.ext4");
                kill(*pid, SIGKILL);
                waitpid(*pid, NULL, 0);
        }
        return pidfd < 0 ? r : pidfd;
}

/* owner's volumes: how many, and their sizes together. */
static unsigned count_volumes(uid_t owner, uint64_t *bytes)
{
        char path[4096];
        volume_dir(owner, NULL, path, sizeof(path));
        _cleanup_(closedirp) DIR *d = opendir(path);
        unsigned n = 0;
        struct dirent *de;
        *bytes = 0;
        while (d != NULL && (de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.')
                        continue;
                n++;
                _cleanup_json_ json_t *record = volume_record(owner, de->d_name);
                json_int_t size = json_integer_value(json_object_get(record, "size_bytes"));
                *bytes += size > 0 ? (uint64_t)size : 0;
        }
        for (struct volume_making *m = making; m != NULL; m = m->next)
                if (m->owner == owner)
                        *bytes += m->size; /* its directory is counted above */
        return n;
}

/* volume_bytes_per_uid, or the size of the state dir's file system. */
static uint64_t volume_bytes_ceiling(void)
{
        if (nsboxd.config.volume_bytes_per_uid != 0)
                return nsboxd.config.volume_bytes_per_uid;
        struct statvfs st;
        if (statvfs(nsboxd.config.state_dir, &st) < 0)
                return UINT64_MAX;
        return (uint64_t)st.f_blocks * st.f_frsize;
}

static int parse_size(json_t *size, uint64_t *out)
{
        if (json_is_integer(size) && json_integer_value(size) > 0) {
                *out = (uint64_t)json_integer_value(size);
                return 0;
        }
        if (json_is_string(size) && size_parse(json_string_value(size), out) == 0)
                return 0;
        return -EINVAL;
}

void volume_method_create(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "name", "size", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *name = json_object_get(req->msg.params, "name");
        if (!json_is_string(name) || json_string_length(name) > POLICY_MAX_VOLUME_NAME ||
            strlen(json_string_value(name)) != json_string_length(name) ||
            !policy_valid_name(json_string_value(name))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "name must be 1 to %d bytes of [A-Za-z0-9._-], no leading dot",
                                POLICY_MAX_VOLUME_NAME);
                return;
        }
        uint64_t size;
        if (parse_size(json_object_get(req->msg.params, "size"), &size) < 0 || size < VOLUME_MIN_BYTES ||
            size > POLICY_MAX_DISK_BYTES) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "size must be a byte count or a size such as \"1G\", from 16M to 1T");
                return;
        }
        if (userns_active()) {
                rpc_reply_fail(req, "unavailable", "%s", VOLUMES_USERNS_REFUSAL);
                return;
        }
        const char *n = json_string_value(name);
        if (volume_exists(req->uid, n) || making_find(req->uid, n) != NULL) {
                rpc_reply_fail(req, "exists", "you have a volume \"%s\" already", n);
                return;
        }
        uint64_t held;
        unsigned n_held = count_volumes(req->uid, &held);
        if (req->uid != 0 && n_held >= VOLUME_MAX_PER_UID) {
                rpc_reply_fail(req, "limit_reached", "uid %u has %d volumes, the most one user may have",
                               (unsigned)req->uid, VOLUME_MAX_PER_UID);
                return;
        }
        uint64_t ceiling = volume_bytes_ceiling();
        if (req->uid != 0 && (size > ceiling || held > ceiling - size)) {
                char a[SIZE_FORMAT_MAX], b[SIZE_FORMAT_MAX], c[SIZE_FORMAT_MAX];
                rpc_reply_fail(req, "limit_reached",
                               "uid %u's volumes hold %s; %s more is over the %s one user's volumes may have "
                               "together (volume_bytes_per_uid)",
                               (unsigned)req->uid, size_format(held, a, sizeof(a)),
                               size_format(size, b, sizeof(b)), size_format(ceiling, c, sizeof(c)));
                return;
        }
        char dir[4096], path[4096];
        snprintf(path, sizeof(path), "%s/volumes", nsboxd.config.state_dir);
        mkdir(path, 0700);
        volume_dir(req->uid, NULL, path, sizeof(path));
        mkdir(path, 0700);
        volume_dir(req->uid, n, dir, sizeof(dir));
        /* A directory without a record is a create that failed half-way. */
        rootfs_remove_dir(dir, NULL);
        if (mkdir(dir, 0700) < 0) {
                rpc_reply_fail(req, "internal", "mkdir %s: %s", dir, strerror(errno));
                return;
        }
        snprintf(path, sizeof(path), "%s/" VOLUME_IMAGE, dir);
        int r = 0, pidfd = -1;
        {
                /* Sparse: the volume takes host disk as it is written. */
                _cleanup_close_ int fd =
                    open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
                        r = nsbox_error(&err, errno, "make the image %s", path);
        }
        struct volume_making *m = r == 0 ? calloc(1, sizeof(*m)) : NULL;
        if (r == 0 && m == NULL)
                r = nsbox_error(&err, ENOMEM, "volume");
        if (r == 0 && (pidfd = mkfs_start(dir, &m->pid, &err)) < 0)
                r = pidfd;
        if (r == 0 && loop_add(nsboxd.loop, pidfd, EPOLLIN, on_mkfs_exit, m) == NULL) {
                r = nsbox_error(&err, errno, "watch mkfs.ext4");
                kill(m->pid, SIGKILL);
                waitpid(m->pid, NULL, 0);
                close(pidfd);
        }
        if (r < 0) {
                free(m);
                rootfs_remove_dir(dir, NULL);
                rpc_reply_fail(req, "internal", "volume %s: %s", n, err->message);
                return;
        }
        m->req = req;
        m->owner = req->uid;
        m->size = size;
        snprintf(m->name, sizeof(m->name), "%s", n);
        m->next = making;
        making = m;
}

static json_t *volume_json(uid_t owner, const char *name)
{
        json_t *record = volume_record(owner, name);
        if (record == NULL)
                return NULL;
        char path[4096];
        struct stat st;
        volume_dir(owner, name, path, sizeof(path));
        strncat(path, "/" VOLUME_IMAGE, sizeof(path) - strlen(path) - 1);
        if (stat(path, &st) == 0)
                json_object_set_new(record, "allocated_bytes", json_integer((json_int_t)st.st_blocks * 512));
        json_object_set_new(record, "in_use", json_integer(volume_users(owner, name)));
        return record;
}

static void list_owner(uid_t owner, json_t *list)
{
        char path[4096];
        volume_dir(owner, NULL, path, sizeof(path));
        _cleanup_(closedirp) DIR *d = opendir(path);
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL) {
                json_t *v = de->d_name[0] != '.' ? volume_json(owner, de->d_name) : NULL;
                if (v != NULL)
                        json_array_append_new(list, v);
        }
}

void volume_method_list(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { NULL };
        if (!rpc_check_fields(req, known))
                return;
        json_t *list = json_array();
        if (req->uid != 0) {
                list_owner(req->uid, list);
        } else {
                /* Root, the operator, sees every user's. */
                char path[4096];
                snprintf(path, sizeof(path), "%s/volumes", nsboxd.config.state_dir);
                _cleanup_(closedirp) DIR *d = opendir(path);
                struct dirent *de;
                while (d != NULL && (de = readdir(d)) != NULL) {
                        char *end;
                        unsigned long uid = strtoul(de->d_name, &end, 10);
                        if (de->d_name[0] != '.' && *end == '\0')
                                list_owner((uid_t)uid, list);
                }
        }
        rpc_reply_result(req, json_pack("{s:o, s:i}", "volumes", list, "count", (int)json_array_size(list)));
}

void volume_method_remove(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "name", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *name = json_object_get(req->msg.params, "name");
        if (!json_is_string(name)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "name must be a string");
                return;
        }
        const char *n = json_string_value(name);
        /* Another user's volume is not found, as a missing one. */
        if (strlen(n) != json_string_length(name) || !volume_exists(req->uid, n)) {
                rpc_reply_fail(req, "not_found", "no volume \"%.64s\"", n);
                return;
        }
        char dir[4096], path[4096], dev[64];
        volume_dir(req->uid, n, dir, sizeof(dir));
        snprintf(path, sizeof(path), "%s/" VOLUME_IMAGE, dir);
        unsigned users = volume_users(req->uid, n);
        struct stat st;
        int loop = stat(path, &st) == 0 ? loop_find(&st, dev, sizeof(dev)) : -ENOENT;
        if (loop >= 0)
                close(loop);
        if (users > 0 || loop >= 0) {
                rpc_reply_fail(req, "busy", "volume %s is mounted in %u live sandbox(es); remove them first",
                               n, users ? users : 1);
                return;
        }
        if (rootfs_remove_dir(dir, &err) < 0) {
                rpc_reply_fail(req, "internal", "%s", err->message);
                return;
        }
        log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "volume %s: removed by uid %u", n, req->uid);
        rpc_reply_result(req, json_pack("{s:s, s:b}", "name", n, "removed", 1));
}
