/* SPDX-License-Identifier: Apache-2.0 */
/* Checks every method's parameter parsing shares: unknown fields, encodings, booleans, timeouts. */
#include "params.h"

#include <string.h>

int params_check_known(json_t *obj, const char *const *known, const char *where, nsbox_error_t **err)
{
        const char *key;
        json_t *value;
        json_object_foreach(obj, key, value)
        {
                bool found = false;
                for (const char *const *k = known; *k != NULL && !found; k++)
                        found = strcmp(*k, key) == 0;
                if (!found)
                        return nsbox_invalid(err, "unknown field \"%.64s\"%s", key, where);
        }
        return 0;
}

int params_get_encoding(json_t *obj, bool *base64, nsbox_error_t **err)
{
        json_t *v = json_object_get(obj, "encoding");
        const char *name = json_string_value(v);
        *base64 = name != NULL && strcmp(name, "base64") == 0;
        if (v == NULL || json_is_null(v) || *base64 || (name != NULL && strcmp(name, "utf-8") == 0))
                return 0;
        return nsbox_invalid(err, "encoding must be \"utf-8\" or \"base64\"");
}

int params_get_bool(json_t *obj, const char *key, bool *out, nsbox_error_t **err)
{
        json_t *v = json_object_get(obj, key);
        *out = false;
        if (v == NULL || json_is_null(v))
                return 0;
        if (!json_is_boolean(v))
                return nsbox_invalid(err, "%s must be a boolean", key);
        *out = json_is_true(v);
        return 0;
}

int params_get_timeout(json_t *obj, unsigned fallback, unsigned *out, nsbox_error_t **err)
{
        json_t *v = json_object_get(obj, "timeout_seconds");
        *out = fallback;
        if (v == NULL || json_is_null(v))
                return 0;
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t >= 1 && t <= PARAMS_TIMEOUT_MAX_S))
                return nsbox_invalid(err, "timeout_seconds must be a number from 1 to %d",
                                     PARAMS_TIMEOUT_MAX_S);
        *out = (unsigned)t;
        if (*out < t)
                (*out)++;
        return 0;
}
