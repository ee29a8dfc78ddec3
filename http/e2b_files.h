/* SPDX-License-Identifier: Apache-2.0 */
/* envd's files (e2b_files.c): GET and POST /files (a file's bytes, down and
 * up) and the filesystem.Filesystem service over Connect (Stat, ListDir,
 * MakeDir, Move, Remove; WatchDir and the polling watcher on fs.watch), on
 * nsboxd's fs.* methods. A handler of the router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

enum MHD_Result http_e2b_files(struct http_request *r, const char *sandbox_id);
/* POST /filesystem.Filesystem/<method>. */
enum MHD_Result http_e2b_filesystem(struct http_request *r, const char *sandbox_id, const char *method);
