/* SPDX-License-Identifier: Apache-2.0 */
/* The temporary files a client writes in pieces (nsbox cp's and
 * nsbox-http's uploads, named as staging_name_is knows them), remembered
 * per connection and removed when that connection ends with them still
 * there: a writer killed mid-way (SIGKILL, an OOM kill, a lost pod) leaves
 * nothing behind. Only the writing connection's end removes its files.
 * Each sandbox's are in a journal in its dir too, so that the nsboxd that
 * adopts it after a kill -9 of nsboxd removes them (live restore). */
#pragma once

#include <stdbool.h>

#include "fs_path.h"
#include "rpc.h"

struct sandbox;

/* The most temporary files one connection holds at once (written, not yet
 * renamed or removed): a writer has one or two; past it a write of another
 * is refused, so that no client grows nsboxd's memory without bound. */
#define FS_STAGING_MAX 1024

/* Whether a write of p in sb (NULL: a volume, whose writers write whole
 * files) is one of a temporary file kept here. */
bool fs_staging_is(const struct sandbox *sb, const struct fs_path *p);
/* Whether req's connection may hold p too (it already does, or holds
 * fewer than FS_STAGING_MAX); when not, the request is answered
 * limit_reached. */
bool fs_staging_room(struct rpc_request *req, const struct fs_path *p);
/* req's connection wrote p in sandbox_id: a file, or (tree) a directory
 * fs.mkdir made, removed with all it holds. */
void fs_staging_wrote(struct rpc_request *req, const char *sandbox_id, const struct fs_path *p, bool tree);
/* from was removed (to NULL) or renamed to `to` on req's connection: it and
 * what is under it are forgotten; renamed to a temporary name, it is kept
 * under that name. */
void fs_staging_moved(struct rpc_request *req, const char *sandbox_id, const struct fs_path *from,
                      const struct fs_path *to);
/* sb was adopted (live restore): the temporary files its journal says the
 * previous nsboxd kept are removed, as at a connection's end. */
void fs_staging_restore(struct sandbox *sb);
