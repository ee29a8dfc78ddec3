/* SPDX-License-Identifier: Apache-2.0 */
/* Checks every method's parameter parsing shares: unknown fields, encodings, booleans, timeouts. */
#include "params.h"

#include <string.h>

#include "size.h"

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
                return nsbox_invalid(
                    err, "timeout_seconds (--timeout) must be a number of seconds from 1 to %d (%d h)",
                    PARAMS_TIMEOUT_MAX_S, PARAMS_TIMEOUT_MAX_S / 3600);
        *out = (unsigned)t;
        if (*out < t)
                (*out)++;
        return 0;
}

int params_get_size(json_t *obj, const char *key, const char *field, const char *option, uint64_t min,
                    uint64_t max, uint64_t *out, nsbox_error_t **err)
{
        json_t *v = json_object_get(obj, key);
        if (v == NULL || json_is_null(v))
                return 0;
        char lo[SIZE_FORMAT_MAX], hi[SIZE_FORMAT_MAX], asked[SIZE_FORMAT_MAX];
        const char *before = option != NULL ? " (" : "", *after = option != NULL ? ")" : "";
        option = option != NULL ? option : "";
        uint64_t n = 0;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
                n = (uint64_t)json_integer_value(v);
        else if (!json_is_string(v) || size_parse(json_string_value(v), &n) < 0)
                return nsbox_invalid(err,
                                     "%s%s%s%s must be a size: bytes as an integer, or a string with a unit "
                                     "such as \"512M\" or \"1GiB\" (K, M, G, T: powers of 1024)",
                                     field, before, option, after);
        if (n < min || n > max)
                return nsbox_invalid(err, "%s %s is out of range: from %s to %s%s%s%s", field,
                                     size_format(n, asked, sizeof(asked)), size_format(min, lo, sizeof(lo)),
                                     size_format(max, hi, sizeof(hi)), before, option, after);
        *out = n;
        return 0;
}
