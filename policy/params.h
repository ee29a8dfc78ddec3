/* Small checks shared by every method's parameter parsing. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

/* Every key of obj must be in the NULL-terminated `known`; `where` (e.g.
 * " in limits") goes into the message. A typo must not pass silently. */
int params_check_known(json_t *obj, const char *const *known, const char *where, nsbox_error_t **err);
/* obj["encoding"] of bytes on the wire: "utf-8" (also when absent or null)
 * or "base64" (*base64 true). */
int params_get_encoding(json_t *obj, bool *base64, nsbox_error_t **err);
/* obj[key] as a boolean; absent or null is false. */
int params_get_bool(json_t *obj, const char *key, bool *out, nsbox_error_t **err);
