/* SPDX-License-Identifier: Apache-2.0 */
/* File snapshots of sandboxes, forks from them, and the copy of a
 * sandbox's file changes that images.c commits as an image.
 *
 * A snapshot is STATE/snapshots/ID/{snapshot.json, layer/}: the sandbox's
 * overlay upper (its /workspace, /tmp and every change to the image,
 * deletions as whiteouts) copied into one layer stored with sandbox-side
 * ids (0 = the sandbox's root), exactly like an image. A sandbox created
 * from it mounts that layer, idmapped to its own uid range, read-only
 * between its own empty upper and its image. The directory is the record:
 * snapshots outlive nsboxd restarts. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "rpc.h"

struct sandbox;

/* A sandbox mounts the snapshot's layer: it cannot be removed until release. */
void snapshot_hold(const char *id);
void snapshot_release(const char *id);
/* STATE/snapshots/ID/layer. */
void snapshot_layer_path(const char *id, char *out, size_t len);
/* The snapshot named by params[key] that req's caller may fork from, after
 * checking it is whole and matches this daemon's uid mode: its record (new
 * reference), or NULL after replying the error. */
json_t *snapshot_require(struct rpc_request *req, const char *key);
/* Any snapshot, or a live sandbox, built on this image. */
bool snapshot_image_used(const char *image);
/* The error kind of a copy's failure r: limit_reached (layer_disk_bytes,
 * -ENOSPC, or a layer_inodes bound, -EDQUOT), busy, or internal. */
const char *snapshot_copy_error_kind(int r);

/* Copy what sandbox sb changed (its snapshot's layer, merged with its
 * upper) into the directory dst_fd, in a forked worker, within
 * layer_disk_bytes and the layer_inodes bounds. done runs in the loop with
 * r < 0 and a message, or r = 0, the copy's size and result.inodes; with
 * dists, result.dists lists the Python distributions the layer adds and
 * removes ({added: {name: version}, removed: [name]}). */
typedef void (*snapshot_copy_done_fn)(void *data, int r, uint64_t size_bytes, json_t *result,
                                      const char *message);
int snapshot_copy_sandbox(struct sandbox *sb, int dst_fd, uid_t owner, bool dists,
                          struct rpc_request *progress_to, snapshot_copy_done_fn done, void *data,
                          nsbox_error_t **err);
/* Remove dir (made by nsboxd, below the state dir) in a forked worker;
 * done(data, r, 0, NULL, message) when it is gone. */
int snapshot_remove_dir_async(const char *dir, snapshot_copy_done_fn done, void *data, nsbox_error_t **err);

int snapshots_init(nsbox_error_t **err);
/* Remove the snapshots taken for forks only (remove_when_unused) that no
 * sandbox uses: after recovery, whose sandboxes hold theirs. */
void snapshots_discard_unused(void);

void snapshot_method_create(struct rpc_request *req, struct sandbox *sb); /* sandbox.snapshot */
void snapshot_method_list(struct rpc_request *req, struct sandbox *sb);
void snapshot_method_remove(struct rpc_request *req, struct sandbox *sb);
