/* SPDX-License-Identifier: Apache-2.0 */
/* The code-interpreter calls: python.run (stateless, and stateful through
 * one long-lived interpreter per sandbox) and package.install. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "rpc.h"

struct sandbox;
struct python_interp;

void python_method_run(struct rpc_request *req, struct sandbox *sb);
/* python.reset: forget a context's variables in the stateful interpreter, or remove the context. */
void python_method_reset(struct rpc_request *req, struct sandbox *sb);
/* A call runs in the sandbox's stateful interpreter, or waits for it. */
bool python_busy(const struct sandbox *sb);
void package_method_install(struct rpc_request *req, struct sandbox *sb);
/* The sandbox has just become ready: start what starts with it (the Python
 * fork server when python_fork_server is "eager"). */
void python_sandbox_ready(struct sandbox *sb);
/* Live restore: the stateful interpreters a previous nsboxd left are taken
 * over (exec_on_adopt). Called at start, before sandboxes are adopted. */
void python_live_restore_init(void);
