/* SPDX-License-Identifier: Apache-2.0 */
/* Small checks shared by every method's parameter parsing. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* Every key of obj must be in the NULL-terminated `known`; `where` (e.g.
 * " in limits") goes into the message. A typo must not pass silently. */
int params_check_known(json_t *obj, const char *const *known, const char *where, nsbox_error_t **err);
/* obj["encoding"] of bytes on the wire: "utf-8" (also when absent or null)
 * or "base64" (*base64 true). */
int params_get_encoding(json_t *obj, bool *base64, nsbox_error_t **err);
/* obj[key] as a boolean; absent or null is false. */
int params_get_bool(json_t *obj, const char *key, bool *out, nsbox_error_t **err);

/* How long a call may run (sandbox.exec, python.run, shell.run), unless
 * its timeout_seconds says otherwise. */
#define PARAMS_TIMEOUT_DEFAULT_S 30
#define PARAMS_TIMEOUT_MAX_S     (24 * 3600)
/* obj["timeout_seconds"]: a number from 1 to PARAMS_TIMEOUT_MAX_S, rounded
 * up to whole seconds (a timeout is never shorter than asked); absent or
 * null gives `fallback`. Below 1 is refused: 0.0001 s is no timeout a
 * command could meet, and the old rounding made it 1 s silently. */
int params_get_timeout(json_t *obj, unsigned fallback, unsigned *out, nsbox_error_t **err);

/* obj[key], a size: a non-negative integer of bytes or a string with a unit
 * ("512M", "1GiB", "64 KB": size_parse in common/size.h), from min to max;
 * absent or null leaves *out as it is. `field` names it in the messages
 * ("limits.memory_bytes"), `option` is the CLI's name for it or NULL
 * ("nsbox create --memory"); the bounds are said in human units. */
int params_get_size(json_t *obj, const char *key, const char *field, const char *option, uint64_t min,
                    uint64_t max, uint64_t *out, nsbox_error_t **err);
