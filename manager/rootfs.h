/* The host side of a sandbox's root: an idmapped mount of the shared
 * read-only image as overlay lower, a size-capped tmpfs holding the
 * per-sandbox upper layer. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Under dir: mount a tmpfs of disk_bytes at dir/disk (upper + work inside,
 * owned by the sandbox's host root uid). */
int rootfs_prepare_upper(const char *dir, uint64_t disk_bytes, uid_t host_root, nsbox_error_t **err);
/* Mount the overlay at dir/root: lower = image_rootfs idmapped through the
 * user namespace of `pid`, upper and work from rootfs_prepare_upper(). */
int rootfs_mount_overlay(const char *dir, const char *image_rootfs, pid_t pid, bool idmap,
                         nsbox_error_t **err);
/* Detach every host-side mount under dir (the sandbox keeps its own copies). */
void rootfs_detach(const char *dir);
/* Remove dir and everything below it, never following symlinks or crossing
 * into other mounts. */
int rootfs_remove_dir(const char *dir, nsbox_error_t **err);
