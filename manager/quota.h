/* SPDX-License-Identifier: Apache-2.0 */
/* Client calls in flight per uid: execs (background ones too), python.run
 * and package.install, one count that max_execs_per_uid bounds. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "rpc.h"

void quota_calls_add(uid_t uid, int delta);
unsigned quota_calls_of(uid_t uid);
/* The uid runs max_execs_per_uid calls already (root never does): answers
 * the request limit_reached and returns true. */
bool quota_refuse_call(struct rpc_request *req);
