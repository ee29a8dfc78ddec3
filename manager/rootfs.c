#include "rootfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"

static const char *const host_mounts[] = { "root", "lower", "disk" };

int rootfs_prepare_upper(const char *dir, uint64_t disk_bytes, uid_t host_root, nsbox_error_t **err)
{
        char path[4096], options[128];

        for (size_t i = 0; i < ARRAY_SIZE(host_mounts); i++) {
                snprintf(path, sizeof(path), "%s/%s", dir, host_mounts[i]);
                if (mkdir(path, 0700) < 0 && errno != EEXIST)
                        return nsbox_error(err, errno, "mkdir %s", path);
        }
        /* Everything the sandbox writes lands in this tmpfs: overlay upper,
         * /workspace, /tmp. Its size is the disk limit; ENOSPC stays inside. */
        snprintf(path, sizeof(path), "%s/disk", dir);
        snprintf(options, sizeof(options), "size=%llu,mode=0700,uid=0,gid=0", (unsigned long long)disk_bytes);
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

int rootfs_mount_overlay(const char *dir, const char *image_rootfs, pid_t pid, bool idmap,
                         nsbox_error_t **err)
{
        char path[4096], lower[4096], options[12800];

        snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
        _cleanup_close_ int userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0)
                return nsbox_error(err, errno, "open %s", path);

        /* A private clone of the image mount, idmapped so that the image's
         * root-owned files belong to this sandbox's root and no one else's. */
        _cleanup_close_ int tree =
            (int)syscall(SYS_open_tree, AT_FDCWD, image_rootfs, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree < 0)
                return nsbox_error(err, errno, "open_tree %s", image_rootfs);
        struct mount_attr attr = {
                .attr_set =
                    (idmap ? MOUNT_ATTR_IDMAP : 0) | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                .userns_fd = (uint64_t)userns,
        };
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return nsbox_error(err, errno,
                                   "idmap the image %s (kernel or filesystem without idmapped mounts?)",
                                   image_rootfs);
        snprintf(lower, sizeof(lower), "%s/lower", dir);
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, lower, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return nsbox_error(err, errno, "attach the idmapped image at %s", lower);

        snprintf(path, sizeof(path), "%s/root", dir);
        /* Layer paths relative to the sandbox dir: the options show in the
         * sandbox's /proc/self/mountinfo, and host paths are none of its
         * business. nsboxd is single-threaded, so the chdir is private. */
        snprintf(options, sizeof(options), "lowerdir=lower,upperdir=disk/upper,workdir=disk/work,volatile");
        if (chdir(dir) < 0)
                return nsbox_error(err, errno, "chdir %s", dir);
        int r = 0;
        if (mount("nsbox", "root", "overlay", MS_NOSUID | MS_NODEV, options) < 0)
                r = nsbox_error(err, errno, "mount overlay on %s", path);
        if (chdir("/") < 0 && r == 0)
                r = nsbox_error(err, errno, "chdir /");
        /* The overlay holds its own reference to the lower layer. */
        umount2(lower, MNT_DETACH);
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
