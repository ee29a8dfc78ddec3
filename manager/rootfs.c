/* SPDX-License-Identifier: Apache-2.0 */
/* The host side of a sandbox's root: image lower layers, the size-capped disk, the overlay. */
#include "rootfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cleanup.h"
#include "config.h"
#include "userns.h"

/* What may be mounted under a sandbox's dir on the host: its disk, and
 * the overlay that nsboxd before 2026-11-25 mounted at root (a record left by
 * such a run is cleaned up by this one). */
static const char *const host_mounts[] = { "root", "disk" };

int rootfs_prepare_upper(const char *dir, uint64_t disk_bytes, uint64_t disk_inodes, uid_t host_root,
                         nsbox_error_t **err)
{
        char path[4096], options[160];

        /* Everything the sandbox writes lands in this tmpfs: overlay upper,
         * /workspace, /tmp. Its size is the disk limit; ENOSPC stays inside.
         * nr_inodes too: tmpfs's own default is half the host's RAM pages,
         * and empty files, directories and symlinks use no size at all. */
        snprintf(path, sizeof(path), "%s/disk", dir);
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", path);
        snprintf(options, sizeof(options), "size=%llu,nr_inodes=%llu,mode=0700,uid=0,gid=0",
                 (unsigned long long)disk_bytes, (unsigned long long)disk_inodes);
        if (mount("nsbox-disk", path, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0)
                return nsbox_error(err, errno, "mount disk tmpfs on %s", path);
        static const char *const layers[] = { "upper", "work" };
        for (size_t i = 0; i < ARRAY_SIZE(layers); i++) {
                snprintf(path, sizeof(path), "%s/disk/%s", dir, layers[i]);
                if (mkdir(path, 0755) < 0)
                        return nsbox_error(err, errno, "mkdir %s", path);
                if (chown(path, host_root, host_root) < 0)
                        return nsbox_error(err, errno, "chown %s", path);
        }
        return 0;
}

/* A private clone of a read-only layer attached at `at`, idmapped so that
 * its files (stored with sandbox-side ids, 0 = the sandbox's root) belong to
 * this sandbox's range and no one else's. */
static int attach_layer(const char *layer, const char *at, int userns, bool idmap, nsbox_error_t **err)
{
        _cleanup_close_ int tree =
            (int)syscall(SYS_open_tree, AT_FDCWD, layer, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree < 0)
                return nsbox_error(err, errno, "open_tree %s", layer);
        struct mount_attr attr = {
                .attr_set =
                    (idmap ? MOUNT_ATTR_IDMAP : 0) | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                .userns_fd = (uint64_t)userns,
        };
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return nsbox_error(
                    err, errno, "idmap the layer %s (kernel or filesystem without idmapped mounts?)", layer);
        if (mkdir(at, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", at);
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, at, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return nsbox_error(err, errno, "attach the idmapped layer at %s", at);
        return 0;
}

/* Where fsconfig failed: the kernel's own words on the fs context fd
 * (one message a read, oldest first, "e overlayfs: ..." for an error),
 * where the file system gives any. */
static int fs_context_error(int fs, const char *what, nsbox_error_t **err)
{
        int errnum = errno;
        char line[512], why[512] = "";
        ssize_t n;
        while ((n = read(fs, line, sizeof(line) - 1)) > 0) {
                line[n] = '\0';
                line[strcspn(line, "\n")] = '\0';
                if (n > 2 && line[0] == 'e' && line[1] == ' ')
                        snprintf(why, sizeof(why), "%s", line + 2);
        }
        if (why[0] != '\0')
                return nsbox_error(err, errnum, "overlay %s: %s", what, why);
        return nsbox_error(err, errnum, "overlay %s", what);
}

static int make_overlay(const char *lowerdir, nsbox_error_t **err)
{
        _cleanup_close_ int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
        if (fs < 0)
                return nsbox_error(err, errno, "fsopen overlay");
        static const char *const strings[][2] = {
                { "source", "nsbox" },
                { "upperdir", "disk/upper" },
                { "workdir", "disk/work" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(strings); i++)
                if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, strings[i][0], strings[i][1], 0) < 0)
                        return fs_context_error(fs, strings[i][0], err);
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir", lowerdir, 0) < 0)
                return fs_context_error(fs, "lowerdir", err);
        /* In a user namespace overlayfs cannot set its trusted.* xattrs:
         * without userxattr (its metadata in user.overlay.*) it has no
         * redirects, and every rename of a directory fails with EXDEV. */
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "volatile", NULL, 0) < 0 ||
            (userns_active() && syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0))
                return fs_context_error(fs, "flags volatile, userxattr", err);
        if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return fs_context_error(fs, "create", err);
        int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mnt < 0)
                return nsbox_error(err, errno, "fsmount the overlay");
        return mnt;
}

int rootfs_mount_overlay(const char *dir, const char *const *layers, size_t n_layers, pid_t pid, bool idmap,
                         nsbox_error_t **err)
{
        char path[4096], lowerdir[1024];
        int r = 0;

        if (n_layers == 0 || n_layers > ROOTFS_MAX_LAYERS)
                return nsbox_error(err, EINVAL, "%zu layers (1 to %d)", n_layers, ROOTFS_MAX_LAYERS);
        snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
        _cleanup_close_ int userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0)
                return nsbox_error(err, errno, "open %s", path);

        /* Layer paths relative to the sandbox dir: the options show in the
         * sandbox's /proc/self/mountinfo, and host paths are none of its
         * business. */
        size_t len = 0;
        for (size_t i = 0; i < n_layers && r == 0; i++) {
                snprintf(path, sizeof(path), "%s/lower%zu", dir, i);
                r = attach_layer(layers[i], path, userns, idmap, err);
                len +=
                    (size_t)snprintf(lowerdir + len, sizeof(lowerdir) - len, "%slower%zu", i ? ":" : "", i);
        }
        /* nsboxd is single-threaded, so the chdir is private. The overlay
         * is never attached here: only the sandbox's mount namespace has
         * it, so nothing of it propagates to or from the host's. */
        if (r == 0 && chdir(dir) < 0)
                r = nsbox_error(err, errno, "chdir %s", dir);
        if (r == 0) {
                r = make_overlay(lowerdir, err);
                if (chdir("/") < 0 && r >= 0) {
                        close(r);
                        r = nsbox_error(err, errno, "chdir /");
                }
        }
        /* The overlay holds its own references to its layers and upper (and
         * an fd nsboxd opened on the disk to it): nothing stays mounted on
         * the host. */
        for (size_t i = 0; i < n_layers; i++) {
                snprintf(path, sizeof(path), "%s/lower%zu", dir, i);
                umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
        }
        snprintf(path, sizeof(path), "%s/disk", dir);
        umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
        return r;
}

void rootfs_detach(const char *dir)
{
        char path[4096];
        for (size_t i = 0; i < ARRAY_SIZE(host_mounts); i++) {
                snprintf(path, sizeof(path), "%s/%s", dir, host_mounts[i]);
                while (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
                        ;
        }
        /* Layer mount points are made in order: the first missing one ends them. */
        for (size_t i = 0; i < ROOTFS_MAX_LAYERS; i++) {
                snprintf(path, sizeof(path), "%s/lower%zu", dir, i);
                while (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
                        ;
                if (errno == ENOENT)
                        break;
        }
}

static int remove_tree_at(int parent, const char *name, dev_t dev, int depth)
{
        if (depth > 256)
                return -ELOOP;
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(parent, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        if (st.st_dev != dev)
                return -EBUSY; /* a mount still sits here: never reach into it */

        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (d == NULL) {
                close(fd);
                return -errno;
        }
        int r = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                int rr = remove_tree_at(dirfd(d), de->d_name, dev, depth + 1);
                if (rr < 0 && r == 0)
                        r = rr;
        }
        closedir(d);
        if (r == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                r = -errno;
        return r;
}

int rootfs_remove_dir(const char *dir, nsbox_error_t **err)
{
        struct stat st;
        if (lstat(dir, &st) < 0)
                return errno == ENOENT ? 0 : nsbox_error(err, errno, "stat %s", dir);
        int r = remove_tree_at(AT_FDCWD, dir, st.st_dev, 0);
        if (r < 0)
                return nsbox_error(err, -r, "remove %s", dir);
        return 0;
}

/* Overlay's own metadata (opaque dirs, redirects, metacopy) and what the
 * sandbox set itself (user.*). trusted.overlay.origin names an inode of the
 * filesystem the layer came from: meaningless anywhere else. Capabilities
 * and ACLs are not kept: a sandbox runs with no_new_privs and no
 * capabilities, so file capabilities would be inert anyway. */
static bool layer_xattr_kept(const char *name)
{
        if (strncmp(name, "trusted.overlay.", 16) == 0)
                return strcmp(name, "trusted.overlay.origin") != 0;
        return strncmp(name, "user.", 5) == 0;
}

static int copy_xattrs(int src, int dst)
{
        char names[16384], value[16384];
        ssize_t n = flistxattr(src, names, sizeof(names));
        if (n < 0)
                return errno == ENOTSUP ? 0 : -errno;
        for (char *name = names; name < names + n; name += strlen(name) + 1) {
                if (!layer_xattr_kept(name))
                        continue;
                ssize_t len = fgetxattr(src, name, value, sizeof(value));
                if (len < 0)
                        continue; /* removed meanwhile, or larger than a layer needs */
                if (fsetxattr(dst, name, value, (size_t)len, 0) < 0)
                        return -errno;
        }
        return 0;
}

static uid_t layer_map_id(const struct rootfs_copy *c, unsigned id)
{
        if (!c->shift)
                return id;
        if (id >= c->from_base && id - c->from_base < NSBOX_UID_RANGE)
                return id - c->from_base;
        return 65534; /* not an id of the sandbox's range: nobody */
}

/* rootfs_copy_file, but -EAGAIN when src_dir/name is no longer a regular
 * file, and at most `most` bytes: what the copy was charged for. A sandbox
 * may grow the file between the charge and the copy (a sparse ftruncate to
 * a terabyte costs its own disk nothing); the bytes past the charge are
 * never read, whatever the file says its size is now. */
static int copy_regular(int src_dir, int dst_dir, const char *name, uint64_t most)
{
        /* O_NONBLOCK: the sandbox may have swapped the file for a FIFO
         * since the listing, and opening that must not wait for a writer. */
        _cleanup_close_ int src =
            openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        if (src < 0) {
                int saved = errno;
                struct stat then;
                /* A symlink (ELOOP), a whiteout on the nodev tmpfs (EACCES),
                 * a socket (ENXIO): the sandbox replaced the file since the
                 * listing, and the caller copies what is there now. */
                if (saved == ELOOP ||
                    (saved != ENOENT && fstatat(src_dir, name, &then, AT_SYMLINK_NOFOLLOW) == 0 &&
                     !S_ISREG(then.st_mode)))
                        return -EAGAIN;
                return -saved;
        }
        struct stat now;
        if (fstat(src, &now) < 0)
                return -errno;
        if (!S_ISREG(now.st_mode))
                return -EAGAIN;
        _cleanup_close_ int dst =
            openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dst < 0)
                return -errno;
        while (most > 0) {
                ssize_t n = sendfile(dst, src, NULL, most < (1u << 30) ? (size_t)most : (1u << 30));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                most -= (uint64_t)n;
        }
        return copy_xattrs(src, dst);
}

int rootfs_copy_file(int src_dir, int dst_dir, const char *name)
{
        int r = copy_regular(src_dir, dst_dir, name, UINT64_MAX);
        return r == -EAGAIN ? 0 : r; /* not a file (now): nothing to copy */
}

static int copy_entry(int src_dir, int dst_dir, const char *name, struct rootfs_copy *c, int depth);

static int copy_dir_entries(int src, int dst, struct rootfs_copy *c, int depth)
{
        int fd = fcntl(src, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (d == NULL) {
                close(fd);
                return -errno;
        }
        int r = 0;
        struct dirent *de;
        while (r == 0 && (de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (c->max_inodes > 0 && ++c->visited > 2 * c->max_inodes + ROOTFS_COPY_SLACK)
                        r = -EBUSY; /* the sandbox adds entries as fast as they are read */
                else
                        r = copy_entry(src, dst, de->d_name, c, depth + 1);
        }
        closedir(d);
        return r;
}

#define LAYER_BLOCK 4096ull

/* Counted before the inode is made, so a copy never goes past a bound. */
static int charge(struct rootfs_copy *c, uint64_t bytes, unsigned inodes)
{
        bytes = (bytes + LAYER_BLOCK - 1) / LAYER_BLOCK * LAYER_BLOCK;
        if (c->max_bytes != 0 && c->bytes + bytes > c->max_bytes)
                return -ENOSPC;
        if (c->max_inodes != 0 && c->inodes + inodes > c->max_inodes)
                return -EDQUOT;
        c->bytes += bytes;
        c->inodes += inodes;
        if (c->progress != NULL)
                c->progress(c);
        return 0;
}

/* One try at copying src_dir/name. -EAGAIN: the sandbox replaced it by
 * something of another type after the stat (nothing made in dst for it). */
static int copy_entry_once(int src_dir, int dst_dir, const char *name, struct rootfs_copy *c, int depth)
{
        struct stat st, old;
        /* Gone since the listing: the sandbox deleted it while we copied. */
        if (fstatat(src_dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        bool have_old = fstatat(dst_dir, name, &old, AT_SYMLINK_NOFOLLOW) == 0;
        uid_t uid = layer_map_id(c, st.st_uid);
        gid_t gid = layer_map_id(c, st.st_gid);
        struct timespec times[2] = { st.st_atim, st.st_mtim };
        int r;

        if (S_ISDIR(st.st_mode)) {
                _cleanup_close_ int src =
                    openat(src_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                /* Removed, or replaced by something else, since the stat:
                 * the sandbox runs while we copy. */
                if (src < 0)
                        return errno == ENOENT ? 0 : errno == ENOTDIR || errno == ELOOP ? -EAGAIN : -errno;
                char v[2];
                bool opaque = fgetxattr(src, "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y';
                /* Merging onto an older layer: an opaque directory replaces
                 * what was there, a plain one adds to it. */
                if (have_old && (!S_ISDIR(old.st_mode) || opaque)) {
                        if ((r = remove_tree_at(dst_dir, name, old.st_dev, 0)) < 0)
                                return r;
                        have_old = false;
                }
                if ((r = charge(c, LAYER_BLOCK, !have_old)) < 0)
                        return r;
                if (!have_old && mkdirat(dst_dir, name, 0700) < 0)
                        return -errno;
                _cleanup_close_ int dst =
                    openat(dst_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dst < 0)
                        return -errno;
                if ((r = copy_xattrs(src, dst)) < 0 || (r = copy_dir_entries(src, dst, c, depth)) < 0)
                        return r;
                if (fchown(dst, uid, gid) < 0 || fchmod(dst, st.st_mode & 07777) < 0 ||
                    futimens(dst, times) < 0)
                        return -errno;
                return 0;
        }
        if (have_old && (r = remove_tree_at(dst_dir, name, old.st_dev, 0)) < 0)
                return r;
        mode_t mode = st.st_mode & 07777;
        if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
                for (size_t i = 0; i < c->n_links; i++) {
                        if (c->links[i].dev == st.st_dev && c->links[i].ino == st.st_ino)
                                return linkat(c->links[i].fd, "", dst_dir, name, AT_EMPTY_PATH) < 0 ? -errno
                                                                                                    : 0;
                }
        }
        if (S_ISREG(st.st_mode)) {
                if ((r = charge(c, (uint64_t)st.st_size, 1)) < 0)
                        return r;
                r = copy_regular(src_dir, dst_dir, name, (uint64_t)st.st_size);
                if (r == -ENOENT)
                        return 0;
                if (r < 0)
                        return r;
                /* Inert in a sandbox (no_new_privs), and no file of the
                 * sandbox's making becomes a setuid file on the host. */
                mode &= ~(mode_t)(S_ISUID | S_ISGID);
        } else if (S_ISLNK(st.st_mode)) {
                char target[4096];
                ssize_t n = readlinkat(src_dir, name, target, sizeof(target) - 1);
                if (n < 0)
                        return errno == ENOENT ? 0 : errno == EINVAL ? -EAGAIN : -errno;
                target[n] = '\0';
                if ((r = charge(c, 0, 1)) < 0)
                        return r;
                if (symlinkat(target, dst_dir, name) < 0)
                        return -errno;
        } else if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
                /* A whiteout: the file below it was deleted in the sandbox. */
                if ((r = charge(c, 0, 1)) < 0)
                        return r;
                if (mknodat(dst_dir, name, S_IFCHR | mode, makedev(0, 0)) < 0)
                        return -errno;
        } else if (S_ISFIFO(st.st_mode)) {
                if ((r = charge(c, 0, 1)) < 0)
                        return r;
                if (mknodat(dst_dir, name, S_IFIFO | 0600, 0) < 0)
                        return -errno;
        } else {
                return 0; /* sockets, and devices a sandbox cannot have made */
        }
        if (fchownat(dst_dir, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (!S_ISLNK(st.st_mode) && fchmodat(dst_dir, name, mode, 0) < 0)
                return -errno;
        if (utimensat(dst_dir, name, times, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISREG(st.st_mode) && st.st_nlink > 1 && c->n_links < ROOTFS_COPY_MAX_LINKS) {
                if (c->links == NULL && (c->links = calloc(ROOTFS_COPY_MAX_LINKS, sizeof(*c->links))) == NULL)
                        return 0; /* the other names become copies */
                int fd = openat(dst_dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0)
                        c->links[c->n_links++] = (struct rootfs_copy_link){ st.st_dev, st.st_ino, fd };
        }
        return 0;
}

/* The sandbox runs while its layer is copied: what was a symlink at the
 * stat may be a file at the readlink (EINVAL), a file a FIFO or directory
 * at the open. Such an entry is copied again as it is then, not failed. */
static int copy_entry(int src_dir, int dst_dir, const char *name, struct rootfs_copy *c, int depth)
{
        if (depth > ROOTFS_COPY_MAX_DEPTH)
                return -ELOOP;
        int r = -EAGAIN;
        for (int try = 0; r == -EAGAIN && try < ROOTFS_COPY_RETRIES; try++) {
                /* What a failed try charged for the entry is not kept. */
                uint64_t bytes = c->bytes, inodes = c->inodes;
                r = copy_entry_once(src_dir, dst_dir, name, c, depth);
                if (r == -EAGAIN) {
                        c->bytes = bytes;
                        c->inodes = inodes;
                }
        }
        /* Not -EAGAIN: that would make the directory above try again. */
        return r == -EAGAIN ? -EBUSY : r;
}

int rootfs_copy_layer(int src, int dst, struct rootfs_copy *c)
{
        return copy_dir_entries(src, dst, c, 0);
}

void rootfs_copy_done(struct rootfs_copy *c)
{
        for (size_t i = 0; i < c->n_links; i++)
                close(c->links[i].fd);
        free(c->links);
        c->links = NULL;
        c->n_links = 0;
}

int rootfs_remove_at(int dir, const char *name)
{
        struct stat st;
        if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        return remove_tree_at(dir, name, st.st_dev, 0);
}
