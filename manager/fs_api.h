/* SPDX-License-Identifier: Apache-2.0 */
/* The file API of nsboxd: the fs.* JSON-RPC methods, on a running sandbox.
 * Resolution never leaves the sandbox's root (fs_ops.h). */
#pragma once

#include "rpc.h"

struct sandbox;

/* Answer a failed fs.* call (r: -errno) with the kind its errno maps to. */
void fs_reply_failure(struct rpc_request *req, int r, nsbox_error_t *err);

void fs_method_list(struct rpc_request *req, struct sandbox *sb);
void fs_method_read(struct rpc_request *req, struct sandbox *sb);
void fs_method_write(struct rpc_request *req, struct sandbox *sb);
void fs_method_remove(struct rpc_request *req, struct sandbox *sb);
void fs_method_mkdir(struct rpc_request *req, struct sandbox *sb);
void fs_method_stat(struct rpc_request *req, struct sandbox *sb);
void fs_method_rename(struct rpc_request *req, struct sandbox *sb);
void fs_method_symlink(struct rpc_request *req, struct sandbox *sb);
void fs_method_chmod(struct rpc_request *req, struct sandbox *sb);
