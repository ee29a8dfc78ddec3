/* SPDX-License-Identifier: Apache-2.0 */
/* fs.watch (fs_watch.c): a directory of a sandbox watched with inotify,
 * its changes streamed to the client as fs.event notifications until the
 * client leaves or the sandbox ends. Bounded per sandbox. */
#pragma once

#include "rpc.h"

struct sandbox;

#include "sandbox_limits.h"

/* Watch streams one sandbox may have at once (each an inotify instance of
 * nsboxd's, host root's: host_pools.c keeps room for them). */
#define FS_WATCH_PER_SANDBOX SANDBOX_WATCH_INSTANCES
/* Directories the watches of one sandbox follow together; past it a
 * stream says so. */
#define FS_WATCH_MAX_DIRS SANDBOX_WATCH_DIRS

void fs_method_watch(struct rpc_request *req, struct sandbox *sb);
/* The sandbox is ending: end its watches. */
void fs_watch_sandbox_gone(struct sandbox *sb);
