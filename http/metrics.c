/* SPDX-License-Identifier: Apache-2.0 */
/* GET /metrics (metrics.h): the front's own counters, then what nsboxd's
 * server.metrics gives the request's owner (root: everything; another
 * uid: its own sandboxes), as one Prometheus text page. */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

#include "cleanup.h"
#include "counters.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "reply.h"

enum MHD_Result http_metrics(struct http_request *r)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params = json_object(), *result = NULL, *error = NULL;
        if (http_call(r, "server.metrics", params, &result, &error, &err) < 0)
                return http_reply_rpc_error(r, error, err);
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        if (out == NULL)
                return http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of memory");
        http_counters_write(out);
        fputs(json_string_value(json_object_get(result, "text")) ?: "", out);
        if (fclose(out) != 0) {
                free(text);
                return http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of memory");
        }
        return http_reply_bytes(r, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
