/* SPDX-License-Identifier: Apache-2.0 */
/* A client's own host directories mounted into its sandboxes: opened with
 * the client's credentials below the operator's host_mount_roots, then
 * cloned as a detached mount idmapped so that the client's files are the
 * sandbox user's. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

/* Open the directory `path` (absolute, normalized) as `caller` would: in a
 * child that has the caller's uid, gid and groups, below the longest of
 * host_mount_roots that holds it, never through a symlink, and only if the
 * caller owns it (root: any) and may read it, and write it unless
 * read_only. Returns an O_PATH fd (what the mount is made from: nothing is
 * resolved again between the check and the mount) or a negative errno:
 * -EPERM when the caller may not have it, the message says why. */
int host_mount_open(uid_t caller, const char *path, bool read_only, nsbox_error_t **err);

/* A user namespace that maps one id, on-disk `disk_uid`/`disk_gid` to the
 * kernel ids `uid`/`gid`, for idmapped mounts: through it a host directory
 * shows the caller's files as the sandbox user's, and stores what that user
 * makes as the caller's (uidmode.c probes idmapped mounts with one too).
 * Returns its fd or a negative errno. */
int host_mount_userns(uid_t disk_uid, gid_t disk_gid, uid_t uid, gid_t gid, nsbox_error_t **err);

/* The caller's primary gid (its passwd entry's; without one, its uid). */
gid_t host_mount_caller_gid(uid_t caller);

/* A detached clone of the mount at the directory fd `dir` (not its
 * submounts), idmapped through `userns`, nosuid, nodev, read-only if asked.
 * Returns its fd (for move_mount) or a negative errno. */
int host_mount_clone_idmapped(int dir, int userns, bool read_only, nsbox_error_t **err);

/* Idmap the detached mount `tree` as host_mount_clone_idmapped does. */
int host_mount_idmap(int tree, int userns, bool read_only, const char *what, nsbox_error_t **err);
