/* SPDX-License-Identifier: Apache-2.0 */
/* desktop.*: the computer-use calls. One launcher exec per sandbox runs the
 * desktop (Xvfb, openbox, x11vnc, websockify serving noVNC); every other call
 * is a short exec of scrot or xdotool whose argv is built here, never a shell
 * line holding client text. */
#include "desktop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "egress.h"
#include "exec.h"
#include "json_cleanup.h"
#include "log.h"
#include "params.h"
#include "quota.h"
#include "sandbox.h"
#include "textenc.h"

#define DESKTOP_DISPLAY        ":0"
#define DESKTOP_VNC_PORT       5900
#define DESKTOP_NOVNC_PORT     6080
#define DESKTOP_DEFAULT_WIDTH  1280
#define DESKTOP_DEFAULT_HEIGHT 800
#define DESKTOP_MIN_WIDTH      320
#define DESKTOP_MIN_HEIGHT     200
#define DESKTOP_MAX_WIDTH      3840
#define DESKTOP_MAX_HEIGHT     2160
/* How long desktop.start waits for the screen and both servers to answer. */
#define DESKTOP_START_TIMEOUT_S 60
/* An input or a screenshot: a live X server answers in well under a second. */
#define DESKTOP_ACTION_TIMEOUT_S 30
/* desktop.type: xdotool types one character per DESKTOP_TYPE_DELAY_MS. */
#define DESKTOP_MAX_TEXT_BYTES 4096
#define DESKTOP_TYPE_DELAY_MS  8
#define DESKTOP_MAX_KEYS_BYTES 256
#define DESKTOP_MAX_KEYS       16
#define DESKTOP_MAX_SCROLL     50
/* A 3840x2160 screen of photos is about 25 MB as PNG. */
#define DESKTOP_MAX_SCREENSHOT_BYTES (48u << 20)

/* The launcher: every server of the desktop in the background, each one's
 * death ends the rest (bash's wait -n), and the whole desktop ends with this
 * exec. fd 9 holds a lock every process of the desktop inherits, so "the
 * lock is free" means "the desktop is gone"; a new launcher waits for the
 * processes of a desktop that just died to be killed. $1, $2: width and height; $3
 * this start's id, written once the lock is held. */
static const char LAUNCH_SCRIPT[] =
    "exec 9>/tmp/.nsbox-desktop.lock\n"
    "flock -w 10 9 || { echo 'nsbox-desktop: a desktop already runs in this sandbox' >&2; exit 75; }\n"
    "exec >/tmp/.nsbox-desktop.log 2>&1\n"
    "echo \"$3\" >/tmp/.nsbox-desktop.id\n"
    "export DISPLAY=" DESKTOP_DISPLAY "\n"
    "rm -f /tmp/.X0-lock /tmp/.X11-unix/X0\n"
    /* -noreset: without it the server resets when its last client (the
     * xdpyinfo below) leaves, and a client connecting meanwhile fails */
    "Xvfb " DESKTOP_DISPLAY " -screen 0 \"$1x$2x24\" -nolisten tcp -noreset &\n"
    "i=0\n"
    "until xdpyinfo >/dev/null 2>&1; do\n"
    "  i=$((i + 1)); [ $i -lt 300 ] && kill -0 $! 2>/dev/null || { echo 'nsbox-desktop: Xvfb did not start'; "
    "exit 1; }\n"
    "  sleep 0.1\n"
    "done\n"
    "xvfb=$!\n"
    "openbox &\n"
    "openbox=$!\n"
    "x11vnc -display " DESKTOP_DISPLAY " -forever -shared -nopw -quiet -noipv6 -rfbport 5900 &\n"
    "x11vnc=$!\n"
    "websockify --web /usr/share/novnc 6080 127.0.0.1:5900 &\n"
    "websockify=$!\n"
    "wait -n -p gone\n"
    "status=$?\n"
    "for name in xvfb openbox x11vnc websockify; do [ \"${!name}\" = \"$gone\" ] && break; done\n"
    "echo \"nsbox-desktop: $name (pid $gone) exited with status $status; the desktop stops\"\n"
    "exit 1\n";

/* Waits for the display and both ports; says why not on stderr. $1: the id
 * of the launcher to wait for: until it holds the lock, a free lock or the
 * log of an earlier desktop say nothing. */
static const char READY_SCRIPT[] =
    "for tool in Xvfb openbox x11vnc websockify xdotool scrot xdpyinfo; do\n"
    "  command -v $tool >/dev/null || { echo \"this sandbox's image has no $tool: desktop.* needs the "
    "desktop image (sandbox.create image \\\"desktop\\\", nsbox create --image desktop)\" >&2; exit 3; }\n"
    "done\n"
    "i=0\n"
    "while :; do\n"
    "  i=$((i + 1))\n"
    "  if [ $i -gt 150 ] && [ \"$(cat /tmp/.nsbox-desktop.id 2>/dev/null)\" != \"$1\" ]; then\n"
    "    echo 'the desktop did not start: another one holds /tmp/.nsbox-desktop.lock' >&2; exit 5\n"
    "  fi\n"
    "  if DISPLAY=" DESKTOP_DISPLAY " xdpyinfo >/dev/null 2>&1 && (exec 3<>/dev/tcp/127.0.0.1/5900) "
    "2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/6080) 2>/dev/null; then exit 0; fi\n"
    "  if [ \"$(cat /tmp/.nsbox-desktop.id 2>/dev/null)\" = \"$1\" ] && flock -n /tmp/.nsbox-desktop.lock "
    "true; then\n"
    "    echo 'the desktop exited while starting; its log (/tmp/.nsbox-desktop.log) ends:' >&2\n"
    "    tail -n 15 /tmp/.nsbox-desktop.log >&2; exit 4\n"
    "  fi\n"
    "  sleep 0.1\n"
    "done\n";

/* scrot into a private file, then the bytes on stdout (base64 by nsboxd). */
static const char SCREENSHOT_SCRIPT[] = "f=$(mktemp --suffix=.png /tmp/.nsbox-screenshot-XXXXXX) || exit 1\n"
                                        "DISPLAY=" DESKTOP_DISPLAY " scrot -o \"$f\" >&2 && cat \"$f\"\n"
                                        "r=$?; rm -f \"$f\"; exit $r\n";

/* The sandbox's desktop, from its launcher's start to its end. */
struct desktop {
        struct desktop *next;
        struct sandbox *sb;
        struct exec *launcher;
        unsigned width, height;
        char start_id[48]; /* its launcher's $3 */
};

static unsigned long long desktop_starts;

static struct desktop *desktops;

static struct desktop *desktop_find(const struct sandbox *sb)
{
        for (struct desktop *d = desktops; d != NULL; d = d->next)
                if (d->sb == sb)
                        return d;
        return NULL;
}

/* The launcher ended (the desktop died, or its sandbox goes): forget it, so
 * the next desktop.start starts a new one. */
static void launcher_done(struct exec *ex, json_t *result, void *data)
{
        struct desktop *d = data;
        for (struct desktop **p = &desktops; *p != NULL; p = &(*p)->next) {
                if (*p == d) {
                        *p = d->next;
                        break;
                }
        }
        json_t *code = json_object_get(result, "exit_code");
        log_info(
            "sandbox %s: desktop ended (%s %lld)", d->sb->id, json_is_integer(code) ? "exit" : "signal",
            (long long)json_integer_value(json_is_integer(code) ? code : json_object_get(result, "signal")));
        free(d);
}

static const struct exec_hooks launcher_hooks = { .done = launcher_done, .service = true };

/* One exec of a desktop call waiting for its end. */
struct desktop_call {
        struct rpc_request *req;
        struct sandbox *sb;
        const char *what; /* for messages: "xdotool", "scrot", "starting the desktop" */
        void (*reply)(struct desktop_call *call, json_t *result);
};

/* The reason an exec of a desktop call did not end with exit 0, for an error. */
static void reply_exec_failure(struct desktop_call *call, json_t *result)
{
        json_t *error = json_object_get(result, "error");
        json_t *stderr_json = json_object_get(result, "stderr");
        const char *err_text = json_string_value(stderr_json);
        _cleanup_free_ char *decoded = NULL;
        if (err_text != NULL && json_is_string(json_object_get(result, "encoding")) &&
            strcmp(json_string_value(json_object_get(result, "encoding")), "base64") == 0) {
                size_t len = 0;
                char *raw = base64_decode(err_text, json_string_length(stderr_json), &len);
                if (raw != NULL && (decoded = strndup(raw, len)) != NULL)
                        err_text = decoded;
                free(raw);
        }
        if (json_is_string(error)) {
                rpc_reply_fail(call->req, "unavailable", "%s: %s", call->what, json_string_value(error));
        } else if (json_is_true(json_object_get(result, "timed_out"))) {
                rpc_reply_fail(call->req, "unavailable",
                               "%s did not finish in time: is the desktop's X server alive? (desktop.start "
                               "starts a new one once it has died)",
                               call->what);
        } else {
                json_t *code = json_object_get(result, "exit_code");
                rpc_reply_fail(call->req, "unavailable", "%s failed (exit %lld): %.1500s", call->what,
                               json_is_integer(code) ? (long long)json_integer_value(code) : -1LL,
                               err_text != NULL && err_text[0] != '\0' ? err_text : "no message");
        }
}

static void call_done(struct exec *ex, json_t *result, void *data)
{
        struct desktop_call *call = data;
        quota_calls_add(call->req->uid, -1);
        json_t *code = json_object_get(result, "exit_code");
        if (json_is_integer(code) && json_integer_value(code) == 0 &&
            !json_is_string(json_object_get(result, "error")))
                call->reply(call, result);
        else
                reply_exec_failure(call, result);
        free(call);
}

static const struct exec_hooks call_hooks = { .done = call_done };

/* Run `params` (sandbox.exec's, taken over) for `req`; the reply comes from
 * `reply` once it exits 0. */
static void call_start(struct rpc_request *req, struct sandbox *sb, const char *what, json_t *params_,
                       void (*reply)(struct desktop_call *, json_t *))
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params = params_;
        if (params == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        if (quota_refuse_call(req))
                return;
        struct desktop_call *call = calloc(1, sizeof(*call));
        if (call == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        *call = (struct desktop_call){ .req = req, .sb = sb, .what = what, .reply = reply };
        quota_calls_add(req->uid, 1);
        struct exec *ex;
        if (exec_run(sb, params, &call_hooks, call, &ex, &err) < 0) {
                quota_calls_add(req->uid, -1);
                free(call);
                rpc_reply_fail(req, "internal", "%s", err->message);
                return;
        }
        exec_attribute(ex, req);
}

/* --- desktop.start ---------------------------------------------------------- */

/* An optional integer param in [min, max]; false after replying. */
static bool get_int(struct rpc_request *req, const char *key, long long min, long long max,
                    long long fallback, long long *out)
{
        json_t *v = json_object_get(req->msg.params, key);
        if (v == NULL || json_is_null(v)) {
                *out = fallback;
                return true;
        }
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "%s must be an integer from %lld to %lld", key, min, max);
                return false;
        }
        *out = json_integer_value(v);
        return true;
}

/* Port `port` of the sandbox through sandbox.expose into `reply` as
 * `<name>_host_port` (and the noVNC URL), or the reason it is not. */
static void add_exposed(json_t *reply, struct sandbox *sb, unsigned port, const char *name)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *exposed = NULL;
        char key[64];
        snprintf(key, sizeof(key), "%s_host_port", name);
        if (egress_expose(sb, port, &exposed, &err) < 0) {
                json_object_set_new(reply, key, json_null());
                if (json_object_get(reply, "exposure_error") == NULL)
                        json_object_set_new(reply, "exposure_error", json_string(err->message));
                return;
        }
        json_int_t host_port = json_integer_value(json_object_get(exposed, "host_port"));
        json_decref(exposed);
        json_object_set_new(reply, key, json_integer(host_port));
        if (port == DESKTOP_NOVNC_PORT) {
                char url[128];
                snprintf(url, sizeof(url), "http://127.0.0.1:%lld/vnc.html?autoconnect=1&resize=scale",
                         (long long)host_port);
                json_object_set_new(reply, "novnc_url", json_string(url));
        }
}

static void start_reply(struct desktop_call *call, json_t *result)
{
        struct desktop *d = desktop_find(call->sb);
        if (d == NULL) {
                rpc_reply_fail(call->req, "unavailable", "the desktop of sandbox %s exited as it started",
                               call->sb->id);
                return;
        }
        json_t *reply =
            json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:n}", "sandbox_id", call->sb->id, "display",
                      DESKTOP_DISPLAY, "width", (int)d->width, "height", (int)d->height, "vnc_port",
                      DESKTOP_VNC_PORT, "novnc_port", DESKTOP_NOVNC_PORT, "novnc_url");
        if (reply == NULL) {
                rpc_reply_fail(call->req, "internal", "out of memory");
                return;
        }
        add_exposed(reply, call->sb, DESKTOP_NOVNC_PORT, "novnc");
        add_exposed(reply, call->sb, DESKTOP_VNC_PORT, "vnc");
        rpc_reply_result(call->req, reply);
}

void desktop_method_start(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        long long width, height;
        if (!get_int(req, "width", DESKTOP_MIN_WIDTH, DESKTOP_MAX_WIDTH, DESKTOP_DEFAULT_WIDTH, &width) ||
            !get_int(req, "height", DESKTOP_MIN_HEIGHT, DESKTOP_MAX_HEIGHT, DESKTOP_DEFAULT_HEIGHT, &height))
                return;
        struct desktop *d = desktop_find(sb);
        bool sized = json_object_get(req->msg.params, "width") != NULL ||
                     json_object_get(req->msg.params, "height") != NULL;
        if (d != NULL && sized && (d->width != width || d->height != height)) {
                rpc_reply_fail(req, "busy",
                               "the desktop of sandbox %s runs at %ux%u already: it keeps its size until it "
                               "ends with the sandbox",
                               sb->id, d->width, d->height);
                return;
        }
        if (d == NULL) {
                d = calloc(1, sizeof(*d));
                if (d == NULL) {
                        rpc_reply_fail(req, "internal", "out of memory");
                        return;
                }
                *d = (struct desktop){ .sb = sb, .width = (unsigned)width, .height = (unsigned)height };
                char w[16], h[16];
                snprintf(w, sizeof(w), "%lld", width);
                snprintf(h, sizeof(h), "%lld", height);
                /* The time too: a sandbox forked from a snapshot of a desktop
                 * carries the id file of its origin, perhaps of an earlier nsboxd. */
                snprintf(d->start_id, sizeof(d->start_id), "%lld.%llu", (long long)time(NULL),
                         ++desktop_starts);
                _cleanup_json_ json_t *params =
                    json_pack("{s:[s, s, s, s, s, s, s], s:i, s:I}", "argv", "bash", "-c", LAUNCH_SCRIPT,
                              "nsbox-desktop", w, h, d->start_id, "timeout_seconds", PARAMS_TIMEOUT_MAX_S,
                              "max_output_bytes", (json_int_t)(16 << 10));
                if (params == NULL || exec_run(sb, params, &launcher_hooks, d, &d->launcher, &err) < 0) {
                        free(d);
                        rpc_reply_fail(req, "internal", "start the desktop: %s",
                                       err != NULL ? err->message : "out of memory");
                        return;
                }
                exec_attribute(d->launcher, req);
                d->next = desktops;
                desktops = d;
                log_info("sandbox %s: desktop starting at %lldx%lld", sb->id, width, height);
        }
        call_start(req, sb, "starting the desktop",
                   json_pack("{s:[s, s, s, s, s], s:i}", "argv", "bash", "-c", READY_SCRIPT,
                             "nsbox-desktop-ready", d->start_id, "timeout_seconds", DESKTOP_START_TIMEOUT_S),
                   start_reply);
}

/* --- the calls on a running desktop ---------------------------------------------- */

/* The sandbox's desktop, or NULL after replying. */
static struct desktop *require_desktop(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = desktop_find(sb);
        if (d == NULL)
                rpc_reply_fail(req, "unavailable",
                               "sandbox %s has no desktop running: desktop.start starts one (nsbox desktop "
                               "start %s)",
                               sb->id, sb->id);
        return d;
}

/* sandbox.exec params for xdotool with `args` (taken over). */
static json_t *xdotool_params(json_t *args, unsigned timeout)
{
        json_t *argv = json_pack("[s]", "xdotool");
        if (argv == NULL || args == NULL || json_array_extend(argv, args) < 0) {
                json_decref(argv);
                json_decref(args);
                return NULL;
        }
        json_decref(args);
        return json_pack("{s:o, s:{s:s}, s:i}", "argv", argv, "env", "DISPLAY", DESKTOP_DISPLAY,
                         "timeout_seconds", (int)timeout);
}

static void done_reply(struct desktop_call *call, json_t *result)
{
        rpc_reply_result(call->req, json_pack("{s:s, s:b}", "sandbox_id", call->sb->id, "done", 1));
}

/* x and y on the screen; both optional when `optional` (then *has is false). */
static bool get_point(struct rpc_request *req, const struct desktop *d, bool optional, bool *has,
                      long long *x, long long *y)
{
        json_t *jx = json_object_get(req->msg.params, "x"), *jy = json_object_get(req->msg.params, "y");
        *has = jx != NULL || jy != NULL;
        if (!*has && optional)
                return true;
        if (!json_is_integer(jx) || !json_is_integer(jy)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "x and y must be integers%s",
                                optional ? " (or both left out)" : "");
                return false;
        }
        return get_int(req, "x", 0, (long long)d->width - 1, 0, x) &&
               get_int(req, "y", 0, (long long)d->height - 1, 0, y);
}

/* No --sync: it waits for a motion event, which never comes when the
 * pointer is already there (xdotool gives up after 15 s). The X server
 * takes a connection's fake events in order, so a click that follows in
 * the same xdotool is at the new place anyway. */
static json_t *move_args(long long x, long long y)
{
        char xs[24], ys[24];
        snprintf(xs, sizeof(xs), "%lld", x);
        snprintf(ys, sizeof(ys), "%lld", y);
        return json_pack("[s, s, s]", "mousemove", xs, ys);
}

void desktop_method_move(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = require_desktop(req, sb);
        long long x, y;
        bool has;
        if (d == NULL || !get_point(req, d, false, &has, &x, &y))
                return;
        call_start(req, sb, "xdotool", xdotool_params(move_args(x, y), DESKTOP_ACTION_TIMEOUT_S), done_reply);
}

void desktop_method_click(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = require_desktop(req, sb);
        long long x, y;
        bool has, twice;
        if (d == NULL || !get_point(req, d, true, &has, &x, &y) || !rpc_get_bool(req, "double", &twice))
                return;
        static const char *const buttons[] = { "left", "middle", "right" };
        static const char *const numbers[] = { "1", "2", "3" };
        const char *button = "1";
        json_t *b = json_object_get(req->msg.params, "button");
        if (b != NULL && !json_is_null(b)) {
                button = NULL;
                for (size_t i = 0; i < ARRAY_SIZE(buttons) && json_is_string(b); i++)
                        if (strcmp(json_string_value(b), buttons[i]) == 0)
                                button = numbers[i];
                if (button == NULL) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "button must be \"left\", \"middle\" or \"right\"");
                        return;
                }
        }
        json_t *args = has ? move_args(x, y) : json_array();
        json_array_append_new(args, json_string("click"));
        if (twice) {
                json_array_append_new(args, json_string("--repeat"));
                json_array_append_new(args, json_string("2"));
        }
        json_array_append_new(args, json_string(button));
        call_start(req, sb, "xdotool", xdotool_params(args, DESKTOP_ACTION_TIMEOUT_S), done_reply);
}

void desktop_method_scroll(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = require_desktop(req, sb);
        long long x, y, amount;
        bool has;
        if (d == NULL || !get_point(req, d, true, &has, &x, &y) ||
            !get_int(req, "amount", 1, DESKTOP_MAX_SCROLL, 3, &amount))
                return;
        /* X's wheel: buttons 4 to 7. */
        static const char *const directions[] = { "up", "down", "left", "right" };
        static const char *const wheel[] = { "4", "5", "6", "7" };
        json_t *dir = json_object_get(req->msg.params, "direction");
        const char *button = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(directions) && json_is_string(dir); i++)
                if (strcmp(json_string_value(dir), directions[i]) == 0)
                        button = wheel[i];
        if (button == NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "direction must be \"up\", \"down\", \"left\" or \"right\"");
                return;
        }
        json_t *args = has ? move_args(x, y) : json_array();
        char repeat[16];
        snprintf(repeat, sizeof(repeat), "%lld", amount);
        _cleanup_json_ json_t *tail = json_pack("[s, s, s, s]", "click", "--repeat", repeat, button);
        json_array_extend(args, tail);
        call_start(req, sb, "xdotool", xdotool_params(args, DESKTOP_ACTION_TIMEOUT_S), done_reply);
}

/* desktop.type: the text goes to xdotool as one argv entry after "--", so
 * quotes, $(...), backslashes and newlines are typed as they are. */
void desktop_method_type(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = require_desktop(req, sb);
        if (d == NULL)
                return;
        json_t *text = json_object_get(req->msg.params, "text");
        if (!json_is_string(text) || json_string_length(text) == 0 ||
            json_string_length(text) > DESKTOP_MAX_TEXT_BYTES ||
            memchr(json_string_value(text), '\0', json_string_length(text)) != NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "text must be a string of 1 to %d bytes without NUL", DESKTOP_MAX_TEXT_BYTES);
                return;
        }
        char delay[16];
        snprintf(delay, sizeof(delay), "%d", DESKTOP_TYPE_DELAY_MS);
        json_t *args = json_pack("[s, s, s, s, O]", "type", "--delay", delay, "--", text);
        unsigned timeout =
            DESKTOP_ACTION_TIMEOUT_S + DESKTOP_MAX_TEXT_BYTES * DESKTOP_TYPE_DELAY_MS / 1000 * 2;
        call_start(req, sb, "xdotool", xdotool_params(args, timeout), done_reply);
}

/* A key name as xdotool's key command takes it: keysyms joined by "+"
 * ("ctrl+l", "Return", "shift+Tab", "KP_Enter", "F5"). */
static bool key_ok(const char *key, size_t len)
{
        if (len == 0 || len > 64 || key[0] == '-' || key[0] == '+')
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = key[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '+' || c == '-'))
                        return false;
        }
        return true;
}

/* desktop.key: keys separated by spaces, each pressed and released in turn. */
void desktop_method_key(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = require_desktop(req, sb);
        if (d == NULL)
                return;
        json_t *keys = json_object_get(req->msg.params, "keys");
        if (!json_is_string(keys) || json_string_length(keys) > DESKTOP_MAX_KEYS_BYTES) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "keys must be a string of at most %d bytes, xdotool key names separated by "
                                "spaces (\"ctrl+l\", \"Return\")",
                                DESKTOP_MAX_KEYS_BYTES);
                return;
        }
        json_t *args = json_pack("[s, s]", "key", "--");
        const char *p = json_string_value(keys), *end = p + json_string_length(keys);
        int n = 0;
        while (args != NULL && p < end) {
                if (*p == ' ') {
                        p++;
                        continue;
                }
                const char *e = memchr(p, ' ', (size_t)(end - p));
                size_t len = e != NULL ? (size_t)(e - p) : (size_t)(end - p);
                if (!key_ok(p, len)) {
                        json_decref(args);
                        rpc_reply_error(
                            req, JSONRPC_INVALID_PARAMS, "invalid_params",
                            "keys: \"%.*s\" is not a key name (letters, digits, _ and - joined by "
                            "+, e.g. ctrl+l)",
                            (int)len, p);
                        return;
                }
                if (++n > DESKTOP_MAX_KEYS) {
                        json_decref(args);
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "keys: at most %d keys", DESKTOP_MAX_KEYS);
                        return;
                }
                json_array_append_new(args, json_stringn(p, len));
                p += len;
        }
        if (n == 0) {
                json_decref(args);
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "keys must name at least one key");
                return;
        }
        call_start(req, sb, "xdotool", xdotool_params(args, DESKTOP_ACTION_TIMEOUT_S), done_reply);
}

/* --- desktop.screenshot -------------------------------------------------------- */

static void screenshot_reply(struct desktop_call *call, json_t *result)
{
        const char *png = json_string_value(json_object_get(result, "stdout"));
        /* "\x89PNG\r\n\x1a\n" in base64: scrot wrote a PNG and all of it came. */
        if (png == NULL || strncmp(png, "iVBORw0KGgo", 11) != 0 ||
            json_is_true(json_object_get(result, "truncated"))) {
                rpc_reply_fail(call->req, "unavailable", "scrot gave no PNG%s",
                               json_is_true(json_object_get(result, "truncated")) ? " (over the size bound)"
                                                                                  : "");
                return;
        }
        struct desktop *d = desktop_find(call->sb);
        rpc_reply_result(call->req,
                         json_pack("{s:s, s:s, s:O, s:i, s:i}", "sandbox_id", call->sb->id, "mime_type",
                                   "image/png", "data", json_object_get(result, "stdout"), "width",
                                   d != NULL ? (int)d->width : 0, "height", d != NULL ? (int)d->height : 0));
}

void desktop_method_screenshot(struct rpc_request *req, struct sandbox *sb)
{
        struct desktop *d = require_desktop(req, sb);
        if (d == NULL)
                return;
        json_t *params = json_pack("{s:[s, s, s], s:i, s:s, s:I}", "argv", "sh", "-c", SCREENSHOT_SCRIPT,
                                   "timeout_seconds", DESKTOP_ACTION_TIMEOUT_S, "encoding", "base64",
                                   "max_output_bytes", (json_int_t)DESKTOP_MAX_SCREENSHOT_BYTES);
        call_start(req, sb, "scrot", params, screenshot_reply);
}
