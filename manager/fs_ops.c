/* SPDX-License-Identifier: Apache-2.0 */
/* The file primitives under a sandbox's root that fs.* and python.run's
 * files are built on: pin the root, resolve, read, write, remove, mkdir,
 * stat, list, rename, symlink, chmod. No JSON and no request here.
 *
 * nsboxd is host root, so every path the sandbox can influence is resolved
 * by the kernel, never by string checks: openat2() under a root fd pinned
 * from /proc/<init>/root with
 *   RESOLVE_IN_ROOT        absolute symlinks and ".." stay inside the
 *                          sandbox's root, even when the sandbox renames or
 *                          swaps directories during the call;
 *   RESOLVE_NO_MAGICLINKS  no /proc/<pid>/root or /proc/<pid>/fd jumps;
 * and what it opened must be on a mount of the sandbox's own files: its
 * overlay root or one of its volumes and host directories, by mount id as
 * nsboxd attached them (fs_resolve). The sandbox's /proc and /sys are
 * host-global kernel knobs when written by host root, /dev holds host
 * devices, and a mount the sandbox made over a volume is not the volume.
 * The last component of write/remove/mkdir is handled on the parent's fd
 * with RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS, so a final
 * symlink is never followed and a mount point is never replaced. Files are
 * opened O_PATH first and reopened only once they are known to be regular:
 * a FIFO or device is never opened at all.
 *
 * Volumes and host directories are idmapped mounts, where host root is no
 * one: what is created on them is created with the sandbox user's fsuid
 * (fs_create_as_user), as the sandbox user would. */
#include "fs_ops.h"
#include "size.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "sandbox_user.h"
#include "fs_path.h"
#include "fs_worker.h"
#include "log.h"
#include "relpath.h"
#include "sandbox.h"

_Static_assert(FS_MAX_MOUNTS == POLICY_MAX_MOUNTS, "fs_ctx holds every mount of a sandbox");

/* A directory is read for fs.list to at most FS_LIST_SCAN_MAX names. */
#define FS_LIST_SCAN_MAX (4u << 20)
/* The deepest tree fs.remove takes apart: one open fd per level, in a
 * worker whose fd limit is raised to match. */
#define FS_TREE_MAX_DEPTH    16384
#define FS_DIRENT_BUFFER     (64u << 10)
#define FS_SANDBOX_USER      NSBOX_SANDBOX_USER
#define FS_DEFAULT_FILE_MODE 0644
#define FS_DEFAULT_DIR_MODE  0755
/* openat2 answers EAGAIN when a rename raced a ".." walk; the sandbox can
 * keep that up forever, so the retries are bounded. */
#define FS_RESOLVE_RETRIES 64

#define FS_RESOLVE (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
/* A volume has no root of its own to resolve absolute symlinks in, and a
 * symlink a sandbox left in it (to /etc, to ../../..) means nothing to
 * nsboxd: none is followed, ".." never climbs above the volume's root, and
 * no walk crosses onto another mount. */
#define FS_RESOLVE_VOLUME (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define FS_RESOLVE_ENTRY  (RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

void fs_ctx_close(struct fs_ctx *ctx)
{
        if (ctx->root >= 0)
                close(ctx->root);
        ctx->root = -1;
}

/* A full sandbox disk, said in human sizes with the option that sizes it. */
static int fs_no_space(nsbox_error_t **err, const struct fs_ctx *ctx, const char *what, const char *shown)
{
        char disk[SIZE_FORMAT_MAX];
        if (ctx->volume != NULL)
                return nsbox_refuse(err, ENOSPC, "%s %s: no space left on volume %s (its size is %s)", what,
                                    shown, ctx->volume, size_format(ctx->disk_bytes, disk, sizeof(disk)));
        return nsbox_refuse(err, ENOSPC,
                            "%s %s: no space left in the sandbox (its disk is %s: nsbox create --disk, "
                            "limits.disk_bytes)",
                            what, shown, size_format(ctx->disk_bytes, disk, sizeof(disk)));
}

static int fs_no_space_written(nsbox_error_t **err, const struct fs_ctx *ctx, const char *shown, size_t done,
                               size_t len)
{
        char disk[SIZE_FORMAT_MAX], wrote[SIZE_FORMAT_MAX], total[SIZE_FORMAT_MAX];
        if (ctx->volume != NULL)
                return nsbox_refuse(
                    err, ENOSPC, "write %s: no space left on volume %s (its size is %s); %s of %s written",
                    shown, ctx->volume, size_format(ctx->disk_bytes, disk, sizeof(disk)),
                    size_format(done, wrote, sizeof(wrote)), size_format(len, total, sizeof(total)));
        return nsbox_refuse(err, ENOSPC,
                            "write %s: no space left in the sandbox (its disk is %s: nsbox create --disk, "
                            "limits.disk_bytes); %s of %s written",
                            shown, size_format(ctx->disk_bytes, disk, sizeof(disk)),
                            size_format(done, wrote, sizeof(wrote)), size_format(len, total, sizeof(total)));
}

static int fs_resolve_error(const struct fs_ctx *ctx, nsbox_error_t **err, int errnum, const char *path)
{
        if (ctx->volume != NULL && errnum == EXDEV)
                return nsbox_refuse(err, errnum, "%s: outside volume %s (above its root), or a mount point",
                                    path, ctx->volume);
        if (ctx->volume != NULL && errnum == ELOOP)
                return nsbox_refuse(err, errnum,
                                    "%s: a symlink on the way (a volume's files are reached without "
                                    "following symlinks)",
                                    path);
        switch (errnum) {
        case ENOENT:
                return nsbox_refuse(err, errnum, "%s: no such file or directory", path);
        case ENOTDIR:
                return nsbox_refuse(err, errnum, "%s: a path component is not a directory", path);
        case EXDEV:
                return nsbox_refuse(err, errnum,
                                    "%s: outside the sandbox's root file system, volumes and host "
                                    "directories (/proc, /dev and /sys, and mounts made in the sandbox, are "
                                    "not reachable through fs.*: use sandbox.exec there), or a mount point",
                                    path);
        case EROFS:
                return nsbox_refuse(err, errnum, "%s: on a read-only mount", path);
        case ELOOP:
                return nsbox_refuse(err, errnum, "%s: too many levels of symlinks, or a /proc magic link",
                                    path);
        case EAGAIN:
                return nsbox_refuse(err, errnum, "%s: the sandbox kept renaming the path during resolution",
                                    path);
        default:
                return nsbox_error(err, errnum, "resolve %s", path);
        }
}

static const char *fs_special_name(mode_t mode)
{
        if (S_ISFIFO(mode))
                return "a FIFO";
        if (S_ISSOCK(mode))
                return "a socket";
        if (S_ISCHR(mode) || S_ISBLK(mode))
                return "a device";
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISLNK(mode))
                return "a symlink";
        return "not a regular file";
}

static int fs_refuse_type(nsbox_error_t **err, mode_t mode, const char *path)
{
        return nsbox_refuse(err, S_ISDIR(mode) ? EISDIR : EINVAL,
                            "%s is %s: only regular files are read or written", path, fs_special_name(mode));
}

static int fs_openat2(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve)
{
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? mode : 0,
                .resolve = resolve,
        };
        for (int attempt = 0;; attempt++) {
                int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
                if (fd >= 0)
                        return fd;
                if (errno != EAGAIN || attempt >= FS_RESOLVE_RETRIES)
                        return -errno;
        }
}

static int fs_mount_id(int fd, uint64_t *id)
{
        struct statx stx;
        if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) < 0)
                return -errno;
        if (!(stx.stx_mask & STATX_MNT_ID))
                return -ENOTSUP;
        *id = stx.stx_mnt_id;
        return 0;
}

/* Whether rel is, by its text, at or under where one of the sandbox's
 * volumes or host directories is attached. */
static bool fs_under_mount_path(const struct fs_ctx *ctx, const char *rel)
{
        for (unsigned i = 0; i < ctx->n_mount_paths; i++) {
                const char *m = ctx->mount_paths[i] + 1;
                size_t n = strlen(m);
                if (strncmp(rel, m, n) == 0 && (rel[n] == '\0' || rel[n] == '/'))
                        return true;
        }
        return false;
}

/* `rel` resolved under the sandbox's root (FS_RESOLVE), or -EXDEV when it
 * ends on a mount other than the root's and the sandbox's volumes and host
 * directories. The walk may pass through another mount (/proc/..); only
 * where it ends is used. A walk that fails on the way (/proc/self is not
 * nsboxd's own there) says -EXDEV too when it left the root file system
 * elsewhere than at a volume or host directory: /proc, /dev and /sys stay
 * beyond fs.* whatever the path. */
static int fs_resolve(const struct fs_ctx *ctx, const char *rel, int flags)
{
        _cleanup_close_ int fd = fs_openat2(ctx->root, rel, flags, 0, ctx->resolve);
        if (fd == -EXDEV)
                return fd;
        if (fd < 0) {
                int in_root = fs_openat2(ctx->root, rel, O_PATH, 0, ctx->resolve | RESOLVE_NO_XDEV);
                if (in_root >= 0)
                        close(in_root);
                return in_root == -EXDEV && !fs_under_mount_path(ctx, rel) ? -EXDEV : fd;
        }
        uint64_t id;
        int r = fs_mount_id(fd, &id);
        if (r < 0)
                return r;
        for (unsigned i = 0; i < ctx->n_mounts; i++)
                if (ctx->mounts[i] == id)
                        return steal_fd(&fd);
        return -EXDEV;
}

/* Create on a held directory as the sandbox user when host root cannot: an
 * idmapped mount (a volume, a host directory) maps no id to host root, and
 * the kernel refuses it a new inode or entry (EOVERFLOW). The fsuid is this
 * thread's only and is given back at once. `call` is an expression that
 * returns a negative errno on failure. */
#define fs_create_as_user(ctx, result, call)                         \
        do {                                                         \
                (result) = (call);                                   \
                if ((result) == -EOVERFLOW) {                        \
                        uid_t old_uid = (uid_t)setfsuid((ctx)->uid); \
                        gid_t old_gid = (gid_t)setfsgid((ctx)->gid); \
                        (result) = (call);                           \
                        setfsgid(old_gid);                           \
                        setfsuid(old_uid);                           \
                }                                                    \
        } while (0)

/* Pin the sandbox's root for one call. The init is nsboxd's child and is
 * only reaped by this loop, so its pid cannot be reused under us; the pidfd
 * check after the open still proves the root belongs to that init. */
int fs_ctx_open(struct sandbox *sb, struct fs_ctx *ctx, nsbox_error_t **err)
{
        ctx->root = -1;
        ctx->watch_fd = -1;
        ctx->resolve = FS_RESOLVE;
        ctx->volume = NULL;
        if (sb->state != SANDBOX_RUNNING || sb->pidfd == NULL)
                return nsbox_refuse(err, ESRCH, "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/root", (int)sb->pid);
        _cleanup_close_ int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return nsbox_error(err, errno, "open the root of sandbox %s", sb->id);
        if (pidfd_send_signal(sb->pidfd->fd, 0, NULL, 0) < 0)
                return nsbox_refuse(err, ESRCH, "sandbox %s: its init is gone", sb->id);
        ctx->n_mounts = 0;
        uint64_t root_mount;
        int r = fs_mount_id(fd, &root_mount);
        if (r < 0)
                return nsbox_error(err, -r, "the mount of the root of sandbox %s", sb->id);
        ctx->mounts[ctx->n_mounts++] = root_mount;
        for (unsigned i = 0; i < sb->n_mount_ids && ctx->n_mounts < ARRAY_SIZE(ctx->mounts); i++)
                ctx->mounts[ctx->n_mounts++] = sb->mount_ids[i];
        ctx->n_mount_paths = 0;
        size_t i;
        json_t *m;
        json_array_foreach(sb->policy.mounts, i, m)
        {
                const char *at = json_string_value(json_object_get(m, "path"));
                if (at != NULL && at[0] == '/' && ctx->n_mount_paths < FS_MAX_MOUNTS)
                        ctx->mount_paths[ctx->n_mount_paths++] = at;
        }
        ctx->root = steal_fd(&fd);
        ctx->uid_base = sb->host_uid_base;
        ctx->uid = sb->host_uid_base + FS_SANDBOX_USER;
        ctx->gid = sb->host_uid_base + FS_SANDBOX_USER;
        ctx->disk_bytes = (unsigned long long)sb->policy.limits.disk_bytes;
        return 0;
}

int fs_ctx_open_volume(int root, const char *name, unsigned long long size_bytes, struct fs_ctx *ctx,
                       nsbox_error_t **err)
{
        _cleanup_close_ int fd = root;
        *ctx = (struct fs_ctx){ .root = -1, .watch_fd = -1, .resolve = FS_RESOLVE_VOLUME, .volume = name };
        int r = fs_mount_id(fd, &ctx->mounts[0]);
        if (r < 0)
                return nsbox_error(err, -r, "the mount of volume %s", name);
        ctx->n_mounts = 1;
        ctx->uid = FS_SANDBOX_USER;
        ctx->gid = FS_SANDBOX_USER;
        ctx->uid_base = 0;
        ctx->disk_bytes = size_bytes;
        ctx->root = steal_fd(&fd);
        return 0;
}

int fs_ctx_fork(struct fs_ctx *ctx, struct sandbox *sb, fs_worker_run_fn run, fs_worker_done_fn done,
                void *data, struct fs_worker **worker, nsbox_error_t **err)
{
        ctx->watch_fd = sb != NULL && sb->pidfd ? sb->pidfd->fd : -1;
        int keep[] = { ctx->root, ctx->watch_fd };
        int r = fs_worker_start(keep, ARRAY_SIZE(keep), run, done, data, worker, err);
        fs_ctx_close(ctx);
        return r;
}

/* Turn an O_PATH fd into a real open file of the same inode, through nsboxd's
 * own /proc (not the sandbox's). */
static int fs_reopen(int path_fd, int flags, const char *shown, nsbox_error_t **err)
{
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", path_fd);
        int fd = open(proc, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return nsbox_error(err, errno, "open %s", shown);
        return fd;
}

/* What this call created is owned by host root: nothing in the sandbox can
 * own an unmapped uid. Hand it to the sandbox user. */
static int fs_claim(const struct fs_ctx *ctx, int fd, mode_t mode, const char *shown, nsbox_error_t **err)
{
        struct stat st;
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", shown);
        if (st.st_uid == ctx->uid && st.st_gid == ctx->gid) /* made as the user (fs_create_as_user) */
                return fchmod(fd, mode) < 0 ? nsbox_error(err, errno, "chmod %s", shown) : 0;
        if (st.st_uid != 0)
                return 0;
        if (fchown(fd, ctx->uid, ctx->gid) < 0)
                return nsbox_error(err, errno, "chown %s to the sandbox user", shown);
        if (fchmod(fd, mode) < 0)
                return nsbox_error(err, errno, "chmod %s", shown);
        return 0;
}

/* mkdir in a held directory, owned by the sandbox user. EEXIST is the
 * caller's to judge. */
static int fs_mkdir_entry(const struct fs_ctx *ctx, int parent, const char *name, const char *shown,
                          nsbox_error_t **err)
{
        int r;
        fs_create_as_user(ctx, r, mkdirat(parent, name, 0700) < 0 ? -errno : 0);
        if (r < 0)
                return r;
        _cleanup_close_ int fd =
            fs_openat2(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (fd < 0) /* swapped already: the sandbox's own business */
                return 0;
        return fs_claim(ctx, fd, FS_DEFAULT_DIR_MODE, shown, err);
}

static void fs_shown(char *shown, size_t size, const char *rel)
{
        snprintf(shown, size, "/%s", strcmp(rel, ".") == 0 ? "" : rel);
}

/* O_PATH fd of the directory `rel`, creating what is missing (mkdir -p).
 * A loop, not a recursion: a client's path of a thousand missing levels
 * once took nsboxd's stack with it. The deepest existing prefix is found
 * first; then each missing level is made in its parent's fd and the prefix
 * reopened from the root with RESOLVE_IN_ROOT, as one openat2 of the whole
 * path would resolve it. The component count is bounded by fs_path_parse. */
static int fs_open_dir_creating(const struct fs_ctx *ctx, const char *rel, int *out, nsbox_error_t **err)
{
        char prefix[FS_PATH_MAX + 16];
        char shown[FS_PATH_MAX + 16];
        unsigned total = 0;
        if (strcmp(rel, ".") != 0)
                while (fs_path_prefix_len(rel, total + 1) > 0)
                        total++;
        if (total > FS_PATH_MAX_COMPONENTS + 1)
                return nsbox_refuse(err, ENAMETOOLONG, "the path has more than %d components",
                                    FS_PATH_MAX_COMPONENTS);

        unsigned have = total;
        _cleanup_close_ int dir = -1;
        for (;; have--) {
                size_t len = fs_path_prefix_len(rel, have);
                if (have == 0) {
                        strcpy(prefix, ".");
                } else {
                        memcpy(prefix, rel, len);
                        prefix[len] = '\0';
                }
                dir = fs_resolve(ctx, prefix, O_PATH | O_DIRECTORY);
                if (dir >= 0)
                        break;
                fs_shown(shown, sizeof(shown), have == total ? rel : prefix);
                if (dir != -ENOENT || have == 0)
                        return fs_resolve_error(ctx, err, -dir, shown);
        }
        for (unsigned level = have + 1; level <= total; level++) {
                size_t start = level == 1 ? 0 : fs_path_prefix_len(rel, level - 1) + 1;
                size_t len = fs_path_prefix_len(rel, level);
                memcpy(prefix, rel, len);
                prefix[len] = '\0';
                const char *name = prefix + start;
                fs_shown(shown, sizeof(shown), prefix);
                if (strcmp(name, "..") != 0) {
                        int r = fs_mkdir_entry(ctx, dir, name, shown, err);
                        if (r == -ENOSPC || r == -EDQUOT)
                                return fs_no_space(err, ctx, "mkdir", shown);
                        if (r < 0 && r != -EEXIST)
                                return nsbox_error(err, -r, "mkdir %s", shown);
                }
                close(dir);
                dir = fs_resolve(ctx, prefix, O_PATH | O_DIRECTORY);
                if (dir < 0)
                        return fs_resolve_error(ctx, err, -dir, shown);
        }
        *out = steal_fd(&dir);
        return 0;
}

static int fs_open_parent(const struct fs_ctx *ctx, const struct fs_path *p, bool create, int *out,
                          nsbox_error_t **err)
{
        if (create)
                return fs_open_dir_creating(ctx, p->parent, out, err);
        int fd = fs_resolve(ctx, p->parent, O_PATH | O_DIRECTORY);
        if (fd < 0)
                return fs_resolve_error(ctx, err, -fd, p->shown);
        *out = fd;
        return 0;
}

/* ---- read ---- */

/* At most max_bytes from `offset` on (beyond the end: nothing). */
int fs_read_at(const struct fs_ctx *ctx, const struct fs_path *p, uint64_t offset, size_t max_bytes,
               struct fs_read_result *out, nsbox_error_t **err)
{
        _cleanup_close_ int path_fd = fs_resolve(ctx, p->rel, O_PATH);
        if (path_fd < 0)
                return fs_resolve_error(ctx, err, -path_fd, p->shown);
        struct stat st;
        if (fstat(path_fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        if (!S_ISREG(st.st_mode))
                return fs_refuse_type(err, st.st_mode, p->shown);
        _cleanup_close_ int fd = fs_reopen(path_fd, O_RDONLY, p->shown, err);
        if (fd < 0)
                return fd;

        uint64_t left = (uint64_t)st.st_size > offset ? (uint64_t)st.st_size - offset : 0;
        size_t cap = left < max_bytes ? (size_t)left : max_bytes;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (buf == NULL)
                return nsbox_error(err, ENOMEM, "read %s", p->shown);
        size_t len = 0;
        for (;;) {
                if (len == cap) {
                        if (cap >= max_bytes)
                                break;
                        /* The file grew since the fstat. */
                        size_t grown = cap < max_bytes / 2 ? cap * 2 + 4096 : max_bytes;
                        if (grown > max_bytes)
                                grown = max_bytes;
                        char *bigger = realloc(buf, grown + 1);
                        if (bigger == NULL)
                                return nsbox_error(err, ENOMEM, "read %s", p->shown);
                        buf = bigger;
                        cap = grown;
                }
                ssize_t n = pread(fd, buf + len, cap - len, (off_t)(offset + len));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return nsbox_error(err, errno, "read %s", p->shown);
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        char probe;
        out->truncated = len == max_bytes && pread(fd, &probe, 1, (off_t)(offset + len)) == 1;
        if (fstat(fd, &st) == 0)
                out->size = (unsigned long long)st.st_size;
        buf[len] = '\0';
        out->data = steal_pointer(&buf);
        out->len = len;
        return 0;
}

/* ---- write ---- */

static int fs_write_all(const struct fs_ctx *ctx, int fd, const void *data, size_t len, const char *shown,
                        nsbox_error_t **err)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = write(fd, (const char *)data + done, len - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == ENOSPC || errno == EDQUOT))
                        return fs_no_space_written(err, ctx, shown, done, len);
                if (n < 0)
                        return nsbox_error(err, errno, "write %s (%zu of %zu bytes written)", shown, done,
                                           len);
                done += (size_t)n;
        }
        return 0;
}

/* Unlink `name` in parent if it is still the file fd is open on: the
 * sandbox may have put something else there meanwhile. */
static void fs_unlink_if_same(int parent, const char *name, int fd)
{
        struct stat now, entry;
        if (fstat(fd, &now) == 0 && fstatat(parent, name, &entry, AT_SYMLINK_NOFOLLOW) == 0 &&
            now.st_dev == entry.st_dev && now.st_ino == entry.st_ino)
                unlinkat(parent, name, 0);
}

/* Append to the existing regular file at `name`; a failed append is cut
 * back to the old end, so the old content stays whole. */
static int fs_append_at(const struct fs_ctx *ctx, int parent, const struct fs_path *p, const void *data,
                        size_t len, const struct fs_write_options *opts, nsbox_error_t **err)
{
        _cleanup_close_ int fd = -1;
        bool created = false;
        struct stat st;
        /* Open the existing file, or create it exclusively: either way the
         * inode is known to be a regular file before any byte moves. */
        for (int attempt = 0; fd < 0; attempt++) {
                if (attempt >= FS_RESOLVE_RETRIES)
                        return nsbox_refuse(err, EAGAIN, "%s: the sandbox kept replacing the file", p->shown);
                _cleanup_close_ int path_fd =
                    fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
                if (path_fd >= 0) {
                        if (fstat(path_fd, &st) < 0)
                                return nsbox_error(err, errno, "stat %s", p->shown);
                        if (S_ISLNK(st.st_mode))
                                return nsbox_refuse(
                                    err, ELOOP, "%s is a symlink: fs.write does not follow a final symlink",
                                    p->shown);
                        if (!S_ISREG(st.st_mode))
                                return fs_refuse_type(err, st.st_mode, p->shown);
                        fd = fs_reopen(path_fd, O_WRONLY | O_APPEND, p->shown, err);
                        if (fd < 0)
                                return fd;
                        break;
                }
                if (path_fd != -ENOENT)
                        return fs_resolve_error(ctx, err, -path_fd, p->shown);
                fs_create_as_user(ctx, fd,
                                  fs_openat2(parent, p->name,
                                             O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY,
                                             0600, FS_RESOLVE_ENTRY));
                if (fd == -EEXIST)
                        continue;
                if (fd == -ENOSPC || fd == -EDQUOT)
                        return fs_no_space(err, ctx, "create", p->shown);
                if (fd < 0)
                        return nsbox_error(err, -fd, "create %s", p->shown);
                created = true;
        }
        mode_t mode = opts->mode_set ? (opts->mode & 0777) : FS_DEFAULT_FILE_MODE;
        int r;
        if (created) {
                r = fs_claim(ctx, fd, mode, p->shown, err);
                if (r < 0) {
                        fs_unlink_if_same(parent, p->name, fd);
                        return r;
                }
        } else {
                if (!opts->mode_set)
                        mode = st.st_mode & 01777; /* setuid/setgid never survive a write */
                if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)
                        return nsbox_error(err, errno, "chmod %s", p->shown);
        }
        off_t start = lseek(fd, 0, SEEK_END);
        r = fs_write_all(ctx, fd, data, len, p->shown, err);
        if (r < 0) {
                /* No half-written append, and the space it took goes back to the sandbox. */
                if (ftruncate(fd, start < 0 ? 0 : start) < 0)
                        log_warn("truncate %s after a failed write: %s", p->shown, strerror(errno));
                if (created)
                        fs_unlink_if_same(parent, p->name, fd);
        }
        return r;
}

/* A temporary name in `parent` (into tmp) for the rename that puts the
 * written file in place: the whole O_TMPFILE file `unnamed` linked there
 * (0 returned), or, with unnamed -1, a new file made there (its fd
 * returned). tmp is empty when nothing has the name. */
static int fs_temp_name(const struct fs_ctx *ctx, int parent, int unnamed, char *tmp, size_t size,
                        const char *shown, nsbox_error_t **err)
{
        char self[64];
        snprintf(self, sizeof(self), "/proc/thread-self/fd/%d", unnamed);
        for (int attempt = 0; attempt < FS_RESOLVE_RETRIES; attempt++) {
                int r = staging_name(STAGING_WRITE_PREFIX, tmp, size);
                if (r < 0)
                        return nsbox_error(err, -r, "a temporary name for %s", shown);
                if (unnamed >= 0)
                        fs_create_as_user(
                            ctx, r, linkat(AT_FDCWD, self, parent, tmp, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0);
                else
                        fs_create_as_user(ctx, r,
                                          fs_openat2(parent, tmp,
                                                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY,
                                                     0600, FS_RESOLVE_ENTRY));
                if (r >= 0)
                        return r;
                tmp[0] = '\0';
                if (r == -ENOSPC || r == -EDQUOT)
                        return fs_no_space(err, ctx, unnamed >= 0 ? "name" : "create", shown);
                if (r != -EEXIST)
                        return unnamed >= 0 ? nsbox_error(err, -r, "name the written file of %s", shown)
                                            : nsbox_error(err, -r, "create %s", shown);
        }
        return nsbox_refuse(err, EAGAIN, "%s: the sandbox kept taking the temporary name", shown);
}

/* A write that replaces the file goes to a temporary file beside it, put in
 * place by a rename once every byte is written: a write cut short (a full
 * disk, nsboxd killed) leaves the old file whole, never a part of the new
 * one under its name. The temporary file goes on any failure. It has no
 * name while it is written where the file system can (O_TMPFILE); its name,
 * when it has one, starts with ".nsbox-write-", so one that a crash of
 * nsboxd left behind is known for what it is. */
int fs_write_at(const struct fs_ctx *ctx, const struct fs_path *p, const void *data, size_t len,
                const struct fs_write_options *opts, nsbox_error_t **err)
{
        if (p->name == NULL || p->dir_only)
                return nsbox_refuse(err, EISDIR, "%s names a directory, not a file", p->shown);
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, opts->parents, &parent, err);
        if (r < 0)
                return r;
        if (opts->append)
                return fs_append_at(ctx, parent, p, data, len, opts, err);

        /* What is there now: kept whole until the rename, and its mode and
         * owner are the new file's. */
        struct stat st;
        bool existed = false;
        _cleanup_close_ int path_fd = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (path_fd >= 0) {
                if (fstat(path_fd, &st) < 0)
                        return nsbox_error(err, errno, "stat %s", p->shown);
                if (S_ISLNK(st.st_mode))
                        return nsbox_refuse(err, ELOOP,
                                            "%s is a symlink: fs.write does not follow a final symlink",
                                            p->shown);
                if (!S_ISREG(st.st_mode))
                        return fs_refuse_type(err, st.st_mode, p->shown);
                existed = true;
        } else if (path_fd != -ENOENT) {
                return fs_resolve_error(ctx, err, -path_fd, p->shown);
        }

        char tmp[NAME_MAX + 1] = "";
        _cleanup_close_ int fd = -1;
        /* Unnamed until every byte is written (O_TMPFILE), so that a kill of
         * nsboxd mid-write leaves nothing behind; where the file system has no
         * O_TMPFILE (overlayfs before Linux 6.6), a named temporary file. */
        fs_create_as_user(ctx, fd, fs_openat2(parent, ".", O_WRONLY | O_TMPFILE, 0600, FS_RESOLVE_ENTRY));
        if (fd == -ENOSPC || fd == -EDQUOT)
                return fs_no_space(err, ctx, "create", p->shown);
        bool unnamed = fd >= 0;
        if (!unnamed && (fd = fs_temp_name(ctx, parent, -1, tmp, sizeof(tmp), p->shown, err)) < 0)
                return fd;
        mode_t mode = opts->mode_set ? (opts->mode & 0777) : FS_DEFAULT_FILE_MODE;
        if (existed) {
                if (!opts->mode_set)
                        mode = st.st_mode & 01777; /* setuid/setgid never survive a write */
                struct stat made;
                if (fstat(fd, &made) < 0)
                        r = nsbox_error(err, errno, "stat %s", p->shown);
                else if ((made.st_uid != st.st_uid || made.st_gid != st.st_gid) &&
                         fchown(fd, st.st_uid, st.st_gid) < 0)
                        r = nsbox_error(err, errno, "chown %s as the file it replaces", p->shown);
                else if (fchmod(fd, mode) < 0)
                        r = nsbox_error(err, errno, "chmod %s", p->shown);
        } else {
                r = fs_claim(ctx, fd, mode, p->shown, err);
        }
        if (r == 0)
                r = fs_write_all(ctx, fd, data, len, p->shown, err);
        if (r == 0 && unnamed)
                r = fs_temp_name(ctx, parent, fd, tmp, sizeof(tmp), p->shown, err);
        int moved = 0;
        if (r == 0)
                fs_create_as_user(ctx, moved, renameat(parent, tmp, parent, p->name) < 0 ? -errno : 0);
        if (moved < 0) {
                r = moved == -ENOSPC || moved == -EDQUOT ? fs_no_space(err, ctx, "rename", p->shown)
                    : moved == -EISDIR || moved == -ENOTDIR
                        ? nsbox_refuse(err, -moved, "%s became a directory during the write", p->shown)
                        : nsbox_error(err, -moved, "rename the written file to %s", p->shown);
        }
        if (r < 0) {
                /* The space it took goes back to the sandbox at once. */
                if (ftruncate(fd, 0) < 0)
                        log_warn("truncate the temporary file of %s after a failed write: %s", p->shown,
                                 strerror(errno));
                if (tmp[0] != '\0')
                        fs_unlink_if_same(parent, tmp, fd);
        }
        return r;
}

/* ---- remove ---- */

/* A directory entry as getdents64 returns it. */
struct fs_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
};

struct fs_tree_level {
        int fd;
        char name[NAME_MAX + 1]; /* in the level above */
};

/* The sandbox being removed ends the walk: its init is gone (watch_fd is
 * the init's pidfd, readable once it exited). */
static bool fs_cancelled(const struct fs_ctx *ctx)
{
        if (ctx->watch_fd < 0)
                return false;
        struct pollfd pfd = { .fd = ctx->watch_fd, .events = POLLIN };
        return poll(&pfd, 1, 0) > 0;
}

/* Open directory `name` in `parent` for the tree walk; 1 when it is no
 * directory (any more) and was unlinked instead, 0 when gone. */
static int fs_tree_open(int parent, const char *name, int *out, const char *shown, nsbox_error_t **err)
{
        int fd = fs_openat2(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (fd == -ENOTDIR || fd == -ELOOP) {
                /* No longer a directory: the sandbox swapped it; remove what is there. */
                if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
                        return nsbox_error(err, errno, "remove %s", shown);
                return 0;
        }
        if (fd == -ENOENT)
                return 0;
        if (fd == -EXDEV)
                return nsbox_refuse(err, EXDEV, "remove %s: a mount point is inside", shown);
        if (fd < 0)
                return nsbox_error(err, -fd, "open %s", shown);
        *out = fd;
        return 1;
}

/* Remove directory `name` in `parent` and everything under it. A loop with
 * its stack of open directories on the heap, not a recursion: the sandbox
 * can make a tree thousands of levels deep, which must cost neither
 * nsboxd's stack nor a refusal. No directory stream stays open across
 * levels: after a subdirectory is gone its parent is read from the start
 * again, where only what is left remains. */
static int fs_remove_tree(const struct fs_ctx *ctx, int parent, const char *name, const char *shown,
                          nsbox_error_t **err)
{
        _cleanup_free_ struct fs_tree_level *levels = NULL;
        size_t depth = 0, cap = 0;
        _cleanup_free_ char *buf = malloc(FS_DIRENT_BUFFER);
        if (buf == NULL)
                return nsbox_error(err, ENOMEM, "remove %s", shown);
        int top_fd = -1;
        int r = fs_tree_open(parent, name, &top_fd, shown, err);
        if (r <= 0)
                return r;
        levels = malloc(sizeof(*levels));
        if (levels == NULL) {
                close(top_fd);
                return nsbox_error(err, ENOMEM, "remove %s", shown);
        }
        cap = 1;
        levels[0].fd = top_fd;
        snprintf(levels[0].name, sizeof(levels[0].name), "%s", name);
        depth = 1;
        unsigned long ops = 0;
        r = 0;
        while (r == 0 && depth > 0) {
                struct fs_tree_level *top = &levels[depth - 1];
                bool descended = false;
                if (lseek(top->fd, 0, SEEK_SET) < 0) {
                        r = nsbox_error(err, errno, "read directory %s", shown);
                        break;
                }
                while (r == 0 && !descended) {
                        long n = syscall(SYS_getdents64, top->fd, buf, FS_DIRENT_BUFFER);
                        if (n < 0) {
                                r = nsbox_error(err, errno, "read directory %s", shown);
                                break;
                        }
                        if (n == 0)
                                break;
                        for (long off = 0; off < n && r == 0 && !descended;) {
                                struct fs_dirent64 *d = (struct fs_dirent64 *)(buf + off);
                                off += d->d_reclen;
                                if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                                        continue;
                                if (++ops % 1024 == 0 && fs_cancelled(ctx)) {
                                        r = nsbox_refuse(err, ESRCH, "remove %s: the sandbox is gone", shown);
                                        break;
                                }
                                if (unlinkat(top->fd, d->d_name, 0) == 0 || errno == ENOENT)
                                        continue;
                                if (errno != EISDIR && errno != EPERM) {
                                        r = nsbox_error(err, errno, "remove %s/.../%s", shown, d->d_name);
                                        break;
                                }
                                if (depth >= FS_TREE_MAX_DEPTH) {
                                        r = nsbox_refuse(err, ELOOP, "remove %s: deeper than %d levels",
                                                         shown, FS_TREE_MAX_DEPTH);
                                        break;
                                }
                                int fd = -1;
                                r = fs_tree_open(top->fd, d->d_name, &fd, shown, err);
                                if (r <= 0)
                                        continue;
                                r = 0;
                                if (depth == cap) {
                                        size_t grown = cap * 2;
                                        struct fs_tree_level *bigger =
                                            realloc(levels, grown * sizeof(*levels));
                                        if (bigger == NULL) {
                                                close(fd);
                                                r = nsbox_error(err, ENOMEM, "remove %s", shown);
                                                break;
                                        }
                                        levels = bigger;
                                        cap = grown;
                                        top = &levels[depth - 1];
                                }
                                levels[depth].fd = fd;
                                snprintf(levels[depth].name, sizeof(levels[depth].name), "%s", d->d_name);
                                depth++;
                                descended = true;
                        }
                }
                if (r < 0 || descended)
                        continue;
                /* Emptied: remove it from the level above. */
                close(top->fd);
                depth--;
                int above = depth > 0 ? levels[depth - 1].fd : parent;
                if (unlinkat(above, levels[depth].name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        r = nsbox_error(err, errno, "remove %s%s%s", shown, depth > 0 ? "/.../" : "",
                                        depth > 0 ? levels[depth].name : "");
        }
        while (depth > 0)
                close(levels[--depth].fd);
        return r;
}

void fs_tree_raise_fd_limit(void)
{
        struct rlimit lim;
        rlim_t want = FS_TREE_MAX_DEPTH + 64;
        if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < want) {
                lim.rlim_cur = want;
                if (lim.rlim_max < want)
                        lim.rlim_max = want;
                setrlimit(RLIMIT_NOFILE, &lim);
        }
}

int fs_remove_at(const struct fs_ctx *ctx, const struct fs_path *p, bool recursive, nsbox_error_t **err)
{
        if (p->name == NULL)
                return nsbox_refuse(err, EINVAL, "refusing to remove %s", p->shown);
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, false, &parent, err);
        if (r < 0)
                return r;
        _cleanup_close_ int entry = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (entry == -EXDEV)
                return nsbox_refuse(err, EXDEV, "refusing to remove %s: it is a mount point", p->shown);
        if (entry < 0)
                return fs_resolve_error(ctx, err, -entry, p->shown);
        struct stat st;
        if (fstat(entry, &st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        if (!S_ISDIR(st.st_mode)) {
                if (p->dir_only)
                        return nsbox_refuse(err, ENOTDIR, "%s is not a directory", p->shown);
                if (unlinkat(parent, p->name, 0) < 0)
                        return nsbox_error(err, errno, "remove %s", p->shown);
                return 0;
        }
        if (recursive)
                return fs_remove_tree(ctx, parent, p->name, p->shown, err);
        if (unlinkat(parent, p->name, AT_REMOVEDIR) < 0) {
                if (errno == ENOTEMPTY || errno == EEXIST)
                        return nsbox_refuse(err, ENOTEMPTY,
                                            "%s is a directory that is not empty (recursive: true removes it "
                                            "and all it holds)",
                                            p->shown);
                return nsbox_error(err, errno, "remove %s", p->shown);
        }
        return 0;
}

/* ---- mkdir ---- */

int fs_mkdir_at(const struct fs_ctx *ctx, const struct fs_path *p, bool parents, bool *created,
                nsbox_error_t **err)
{
        *created = false;
        if (p->name == NULL) {
                if (!parents)
                        return nsbox_refuse(err, EEXIST, "%s already exists", p->shown);
                _cleanup_close_ int fd = -1;
                return fs_open_dir_creating(ctx, p->rel, &fd, err);
        }
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, parents, &parent, err);
        if (r < 0)
                return r;
        r = fs_mkdir_entry(ctx, parent, p->name, p->shown, err);
        if (r == -EEXIST) {
                _cleanup_close_ int fd =
                    fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
                struct stat st;
                if (parents && fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
                        return 0;
                return nsbox_refuse(err, EEXIST, "%s already exists", p->shown);
        }
        if (r == -ENOSPC || r == -EDQUOT)
                return fs_no_space(err, ctx, "mkdir", p->shown);
        if (r < 0)
                return nsbox_error(err, -r, "mkdir %s", p->shown);
        *created = true;
        return 0;
}

/* ---- list, stat ---- */

static int fs_name_compare(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int fs_list_names(const struct fs_ctx *ctx, const struct fs_path *p, int *dir, char ***names_out,
                  size_t *n_out, bool *scan_cut_out, nsbox_error_t **err)
{
        _cleanup_close_ int fd = fs_resolve(ctx, p->rel, O_RDONLY | O_DIRECTORY);
        if (fd < 0)
                return fs_resolve_error(ctx, err, -fd, p->shown);
        _cleanup_free_ char *buf = malloc(FS_DIRENT_BUFFER);
        char **names = NULL;
        size_t n = 0, cap = 0;
        bool scan_cut = false;
        int r = buf ? 0 : nsbox_error(err, ENOMEM, "list %s", p->shown);
        while (r == 0 && !scan_cut) {
                long got = syscall(SYS_getdents64, fd, buf, FS_DIRENT_BUFFER);
                if (got < 0) {
                        r = nsbox_error(err, errno, "read directory %s", p->shown);
                        break;
                }
                if (got == 0)
                        break;
                for (long off = 0; off < got;) {
                        struct fs_dirent64 *d = (struct fs_dirent64 *)(buf + off);
                        off += d->d_reclen;
                        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                                continue;
                        if (n == FS_LIST_SCAN_MAX) {
                                scan_cut = true;
                                break;
                        }
                        if (n == cap) {
                                size_t grown = cap ? cap * 2 : 256;
                                char **bigger = realloc(names, grown * sizeof(*names));
                                if (bigger == NULL) {
                                        r = nsbox_error(err, ENOMEM, "list %s", p->shown);
                                        break;
                                }
                                names = bigger;
                                cap = grown;
                        }
                        if ((names[n] = strdup(d->d_name)) == NULL) {
                                r = nsbox_error(err, ENOMEM, "list %s", p->shown);
                                break;
                        }
                        n++;
                }
        }
        /* The child exits right after: the names are not freed one by one. */
        if (r < 0)
                return r;
        if (n > 0)
                qsort(names, n, sizeof(*names), fs_name_compare);
        *dir = steal_fd(&fd);
        *names_out = names;
        *n_out = n;
        *scan_cut_out = scan_cut;
        return 0;
}

int fs_stat_at(const struct fs_ctx *ctx, const struct fs_path *p, int *out, struct stat *st,
               nsbox_error_t **err)
{
        /* O_PATH | O_NOFOLLOW: a final symlink is described, not followed. */
        _cleanup_close_ int fd = fs_resolve(ctx, p->rel, O_PATH | O_NOFOLLOW);
        if (fd < 0)
                return fs_resolve_error(ctx, err, -fd, p->shown);
        if (fstat(fd, st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        *out = steal_fd(&fd);
        return 0;
}

bool fs_read_is_large(const struct fs_ctx *ctx, const struct fs_path *p, uint64_t offset)
{
        _cleanup_close_ int fd = fs_resolve(ctx, p->rel, O_PATH);
        struct stat st;
        return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
               (uint64_t)st.st_size > offset + FS_INLINE_BYTES;
}

/* ---- rename, symlink, chmod ---- */

/* The entry `p` names, held without following it, in its parent `parent`
 * (opened by fs_open_parent). A mount point (the sandbox's /proc, a bind
 * mount) is refused: renaming or re-moding one is never the client's to do. */
static int fs_open_entry(const struct fs_ctx *ctx, int parent, const struct fs_path *p, const char *what,
                         int *out, struct stat *st, nsbox_error_t **err)
{
        int fd = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (fd == -EXDEV)
                return nsbox_refuse(err, EXDEV, "refusing to %s %s: it is a mount point", what, p->shown);
        if (fd < 0)
                return fs_resolve_error(ctx, err, -fd, p->shown);
        if (fstat(fd, st) < 0) {
                int e = errno;
                close(fd);
                return nsbox_error(err, e, "stat %s", p->shown);
        }
        if (p->dir_only && !S_ISDIR(st->st_mode)) {
                close(fd);
                return nsbox_refuse(err, ENOTDIR, "%s is not a directory", p->shown);
        }
        *out = fd;
        return 0;
}

/* Both ends are resolved to a parent directory fd inside the root and the
 * last components are renamed between those fds, so neither a symlink in
 * `from`/`to` nor one swapped in meanwhile moves anything out of (or into)
 * the sandbox. The parents of `to` must exist, as for rename(2). */
int fs_rename_at(const struct fs_ctx *ctx, const struct fs_path *from, const struct fs_path *to,
                 bool overwrite, nsbox_error_t **err)
{
        if (from->name == NULL || strcmp(from->name, "..") == 0)
                return nsbox_refuse(err, EINVAL, "refusing to rename %s", from->shown);
        if (to->name == NULL || strcmp(to->name, "..") == 0)
                return nsbox_refuse(err, EINVAL, "refusing to rename onto %s", to->shown);
        _cleanup_close_ int from_parent = -1, to_parent = -1, entry = -1;
        int r = fs_open_parent(ctx, from, false, &from_parent, err);
        if (r < 0)
                return r;
        struct stat st;
        r = fs_open_entry(ctx, from_parent, from, "rename", &entry, &st, err);
        if (r < 0)
                return r;
        r = fs_open_parent(ctx, to, false, &to_parent, err);
        if (r < 0)
                return r;
        /* A new name is an entry made: on an idmapped mount, as the user. */
        fs_create_as_user(
            ctx, r,
            renameat2(from_parent, from->name, to_parent, to->name, overwrite ? 0 : RENAME_NOREPLACE) < 0
                ? -errno
                : 0);
        if (r == 0)
                return 0;
        errno = -r;
        switch (errno) {
        case EEXIST:
                return nsbox_refuse(err, EEXIST, "%s already exists (set overwrite to replace it)",
                                    to->shown);
        case ENOTEMPTY:
                return nsbox_refuse(err, ENOTEMPTY, "%s is a directory that is not empty", to->shown);
        case EISDIR:
                return nsbox_refuse(err, EISDIR, "%s is a directory and %s is not", to->shown, from->shown);
        case ENOTDIR:
                return nsbox_refuse(err, ENOTDIR, "%s is a directory and %s is not", from->shown, to->shown);
        case EINVAL:
                return nsbox_refuse(err, EINVAL, "cannot move %s into itself (%s)", from->shown, to->shown);
        case EXDEV:
                /* overlayfs without redirect_dir cannot rename a directory
                 * that comes from the image; mount points are other file
                 * systems. */
                return nsbox_refuse(err, EXDEV,
                                    "cannot rename %s to %s: a directory from the image, or a move between "
                                    "file systems (copy and remove instead)",
                                    from->shown, to->shown);
        case ENOSPC:
        case EDQUOT:
                return fs_no_space(err, ctx, "rename", from->shown);
        default:
                return nsbox_error(err, errno, "rename %s to %s", from->shown, to->shown);
        }
}

/* The link's own path is resolved like any other (its parent inside the
 * root, its name never followed); the target is stored as given, since the
 * sandbox resolves it later in its own root, as the kernel always does. */
int fs_symlink_at(const struct fs_ctx *ctx, const char *target, const struct fs_path *p, bool overwrite,
                  nsbox_error_t **err)
{
        if (p->name == NULL || strcmp(p->name, "..") == 0 || p->dir_only)
                return nsbox_refuse(err, EINVAL, "refusing to create a symlink at %s", p->shown);
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, false, &parent, err);
        if (r < 0)
                return r;
        for (int attempt = 0;; attempt++) {
                int made;
                fs_create_as_user(ctx, made, symlinkat(target, parent, p->name) < 0 ? -errno : 0);
                if (made == 0)
                        break;
                errno = -made;
                if (errno == ENOSPC || errno == EDQUOT)
                        return fs_no_space(err, ctx, "symlink", p->shown);
                if (errno != EEXIST)
                        return nsbox_error(err, errno, "symlink %s", p->shown);
                if (!overwrite)
                        return nsbox_refuse(err, EEXIST, "%s already exists (set overwrite to replace it)",
                                            p->shown);
                if (attempt >= FS_RESOLVE_RETRIES)
                        return nsbox_refuse(err, EAGAIN, "%s: the sandbox kept recreating the path",
                                            p->shown);
                /* As ln -sf: a file or link is replaced, a directory is not. */
                _cleanup_close_ int old = -1;
                struct stat st;
                r = fs_open_entry(ctx, parent, p, "replace", &old, &st, err);
                if (r < 0)
                        return r;
                if (S_ISDIR(st.st_mode))
                        return nsbox_refuse(err, EISDIR, "%s is a directory", p->shown);
                if (unlinkat(parent, p->name, 0) < 0 && errno != ENOENT)
                        return nsbox_error(err, errno, "replace %s", p->shown);
        }
        _cleanup_close_ int link = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        struct stat st;
        if (link < 0 || fstat(link, &st) < 0 || !S_ISLNK(st.st_mode) || st.st_uid != 0)
                return 0; /* swapped already: the sandbox's own business */
        if (fchownat(link, "", ctx->uid, ctx->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return nsbox_error(err, errno, "chown %s to the sandbox user", p->shown);
        return 0;
}

int fs_chmod_at(const struct fs_ctx *ctx, const struct fs_path *p, mode_t mode, nsbox_error_t **err)
{
        /* A final symlink is followed, inside the root, as chmod(1) does. */
        _cleanup_close_ int fd = fs_resolve(ctx, p->rel, O_PATH);
        if (fd < 0)
                return fs_resolve_error(ctx, err, -fd, p->shown);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        if (p->dir_only && !S_ISDIR(st.st_mode))
                return nsbox_refuse(err, ENOTDIR, "%s is not a directory", p->shown);
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                return fs_refuse_type(err, st.st_mode, p->shown);
        /* fchmod does not take O_PATH fds; nsboxd's own /proc reaches the
         * inode already resolved, with no path walk left. */
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        if (chmod(proc, mode) < 0)
                return nsbox_error(err, errno, "chmod %s", p->shown);
        return 0;
}

/* fs_write_file's write, with the sandbox's root already pinned. */
int fs_write_path(struct fs_ctx *ctx, const char *path, const void *data, size_t len, mode_t mode,
                  nsbox_error_t **err)
{
        struct fs_path p;
        struct fs_write_options opts = { .mode = mode, .mode_set = true, .parents = true };
        int r = fs_path_parse(path, strlen(path), FS_PATH_WORKSPACE, &p, err);
        return r < 0 ? r : fs_write_at(ctx, &p, data, len, &opts, err);
}
