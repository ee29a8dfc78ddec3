/* SPDX-License-Identifier: Apache-2.0 */
/* Images: the operator's under the image dir (NAME/rootfs +
 * NAME/manifest.json, read-only to the API), and images committed from
 * sandboxes under STATE/images (NAME/rootfs holds only what the sandbox
 * changed; the manifest names the parent image it is layered on). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "rpc.h"

struct sandbox;

/* Images are chained at most this deep (committed on committed on ...). */
#define IMAGE_MAX_DEPTH 8

bool image_exists(const char *name);
/* Whether the image was committed through the API (image.remove may remove
 * it), not one of the operator's image dir. */
bool image_committed(const char *name);
/* An image `uid` may start sandboxes from: the operator's images, and
 * committed images of its own (root: all). */
bool image_usable(const char *name, uid_t uid);
/* The read-only layers of an image, top first (its own, then its
 * parents'): n strings allocated into layers[0..max). */
int image_layers(const char *name, char **layers, size_t max, size_t *n, nsbox_error_t **err);
/* [{name, size_bytes, parent?, owner?, python_version, ...}] of the images
 * `uid` may use (new reference). */
json_t *images_list(uid_t uid);
/* The directory holding committed images (STATE/images), made at start. */
int images_init(nsbox_error_t **err);

/* image.commit {sandbox_id, name}: the sandbox's file changes as a new
 * image owned by the caller, layered on the sandbox's image. */
void image_method_commit(struct rpc_request *req, struct sandbox *sb);
void image_method_list(struct rpc_request *req, struct sandbox *sb); /* image.list */
void image_method_remove(struct rpc_request *req,
                         struct sandbox *sb); /* image.remove {name}: committed images only */
/* image.import {path, name, tag?: "latest"} (root only): an OCI image
 * layout or docker-archive tarball as a whole image everyone may use. */
void image_method_import(struct rpc_request *req, struct sandbox *sb);
/* The image's manifest[key] (a committed image keeps its parent's keys; new
 * reference), or NULL. */
json_t *image_manifest_get(const char *name, const char *key);
/* The modules the image's Python fork server imports (manifest
 * "python_preload", new reference), or NULL: the image has no fork server. */
json_t *image_python_preload(const char *name);
