/* SPDX-License-Identifier: Apache-2.0 */
/* Named volumes: a client's ext4 file systems in image files under the
 * state dir (volumes/UID/NAME/{volume.json,image}), each its own quota,
 * mounted idmapped into the sandboxes that ask for them. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "fs_ops.h"
#include "rpc.h"
#include "sandbox.h"
#include "sandbox_user.h"

/* The sandbox user's ids (the image's uid 1000): a new volume's root is
 * theirs, and a host directory's owner appears as them. */
#define VOLUME_SANDBOX_USER NSBOX_SANDBOX_USER
#define VOLUME_MIN_BYTES    (16ull << 20)
#define VOLUME_MAX_PER_UID  64

/* Why mounts are refused by an nsboxd in a user namespace (rootless or
 * nested): no loop devices, no ext4 mounts, no idmapped clones of host
 * directories there. */
#define VOLUMES_USERNS_REFUSAL                                                                     \
        "volumes and host directory mounts need nsboxd running as host root: in a user namespace " \
        "(rootless or nested mode) it can make no loop devices, mount no ext4 and idmap no host "  \
        "directory; copy files in and out instead (nsbox cp, fs.write, fs.read)"

void volume_method_create(struct rpc_request *req, struct sandbox *sb);
void volume_method_list(struct rpc_request *req, struct sandbox *sb);
void volume_method_remove(struct rpc_request *req, struct sandbox *sb);

/* Does `owner` have the volume `name`? */
bool volume_exists(uid_t owner, const char *name);

/* A detached mount of `owner`'s volume `name`, idmapped through the user
 * namespace `userns` (the sandbox's: files on the volume are stored with
 * sandbox-side ids, so every sandbox sees them as its own), read-only if
 * asked. Sandboxes that use one volume at once share its file system (one
 * loop device, one superblock). Returns the mount fd or a negative errno
 * (-ENOENT: no such volume of the owner's). */
int volume_mount_tree(uid_t owner, const char *name, int userns, bool read_only, nsbox_error_t **err);

/* Pin `owner`'s volume `name` for one file call without a sandbox
 * (volume.fs.*): its ext4 mounted detached, as the volume stores its ids.
 * -ENOENT when the owner has no such volume. */
int volume_fs_open(uid_t owner, const char *name, struct fs_ctx *ctx, nsbox_error_t **err);
