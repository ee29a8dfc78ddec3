/* The code-interpreter calls: python.run (stateless, and stateful through
 * one long-lived interpreter per sandbox) and package.install. */
#pragma once

#include "rpc.h"

struct sandbox;
struct python_interp;

void python_method_run(struct rpc_request *req);
void package_method_install(struct rpc_request *req, struct sandbox *sb);
