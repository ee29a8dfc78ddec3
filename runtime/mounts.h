/* SPDX-License-Identifier: Apache-2.0 */
/* Mounts inside a new sandbox, done by the setup child (setup.c). */
#pragma once

#include <stdint.h>

#include "error.h"

/* In the sandbox's fresh, private mount namespace (a copy of nsboxd's base
 * one, manager/basens.c): mount /proc (masked), /dev (its /dev/shm a tmpfs
 * of shm_bytes) and /sys into `root` (already the overlay), then chroot
 * into it. */
int mounts_enter_root(const char *root, uint64_t shm_bytes, nsbox_error_t **err);

/* Attach the detached mount `tree` at `path` (absolute, in the root we are
 * chrooted into), making the directories missing on the way (mode 0755).
 * No component may be a symlink: the sandbox's files (a snapshot's layer)
 * must not point a mount elsewhere. */
int mounts_attach(int tree, const char *path, nsbox_error_t **err);

/* The device nodes of a sandbox's /dev: bound from /dev/<name> of the base
 * namespace, which holds binds of the host's. */
extern const char *const mounts_device_nodes[];
#define MOUNTS_DEVICE_NODES 6
