/* SPDX-License-Identifier: Apache-2.0 */
/* Persistent shell sessions: a named bash per session that keeps its state between commands. */
#include "shell.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "budget.h"
#include "cleanup.h"
#include "daemon.h"
#include "exec.h"
#include "json_cleanup.h"
#include "log.h"
#include "params.h"
#include "policy.h"
#include "sandbox.h"
#include "textenc.h"

#define SHELL_DEFAULT_MAX_OUTPUT (1u << 20)
#define SHELL_MAX_MAX_OUTPUT     (256u << 20)
#define SHELL_MAX_COMMAND        (1u << 20)
#define SHELL_MAX_NAME           64
/* After SIGINT, then after SIGTERM: how long the command has to stop. */
#define SHELL_INTERRUPT_GRACE_MS 2000
/* How long an interrupt waits for bash to start reading the command's line. */
#define SHELL_START_GRACE_MS 10000
#define SHELL_MARKER_PREFIX  "\036NSBOXEND "
#define SHELL_NONCE_LEN      32
#define SHELL_MARKER_LEN     (sizeof(SHELL_MARKER_PREFIX) - 1 + SHELL_NONCE_LEN)
#define SHELL_MAX_TRAILER    (4096 + 32)
/* The record a command's line prints first, after the marker: bash runs it. */
#define SHELL_START_TRAILER " go"

enum { SHELL_STDOUT, SHELL_STDERR };
static const char *const shell_stream_names[] = { "stdout", "stderr" };

/* One pipe of a command as we read it: its output, and how far into its
 * end record we are. */
struct shell_stream {
        char *data;
        size_t len, cap;
        size_t match;    /* bytes of the end record's marker matched so far */
        bool in_trailer; /* the marker is matched: reading up to its NUL */
        char *trailer;   /* " <status> <pwd>" on stdout */
        size_t trailer_len;
        bool ended;
};

struct shell_command {
        char id[37];
        char marker[SHELL_MARKER_LEN + 1];
        struct rpc_request *req; /* a blocking run's client, until answered */
        bool boot;               /* the setup line: its output is dropped */
        bool base64;
        size_t max_output, total_output, charged;
        bool truncated, timed_out, finished, shell_exited;
        unsigned timeout_s;
        struct shell_stream out[2];
        json_t *exit_code; /* set when finished (null: none) */
        char *cwd;         /* $PWD after it */
        const char *note;
        long long started_mono, end_mono;
        long long ends_realtime_ms;  /* when its timeout ends it (0: none), for live restore */
        struct loop_timer *deadline; /* the timeout or the next interrupt stage */
        int stage;                   /* 0: running, 1: SIGINT sent, 2: SIGTERM sent, 3: SIGKILL sent */
        bool begun;                  /* bash has read the line and runs it (its start record came) */
        bool interrupt_waiting;      /* an interrupt waits for the start record */
};

struct shell_session {
        char name[SHELL_MAX_NAME + 1];
        struct sandbox *sb;
        struct exec *exec;
        struct rpc_request *create_req; /* answered once the shell is set up */
        bool ready, terminating;
        char *cwd;
        long long created_ms;
        struct shell_command *cmd; /* running, or the last one (kept for shell.check) */
        struct shell_session *next;
};

static struct shell_session *sessions;

/* --- commands ------------------------------------------------------------ */

static void command_free(struct shell_command *c)
{
        if (c == NULL)
                return;
        loop_timer_cancel(nsboxd.loop, c->deadline);
        for (int i = 0; i < 2; i++) {
                free(c->out[i].data);
                free(c->out[i].trailer);
        }
        budget_give(c->charged);
        json_decref(c->exit_code);
        free(c->cwd);
        free(c);
}

static void make_nonce(char out[SHELL_NONCE_LEN + 1])
{
        uuid_t u;
        uuid_generate_random(u);
        for (int i = 0; i < 16; i++)
                snprintf(out + 2 * i, 3, "%02x", u[i]);
}

static struct shell_command *command_new(bool boot, size_t max_output, bool base64)
{
        struct shell_command *c = calloc(1, sizeof(*c));
        if (c == NULL)
                return NULL;
        uuid_t u;
        uuid_generate_random(u);
        uuid_unparse_lower(u, c->id);
        char nonce[SHELL_NONCE_LEN + 1];
        make_nonce(nonce);
        snprintf(c->marker, sizeof(c->marker), "%s%s", SHELL_MARKER_PREFIX, nonce);
        c->boot = boot;
        c->begun = boot;
        c->max_output = max_output;
        c->base64 = base64;
        c->started_mono = now_monotonic_ms();
        return c;
}

/* Keep output bytes of the command, up to its max_output and as the budget allows. */
static void command_keep(struct shell_command *c, int which, const char *data, size_t len)
{
        size_t room = c->max_output > c->total_output ? c->max_output - c->total_output : 0;
        if (len > room) {
                c->truncated = c->truncated || !c->boot;
                len = room;
        }
        if (len == 0)
                return;
        struct shell_stream *s = &c->out[which];
        if (s->len + len > s->cap) {
                size_t cap = s->cap ? s->cap : 4096;
                while (cap < s->len + len)
                        cap *= 2;
                if (cap > c->max_output)
                        cap = c->max_output;
                if (!budget_take(cap - s->cap)) {
                        c->truncated = true;
                        return;
                }
                char *grown = realloc(s->data, cap);
                if (grown == NULL) {
                        budget_give(cap - s->cap);
                        c->truncated = true;
                        return;
                }
                c->charged += cap - s->cap;
                s->data = grown;
                s->cap = cap;
        }
        memcpy(s->data + s->len, data, len);
        s->len += len;
        c->total_output += len;
}

static json_t *shell_text_json(const struct shell_command *c, const char *data, size_t len)
{
        size_t n;
        _cleanup_free_ char *text = c->base64 ? base64_encode(data, len, &n) : utf8_make_valid(data, len, &n);
        if (text == NULL)
                return json_string("");
        return json_stringn_nocheck(text, n);
}

static json_t *output_json(const struct shell_command *c, int which, size_t from)
{
        const struct shell_stream *s = &c->out[which];
        size_t kept = s->len - from;
        if (which != SHELL_STDERR || !c->finished || !c->timed_out)
                return shell_text_json(c, s->data + from, kept);
        /* A timeout is said as an exec's is, on a line after the command's stderr. */
        char note[160];
        int n =
            snprintf(note, sizeof(note),
                     "%snsbox: timed out after %u s (timeout_seconds), interrupted; the shell and its state "
                     "remain\n",
                     kept > 0 && s->data[s->len - 1] != '\n' ? "\n" : "", c->timeout_s);
        _cleanup_free_ char *all = malloc(kept + (size_t)n);
        if (all == NULL)
                return shell_text_json(c, s->data + from, kept);
        if (kept > 0)
                memcpy(all, s->data + from, kept);
        memcpy(all + kept, note, (size_t)n);
        return shell_text_json(c, all, kept + (size_t)n);
}

/* What shell.run (blocking) and shell.check answer about a command. */
static json_t *command_json(const struct shell_session *s, const struct shell_command *c, size_t since[2])
{
        size_t from[2] = { 0, 0 };
        for (int i = 0; i < 2 && since != NULL; i++)
                from[i] = since[i] < c->out[i].len ? since[i] : c->out[i].len;
        long long end = c->finished ? c->end_mono : now_monotonic_ms();
        json_t *result = json_pack(
            "{s:s, s:s, s:b, s:O, s:o, s:o, s:{s:I, s:I}, s:s, s:I, s:b, s:b, s:s}", "session", s->name,
            "command_id", c->id, "running", !c->finished, "exit_code",
            c->exit_code ? c->exit_code : json_null(), "stdout", output_json(c, SHELL_STDOUT, from[0]),
            "stderr", output_json(c, SHELL_STDERR, from[1]), "next", "stdout", (json_int_t)c->out[0].len,
            "stderr", (json_int_t)c->out[1].len, "cwd", c->cwd ? c->cwd : (s->cwd ? s->cwd : ""),
            "duration_ms", (json_int_t)(end - c->started_mono), "timed_out", c->timed_out, "truncated",
            c->truncated, "encoding", c->base64 ? "base64" : "utf-8");
        if (result != NULL)
                json_object_set_new(result, "status",
                                    json_string(!c->finished                    ? "running"
                                                : c->timed_out                  ? "timeout"
                                                : json_is_integer(c->exit_code) ? "exited"
                                                                                : "killed"));
        if (result != NULL && c->shell_exited)
                json_object_set_new(result, "shell_exited", json_true());
        if (result != NULL && c->note != NULL)
                json_object_set_new(result, "note", json_string(c->note));
        return result;
}

/* --- the interrupt timer ----------------------------------------------------- */

static void on_command_deadline(struct loop *loop, struct loop_timer *timer, void *data);

/* The session's command takes its next step at at_ms (monotonic); 0: none.
 * Each command has its own timer on the loop (loop.h). */
static void command_deadline(struct shell_session *s, struct shell_command *c, long long at_ms)
{
        loop_timer_cancel(nsboxd.loop, c->deadline);
        c->deadline = NULL;
        if (at_ms != 0 && (c->deadline = loop_timer_add(nsboxd.loop, at_ms, on_command_deadline, s)) == NULL)
                log_error("sandbox %s: shell %s: no timer for the command: out of memory", s->sb->id,
                          s->name);
}

/* Next step against a command that should stop: SIGINT, SIGTERM, SIGKILL. */
static void command_interrupt_step(struct shell_session *s, struct shell_command *c)
{
        command_deadline(s, c, 0);
        if (s->exec == NULL)
                return;
        if (c->stage == 0 && !c->begun && !c->interrupt_waiting) {
                /* A SIGINT while bash still reads the line makes it drop the line, and the command
                 * never ends: wait for its start record (session_feed), within a grace time. */
                c->interrupt_waiting = true;
                command_deadline(s, c, now_monotonic_ms() + SHELL_START_GRACE_MS);
                return;
        }
        if (c->stage == 0) {
                c->stage = 1;
                exec_signal(s->exec, SIGINT);
                command_deadline(s, c, now_monotonic_ms() + SHELL_INTERRUPT_GRACE_MS);
        } else if (c->stage == 1) {
                c->stage = 2;
                exec_signal(s->exec, SIGTERM);
                command_deadline(s, c, now_monotonic_ms() + SHELL_INTERRUPT_GRACE_MS);
        } else if (c->stage == 2) {
                c->stage = 3;
                log_limited(s->sb->id, LOG_LEVEL_INFO,
                            "sandbox %s: shell %s: the command ignored SIGINT and SIGTERM; killing the shell",
                            s->sb->id, s->name);
                exec_signal(s->exec, SIGKILL);
        }
}

/* Only the session's command has a timer: one it replaced or finished was
 * cancelled with it. */
static void on_command_deadline(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct shell_session *s = data;
        struct shell_command *c = s->cmd;
        c->deadline = NULL; /* a one-shot timer, gone once this returns */
        if (c->stage == 0 && !c->interrupt_waiting)
                c->timed_out = true;
        command_interrupt_step(s, c);
}

/* --- sessions -------------------------------------------------------------- */

static void session_unlink(struct shell_session *s)
{
        for (struct shell_session **p = &sessions; *p != NULL; p = &(*p)->next) {
                if (*p == s) {
                        *p = s->next;
                        return;
                }
        }
}

static void session_free(struct shell_session *s)
{
        session_unlink(s);
        command_free(s->cmd);
        free(s->cwd);
        free(s);
}

bool shell_busy(const struct sandbox *sb)
{
        for (const struct shell_session *s = sessions; s != NULL; s = s->next) {
                if (s->sb == sb && (!s->ready || (s->cmd != NULL && !s->cmd->finished)))
                        return true;
        }
        return false;
}

static unsigned sessions_of(const struct sandbox *sb)
{
        unsigned n = 0;
        for (const struct shell_session *s = sessions; s != NULL; s = s->next)
                n += s->sb == sb && !s->terminating;
        return n;
}

static struct shell_session *session_find(const struct sandbox *sb, const char *name)
{
        for (struct shell_session *s = sessions; s != NULL; s = s->next) {
                if (s->sb == sb && !s->terminating && strcmp(s->name, name) == 0)
                        return s;
        }
        return NULL;
}

/* The command ended (both end records seen, or the shell is gone). */
static void command_finish(struct shell_session *s, struct shell_command *c)
{
        if (c->finished)
                return;
        c->finished = true;
        c->end_mono = now_monotonic_ms();
        command_deadline(s, c, 0);
        const char *t = c->out[SHELL_STDOUT].trailer;
        if (c->exit_code == NULL && t != NULL) {
                /* " <status> <pwd>" */
                char *end;
                long status = strtol(t, &end, 10);
                if (end != t && *end == ' ') {
                        c->exit_code = json_integer(status);
                        free(c->cwd);
                        c->cwd = strdup(end + 1);
                        free(s->cwd);
                        s->cwd = c->cwd ? strdup(c->cwd) : NULL;
                }
        }
        if (c->boot) {
                s->ready = true;
                s->cmd = NULL;
                exec_keep_update(s->exec);
                if (s->create_req != NULL) {
                        struct rpc_request *req = s->create_req;
                        s->create_req = NULL;
                        rpc_reply_result(req, json_pack("{s:s, s:s, s:s}", "session", s->name, "sandbox_id",
                                                        s->sb->id, "cwd", s->cwd ? s->cwd : ""));
                }
                command_free(c);
                return;
        }
        sandbox_touch(s->sb);
        exec_keep_update(s->exec);
        log_debug("sandbox %s: shell %s: command %s ended", s->sb->id, s->name, c->id);
        if (c->req != NULL) {
                struct rpc_request *req = c->req;
                c->req = NULL;
                rpc_reply_result(req, command_json(s, c, NULL));
        }
}

/* The command's start record came: bash has read its whole line. */
static void command_begun(struct shell_session *s, struct shell_command *c)
{
        struct shell_stream *st = &c->out[SHELL_STDOUT];
        st->in_trailer = false;
        st->match = 0;
        st->trailer_len = 0;
        st->trailer[0] = '\0';
        c->begun = true;
        if (c->interrupt_waiting && c->stage == 0) {
                command_interrupt_step(s, c);
        }
}

/* Bytes from one of the shell's pipes: the running command's output up to
 * its end record; anything else (a background job writing between
 * commands, the shell's banner before setup) is dropped. The marker starts
 * with \036, a byte found nowhere else in it: a partial match that fails
 * is output, and the failing byte is tried again as a start. */
static void session_feed(struct shell_session *s, int which, const char *data, size_t len)
{
        struct shell_command *c = s->cmd;
        if (c == NULL || c->finished)
                return;
        struct shell_stream *st = &c->out[which];
        size_t i = 0;
        while (i < len && !st->ended) {
                if (st->in_trailer) {
                        const char *nul = memchr(data + i, '\0', len - i);
                        size_t n = nul ? (size_t)(nul - (data + i)) : len - i;
                        size_t room = SHELL_MAX_TRAILER - st->trailer_len;
                        size_t take = n < room ? n : room;
                        if (st->trailer == NULL && (st->trailer = malloc(SHELL_MAX_TRAILER + 1)) == NULL)
                                take = 0;
                        if (take > 0)
                                memcpy(st->trailer + st->trailer_len, data + i, take);
                        st->trailer_len += take;
                        if (st->trailer)
                                st->trailer[st->trailer_len] = '\0';
                        i += n;
                        if (nul == NULL)
                                continue;
                        i++;
                        if (which == SHELL_STDOUT && !c->begun && st->trailer != NULL &&
                            strcmp(st->trailer, SHELL_START_TRAILER) == 0) {
                                command_begun(s, c);
                                continue;
                        }
                        st->ended = true;
                        continue;
                }
                if (data[i] == c->marker[st->match]) {
                        i++;
                        if (++st->match == SHELL_MARKER_LEN)
                                st->in_trailer = true;
                        continue;
                }
                if (st->match > 0) {
                        command_keep(c, which, c->marker, st->match);
                        st->match = 0;
                        continue;
                }
                const char *start = memchr(data + i, c->marker[0], len - i);
                size_t n = start ? (size_t)(start - (data + i)) : len - i;
                command_keep(c, which, data + i, n);
                i += n;
        }
        if (c->out[0].ended && c->out[1].ended)
                command_finish(s, c);
}

static void shell_on_stdout(struct exec *ex, const char *data, size_t len, void *opaque)
{
        session_feed(opaque, SHELL_STDOUT, data, len);
}

static void shell_on_stderr(struct exec *ex, const char *data, size_t len, void *opaque)
{
        session_feed(opaque, SHELL_STDERR, data, len);
}

/* The shell ended: `exit`, terminate, a kill after a timeout, its sandbox going. */
static void shell_exec_done(struct exec *ex, json_t *result, void *opaque)
{
        struct shell_session *s = opaque;
        struct sandbox *sb = s->sb;
        s->exec = NULL;
        bool sandbox_gone = sb->state != SANDBOX_RUNNING;
        if (s->create_req != NULL) {
                struct rpc_request *req = s->create_req;
                s->create_req = NULL;
                const char *why = json_string_value(json_object_get(result, "stderr"));
                rpc_reply_fail(req, sandbox_gone ? "unavailable" : "internal",
                               "the shell did not start%s%.300s", why && why[0] ? ": " : "", why ? why : "");
        }
        struct shell_command *c = s->cmd;
        if (c != NULL && !c->finished && !c->boot) {
                if (c->req != NULL && (sandbox_gone || s->terminating)) {
                        struct rpc_request *req = c->req;
                        c->req = NULL;
                        rpc_reply_fail(req, "unavailable", "%s",
                                       sandbox_gone ? "the sandbox was removed during the command"
                                                    : "the shell session was terminated");
                }
                c->shell_exited = true;
                json_t *code = json_object_get(result, "exit_code");
                c->exit_code = json_is_integer(code) ? json_incref(code) : json_null();
                if (c->stage == 3)
                        c->note = "the command did not stop on SIGINT or SIGTERM: the shell was killed and "
                                  "the session's state is lost";
                else
                        c->note = "the shell exited: the session has ended";
                command_finish(s, c);
        }
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: shell %s ended", sb->id, s->name);
        session_free(s);
}

/* What the next nsboxd must know to take the session over (live restore):
 * and the command it runs, if any, to know its end record. */
static json_t *shell_keep_state(struct exec *ex, void *data)
{
        struct shell_session *s = data;
        json_t *state = json_pack("{s:s, s:s?, s:b}", "name", s->name, "cwd", s->cwd, "busy",
                                  !s->ready || (s->cmd != NULL && !s->cmd->finished));
        const struct shell_command *c = s->cmd;
        if (state != NULL && s->ready && c != NULL && !c->finished && !c->boot)
                json_object_set_new(state, "command",
                                    json_pack("{s:s, s:s, s:I, s:b, s:I, s:i}", "command_id", c->id, "nonce",
                                              c->marker + sizeof(SHELL_MARKER_PREFIX) - 1, "max_output",
                                              (json_int_t)c->max_output, "base64", c->base64, "ends_at_ms",
                                              (json_int_t)c->ends_realtime_ms, "timeout_s",
                                              (int)c->timeout_s));
        return state;
}

/* The command a session ran at the restart, from its kept state: its end
 * record is known by its nonce; its output before the restart is lost. */
static struct shell_command *command_adopted(struct shell_session *s, json_t *kept)
{
        json_t *id = json_object_get(kept, "command_id"), *nonce = json_object_get(kept, "nonce"),
               *max = json_object_get(kept, "max_output"), *ends = json_object_get(kept, "ends_at_ms");
        if (!json_is_string(id) || json_string_length(id) != 36 || !json_is_string(nonce) ||
            json_string_length(nonce) != SHELL_NONCE_LEN ||
            strspn(json_string_value(nonce), "0123456789abcdef") != SHELL_NONCE_LEN ||
            !json_is_integer(max) || json_integer_value(max) < 0 ||
            json_integer_value(max) > SHELL_MAX_MAX_OUTPUT || !json_is_integer(ends))
                return NULL;
        struct shell_command *c = command_new(false, (size_t)json_integer_value(max),
                                              json_is_true(json_object_get(kept, "base64")));
        if (c == NULL)
                return NULL;
        snprintf(c->id, sizeof(c->id), "%s", json_string_value(id));
        snprintf(c->marker, sizeof(c->marker), "%s%s", SHELL_MARKER_PREFIX, json_string_value(nonce));
        c->begun = true; /* its start record went to the previous nsboxd, or comes now: skipped as output */
        c->truncated = true;
        c->note = "nsboxd restarted while the command ran: its output before the restart is not kept";
        c->timeout_s = (unsigned)json_integer_value(json_object_get(kept, "timeout_s"));
        c->ends_realtime_ms = json_integer_value(ends);
        if (c->ends_realtime_ms > 0) {
                long long left = c->ends_realtime_ms - now_realtime_ms();
                command_deadline(s, c, now_monotonic_ms() + (left > 0 ? left : 1));
        }
        return c;
}

static const struct exec_hooks shell_hooks = {
        .on_stdout = shell_on_stdout,
        .on_stderr = shell_on_stderr,
        .done = shell_exec_done,
        .keep_stdin = true,
        .service = true,
        .keep_kind = "shell", /* live restore: the session (its cwd, variables, jobs) outlives nsboxd */
        .keep_state = shell_keep_state,
};

static bool name_valid(const char *name, size_t len);

/* Live restore: a session a previous nsboxd started, with the command it
 * ran then, if any: that one runs on, and its end (exit code, cwd) is kept
 * for shell.check as a non-blocking run's (its client went with the old
 * nsboxd). One still setting up is not adopted. */
static int shell_adopt(struct sandbox *sb, struct exec *ex, json_t *state)
{
        json_t *name = json_object_get(state, "name"), *cwd = json_object_get(state, "cwd");
        json_t *kept = json_object_get(state, "command");
        if (!json_is_string(name) || !name_valid(json_string_value(name), json_string_length(name)) ||
            session_find(sb, json_string_value(name)) != NULL)
                return -1;
        if (json_is_true(json_object_get(state, "busy")) && kept == NULL) {
                log_warn("sandbox %s: shell %s not adopted: it was starting", sb->id,
                         json_string_value(name));
                return -1;
        }
        struct shell_session *s = calloc(1, sizeof(*s));
        if (s == NULL)
                return -1;
        s->sb = sb;
        if (kept != NULL && (s->cmd = command_adopted(s, kept)) == NULL) {
                free(s);
                log_warn("sandbox %s: shell %s not adopted: the command it ran is not one nsboxd keeps",
                         sb->id, json_string_value(name));
                return -1;
        }
        snprintf(s->name, sizeof(s->name), "%s", json_string_value(name));
        s->exec = ex;
        s->ready = true;
        s->created_ms = now_monotonic_ms();
        s->cwd = json_is_string(cwd) ? strdup(json_string_value(cwd)) : NULL;
        s->next = sessions;
        sessions = s;
        exec_adopted_hooks(ex, &shell_hooks, s);
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: shell %s adopted (live restore)%s%s", sb->id,
                    s->name, s->cmd != NULL ? ", running command " : "", s->cmd != NULL ? s->cmd->id : "");
        return 0;
}

void shell_live_restore_init(void)
{
        exec_on_adopt(shell_hooks.keep_kind, shell_adopt);
}

/* Append `text` as a bash $'...' word: bytes outside a plain set as \xHH. */
static int append_quoted(char **buf, size_t *len, size_t *cap, const char *text, size_t n)
{
        size_t need = *len + 4 * n + 8;
        if (need > *cap) {
                char *grown = realloc(*buf, need);
                if (grown == NULL)
                        return -ENOMEM;
                *buf = grown;
                *cap = need;
        }
        char *p = *buf + *len;
        *p++ = '$';
        *p++ = '\'';
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)text[i];
                if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    strchr(" _-./,:=+@%", ch) != NULL) {
                        if (ch != '\0') {
                                *p++ = (char)ch;
                                continue;
                        }
                }
                static const char hex[] = "0123456789abcdef";
                *p++ = '\\';
                *p++ = 'x';
                *p++ = hex[ch >> 4];
                *p++ = hex[ch & 15];
        }
        *p++ = '\'';
        *len = (size_t)(p - *buf);
        return 0;
}

static int append_text(char **buf, size_t *len, size_t *cap, const char *text)
{
        size_t n = strlen(text);
        if (*len + n + 1 > *cap) {
                size_t c = *len + n + 256;
                char *grown = realloc(*buf, c);
                if (grown == NULL)
                        return -ENOMEM;
                *buf = grown;
                *cap = c;
        }
        memcpy(*buf + *len, text, n);
        *len += n;
        return 0;
}

/* The line that runs `command` (in `cwd` first, when given) under `c`'s nonce. */
static char *command_line(const struct shell_command *c, const char *command, size_t command_len,
                          const char *cwd, size_t *out_len)
{
        char *buf = NULL;
        size_t len = 0, cap = 0;
        char head[192];
        snprintf(head, sizeof(head),
                 "__nsbox_n=%s; printf '\\036NSBOXEND %%s" SHELL_START_TRAILER
                 "\\0' \"$__nsbox_n\"; __nsbox_ret; { ",
                 c->marker + sizeof(SHELL_MARKER_PREFIX) - 1);
        int r = append_text(&buf, &len, &cap, head);
        if (r == 0 && cwd != NULL) {
                r = append_text(&buf, &len, &cap, "cd -- ");
                if (r == 0)
                        r = append_quoted(&buf, &len, &cap, cwd, strlen(cwd));
                if (r == 0)
                        r = append_text(&buf, &len, &cap, " && ");
        }
        if (r == 0)
                r = append_text(&buf, &len, &cap, "eval ");
        if (r == 0)
                r = append_quoted(&buf, &len, &cap, command, command_len);
        if (r == 0)
                r = append_text(&buf, &len, &cap, "; } </dev/null\n");
        if (r < 0) {
                free(buf);
                return NULL;
        }
        *out_len = len;
        return buf;
}

/* The setup line (see shell.h); its own end records say the shell is ready. */
static char *setup_line(const struct shell_command *boot, size_t *out_len)
{
        char *line = NULL;
        int n = asprintf(
            &line,
            "set +m +H +o history; unset HISTFILE MAILCHECK; PS1=''; PS2=''; PS0=''; __nsbox_rc=0; "
            "__nsbox_n=%s; __nsbox_end() { __nsbox_rc=$?; printf '\\036NSBOXEND %%s %%d %%s\\0' "
            "\"$__nsbox_n\" \"$__nsbox_rc\" \"$PWD\"; printf '\\036NSBOXEND %%s\\0' \"$__nsbox_n\" >&2; }; "
            "__nsbox_ret() { return \"$__nsbox_rc\"; }; readonly -f __nsbox_end __nsbox_ret; "
            "PROMPT_COMMAND=__nsbox_end; readonly PROMPT_COMMAND\n",
            boot->marker + sizeof(SHELL_MARKER_PREFIX) - 1);
        if (n < 0)
                return NULL;
        *out_len = (size_t)n;
        return line;
}

/* --- parameters -------------------------------------------------------- */

/* The sandbox of params.sandbox_id (the dispatcher found it, or NULL) that
 * the caller may use, running; NULL after replying. */
static struct sandbox *require_running_sandbox(struct rpc_request *req, struct sandbox *sb)
{
        json_t *id = json_object_get(req->msg.params, "sandbox_id");
        if (!json_is_string(id)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "sandbox_id must be a string");
                return NULL;
        }
        if (sb == NULL) {
                rpc_reply_fail(req, "not_found", "no sandbox %.64s", json_string_value(id));
                return NULL;
        }
        if (sb->state != SANDBOX_RUNNING) {
                rpc_reply_fail(req, "unavailable", "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
                return NULL;
        }
        return sb;
}

static bool name_valid(const char *name, size_t len)
{
        if (len == 0 || len > SHELL_MAX_NAME ||
            !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z') ||
              (name[0] >= '0' && name[0] <= '9')))
                return false;
        for (size_t i = 0; i < len; i++) {
                char ch = name[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                      ch == '_' || ch == '-' || ch == '.'))
                        return false;
        }
        return true;
}

static bool valid_path(json_t *v)
{
        return json_is_string(v) && json_string_length(v) > 0 && json_string_length(v) < 4096 &&
               memchr(json_string_value(v), '\0', json_string_length(v)) == NULL;
}

/* The session named by params.session of a running sandbox; NULL after replying. */
static struct shell_session *require_session(struct rpc_request *req, struct sandbox *sb)
{
        sb = require_running_sandbox(req, sb);
        if (sb == NULL)
                return NULL;
        json_t *name = json_object_get(req->msg.params, "session");
        if (!json_is_string(name) || !name_valid(json_string_value(name), json_string_length(name))) {
                rpc_reply_error(
                    req, JSONRPC_INVALID_PARAMS, "invalid_params",
                    "session must be a name of 1 to %d letters, digits, '_', '-' or '.', starting "
                    "with a letter or digit",
                    SHELL_MAX_NAME);
                return NULL;
        }
        struct shell_session *s = session_find(sb, json_string_value(name));
        if (s == NULL) {
                rpc_reply_fail(req, "not_found", "no shell session %s in sandbox %s", json_string_value(name),
                               sb->id);
                return NULL;
        }
        return s;
}

/* --- methods ------------------------------------------------------------- */

void shell_method_create(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "name", "cwd", "env", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *p = req->msg.params;
        json_t *name = json_object_get(p, "name");
        if (name != NULL && !json_is_null(name) &&
            (!json_is_string(name) || !name_valid(json_string_value(name), json_string_length(name)))) {
                rpc_reply_error(
                    req, JSONRPC_INVALID_PARAMS, "invalid_params",
                    "name must be 1 to %d letters, digits, '_', '-' or '.', starting with a letter "
                    "or digit",
                    SHELL_MAX_NAME);
                return;
        }
        json_t *cwd = json_object_get(p, "cwd");
        if (cwd != NULL && !json_is_null(cwd) && !valid_path(cwd)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "cwd must be a path");
                return;
        }
        json_t *env = json_object_get(p, "env");
        if (env != NULL && !json_is_null(env) && policy_check_env(env, "env", &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        sb = require_running_sandbox(req, sb);
        if (sb == NULL)
                return;
        char chosen[SHELL_MAX_NAME + 1];
        if (json_is_string(name)) {
                snprintf(chosen, sizeof(chosen), "%s", json_string_value(name));
                if (session_find(sb, chosen) != NULL) {
                        rpc_reply_fail(req, "exists", "sandbox %s has a shell session %s already", sb->id,
                                       chosen);
                        return;
                }
        } else {
                for (unsigned i = 1;; i++) {
                        snprintf(chosen, sizeof(chosen), "shell-%u", i);
                        if (session_find(sb, chosen) == NULL)
                                break;
                }
        }
        if (sessions_of(sb) >= SHELL_MAX_SESSIONS) {
                rpc_reply_fail(req, "limit_reached", "sandbox %s has %d shell sessions, the most allowed",
                               sb->id, SHELL_MAX_SESSIONS);
                return;
        }
        struct shell_session *s = calloc(1, sizeof(*s));
        struct shell_command *boot = command_new(true, 0, false);
        size_t line_len = 0;
        _cleanup_free_ char *line = boot ? setup_line(boot, &line_len) : NULL;
        if (s == NULL || line == NULL) {
                free(s);
                command_free(boot);
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        snprintf(s->name, sizeof(s->name), "%s", chosen);
        s->sb = sb;
        s->created_ms = now_monotonic_ms();
        s->cmd = boot;
        s->create_req = req;
        /* A shell that never comes up (a loaded host, an image whose bash hangs) is given up. */
        command_deadline(s, boot, now_monotonic_ms() + 60000);
        boot->stage = 2;
        _cleanup_json_ json_t *params =
            json_pack("{s:[s, s, s, s, s], s:i, s:i}", "argv", "bash", "--noediting", "--norc", "--noprofile",
                      "-i", "timeout_seconds", PARAMS_TIMEOUT_MAX_S, "max_output_bytes", 65536);
        if (params != NULL && cwd != NULL && !json_is_null(cwd))
                json_object_set(params, "cwd", cwd);
        if (params != NULL && env != NULL && !json_is_null(env))
                json_object_set(params, "env", env);
        if (params == NULL || exec_run(sb, params, &shell_hooks, s, &s->exec, &err) < 0) {
                command_free(boot);
                free(s);
                rpc_reply_fail(req, "internal", "start the shell: %s", err ? err->message : "out of memory");
                return;
        }
        s->next = sessions;
        sessions = s;
        if (exec_write_stdin(s->exec, line, line_len) < 0)
                exec_signal(s->exec, SIGKILL); /* shell_exec_done answers */
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: shell %s started by uid %u", sb->id, s->name,
                    (unsigned)req->uid);
}

/* The client of a blocking run left: nobody reads the result; interrupt it.
 * The request is answered now (into the void), which frees it: the command
 * ends without one. */
static void run_client_gone(struct rpc_request *req, void *data)
{
        struct shell_session *s = data;
        struct shell_command *c = s->cmd;
        if (c == NULL || c->req != req)
                return;
        c->req = NULL;
        if (!c->finished && c->stage == 0 && !c->interrupt_waiting) {
                command_interrupt_step(s, c);
        }
        rpc_reply_fail(req, "unavailable", "client gone");
}

void shell_method_run(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "session",          "command",
                                             "cwd",        "timeout_seconds",  "blocking",
                                             "encoding",   "max_output_bytes", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *p = req->msg.params;
        json_t *command = json_object_get(p, "command");
        if (!json_is_string(command) || json_string_length(command) == 0 ||
            memchr(json_string_value(command), '\0', json_string_length(command)) != NULL ||
            json_string_length(command) > SHELL_MAX_COMMAND) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "command must be a non-empty string without NUL bytes, of at most %u bytes",
                                SHELL_MAX_COMMAND);
                return;
        }
        json_t *cwd = json_object_get(p, "cwd");
        if (cwd != NULL && !json_is_null(cwd) && !valid_path(cwd)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "cwd must be a path");
                return;
        }
        bool blocking = true;
        json_t *b = json_object_get(p, "blocking");
        if (b != NULL && !json_is_null(b)) {
                if (!json_is_boolean(b)) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "blocking must be a boolean");
                        return;
                }
                blocking = json_is_true(b);
        }
        /* Blocking runs time out after 30 s unless asked; non-blocking ones run until done. */
        unsigned timeout_s;
        if (params_get_timeout(p, blocking ? PARAMS_TIMEOUT_DEFAULT_S : 0, &timeout_s, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        bool base64;
        _cleanup_error_ nsbox_error_t *enc_err = NULL;
        if (params_get_encoding(p, &base64, &enc_err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", enc_err->message);
                return;
        }
        uint64_t max_output = SHELL_DEFAULT_MAX_OUTPUT;
        _cleanup_error_ nsbox_error_t *size_err = NULL;
        if (params_get_size(p, "max_output_bytes", "max_output_bytes", NULL, 0, SHELL_MAX_MAX_OUTPUT,
                            &max_output, &size_err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", size_err->message);
                return;
        }
        struct shell_session *s = require_session(req, sb);
        if (s == NULL)
                return;
        if (!s->ready || s->exec == NULL) {
                rpc_reply_fail(req, "busy", "shell session %s is starting", s->name);
                return;
        }
        if (s->cmd != NULL && !s->cmd->finished) {
                rpc_reply_fail(req, "busy", "shell session %s runs command %s; wait for it (shell.check)",
                               s->name, s->cmd->id);
                return;
        }
        struct shell_command *c = command_new(false, max_output, base64);
        size_t line_len = 0;
        _cleanup_free_ char *line =
            c ? command_line(c, json_string_value(command), json_string_length(command),
                             json_is_string(cwd) ? json_string_value(cwd) : NULL, &line_len)
              : NULL;
        if (line == NULL) {
                command_free(c);
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        int r = exec_write_stdin(s->exec, line, line_len);
        if (r < 0) {
                command_free(c);
                rpc_reply_fail(req, "unavailable", "shell session %s does not take input: %s", s->name,
                               strerror(-r));
                return;
        }
        command_free(s->cmd);
        s->cmd = c;
        c->timeout_s = timeout_s;
        if (timeout_s > 0) {
                command_deadline(s, c, c->started_mono + (long long)timeout_s * 1000);
                c->ends_realtime_ms = now_realtime_ms() + (long long)timeout_s * 1000;
        }
        exec_keep_update(s->exec);
        sandbox_touch(s->sb);
        if (blocking) {
                c->req = req;
                rpc_request_on_disconnect(req, run_client_gone, s);
                return;
        }
        rpc_reply_result(
            req, json_pack("{s:s, s:s, s:b}", "session", s->name, "command_id", c->id, "running", true));
}

void shell_method_check(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "session", "since", NULL };
        if (!rpc_check_fields(req, known))
                return;
        size_t since[2] = { 0, 0 };
        json_t *sv = json_object_get(req->msg.params, "since");
        for (int i = 0; i < 2 && sv != NULL && !json_is_null(sv); i++) {
                json_t *v = json_is_object(sv) ? json_object_get(sv, shell_stream_names[i]) : NULL;
                if (!json_is_object(sv) ||
                    (v != NULL && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0))) {
                        rpc_reply_error(
                            req, JSONRPC_INVALID_PARAMS, "invalid_params",
                            "since must be {stdout, stderr} byte offsets (the `next` of a check)");
                        return;
                }
                since[i] = json_is_integer(v) ? (size_t)json_integer_value(v) : 0;
        }
        struct shell_session *s = require_session(req, sb);
        if (s == NULL)
                return;
        if (s->cmd == NULL || s->cmd->boot) {
                rpc_reply_result(req, json_pack("{s:s, s:n, s:b, s:s}", "session", s->name, "command_id",
                                                "running", false, "cwd", s->cwd ? s->cwd : ""));
                return;
        }
        rpc_reply_result(req, command_json(s, s->cmd, since));
}

void shell_method_terminate(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "session", NULL };
        if (!rpc_check_fields(req, known))
                return;
        struct shell_session *s = require_session(req, sb);
        if (s == NULL)
                return;
        s->terminating = true;
        if (s->exec != NULL)
                exec_signal(s->exec, SIGKILL); /* shell_exec_done frees it */
        log_limited(s->sb->id, LOG_LEVEL_INFO, "sandbox %s: shell %s terminated by uid %u", s->sb->id,
                    s->name, (unsigned)req->uid);
        rpc_reply_result(req, json_pack("{s:s, s:b}", "session", s->name, "terminated", true));
}

void shell_method_list(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", NULL };
        if (!rpc_check_fields(req, known))
                return;
        sb = require_running_sandbox(req, sb);
        if (sb == NULL)
                return;
        json_t *list = json_array();
        for (struct shell_session *s = sessions; s != NULL; s = s->next) {
                if (s->sb != sb || s->terminating)
                        continue;
                struct shell_command *c = s->cmd != NULL && !s->cmd->boot ? s->cmd : NULL;
                json_array_append_new(list,
                                      json_pack("{s:s, s:b, s:b, s:o, s:s}", "session", s->name, "ready",
                                                s->ready, "running", c != NULL && !c->finished, "command_id",
                                                c != NULL ? json_string(c->id) : json_null(), "cwd",
                                                s->cwd ? s->cwd : ""));
        }
        rpc_reply_result(req, json_pack("{s:s, s:o, s:i}", "sandbox_id", sb->id, "sessions", list, "max",
                                        SHELL_MAX_SESSIONS));
}
