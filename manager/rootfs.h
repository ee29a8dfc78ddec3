/* SPDX-License-Identifier: Apache-2.0 */
/* The host side of a sandbox's root: an idmapped mount of the shared
 * read-only image as overlay lower, a size-capped tmpfs holding the
 * per-sandbox upper layer. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Under dir: mount a tmpfs of disk_bytes and disk_inodes at dir/disk
 * (upper + work inside, owned by the sandbox's host root uid). */
int rootfs_prepare_upper(const char *dir, uint64_t disk_bytes, uint64_t disk_inodes, uid_t host_root,
                         nsbox_error_t **err);
/* Inodes of a sandbox's disk that are not its changes: the tmpfs root,
 * upper, work and what overlay keeps in work (df -i in a new sandbox: 8). */
#define ROOTFS_DISK_OWN_INODES 8
/* Read-only layers below a sandbox's upper: its image and the image's
 * parents, and the snapshot it was forked from. */
#define ROOTFS_MAX_LAYERS 16

/* Make the sandbox's overlay, detached (never attached on the host):
 * lower = layers (top first) each idmapped through the user namespace of
 * `pid`, upper and work from rootfs_prepare_upper(). Returns its mount fd
 * (for move_mount) or a negative errno. Either way the layers and the disk
 * are unmounted from dir after: nothing of the sandbox stays mounted on the
 * host (an fd opened on the disk before keeps it reachable). */
int rootfs_mount_overlay(const char *dir, const char *const *layers, size_t n_layers, pid_t pid, bool idmap,
                         nsbox_error_t **err);
/* Detach every host-side mount under dir (the sandbox keeps its own copies). */
void rootfs_detach(const char *dir);
/* Remove dir and everything below it, never following symlinks or crossing
 * into other mounts. */
int rootfs_remove_dir(const char *dir, nsbox_error_t **err);

/* Copying an overlay layer (an upper, or a stored snapshot layer) into a
 * stored layer, as another layer over the same lower ones would see it. */
struct rootfs_copy {
        bool shift;          /* host ids from_base.. become sandbox-side ids 0.. */
        uid_t from_base;     /* the sandbox's host range (ids outside it: 65534) */
        uint64_t max_bytes;  /* -ENOSPC beyond it (0: no bound) */
        uint64_t bytes;      /* what was copied, in 4 KiB blocks */
        uint64_t max_inodes; /* -EDQUOT beyond it (0: no bound) */
        /* Inodes made: every directory, file, symlink, FIFO and whiteout
         * (a hard link to a file already copied makes none). Empty files
         * cost no bytes, so bytes alone do not bound a layer. */
        uint64_t inodes;
        /* Entries looked at, those gone or skipped by the time they were
         * reached too: a sandbox making and removing names as fast as the
         * walk reads them (a tmpfs directory's listing goes on past entries
         * added behind its cursor) would keep it going for ever. -EBUSY past
         * 2 x max_inodes + ROOTFS_COPY_SLACK. */
        uint64_t visited;
        /* Called after each entry is charged, if set (a file worker's
         * fs_worker_progress, say). */
        void (*progress)(const struct rootfs_copy *c);
        /* Files with more than one link seen so far (the first copy held
         * by an O_PATH fd), so that their other names become links too. */
        struct rootfs_copy_link {
                dev_t dev;
                ino_t ino;
                int fd;
        } * links;
        size_t n_links;
};
#define ROOTFS_COPY_SLACK 1024
/* At most this many linked files are remembered; beyond, copies. */
#define ROOTFS_COPY_MAX_LINKS 1024
/* Each level holds three fds and a few KiB of stack in the worker; below
 * the depth rootfs_remove_dir goes to, so a half-made copy is removed. */
#define ROOTFS_COPY_MAX_DEPTH 200

/* How often one entry is copied again when the running sandbox replaced it
 * by something of another type between its stat and its copy. */
#define ROOTFS_COPY_RETRIES 16

/* Copy the entries of the directory src into the directory dst, merged as
 * overlay would stack them: whiteouts (0:0 character devices) and opaque
 * directories (trusted.overlay.opaque) replace what dst holds, plain
 * directories add to it. Regular files are copied (never linked to the
 * source: it may be a live writable layer; names of one file in the source
 * are links to one copy), setuid/setgid bits dropped, owners
 * shifted by `c`. Never follows symlinks. An entry removed meanwhile is
 * skipped; one replaced by another type is copied as it is then, and
 * -EBUSY when it kept changing for ROOTFS_COPY_RETRIES tries. Returns 0,
 * -ENOSPC or -EDQUOT past c's bounds, or a negative errno. */
int rootfs_copy_layer(int src, int dst, struct rootfs_copy *c);
/* Copy the regular file src_dir/name (data and xattrs, never following a
 * symlink; 0 and nothing copied if it is not a regular file) to a new file
 * dst_dir/name, mode 0600. Returns 0 or a negative errno. */
int rootfs_copy_file(int src_dir, int dst_dir, const char *name);
/* Close what rootfs_copy_layer remembered of c's hard links. */
void rootfs_copy_done(struct rootfs_copy *c);
/* Remove dir/name and everything below, as rootfs_remove_dir. */
int rootfs_remove_at(int dir, const char *name);
