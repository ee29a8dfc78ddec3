/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON-RPC method table of nsboxd and the server-wide methods. */
#pragma once

#include "rpc.h"

extern const struct rpc_method nsboxd_methods[];
