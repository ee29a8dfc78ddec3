/* SPDX-License-Identifier: Apache-2.0 */
/* Headless Chromium in a sandbox of a browser image: browser.start (a CDP
 * endpoint for the host through sandbox.expose), browser.navigate and
 * browser.screenshot, all driven by the image's browser.py. */
#include "browser.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "egress.h"
#include "exec.h"
#include "images.h"
#include "json_cleanup.h"
#include "log.h"
#include "params.h"
#include "sandbox.h"

#define BROWSER_HELPER "/usr/lib/nsbox/browser.py"
/* The helper's first line (or its error) comes within its own 30 s start
 * bound; this caps what nsboxd keeps of a line that never ends. */
#define BROWSER_LINE_MAX 4096
#define BROWSER_URL_MAX  8192
#define BROWSER_SIZE_MIN 16
#define BROWSER_SIZE_MAX 4096
/* A full-page PNG of a long page, base64: bigger is refused, not cut. */
#define BROWSER_SHOT_MAX_OUTPUT (64u << 20)

enum browser_action { BROWSER_START, BROWSER_NAVIGATE, BROWSER_SCREENSHOT };

/* One call: the serve exec (which runs Chromium for as long as the
 * sandbox, or finds it running), then for navigate and screenshot an
 * exec of the helper that drives it. `req` is NULL once answered. */
struct browser_call {
        struct rpc_request *req;
        struct sandbox *sb;
        enum browser_action action;
        unsigned timeout_s;
        char line[BROWSER_LINE_MAX];
        size_t len;
};

json_t *browser_info(const struct sandbox *sb)
{
        json_t *browser = image_manifest_get(sb->policy.image, "browser");
        if (!json_is_object(browser)) {
                json_decref(browser);
                return NULL;
        }
        json_object_set_new(browser, "chromium_sandbox", json_false());
        json_object_set_new(browser, "why",
                            json_string("Chromium's own sandbox needs user namespaces, which the sandbox's "
                                        "seccomp filter refuses; Chromium runs with --no-sandbox inside the "
                                        "nsbox sandbox, which is the boundary (docs/browser.md)"));
        return browser;
}

static void call_fail(struct browser_call *call, const char *kind, const char *message)
{
        if (call->req == NULL)
                return;
        rpc_reply_fail(call->req, kind, "%s", message);
        call->req = NULL;
}

/* The helper's error: its last stderr line, or how the exec ended. */
static void reply_helper_error(struct browser_call *call, json_t *result, const char *what)
{
        const char *err = json_string_value(json_object_get(result, "stderr")) ?: "";
        char line[1024];
        size_t n = strlen(err);
        while (n > 0 && err[n - 1] == '\n')
                n--;
        size_t start = n;
        while (start > 0 && err[start - 1] != '\n')
                start--;
        snprintf(line, sizeof(line), "%.*s", (int)(n - start), err + start);
        if (json_is_true(json_object_get(result, "timed_out")))
                snprintf(line, sizeof(line), "timed out after %u s", call->timeout_s);
        else if (json_is_true(json_object_get(result, "oom_killed")))
                snprintf(line, sizeof(line), "out of memory: the sandbox's memory limit killed the browser");
        else if (line[0] == '\0')
                snprintf(line, sizeof(line), "the browser helper ended without a word");
        json_t *refused = json_object_get(result, "network_refused");
        if (call->req != NULL && refused != NULL) {
                /* What the policy refused is often why the page failed. */
                rpc_reply_fail_data(call->req, "unavailable", json_pack("{s:O}", "network_refused", refused),
                                    "%s: %s", what, line);
                call->req = NULL;
                return;
        }
        char message[1200];
        snprintf(message, sizeof(message), "%s: %s", what, line);
        call_fail(call, "unavailable", message);
}

static void action_done(struct exec *ex, json_t *result, void *data)
{
        struct browser_call *call = data;
        json_t *code = json_object_get(result, "exit_code");
        if (!json_is_integer(code) || json_integer_value(code) != 0) {
                reply_helper_error(call, result,
                                   call->action == BROWSER_NAVIGATE ? "navigate" : "screenshot");
        } else {
                const char *out = json_string_value(json_object_get(result, "stdout")) ?: "";
                json_t *reply = json_loads(out, 0, NULL);
                if (!json_is_object(reply)) {
                        json_decref(reply);
                        call_fail(call, "unavailable", "the browser helper's answer is not JSON");
                } else {
                        json_object_set_new(reply, "sandbox_id", json_string(call->sb->id));
                        json_t *refused = json_object_get(result, "network_refused");
                        if (refused != NULL)
                                json_object_set(reply, "network_refused", refused);
                        rpc_reply_result(call->req, reply);
                        call->req = NULL;
                }
        }
        free(call);
}

static const struct exec_hooks action_hooks = { .done = action_done };

static void run_action(struct browser_call *serve)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct browser_call *call = calloc(1, sizeof(*call));
        if (call == NULL) {
                call_fail(serve, "internal", "out of memory");
                return;
        }
        *call = (struct browser_call){
                .req = serve->req, .sb = serve->sb, .action = serve->action, .timeout_s = serve->timeout_s
        };
        serve->req = NULL;
        json_t *p = call->req->msg.params;
        _cleanup_json_ json_t *params = NULL;
        char timeout[16];
        snprintf(timeout, sizeof(timeout), "%u", call->timeout_s);
        if (call->action == BROWSER_NAVIGATE) {
                params = json_pack("{s:[s, s, s, O, s], s:i}", "argv", "python3", BROWSER_HELPER, "navigate",
                                   json_object_get(p, "url"), timeout, "timeout_seconds",
                                   (int)call->timeout_s + 5);
        } else {
                _cleanup_json_ json_t *options = json_pack("{s:i}", "timeout", (int)call->timeout_s);
                static const char *const keys[] = { "url", "full_page", "width", "height" };
                for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                        json_t *v = json_object_get(p, keys[i]);
                        if (v != NULL && !json_is_null(v))
                                json_object_set(options, keys[i], v);
                }
                _cleanup_free_ char *text = json_dumps(options, JSON_COMPACT);
                params = json_pack("{s:[s, s, s, s], s:i, s:I}", "argv", "python3", BROWSER_HELPER,
                                   "screenshot", text, "timeout_seconds", (int)call->timeout_s + 5,
                                   "max_output_bytes", (json_int_t)BROWSER_SHOT_MAX_OUTPUT);
        }
        struct exec *ex = NULL;
        if (params == NULL || exec_run(call->sb, params, &action_hooks, call, &ex, &err) < 0) {
                call_fail(call, "internal", err != NULL ? err->message : "out of memory");
                free(call);
                return;
        }
        exec_attribute(ex, call->req);
}

static void reply_started(struct browser_call *call, json_t *ready)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *exposed = NULL;
        json_t *port = json_object_get(ready, "port");
        const char *path = json_string_value(json_object_get(ready, "ws_path")) ?: "";
        if (!json_is_integer(port) || strncmp(path, "/devtools/browser/", 18) != 0 ||
            strspn(path + 18, "0123456789abcdef-") != strlen(path + 18)) {
                call_fail(call, "unavailable", "the browser helper gave no DevTools endpoint");
                return;
        }
        int r = egress_expose(call->sb, (unsigned)json_integer_value(port), &exposed, &err);
        if (r < 0) {
                char message[1024];
                snprintf(message, sizeof(message), "browser.start: %s", err->message);
                call_fail(call,
                          r == -EINVAL    ? "invalid_params"
                          : r == -ENOTSUP ? "unavailable"
                                          : "internal",
                          message);
                return;
        }
        int host_port = (int)json_integer_value(json_object_get(exposed, "host_port"));
        char cdp[128], http[64];
        snprintf(cdp, sizeof(cdp), "ws://127.0.0.1:%d%s", host_port, path);
        snprintf(http, sizeof(http), "http://127.0.0.1:%d", host_port);
        rpc_reply_result(call->req,
                         json_pack("{s:s, s:s, s:s, s:i, s:s}", "sandbox_id", call->sb->id, "cdp_url", cdp,
                                   "http_url", http, "host_port", host_port, "browser",
                                   json_string_value(json_object_get(ready, "browser")) ?: ""));
        call->req = NULL;
}

static void serve_on_stdout(struct exec *ex, const char *data, size_t len, void *opaque)
{
        struct browser_call *call = opaque;
        if (call->req == NULL)
                return; /* answered: the rest is Chromium's business */
        for (size_t i = 0; i < len; i++) {
                if (data[i] != '\n') {
                        if (call->len + 1 < sizeof(call->line))
                                call->line[call->len++] = data[i];
                        continue;
                }
                call->line[call->len] = '\0';
                _cleanup_json_ json_t *ready = json_loads(call->line, 0, NULL);
                if (!json_is_true(json_object_get(ready, "ready")))
                        call_fail(call, "unavailable", "the browser helper's first line is not ready");
                else if (call->action == BROWSER_START)
                        reply_started(call, ready);
                else
                        run_action(call);
                return;
        }
}

static void serve_done(struct exec *ex, json_t *result, void *opaque)
{
        struct browser_call *call = opaque;
        if (call->req != NULL)
                reply_helper_error(call, result, "browser.start");
        else if (json_integer_value(json_object_get(result, "exit_code")) != 0 &&
                 call->sb->state == SANDBOX_RUNNING)
                log_limited(call->sb->id, LOG_LEVEL_INFO, "sandbox %s: browser ended: %s", call->sb->id,
                            json_string_value(json_object_get(result, "stderr")) ?: "");
        free(call);
}

/* Chromium is a helper of the sandbox: it keeps the sandbox neither busy nor
 * alive past its timeout, and ends with it. */
static const struct exec_hooks serve_hooks = {
        .on_stdout = serve_on_stdout,
        .done = serve_done,
        .service = true,
};

static void browser_call_start(struct rpc_request *req, struct sandbox *sb, enum browser_action action)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *p = req->msg.params;
        _cleanup_json_ json_t *manifest_browser = image_manifest_get(sb->policy.image, "browser");
        if (manifest_browser == NULL) {
                rpc_reply_fail(req, "invalid_params",
                               "sandbox %s runs image %s, which has no browser: create it with "
                               "image \"browser\"",
                               sb->id, sb->policy.image);
                return;
        }
        unsigned timeout_s = PARAMS_TIMEOUT_DEFAULT_S;
        if (params_get_timeout(p, PARAMS_TIMEOUT_DEFAULT_S, &timeout_s, &err) < 0 || timeout_s > 300) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s",
                                err != NULL ? err->message : "timeout_seconds must be at most 300");
                return;
        }
        struct browser_call *call = calloc(1, sizeof(*call));
        if (call == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        *call = (struct browser_call){ .req = req, .sb = sb, .action = action, .timeout_s = timeout_s };
        /* The helper's bound on Chromium's start (DevTools answering). */
        char start_timeout[16];
        snprintf(start_timeout, sizeof(start_timeout), "%u", timeout_s);
        _cleanup_json_ json_t *params = json_pack(
            "{s:[s, s, s, s, s], s:i, s:I}", "argv", "python3", "-u", BROWSER_HELPER, "serve", start_timeout,
            "timeout_seconds", PARAMS_TIMEOUT_MAX_S, "max_output_bytes", (json_int_t)(64 << 10));
        struct exec *ex = NULL;
        if (exec_run(sb, params, &serve_hooks, call, &ex, &err) < 0) {
                rpc_reply_fail(req, "internal", "browser.start: %s", err->message);
                free(call);
                return;
        }
        exec_attribute(ex, req);
}

/* url: http(s), about:, data: (a page made by the caller); never file:,
 * javascript: or Chromium's own chrome:// pages. */
static bool check_url(struct rpc_request *req, bool required)
{
        json_t *url = json_object_get(req->msg.params, "url");
        if (url == NULL || json_is_null(url)) {
                if (required)
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "url is required");
                return !required;
        }
        const char *u = json_string_value(url);
        if (u == NULL || strlen(u) == 0 || strlen(u) > BROWSER_URL_MAX || strpbrk(u, "\r\n") != NULL ||
            (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0 &&
             strncmp(u, "about:", 6) != 0 && strncmp(u, "data:", 5) != 0)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "url must be an http://, https://, about: or data: URL of at most %d bytes",
                                BROWSER_URL_MAX);
                return false;
        }
        return true;
}

void browser_method_start(struct rpc_request *req, struct sandbox *sb)
{
        browser_call_start(req, sb, BROWSER_START);
}

void browser_method_navigate(struct rpc_request *req, struct sandbox *sb)
{
        if (check_url(req, true))
                browser_call_start(req, sb, BROWSER_NAVIGATE);
}

void browser_method_screenshot(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *p = req->msg.params;
        bool full_page = false;
        if (!check_url(req, false))
                return;
        if (params_get_bool(p, "full_page", &full_page, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        static const char *const sizes[] = { "width", "height" };
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                json_t *v = json_object_get(p, sizes[i]);
                if (v != NULL && !json_is_null(v) &&
                    (!json_is_integer(v) || json_integer_value(v) < BROWSER_SIZE_MIN ||
                     json_integer_value(v) > BROWSER_SIZE_MAX)) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "%s must be an integer from %d to %d", sizes[i], BROWSER_SIZE_MIN,
                                        BROWSER_SIZE_MAX);
                        return;
                }
        }
        browser_call_start(req, sb, BROWSER_SCREENSHOT);
}
