/* SPDX-License-Identifier: Apache-2.0 */
/* _cleanup_json_: a json_t reference dropped at the end of its scope. */
#pragma once

#include <jansson.h>

#include "cleanup.h"

/* jansson provides json_decrefp() for scope-bound references. */
#define _cleanup_json_ _cleanup_(json_decrefp)
