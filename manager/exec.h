/* One process run in a sandbox at a client's request: pipes the manager
 * reads, timeout, output caps, streaming, background bookkeeping. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "rpc.h"

struct sandbox;

/* sandbox.exec */
void exec_handle_request(struct rpc_request *req, struct sandbox *sb);
/* A control message from the sandbox's init about one of its execs. */
void exec_on_control(struct sandbox *sb, const void *msg, size_t len);
/* The sandbox is going away: finish every exec (killed). */
void exec_sandbox_gone(struct sandbox *sb);
