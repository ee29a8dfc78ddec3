/* SPDX-License-Identifier: Apache-2.0 */
/* fs.watch (fs_watch.c): a directory of a sandbox watched with inotify,
 * its changes streamed to the client as fs.event notifications until the
 * client leaves or the sandbox ends. Bounded per sandbox. */
#pragma once

#include "rpc.h"

struct sandbox;

/* Watch streams one sandbox may have at once. */
#define FS_WATCH_PER_SANDBOX 16
/* Directories one recursive watch follows; past it the stream says so. */
#define FS_WATCH_MAX_DIRS 1024

void fs_method_watch(struct rpc_request *req, struct sandbox *sb);
/* The sandbox is ending: end its watches. */
void fs_watch_sandbox_gone(struct sandbox *sb);
