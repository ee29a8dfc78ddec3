/* SPDX-License-Identifier: Apache-2.0 */
/* envd's file watching (e2b_watch.c) on nsboxd's fs.watch:
 * filesystem.Filesystem's WatchDir stream, and the polling watcher
 * (CreateWatcher, GetWatcherEvents, RemoveWatcher) the synchronous Python
 * SDK uses. A handler of the router. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>

#include "request.h"

/* Polling watchers one owner may hold; each is dropped after this long
 * without a GetWatcherEvents. */
#define E2B_WATCHERS_PER_OWNER   64
#define E2B_WATCHER_IDLE_SECONDS 300
/* Events a polling watcher keeps between two polls; past it they are lost. */
#define E2B_WATCHER_MAX_EVENTS 10000

enum MHD_Result http_e2b_watch_dir(struct http_request *r, const char *sandbox_id, json_t *msg);
enum MHD_Result http_e2b_watcher(struct http_request *r, const char *sandbox_id, const char *method,
                                 json_t *msg);
