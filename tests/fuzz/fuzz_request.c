/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a client's bytes as nsboxd sees them. The input is split
 * into lines like the server does; each line goes through the request parser,
 * the error/result builders and the serializer (the reply must be one valid
 * line), and sandbox.create params through the policy parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "jsonrpc.h"
#include "policy.h"

static void check_reply_is_one_line(json_t *reply)
{
        if (reply == NULL)
                abort(); /* every request must get an answer */
        size_t len;
        char *line = jsonrpc_serialize(reply, &len);
        if (line == NULL || len == 0 || line[len - 1] != '\n' ||
            jsonrpc_find_newline(line, len) != (ssize_t)len - 1)
                abort();
        json_t *back = json_loadb(line, len - 1, 0, NULL);
        if (back == NULL)
                abort();
        json_decref(back);
        free(line);
        json_decref(reply);
}

static void fuzz_line(const char *line, size_t len, const struct sandbox_policy *defaults)
{
        struct jsonrpc_request req;
        const char *why = NULL;
        int code = jsonrpc_parse_request(line, len, &req, &why);
        if (code < 0) {
                /* params may be set: a NUL inside them is found after parsing. */
                if (why == NULL)
                        abort();
                check_reply_is_one_line(jsonrpc_error(req.id, code, NULL, why));
                jsonrpc_request_clear(&req);
                return;
        }
        if (req.method == NULL || !json_is_object(req.params))
                abort();
        struct sandbox_policy policy;
        nsbox_error_t *err = NULL;
        if (policy_from_json(defaults, NULL, req.params, &policy, &err) == 0) {
                if (err != NULL)
                        abort();
                policy_clear(&policy);
        } else {
                if (err == NULL || err->message == NULL)
                        abort();
                /* The message quotes client text: it must still make a reply. */
                check_reply_is_one_line(
                    jsonrpc_error(req.id, JSONRPC_INVALID_PARAMS, "invalid_params", err->message));
                nsbox_error_free(&err);
        }
        json_t *env = json_object_get(req.params, "env");
        if (env != NULL) {
                if (policy_check_env(env, "env", &err) < 0 && err == NULL)
                        abort();
                nsbox_error_free(&err);
        }
        check_reply_is_one_line(jsonrpc_result(req.id, req.params));
        jsonrpc_request_clear(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct sandbox_policy defaults;
        static int initialized;
        if (!initialized) {
                policy_defaults(&defaults);
                initialized = 1;
        }
        const char *text = (const char *)data;
        size_t start = 0;
        while (start < size) {
                ssize_t nl = jsonrpc_find_newline(text + start, size - start);
                size_t len = nl < 0 ? size - start : (size_t)nl;
                fuzz_line(text + start, len, &defaults);
                start += len + 1;
        }
        return 0;
}
