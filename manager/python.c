/* SPDX-License-Identifier: Apache-2.0 */
/* The code interpreter: python.run (stateless, stateful) and package.install. */
#include "python.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "cleanup.h"
#include "daemon.h"
#include "egress.h"
#include "exec.h"
#include "exec_params.h"
#include "fs_files.h"
#include "fs_path.h"
#include "images.h"
#include "json_cleanup.h"
#include "log.h"
#include "params.h"
#include "policy.h"
#include "quota.h"
#include "requirement.h"
#include "removals.h"
#include "sandbox_life.h"
#include "textenc.h"

#define RUNNER      "/usr/lib/nsbox/run.py"
#define DRIVER      "/usr/lib/nsbox/driver.py"
#define FORKSERVER  "/usr/lib/nsbox/forkserver.py"
#define FORKRUN     "/usr/lib/nsbox/forkrun"
#define SCRIPT_PATH "/workspace/script.py"
#define PIP_TIMEOUT 600
/* What one reply may carry of images and the list of files produced: the
 * lists come from code in the sandbox, and a reply is held in nsboxd until
 * its client reads it. What is past these is left out, and the reply says so. */
#define MAX_IMAGE_BYTES    (8u << 20)
#define MAX_IMAGES         16
#define MAX_IMAGES_TOTAL   (16u << 20)
#define MAX_FILES_PRODUCED 1000
#define MAX_REPORT         (4u << 20)
#define MAX_FILES          1000
/* A stateful call that ignores SIGINT this long after its timeout loses its
 * interpreter. Once its code has stopped, the driver says so and has this
 * long again to end the call's processes and answer (a loaded host). */
#define INTERRUPT_GRACE_MS 2000
#define CLEANUP_GRACE_MS   30000
#define MAX_FRAME          (64u << 20)
/* A stateless script's arguments: they travel on the runner's command line
 * and in the fork server's request (forkrun's 256 KiB, with the environment). */
#define MAX_SCRIPT_ARGS       1000
#define MAX_SCRIPT_ARGS_BYTES (64u << 10)
/* A stateful call's output travels in one frame of the driver (MAX_FRAME,
 * JSON-escaped): it keeps at most this much, stdout and stderr together. */
#define STATEFUL_MAX_OUTPUT (8u << 20)
/* What a stateful call keeps of its output when it does not say (the driver's own default). */
#define STATEFUL_DEFAULT_OUTPUT (1u << 20)
/* A context's name (python.run context, python.reset). */
#define CONTEXT_NAME_MAX 64

struct python_run {
        struct rpc_request *req;
        uid_t uid;        /* its client's, counted in calls_by_uid until it is answered */
        bool new_session; /* a sandbox was made for its session: the reply says if one went before */
        bool oom_killed;  /* the kernel's OOM killer ended its code (stateless) */
        struct sandbox *sb;
        char sandbox_id[37]; /* sb's, to find whether it still exists after a wait */
        bool stateful;
        bool stream;                                   /* output as exec.output notifications */
        enum { RUN_CODE, RUN_RESET, RUN_REMOVE } kind; /* stateful: a call, or python.reset */
        char call_id[37];    /* a streamed stateful call's exec_id in its notifications */
        json_int_t streamed; /* bytes of it sent so far (stateful) */
        size_t images_sent, image_bytes, images_left_out; /* its figures streamed (stateful) */
        json_t *error; /* the exception's {name, value, traceback} (stateful), owned */
        unsigned timeout_s;
        json_int_t max_output;     /* max_output_bytes asked, or -1: the default */
        json_int_t output_dropped; /* bytes of output past max_output, dropped */
        long long started_mono;
        char report[80];
        char script[80];            /* a named script's private copy (script_name), or "" */
        struct exec *exec;          /* the stateless run or its pip install, while it runs */
        uint64_t forkserver_serial; /* the fork server that serves it (stateless), or 0 */
        struct python_run *next;    /* queued on the interpreter */
};

/* --- responses ------------------------------------------------------------ */

static void run_free(struct python_run *run)
{
        quota_calls_add(run->uid, -1);
        json_decref(run->error);
        free(run);
}

static void run_fail(struct python_run *run, const char *kind, const char *message)
{
        rpc_reply_fail(run->req, kind, "%s", message);
        run_free(run);
}

/* outputs: logs, then one image entry per PNG (read back from the sandbox),
 * as many as the bounds above allow; *left_out counts the others. */
static json_t *build_outputs(struct sandbox *sb, const char *stdout_text, json_t *images, size_t *left_out)
{
        json_t *outputs = json_array();
        if (stdout_text != NULL && stdout_text[0] != '\0')
                json_array_append_new(outputs, json_pack("{s:s, s:s}", "type", "logs", "logs", stdout_text));
        size_t i, total = 0, kept = 0;
        json_t *path;
        *left_out = 0;
        json_array_foreach(images, i, path)
        {
                if (!json_is_string(path))
                        continue;
                if (kept >= MAX_IMAGES || total >= MAX_IMAGES_TOTAL) {
                        (*left_out)++;
                        continue;
                }
                _cleanup_error_ nsbox_error_t *err = NULL;
                _cleanup_free_ char *data = NULL;
                size_t len = 0;
                size_t room = MAX_IMAGES_TOTAL - total;
                if (fs_read_file(sb, json_string_value(path), room < MAX_IMAGE_BYTES ? room : MAX_IMAGE_BYTES,
                                 &data, &len, &err) < 0) {
                        /* Too large for what is left, or unreadable. */
                        log_debug("sandbox %s: an image: %s", sb->id, err->message);
                        (*left_out)++;
                        continue;
                }
                total += len;
                _cleanup_free_ char *b64 = base64_encode(data, len, NULL);
                if (b64 == NULL) {
                        (*left_out)++;
                        continue;
                }
                kept++;
                json_array_append_new(outputs, json_pack("{s:s, s:{s:s, s:s, s:O}}", "type", "image", "image",
                                                         "mime", "image/png", "data", b64, "path", path));
        }
        return outputs;
}

/* The first MAX_FILES_PRODUCED entries of files (borrowed); *left_out counts the others. */
static json_t *bounded_files(json_t *files, size_t *left_out)
{
        *left_out = 0;
        if (files == NULL)
                return json_object();
        if (json_object_size(files) <= MAX_FILES_PRODUCED)
                return json_incref(files);
        json_t *kept = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(files, key, v)
        {
                if (json_object_size(kept) < MAX_FILES_PRODUCED)
                        json_object_set(kept, key, v);
                else
                        (*left_out)++;
        }
        return kept;
}

/* exit_code and result: new references or NULL (taken over); files and images: borrowed. */
static void reply_run(struct python_run *run, const char *status, json_t *exit_code, const char *out,
                      const char *err_text, json_t *files, json_t *images, json_t *result, bool truncated)
{
        long long elapsed = now_monotonic_ms() - run->started_mono;
        size_t images_left_out, files_left_out;
        _cleanup_free_ char *with_oom = NULL;
        if (run->oom_killed &&
            asprintf(&with_oom,
                     "%snsbox: the code ran out of memory and was killed (the sandbox's memory limit is %llu "
                     "MiB: create it with a larger limits.memory_bytes)\n",
                     err_text ? err_text : "",
                     (unsigned long long)(run->sb->policy.limits.memory_bytes >> 20)) >= 0)
                err_text = with_oom;
        json_t *outputs = build_outputs(run->sb, out, images, &images_left_out);
        images_left_out += run->images_left_out;
        json_t *files_json = bounded_files(files, &files_left_out);
        json_t *reply = json_pack("{s:s, s:s, s:s, s:o, s:I, s:o, s:o, s:o, s:b, s:s, s:I, s:I}", "status",
                                  status, "stdout", out ? out : "", "stderr", err_text ? err_text : "",
                                  "exit_code", exit_code ? exit_code : json_null(), "execution_time_ms",
                                  (json_int_t)elapsed, "files_produced", files_json, "outputs", outputs,
                                  "result", result ? result : json_null(), "truncated", truncated,
                                  "sandbox_id", run->sb->id, "images_left_out", (json_int_t)images_left_out,
                                  "files_left_out", (json_int_t)files_left_out);
        egress_note_refused(reply, run->sb, run->started_mono, true);
        if (reply != NULL)
                json_object_set_new(reply, "oom_killed", json_boolean(run->oom_killed));
        if (reply != NULL && truncated && run->output_dropped > 0)
                json_object_set_new(reply, "output_dropped_bytes", json_integer(run->output_dropped));
        if (reply != NULL && run->error != NULL)
                json_object_set(reply, "error", run->error);
        if (run->new_session)
                sandbox_removal_note_recreated(
                    reply, sandbox_removal_of_session(run->sb->policy.session_id, run->sb->owner));
        /* The end of a call is activity: the idle timeout counts from here. */
        sandbox_touch(run->sb);
        if (reply != NULL && (images_left_out > 0 || files_left_out > 0)) {
                char note[256];
                snprintf(note, sizeof(note),
                         "%zu images and %zu produced files were left out of this reply (at most %d images, "
                         "%u MiB of them, and %d files per reply); they are in the sandbox",
                         images_left_out, files_left_out, MAX_IMAGES, MAX_IMAGES_TOTAL >> 20,
                         MAX_FILES_PRODUCED);
                json_object_set_new(reply, "note", json_string(note));
        }
        rpc_reply_result(run->req, reply);
        run_free(run);
}

/* --- stateless: the fork server ------------------------------------------ */

/* One per sandbox at most (image-files/usr/lib/nsbox/forkserver.py): a
 * Python that has imported the image's heavy modules once and forks a
 * fresh child for each stateless call. A call is still an exec of its own
 * (output, timeout, kill, exit code, oom as before) whose program is the
 * attach client, forkrun, which hands the call to the server or, when it
 * cannot, runs run.py itself. The server is a service exec: it neither
 * makes the sandbox busy nor keeps it from the idle reaper, and its memory
 * is charged to the sandbox's cgroup. */
struct python_forkserver {
        struct sandbox *sb;
        struct exec *exec;
        uint64_t serial; /* tells a restarted server from the one a call used */
        bool ready;      /* it said so: its imports are done, its socket is bound */
        bool stopping;   /* killed; a new one starts once it has ended */
        unsigned calls;  /* stateless calls it serves now */
        char token[33];  /* its socket's name: see forkserver_start */
        char out[16];    /* what it printed so far, for "ready\n" */
        size_t out_len;
        struct loop_timer *idle_timer;
        struct python_forkserver *next;
};

static struct python_forkserver *forkservers;
static uint64_t forkserver_serial;

static struct python_forkserver *forkserver_of(const struct sandbox *sb)
{
        for (struct python_forkserver *fs = forkservers; fs != NULL; fs = fs->next) {
                if (fs->sb == sb)
                        return fs;
        }
        return NULL;
}

static void forkserver_on_idle(struct loop *loop, struct loop_timer *timer, void *data);

static void forkserver_arm_idle(struct python_forkserver *fs)
{
        long long ms = (long long)nsboxd.config.python_fork_server_idle_seconds * 1000;
        if (fs->idle_timer != NULL)
                loop_timer_move_in(nsboxd.loop, fs->idle_timer, ms);
        else if ((fs->idle_timer = loop_timer_add_in(nsboxd.loop, ms, forkserver_on_idle, fs)) == NULL)
                log_error("sandbox %s: python fork server: no idle timer: out of memory", fs->sb->id);
}

static void forkserver_stop(struct python_forkserver *fs, const char *why)
{
        if (fs == NULL || fs->stopping)
                return;
        log_limited(fs->sb->id, LOG_LEVEL_INFO, "sandbox %s: stopping the python fork server (%s)",
                    fs->sb->id, why);
        fs->stopping = true;
        fs->ready = false;
        exec_signal(fs->exec, SIGKILL); /* forkserver_done frees it */
}

static void forkserver_on_idle(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct python_forkserver *fs = data;
        fs->idle_timer = NULL; /* a one-shot timer, gone once this returns */
        if (fs->calls > 0)
                forkserver_arm_idle(fs); /* looked at again when the calls end */
        else
                forkserver_stop(fs, "idle");
}

static void forkserver_on_stdout(struct exec *ex, const char *data, size_t len, void *opaque)
{
        struct python_forkserver *fs = opaque;
        size_t room = sizeof(fs->out) - 1 - fs->out_len;
        memcpy(fs->out + fs->out_len, data, len < room ? len : room);
        fs->out_len += len < room ? len : room;
        fs->out[fs->out_len] = '\0';
        if (!fs->ready && !fs->stopping && strcmp(fs->out, "ready\n") == 0) {
                fs->ready = true;
                log_limited(fs->sb->id, LOG_LEVEL_INFO, "sandbox %s: python fork server ready", fs->sb->id);
        }
}

static void forkserver_done(struct exec *ex, json_t *result, void *opaque)
{
        struct python_forkserver *fs = opaque;
        for (struct python_forkserver **p = &forkservers; *p != NULL; p = &(*p)->next) {
                if (*p == fs) {
                        *p = fs->next;
                        break;
                }
        }
        if (!fs->stopping)
                log_limited(fs->sb->id, LOG_LEVEL_INFO, "sandbox %s: python fork server ended (%s)",
                            fs->sb->id, json_string_value(json_object_get(result, "stderr")) ?: "");
        loop_timer_cancel(nsboxd.loop, fs->idle_timer);
        free(fs);
}

static const struct exec_hooks forkserver_hooks = {
        .on_stdout = forkserver_on_stdout,
        .done = forkserver_done,
        .keep_stdin = true,
        .service = true,
};

static bool forkserver_wanted(const struct sandbox *sb)
{
        return strcmp(nsboxd.config.python_fork_server, "off") != 0 && sb->state == SANDBOX_RUNNING &&
               sb->policy.limits.memory_bytes >= nsboxd.config.python_fork_server_min_memory_bytes;
}

static int forkserver_start(struct sandbox *sb, nsbox_error_t **err)
{
        _cleanup_json_ json_t *preload = image_python_preload(sb->policy.image);
        if (preload == NULL)
                return 0; /* an image without one */
        struct python_forkserver *fs = calloc(1, sizeof(*fs));
        if (fs == NULL)
                return nsbox_error(err, ENOMEM, "python fork server");
        fs->sb = sb;
        fs->serial = ++forkserver_serial;
        /* The socket's name is random and reaches the server on its stdin,
         * which nothing else in the sandbox reads: a process of the sandbox
         * cannot take the name before the server binds it, and so cannot
         * stand in for the server and receive later calls. */
        uuid_t u;
        uuid_generate_random(u);
        for (int i = 0; i < 16; i++)
                snprintf(fs->token + 2 * i, 3, "%02x", u[i]);
        _cleanup_json_ json_t *argv = json_pack("[s, s]", "python3", FORKSERVER);
        json_array_extend(argv, preload);
        _cleanup_json_ json_t *params =
            json_pack("{s:O, s:i, s:I}", "argv", argv, "timeout_seconds", PARAMS_TIMEOUT_MAX_S,
                      "max_output_bytes", (json_int_t)(64 << 10));
        if (exec_run(sb, params, &forkserver_hooks, fs, &fs->exec, err) < 0) {
                free(fs);
                return -1;
        }
        char line[sizeof(fs->token) + 1];
        int n = snprintf(line, sizeof(line), "%s\n", fs->token);
        fs->next = forkservers;
        forkservers = fs;
        forkserver_arm_idle(fs);
        if (exec_write_stdin(fs->exec, line, (size_t)n) < 0)
                forkserver_stop(fs, "its stdin failed");
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: python fork server starting", sb->id);
        return 0;
}

/* The sandbox's fork server if it is ready to take a call; started (for
 * later calls) if there is none. The call that starts it does not wait for
 * its imports: it takes the plain path. */
static struct python_forkserver *forkserver_get(struct sandbox *sb)
{
        if (!forkserver_wanted(sb))
                return NULL;
        struct python_forkserver *fs = forkserver_of(sb);
        if (fs == NULL) {
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (forkserver_start(sb, &err) < 0)
                        log_limited(sb->id, LOG_LEVEL_WARN, "sandbox %s: python fork server: %s", sb->id,
                                    err->message);
                return NULL;
        }
        return fs->ready ? fs : NULL;
}

void python_sandbox_ready(struct sandbox *sb)
{
        if (strcmp(nsboxd.config.python_fork_server, "eager") == 0 && !sb->pooled)
                (void)forkserver_get(sb);
}

/* site-packages changed: the server's imports may no longer be what a
 * fresh interpreter would import. The next stateless call starts a new one. */
static void forkserver_invalidate(struct sandbox *sb)
{
        forkserver_stop(forkserver_of(sb), "packages were installed");
}

/* A call it served has ended. */
static void forkserver_call_done(struct python_run *run, bool timed_out)
{
        struct python_forkserver *fs = forkserver_of(run->sb);
        if (fs == NULL || fs->serial != run->forkserver_serial)
                return;
        fs->calls--;
        forkserver_arm_idle(fs);
        /* The call's own code may have stopped the server (SIGSTOP: same uid),
         * which then takes later calls and never runs them: a call that timed
         * out costs the server, so at most one call is lost that way. */
        if (timed_out)
                forkserver_stop(fs, "a call it served timed out");
}

/* --- stateless: run.py under the exec machinery --------------------------- */

static void stateless_done(struct exec *ex, json_t *result, void *data)
{
        struct python_run *run = data;
        run->exec = NULL;
        struct sandbox *sb = run->sb;
        if (sb->state == SANDBOX_EXITED || sb->state == SANDBOX_STOPPING) {
                run_fail(run, "unavailable", "the sandbox was removed during the run");
                return;
        }
        _cleanup_json_ json_t *report = NULL;
        _cleanup_free_ char *text = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        size_t len = 0;
        if (fs_read_file(sb, run->report, MAX_REPORT, &text, &len, &err) == 0)
                report = json_loadb(text, len, 0, NULL);
        nsbox_error_free(&err);
        if (fs_remove_file(sb, run->report, &err) < 0)
                log_debug("sandbox %s: remove %s: %s", sb->id, run->report, err->message);
        nsbox_error_free(&err);
        if (run->script[0] != '\0' && fs_remove_file(sb, run->script, &err) < 0)
                log_debug("sandbox %s: remove %s: %s", sb->id, run->script, err->message);

        json_t *code = json_object_get(result, "exit_code");
        bool timed_out = json_is_true(json_object_get(result, "timed_out"));
        if (run->forkserver_serial != 0)
                forkserver_call_done(run, timed_out);
        const char *status = timed_out                                                  ? "timeout"
                             : (json_is_integer(code) && json_integer_value(code) == 0) ? "ok"
                                                                                        : "error";
        json_t *files = json_object_get(report, "files_produced");
        json_t *images = json_object_get(report, "images");
        run->oom_killed = json_is_true(json_object_get(result, "oom_killed"));
        run->output_dropped = json_integer_value(json_object_get(result, "output_dropped_bytes"));
        reply_run(run, status, json_incref(code), json_string_value(json_object_get(result, "stdout")),
                  json_string_value(json_object_get(result, "stderr")), json_is_object(files) ? files : NULL,
                  json_is_array(images) ? images : NULL, NULL,
                  json_is_true(json_object_get(result, "truncated")));
}

static const struct exec_hooks stateless_hooks = { .done = stateless_done };

/* The code goes to /workspace/script.py (SPEC), or, given a script_name,
 * to a private file in /tmp that is removed after the call, so that the
 * user's own files are left alone; the runner then names the code
 * script_name (sys.argv[0], tracebacks). args follow as sys.argv[1:]. */
static void run_stateless(struct python_run *run, const char *code)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *p = run->req->msg.params;
        const char *name = json_string_value(json_object_get(p, "script_name"));
        json_t *args = json_object_get(p, "args");
        uuid_t u;
        char uuid_text[37];
        uuid_generate_random(u);
        uuid_unparse_lower(u, uuid_text);
        if (name != NULL)
                snprintf(run->script, sizeof(run->script), "/tmp/.nsbox-script-%s.py", uuid_text);
        const char *script = name != NULL ? run->script : SCRIPT_PATH;
        if (fs_write_file(run->sb, script, code, strlen(code), 0644, &err) < 0) {
                run->script[0] = '\0';
                run_fail(run, "internal", err->message);
                return;
        }
        snprintf(run->report, sizeof(run->report), "/tmp/.nsbox-report-%s.json", uuid_text);
        struct python_forkserver *fs = forkserver_get(run->sb);
        _cleanup_json_ json_t *params =
            json_pack("{s:[s, s, s, s], s:i, s:b}", "argv", fs != NULL ? FORKRUN : "python3",
                      fs != NULL ? fs->token : RUNNER, script, run->report, "timeout_seconds",
                      (int)run->timeout_s, "stream", run->stream);
        if (run->max_output >= 0)
                json_object_set_new(params, "max_output_bytes", json_integer(run->max_output));
        json_t *env = json_object_get(p, "env");
        if (json_is_object(env))
                json_object_set(params, "env", env);
        json_t *argv = json_object_get(params, "argv");
        if (name != NULL || json_array_size(args) > 0)
                json_array_append_new(argv, json_string(name != NULL ? name : script));
        json_array_extend(argv, args != NULL && json_is_array(args) ? args : NULL);
        if (exec_run(run->sb, params, &stateless_hooks, run, &run->exec, &err) < 0) {
                _cleanup_error_ nsbox_error_t *ignored = NULL;
                if (run->script[0] != '\0')
                        fs_remove_file(run->sb, run->script, &ignored);
                run_fail(run, "internal", err->message);
                return;
        }
        exec_attribute(run->exec, run->req);
        if (run->stream)
                exec_stream_to(run->exec, run->req);
        if (fs != NULL) {
                run->forkserver_serial = fs->serial;
                fs->calls++;
        }
}

/* --- stateful: one interpreter per sandbox -------------------------------- */

struct python_interp {
        struct sandbox *sb;
        struct exec *exec;
        bool ready;
        char *buf; /* frames from the driver */
        size_t len, cap;
        struct python_run *queue; /* head is the call in flight once sent */
        bool in_flight;
        uint64_t next_id;
        struct loop_timer *timer; /* the call's timeout, then its grace times */
        int timeout_stage;        /* 0: none, 1: SIGINT sent, 2: the code stopped, 3: killed */
        long long call_ends_ms;   /* when the call in flight times out (realtime), for live restore */
        /* Live restore: the call in flight is a previous nsboxd's, whose
         * answer reaches no one (dropped); until it comes, a frame that
         * nsboxd had read in part before it stopped is skipped. */
        bool orphan_call;
};

bool python_busy(const struct sandbox *sb)
{
        return sb->python != NULL && (sb->python->in_flight || sb->python->queue != NULL);
}

static void interp_send_next(struct python_interp *in);
static void python_stateful_submit(struct python_run *run);

static void interp_on_timer(struct loop *loop, struct loop_timer *timer, void *data);

static void interp_arm(struct python_interp *in, long long ms)
{
        if (in->timer != NULL)
                loop_timer_move_in(nsboxd.loop, in->timer, ms);
        else if ((in->timer = loop_timer_add_in(nsboxd.loop, ms, interp_on_timer, in)) == NULL)
                log_error("sandbox %s: python interpreter: no timer: out of memory", in->sb->id);
}

static void interp_disarm(struct python_interp *in)
{
        loop_timer_cancel(nsboxd.loop, in->timer);
        in->timer = NULL;
}

static void interp_free(struct python_interp *in, const char *why)
{
        while (in->queue != NULL) {
                struct python_run *run = in->queue;
                in->queue = run->next;
                run_fail(run, "unavailable", why);
        }
        interp_disarm(in);
        if (in->sb->python == in)
                in->sb->python = NULL;
        free(in->buf);
        free(in);
}

/* A streamed call's output frame, as exec.output notifications, up to
 * the output it keeps (the driver bounds it too; this bounds what nsboxd
 * holds for a client that does not read, whatever the sandbox sends). */
static void interp_stream(struct python_run *run, json_t *frame)
{
        const char *stream = json_string_value(json_object_get(frame, "output"));
        json_t *data = json_object_get(frame, "data");
        if (!run->stream || run->kind != RUN_CODE || !json_is_string(data) ||
            (strcmp(stream, "stdout") != 0 && strcmp(stream, "stderr") != 0))
                return;
        json_int_t most = run->max_output >= 0 ? run->max_output : STATEFUL_DEFAULT_OUTPUT;
        json_int_t len = (json_int_t)json_string_length(data);
        if (run->streamed + len > most) {
                run->output_dropped += len;
                return;
        }
        run->streamed += len;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:O}", "exec_id", run->call_id, "stream", stream, "data", data);
        if (params != NULL)
                rpc_notify(run->req, "exec.output", params);
}

/* A figure a streamed call showed (its path in the sandbox), as a
 * python.image notification while the call runs, within the bounds of a
 * reply's images: the ones past them are counted as left out. */
static void interp_stream_image(struct python_run *run, json_t *frame)
{
        const char *path = json_string_value(json_object_get(frame, "image"));
        if (!run->stream || run->kind != RUN_CODE || path == NULL)
                return;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_free_ char *data = NULL, *b64 = NULL;
        size_t len = 0, room = MAX_IMAGES_TOTAL - run->image_bytes;
        if (run->images_sent >= MAX_IMAGES || run->image_bytes >= MAX_IMAGES_TOTAL ||
            fs_read_file(run->sb, path, room < MAX_IMAGE_BYTES ? room : MAX_IMAGE_BYTES, &data, &len, &err) <
                0 ||
            (b64 = base64_encode(data, len, NULL)) == NULL) {
                run->images_left_out++;
                return;
        }
        run->images_sent++;
        run->image_bytes += len;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s, s:s, s:s}", "exec_id", run->call_id, "mime",
                                                  "image/png", "data", b64, "path", path);
        if (params != NULL)
                rpc_notify(run->req, "python.image", params);
}

/* The driver's {name, value, traceback} of the call's exception, type-checked. */
static json_t *driver_error(json_t *frame)
{
        json_t *e = json_object_get(frame, "error");
        json_t *name = json_object_get(e, "name"), *value = json_object_get(e, "value"),
               *traceback = json_object_get(e, "traceback");
        if (!json_is_string(name) || !json_is_string(value) || !json_is_string(traceback))
                return NULL;
        return json_pack("{s:O, s:O, s:O}", "name", name, "value", value, "traceback", traceback);
}

/* python.reset's answer, or a call the driver refused (too many contexts). */
static bool interp_answer_other(struct python_run *run, json_t *frame)
{
        if (run->kind != RUN_CODE) {
                json_t *context = json_object_get(run->req->msg.params, "context");
                bool found = json_is_true(json_object_get(frame, "found"));
                rpc_reply_result(run->req,
                                 json_pack("{s:s, s:O, s:b, s:b}", "sandbox_id", run->sb->id, "context",
                                           json_is_string(context) ? context : json_null(), "found", found,
                                           "removed", found && run->kind == RUN_REMOVE));
                run_free(run);
                return true;
        }
        const char *refused = json_string_value(json_object_get(frame, "refused"));
        if (refused == NULL)
                return false;
        char message[256];
        snprintf(message, sizeof(message), "%s", refused);
        run_fail(run, "limit_reached", message);
        return true;
}

static void interp_answer(struct python_interp *in, json_t *frame)
{
        struct python_run *run = in->queue;
        in->queue = run->next;
        in->in_flight = false;
        exec_keep_update(in->exec);
        interp_disarm(in);
        bool timed_out = in->timeout_stage > 0;
        in->timeout_stage = 0;
        if (interp_answer_other(run, frame)) {
                interp_send_next(in);
                return;
        }
        const char *status = timed_out ? "timeout" : json_string_value(json_object_get(frame, "status"));
        if (status == NULL)
                status = "error";
        /* A SystemExit's code as a script's would be (the driver says it), else 0 or 1. */
        json_t *said = json_object_get(frame, "exit_code");
        json_t *exit_code =
            timed_out ? NULL
            : json_is_integer(said) && json_integer_value(said) >= 0 && json_integer_value(said) <= 255
                ? json_incref(said)
                : json_integer(strcmp(status, "ok") == 0 ? 0 : 1);
        json_t *files = json_object_get(frame, "files_produced");
        json_t *images = json_object_get(frame, "images");
        json_t *result = json_object_get(frame, "result");
        /* The driver's count, type-checked: it runs as the sandbox's user. */
        json_t *dropped = json_object_get(frame, "output_dropped_bytes");
        if (json_is_integer(dropped) && json_integer_value(dropped) > 0 &&
            json_integer_value(dropped) < (1LL << 40)) /* a count, not a forged overflow */
                run->output_dropped += json_integer_value(dropped);
        run->error = driver_error(frame);
        /* A timeout is said as exec says it (the code got a KeyboardInterrupt; its
         * variables remain). */
        _cleanup_free_ char *stderr_text = NULL;
        const char *err_text = json_string_value(json_object_get(frame, "stderr"));
        if (timed_out &&
            asprintf(
                &stderr_text,
                "%s%snsbox: timed out after %u s (timeout_seconds), interrupted; the interpreter and its "
                "variables remain\n",
                err_text ? err_text : "",
                err_text && *err_text && err_text[strlen(err_text) - 1] != '\n' ? "\n" : "",
                run->timeout_s) >= 0)
                err_text = stderr_text;
        reply_run(run, status, exit_code, json_string_value(json_object_get(frame, "stdout")), err_text,
                  json_is_object(files) ? files : NULL, json_is_array(images) ? images : NULL,
                  json_is_string(result) ? json_incref(result) : NULL,
                  json_is_true(json_object_get(frame, "truncated")) || run->output_dropped > 0);
        interp_send_next(in);
}

/* Adopted during a call: the bytes the previous nsboxd left in the pipe may
 * begin inside a frame. Skip to what looks like the next one's start (a
 * frame's JSON object ends with '}', the next begins "LENGTH\n{"), keeping
 * the last bytes, where that start may be on its way. */
static void interp_resync(struct python_interp *in)
{
        size_t from = in->len > 24 ? in->len - 24 : 0;
        for (size_t i = 1; i < in->len; i++) {
                if (in->buf[i - 1] != '}' || in->buf[i] < '0' || in->buf[i] > '9')
                        continue;
                size_t j = i;
                while (j < in->len && in->buf[j] >= '0' && in->buf[j] <= '9')
                        j++;
                if (j + 1 < in->len && in->buf[j] == '\n' && in->buf[j + 1] == '{') {
                        from = i;
                        break;
                }
        }
        if (from == 0)
                from = 1; /* at least one byte, or this would not end */
        memmove(in->buf, in->buf + from, in->len - from);
        in->len -= from;
}

/* The previous nsboxd's call answered: dropped; the next call may go. */
static void interp_orphan_answered(struct python_interp *in)
{
        in->orphan_call = false;
        in->in_flight = false;
        in->timeout_stage = 0;
        interp_disarm(in);
        exec_keep_update(in->exec);
        log_limited(in->sb->id, LOG_LEVEL_INFO,
                    "sandbox %s: python interpreter: the call it ran at the restart has ended (its answer is "
                    "dropped)",
                    in->sb->id);
        interp_send_next(in);
}

static void interp_on_stdout(struct exec *ex, const char *data, size_t len, void *opaque)
{
        struct python_interp *in = opaque;
        if (in->len + len > MAX_FRAME + 32) {
                log_limited(in->sb->id, LOG_LEVEL_ERROR,
                            "sandbox %s: the python interpreter sent an oversized frame; killing it",
                            in->sb->id);
                exec_signal(ex, SIGKILL);
                return;
        }
        if (in->len + len > in->cap) {
                size_t cap = in->cap ? in->cap : 65536;
                while (cap < in->len + len)
                        cap *= 2;
                char *grown = realloc(in->buf, cap);
                if (grown == NULL) {
                        exec_signal(ex, SIGKILL);
                        return;
                }
                in->buf = grown;
                in->cap = cap;
        }
        memcpy(in->buf + in->len, data, len);
        in->len += len;
        for (;;) {
                char *nl = memchr(in->buf, '\n', in->len < 24 ? in->len : 24);
                if (nl == NULL && in->orphan_call && in->len >= 24) {
                        interp_resync(in);
                        continue;
                }
                if (nl == NULL)
                        return;
                char *end;
                unsigned long long body = strtoull(in->buf, &end, 10);
                if (in->orphan_call && (end != nl || body > MAX_FRAME ||
                                        (in->len > (size_t)(nl - in->buf) + 1 && nl[1] != '{'))) {
                        interp_resync(in);
                        continue;
                }
                if (end != nl || body > MAX_FRAME) {
                        log_limited(in->sb->id, LOG_LEVEL_ERROR,
                                    "sandbox %s: the python interpreter broke its framing; killing it",
                                    in->sb->id);
                        exec_signal(ex, SIGKILL);
                        return;
                }
                size_t header = (size_t)(nl - in->buf) + 1;
                if (in->len < header + body)
                        return;
                json_t *frame = json_loadb(in->buf + header, body, 0, NULL);
                memmove(in->buf, in->buf + header + body, in->len - header - body);
                in->len -= header + body;
                if (!json_is_object(frame) && in->orphan_call) {
                        json_decref(frame);
                        continue; /* the rest of a frame read in part, taken for one */
                }
                if (!json_is_object(frame)) {
                        json_decref(frame);
                        exec_signal(ex, SIGKILL);
                        return;
                }
                if (json_is_true(json_object_get(frame, "ready"))) {
                        in->ready = true;
                        interp_send_next(in);
                } else if (json_is_true(json_object_get(frame, "stopped"))) {
                        /* Once: code that forges the frame gains one grace, not forever. */
                        if (in->in_flight && in->timeout_stage == 1) {
                                in->timeout_stage = 2;
                                interp_arm(in, CLEANUP_GRACE_MS);
                        }
                } else if (json_is_string(json_object_get(frame, "output")) ||
                           json_is_string(json_object_get(frame, "image"))) {
                        json_t *id = json_object_get(frame, "id");
                        bool current = in->in_flight && !in->orphan_call && in->queue != NULL &&
                                       json_is_integer(id) && (uint64_t)json_integer_value(id) == in->next_id;
                        if (current && json_object_get(frame, "output") != NULL)
                                interp_stream(in->queue, frame);
                        else if (current)
                                interp_stream_image(in->queue, frame);
                } else if (in->in_flight && in->orphan_call) {
                        interp_orphan_answered(in);
                } else if (in->in_flight && in->queue != NULL) {
                        interp_answer(in, frame);
                }
                json_decref(frame);
        }
}

static void interp_done(struct exec *ex, json_t *result, void *opaque)
{
        struct python_interp *in = opaque;
        struct sandbox *sb = in->sb;
        struct python_run *queued = in->queue;
        in->queue = NULL;
        if (in->in_flight && !in->orphan_call && queued != NULL) {
                struct python_run *run = queued;
                queued = run->next;
                if (run->kind != RUN_CODE)
                        run_fail(run, "unavailable", "the python interpreter exited during the call");
                else if (in->timeout_stage > 0)
                        reply_run(run, "timeout", NULL, "",
                                  "nsbox: the code did not stop on SIGINT and its interpreter was restarted; "
                                  "variables are lost\n",
                                  NULL, NULL, NULL, false);
                else if (json_is_true(json_object_get(result, "oom_killed"))) {
                        /* The call's answer, not nsbox's failure: reply_run says out of memory. */
                        run->oom_killed = true;
                        reply_run(run, "error", NULL, "",
                                  "nsbox: the python interpreter was killed during the call; variables are "
                                  "lost\n",
                                  NULL, NULL, NULL, false);
                } else
                        run_fail(run, "internal",
                                 "the python interpreter exited during the call; variables are lost");
        }
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: python interpreter ended", sb->id);
        interp_free(in, "the python interpreter exited");
        /* Calls waiting behind it get a fresh interpreter, if the sandbox lives. */
        while (queued != NULL) {
                struct python_run *next = queued->next;
                queued->next = NULL;
                if (sb->state == SANDBOX_RUNNING)
                        python_stateful_submit(queued);
                else
                        run_fail(queued, "unavailable", "the sandbox was removed");
                queued = next;
        }
}

/* What the next nsboxd must know: whether a call is in flight, until when,
 * and the id of the last call sent. */
static json_t *interp_keep_state(struct exec *ex, void *data)
{
        struct python_interp *in = data;
        return json_pack("{s:b, s:I, s:I}", "busy", in->in_flight, "ends_at_ms", (json_int_t)in->call_ends_ms,
                         "last_id", (json_int_t)in->next_id);
}

static const struct exec_hooks interp_hooks = {
        .on_stdout = interp_on_stdout,
        .done = interp_done,
        .keep_stdin = true,
        .service = true,
        .keep_kind = "python", /* live restore: its variables outlive nsboxd */
        .keep_state = interp_keep_state,
};

/* Live restore: the interpreter a previous nsboxd started, variables and
 * all. One running a call is busy until that call's answer comes, which
 * reaches no one (its client went with the old nsboxd) and is dropped; the
 * call keeps its timeout. */
static int interp_adopt(struct sandbox *sb, struct exec *ex, json_t *state)
{
        if (sb->python != NULL)
                return -1;
        json_t *last_id = json_object_get(state, "last_id"), *ends = json_object_get(state, "ends_at_ms");
        struct python_interp *in = calloc(1, sizeof(*in));
        if (in == NULL)
                return -1;
        in->sb = sb;
        in->exec = ex;
        in->ready = true;
        in->next_id = json_is_integer(last_id) && json_integer_value(last_id) > 0
                          ? (uint64_t)json_integer_value(last_id)
                          : 0;
        if (json_is_true(json_object_get(state, "busy"))) {
                in->in_flight = in->orphan_call = true;
                in->call_ends_ms = json_is_integer(ends) ? json_integer_value(ends) : 0;
                long long left = in->call_ends_ms - now_realtime_ms();
                interp_arm(in, left > 0 ? left : 1);
        }
        exec_adopted_hooks(ex, &interp_hooks, in);
        sb->python = in;
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: python interpreter adopted (live restore)%s", sb->id,
                    in->orphan_call ? ", running a call" : "");
        return 0;
}

void python_live_restore_init(void)
{
        exec_on_adopt(interp_hooks.keep_kind, interp_adopt);
}

static void interp_on_timer(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct python_interp *in = data;
        in->timer = NULL; /* a one-shot timer, gone once this returns */
        if (!in->in_flight || in->exec == NULL)
                return;
        if (in->timeout_stage == 0) {
                in->timeout_stage = 1;
                exec_signal(in->exec, SIGINT);
                interp_arm(in, INTERRUPT_GRACE_MS);
        } else if (in->timeout_stage < 3) {
                in->timeout_stage = 3;
                exec_signal(in->exec, SIGKILL);
        }
}

static void interp_send_next(struct python_interp *in)
{
        if (!in->ready || in->in_flight || in->queue == NULL)
                return;
        struct python_run *run = in->queue;
        json_t *p = run->req->msg.params;
        _cleanup_json_ json_t *req = json_pack("{s:I}", "id", (json_int_t)++in->next_id);
        if (req != NULL && run->kind != RUN_CODE) {
                json_t *context = json_object_get(p, "context");
                json_object_set_new(req, "reset",
                                    json_is_string(context) ? json_incref(context) : json_string(""));
                json_object_set_new(req, "remove", json_boolean(run->kind == RUN_REMOVE));
        } else if (req != NULL) {
                /* checked by check_run_params */
                static const char *const passed[] = { "code", "context", "cwd", "env", "stream" };
                for (size_t i = 0; i < ARRAY_SIZE(passed); i++) {
                        json_t *v = json_object_get(p, passed[i]);
                        if (v != NULL && !json_is_null(v))
                                json_object_set(req, passed[i], v);
                }
                if (run->max_output >= 0)
                        json_object_set_new(req, "max_output_bytes", json_integer(run->max_output));
        }
        _cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
        _cleanup_free_ char *frame = NULL;
        /* One write: the driver wakes once, with all of it. */
        int len = body != NULL ? asprintf(&frame, "%zu\n%s", strlen(body), body) : -1;
        if (len < 0) {
                frame = NULL; /* asprintf leaves it undefined */
                in->queue = run->next;
                run_fail(run, "internal", "out of memory");
                return;
        }
        run->started_mono = now_monotonic_ms();
        in->in_flight = true;
        in->call_ends_ms = now_realtime_ms() + (long long)run->timeout_s * 1000;
        exec_keep_update(in->exec);
        if (exec_write_stdin(in->exec, frame, (size_t)len) < 0) {
                exec_signal(in->exec, SIGKILL); /* interp_done answers */
                return;
        }
        if (run->stream && run->kind == RUN_CODE) {
                uuid_t u;
                uuid_generate_random(u);
                uuid_unparse_lower(u, run->call_id);
                _cleanup_json_ json_t *started = json_pack("{s:s}", "exec_id", run->call_id);
                if (started != NULL)
                        rpc_notify(run->req, "exec.started", started);
        }
        interp_arm(in, (long long)run->timeout_s * 1000);
}

static struct python_interp *interp_start(struct sandbox *sb, nsbox_error_t **err)
{
        struct python_interp *in = calloc(1, sizeof(*in));
        if (in == NULL) {
                nsbox_error(err, ENOMEM, "python interpreter");
                return NULL;
        }
        in->sb = sb;
        _cleanup_json_ json_t *params =
            json_pack("{s:[s, s, s], s:i, s:I}", "argv", "python3", "-u", DRIVER, "timeout_seconds",
                      PARAMS_TIMEOUT_MAX_S, "max_output_bytes", (json_int_t)(1 << 20));
        if (exec_run(sb, params, &interp_hooks, in, &in->exec, err) < 0) {
                free(in);
                return NULL;
        }
        sb->python = in;
        log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: python interpreter started", sb->id);
        return in;
}

static void python_stateful_submit(struct python_run *run)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct python_interp *in = run->sb->python;
        if (in == NULL && (in = interp_start(run->sb, &err)) == NULL) {
                run_fail(run, "internal", err->message);
                return;
        }
        struct python_run **tail = &in->queue;
        while (*tail != NULL)
                tail = &(*tail)->next;
        *tail = run;
        interp_send_next(in);
}

/* --- package installs ------------------------------------------------------ */

static int check_requirements(json_t *list, const char *field, nsbox_error_t **err)
{
        if (!json_is_array(list))
                return nsbox_invalid(err, "%s must be an array of requirement strings", field);
        if (json_array_size(list) > 100)
                return nsbox_invalid(err, "%s: at most 100 packages", field);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v)
        {
                const char *why = NULL;
                if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v)) != NULL)
                        return nsbox_invalid(err, "%s[%zu] must be a string", field, i);
                if (!requirement_valid(json_string_value(v), &why))
                        return nsbox_invalid(err, "%s[%zu] \"%.80s\": %s", field, i, json_string_value(v),
                                             why);
        }
        return 0;
}

/* pip inside the sandbox as its root: packages land in the sandbox's own layer. */
static json_t *pip_params(json_t *packages, const char *index_url, const char *find_links)
{
        json_t *argv =
            json_pack("[s, s, s, s, s, s, s, s, s]", "python3", "-m", "pip", "install", "--no-input",
                      "--disable-pip-version-check", "--root-user-action=ignore", "--retries", "0");
        json_array_append_new(argv, json_string("--timeout"));
        json_array_append_new(argv, json_string("15"));
        if (index_url != NULL && index_url[0] == '\0') {
                json_array_append_new(argv, json_string("--no-index"));
        } else if (index_url != NULL) {
                json_array_append_new(argv, json_string("--index-url"));
                json_array_append_new(argv, json_string(index_url));
        }
        if (find_links != NULL) {
                json_array_append_new(argv, json_string("--find-links"));
                json_array_append_new(argv, json_string(find_links));
        }
        json_array_append_new(argv, json_string("--"));
        json_array_extend(argv, packages);
        return json_pack("{s:o, s:s, s:i, s:s}", "argv", argv, "user", "root", "timeout_seconds", PIP_TIMEOUT,
                         "cwd", "/");
}

struct install {
        struct rpc_request *req;
        struct python_run *run; /* python.run waiting for its requirements, or NULL */
        json_t *code;
        struct sandbox *sb;
        long long started_mono;
        bool offline; /* index_url "": no index asked for */
};

/* pip failed in a sandbox without network, asked for an index: the reason
 * the user most likely needs, in its stderr. */
#define NO_NETWORK_HINT                                                                                   \
        "nsbox: this sandbox has no network, so pip cannot reach a package index: create it with a "      \
        "network policy that allows the index (sandbox.create network, nsbox create --network NAME), or " \
        "install offline from wheels put in the sandbox (find_links, with index_url \"\")\n"

static bool install_lacks_network(const struct install *inst, json_t *result)
{
        json_t *code = json_object_get(result, "exit_code");
        return !inst->offline && strcmp(inst->sb->policy.network, "none") == 0 &&
               !(json_is_integer(code) && json_integer_value(code) == 0);
}

static void run_after_requirements(struct python_run *run);

static void install_done(struct exec *ex, json_t *result, void *data)
{
        struct install *inst = data;
        forkserver_invalidate(inst->sb);
        if (inst->run == NULL) {
                quota_calls_add(inst->req->uid, -1);
                json_t *reply = json_deep_copy(result);
                if (reply != NULL && json_is_string(json_object_get(reply, "stderr")) &&
                    strcmp(json_string_value(json_object_get(reply, "encoding")), "utf-8") == 0) {
                        egress_note_refused(reply, inst->sb, inst->started_mono, true);
                        if (install_lacks_network(inst, reply)) {
                                _cleanup_free_ char *text = NULL;
                                if (asprintf(&text, "%s%s",
                                             json_string_value(json_object_get(reply, "stderr")),
                                             NO_NETWORK_HINT) >= 0)
                                        json_object_set_new(reply, "stderr", json_string(text));
                        }
                }
                rpc_reply_result(inst->req, reply);
                free(inst);
                return;
        }
        struct python_run *run = inst->run;
        run->exec = NULL;
        bool lacks_network = install_lacks_network(inst, result);
        free(inst);
        json_t *code = json_object_get(result, "exit_code");
        if (!json_is_integer(code) || json_integer_value(code) != 0) {
                /* The requirements could not be installed: the code does not run. */
                char message[768];
                snprintf(
                    message, sizeof(message), "nsbox: installing the requirements failed (pip exit %s)\n%s",
                    json_is_integer(code) ? "non-zero" : "by signal", lacks_network ? NO_NETWORK_HINT : "");
                _cleanup_free_ char *err_text = NULL;
                if (asprintf(&err_text, "%s%s", json_string_value(json_object_get(result, "stderr")),
                             message) < 0)
                        err_text = NULL;
                reply_run(run, json_is_true(json_object_get(result, "timed_out")) ? "timeout" : "error",
                          json_incref(code), json_string_value(json_object_get(result, "stdout")), err_text,
                          NULL, NULL, NULL, false);
                return;
        }
        run_after_requirements(run);
}

static const struct exec_hooks install_hooks = { .done = install_done };

static int start_install(struct sandbox *sb, json_t *packages, const char *index_url, const char *find_links,
                         struct install *inst, nsbox_error_t **err)
{
        _cleanup_json_ json_t *params = pip_params(packages, index_url, find_links);
        struct exec *ex;
        if (exec_run(sb, params, &install_hooks, inst, &ex, err) < 0)
                return -EINVAL;
        if (inst->run != NULL)
                inst->run->exec = ex;
        struct rpc_request *req = inst->run != NULL ? inst->run->req : inst->req;
        if (req != NULL)
                exec_attribute(ex, req);
        return 0;
}

void package_method_install(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        static const char *const known[] = { "sandbox_id", "packages", "index_url", "find_links", NULL };
        if (!rpc_check_fields(req, known))
                return;
        json_t *packages = json_object_get(req->msg.params, "packages");
        if (check_requirements(packages, "packages", &err) < 0 || json_array_size(packages) == 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s",
                                err ? err->message : "packages must not be empty");
                return;
        }
        const char *opt_names[] = { "index_url", "find_links" };
        const char *opts[2] = { NULL, NULL };
        for (int i = 0; i < 2; i++) {
                json_t *o = json_object_get(req->msg.params, opt_names[i]);
                if (o == NULL || json_is_null(o))
                        continue;
                if (!json_is_string(o) || memchr(json_string_value(o), '\0', json_string_length(o)) != NULL ||
                    json_string_length(o) > 2048 ||
                    (json_string_length(o) > 0 && json_string_value(o)[0] == '-') ||
                    (i == 1 && json_string_length(o) == 0)) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "%s must be a URL or a sandbox path", opt_names[i]);
                        return;
                }
                opts[i] = json_string_value(o);
        }
        if (opts[0] != NULL && opts[0][0] != '\0' && strncmp(opts[0], "http://", 7) != 0 &&
            strncmp(opts[0], "https://", 8) != 0 && strncmp(opts[0], "file://", 7) != 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "index_url must be an http(s):// or file:// URL, or \"\" for no index");
                return;
        }
        if (quota_refuse_call(req))
                return;
        struct install *inst = calloc(1, sizeof(*inst));
        if (inst == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        inst->req = req;
        inst->sb = sb;
        inst->offline = opts[0] != NULL && opts[0][0] == '\0';
        inst->started_mono = now_monotonic_ms();
        quota_calls_add(req->uid, 1);
        if (start_install(sb, packages, opts[0], opts[1], inst, &err) < 0) {
                quota_calls_add(req->uid, -1);
                free(inst);
                rpc_reply_fail(req, "internal", "%s", err->message);
        }
}

/* --- python.run ------------------------------------------------------------ */

/* A `files` key: relative to /workspace, or absolute under /workspace; no "..";
 * as long as fs.write takes (the seed's /execute sends such paths). */
static bool workspace_path_ok(const char *path)
{
        if (path[0] == '\0' || strlen(path) > FS_PATH_MAX)
                return false;
        if (path[0] == '/' && strncmp(path, "/workspace/", 11) != 0)
                return false;
        for (const char *p = path; *p;) {
                const char *slash = strchr(p, '/');
                size_t n = slash ? (size_t)(slash - p) : strlen(p);
                if ((n == 2 && strncmp(p, "..", 2) == 0) || (n == 1 && p[0] == '.'))
                        return false;
                p += n + (slash ? 1 : 0);
        }
        return true;
}

static void run_after_requirements(struct python_run *run)
{
        const char *code = json_string_value(json_object_get(run->req->msg.params, "code"));
        if (run->stateful)
                python_stateful_submit(run);
        else
                run_stateless(run, code);
}

static void files_written(void *data, const char *error, bool invalid_content)
{
        struct python_run *run = data;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (invalid_content) {
                rpc_reply_error(run->req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", error);
                run_free(run);
                return;
        }
        if (error != NULL) {
                run_fail(run, "internal", error);
                return;
        }
        /* A worker may have written them: the sandbox may be gone since. */
        if (sandbox_lookup(run->sandbox_id, run->uid) != run->sb || run->sb->state != SANDBOX_RUNNING) {
                run_fail(run, "not_found", "the sandbox was removed while the call's files were written");
                return;
        }
        json_t *requirements = json_object_get(run->req->msg.params, "requirements");
        if (json_array_size(requirements) > 0) {
                struct install *inst = calloc(1, sizeof(*inst));
                if (inst == NULL) {
                        run_fail(run, "internal", "out of memory");
                        return;
                }
                inst->run = run;
                inst->sb = run->sb;
                if (start_install(run->sb, requirements, NULL, NULL, inst, &err) < 0) {
                        free(inst);
                        run_fail(run, "internal", err->message);
                }
                return;
        }
        run_after_requirements(run);
}

static void run_in_sandbox(struct python_run *run)
{
        snprintf(run->sandbox_id, sizeof(run->sandbox_id), "%s", run->sb->id);
        json_t *files = json_object_get(run->req->msg.params, "files");
        if (json_object_size(files) == 0) {
                files_written(run, NULL, false);
                return;
        }
        fs_write_files(run->sb, files, files_written, run);
}

static void session_ready(struct sandbox *sb, const char *error, void *data)
{
        struct python_run *run = data;
        if (error != NULL) {
                char message[1024];
                snprintf(message, sizeof(message), "sandbox create failed: %s", error);
                run_fail(run, "internal", message);
                return;
        }
        run->sb = sb;
        run_in_sandbox(run);
}

/* A context's name: absent or null (the main one), else 1 to
 * CONTEXT_NAME_MAX letters, digits, '_', '-' and '.'. */
static int check_context_name(json_t *v, nsbox_error_t **err)
{
        if (v == NULL || json_is_null(v))
                return 0;
        const char *name = json_string_value(v);
        size_t n = name ? strlen(name) : 0;
        bool ok = name != NULL && n >= 1 && n <= CONTEXT_NAME_MAX && n == json_string_length(v);
        for (size_t i = 0; ok && i < n; i++)
                ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
                     (name[i] >= '0' && name[i] <= '9') || strchr("_-.", name[i]) != NULL;
        if (!ok)
                return nsbox_invalid(err, "context must be 1 to %d letters, digits, '_', '-' or '.'",
                                     CONTEXT_NAME_MAX);
        return 0;
}

/* args and script_name: how a stateless call runs its script; context and
 * cwd: where a stateful one runs; stream and env: either. */
static int check_script_params(json_t *p, bool stateful, nsbox_error_t **err)
{
        static const char *const stateless_only[] = { "args", "script_name" };
        static const char *const stateful_only[] = { "context", "cwd" };
        for (size_t i = 0; i < ARRAY_SIZE(stateless_only); i++) {
                json_t *v = json_object_get(p, stateless_only[i]);
                if (stateful && v != NULL && !json_is_null(v))
                        return nsbox_invalid(err, "%s is for stateless calls (stateful: false)",
                                             stateless_only[i]);
                v = json_object_get(p, stateful_only[i]);
                if (!stateful && v != NULL && !json_is_null(v))
                        return nsbox_invalid(err, "%s is for stateful calls (stateful: true)",
                                             stateful_only[i]);
        }
        int r = check_context_name(json_object_get(p, "context"), err);
        if (r < 0)
                return r;
        json_t *cwd = json_object_get(p, "cwd");
        if (cwd != NULL && !json_is_null(cwd) &&
            (!json_is_string(cwd) || json_string_value(cwd)[0] != '/' ||
             json_string_length(cwd) > FS_PATH_MAX ||
             strlen(json_string_value(cwd)) != json_string_length(cwd)))
                return nsbox_invalid(err, "cwd must be an absolute path of at most %d bytes, without NUL",
                                     FS_PATH_MAX);
        json_t *stream = json_object_get(p, "stream");
        if (stream != NULL && !json_is_null(stream) && !json_is_boolean(stream))
                return nsbox_invalid(err, "stream must be a boolean");
        json_t *env = json_object_get(p, "env");
        if (env != NULL && !json_is_null(env) && (r = policy_check_env(env, "env", err)) < 0)
                return r;
        json_t *args = json_object_get(p, "args");
        if (args != NULL && !json_is_null(args)) {
                if (!json_is_array(args) || json_array_size(args) > MAX_SCRIPT_ARGS)
                        return nsbox_invalid(err, "args must be an array of at most %d strings",
                                             MAX_SCRIPT_ARGS);
                size_t i, total = 0;
                json_t *a;
                json_array_foreach(args, i, a)
                {
                        if (!json_is_string(a) || memchr(json_string_value(a), '\0', json_string_length(a)))
                                return nsbox_invalid(err, "args[%zu] must be a string without NUL bytes", i);
                        total += json_string_length(a) + 1;
                }
                if (total > MAX_SCRIPT_ARGS_BYTES)
                        return nsbox_invalid(err, "args must total at most %u bytes", MAX_SCRIPT_ARGS_BYTES);
        }
        json_t *name = json_object_get(p, "script_name");
        if (name != NULL && !json_is_null(name)) {
                const char *n = json_string_value(name);
                bool ok = n != NULL && json_string_length(name) > 0 && json_string_length(name) <= 255 &&
                          strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
                for (size_t i = 0; ok && i < json_string_length(name); i++)
                        ok = n[i] != '/' && (unsigned char)n[i] >= 0x20 && n[i] != 0x7f;
                if (!ok)
                        return nsbox_invalid(err,
                                             "script_name must be a file name (1 to 255 bytes, no \"/\", "
                                             "no control characters)");
        }
        return 0;
}

/* check_base64: the files are written on the loop (fs_files_inline); else
 * the worker that decodes them finds bad base64, off the loop. */
static int check_file_value(const char *key, json_t *v, bool check_base64, nsbox_error_t **err)
{
        static const char *const known[] = { "content", "encoding", NULL };
        if (json_is_string(v))
                return 0;
        bool base64;
        if (!json_is_object(v) || !json_is_string(json_object_get(v, "content")) ||
            params_check_known(v, known, "", err) < 0 || params_get_encoding(v, &base64, err) < 0) {
                nsbox_error_free(err);
                return nsbox_invalid(err,
                                     "files[\"%.100s\"] must be a string or {content, encoding?: "
                                     "\"utf-8\"|\"base64\"}",
                                     key);
        }
        json_t *content = json_object_get(v, "content");
        if (base64 && check_base64 && !base64_valid(json_string_value(content), json_string_length(content)))
                return nsbox_invalid(err, "files[\"%.100s\"]: content is not valid base64", key);
        return 0;
}

static int check_run_params(json_t *p, unsigned *timeout_s, json_int_t *max_output, nsbox_error_t **err)
{
        static const char *const known[] = {
                "sandbox_id", "session_id", "code",        "timeout_seconds", "requirements",     "files",
                "stateful",   "args",       "script_name", "stream",          "max_output_bytes", "env",
                "context",    "cwd",        NULL
        };
        int r = params_check_known(p, known, "", err);
        if (r < 0)
                return r;
        json_t *code = json_object_get(p, "code");
        if (!json_is_string(code) || json_string_length(code) == 0)
                return nsbox_invalid(err, "code must be a non-empty string");
        if (memchr(json_string_value(code), '\0', json_string_length(code)) != NULL)
                return nsbox_invalid(err, "code contains a NUL byte");
        bool by_id = json_object_get(p, "sandbox_id") != NULL,
             by_session = json_object_get(p, "session_id") != NULL;
        if (by_id == by_session)
                return nsbox_invalid(err, "give exactly one of sandbox_id or session_id");
        if ((r = params_get_timeout(p, PARAMS_TIMEOUT_DEFAULT_S, timeout_s, err)) < 0)
                return r;
        json_t *stateful = json_object_get(p, "stateful");
        if (stateful != NULL && !json_is_null(stateful) && !json_is_boolean(stateful))
                return nsbox_invalid(err, "stateful must be a boolean");
        if ((r = check_script_params(p, json_is_true(stateful), err)) < 0)
                return r;
        json_t *max = json_object_get(p, "max_output_bytes");
        json_int_t most = json_is_true(stateful) ? STATEFUL_MAX_OUTPUT : EXEC_MAX_MAX_OUTPUT;
        *max_output = -1;
        if (max != NULL && !json_is_null(max)) {
                if (!json_is_integer(max) || json_integer_value(max) < 0 || json_integer_value(max) > most)
                        return nsbox_invalid(err, "max_output_bytes must be an integer from 0 to %lld%s",
                                             (long long)most,
                                             json_is_true(stateful) ? " for a stateful call" : "");
                *max_output = json_integer_value(max);
        }
        json_t *req = json_object_get(p, "requirements");
        if (req != NULL && !json_is_null(req)) {
                r = check_requirements(req, "requirements", err);
                if (r < 0)
                        return r;
        }
        json_t *files = json_object_get(p, "files");
        if (files != NULL && !json_is_null(files)) {
                if (!json_is_object(files) || json_object_size(files) > MAX_FILES)
                        return nsbox_invalid(err, "files must be an object {path: content} of at most %d",
                                             MAX_FILES);
                bool inline_files = fs_files_inline(files);
                const char *key;
                json_t *v;
                json_object_foreach(files, key, v)
                {
                        if (!workspace_path_ok(key))
                                return nsbox_error(
                                    err, EINVAL,
                                    "files[\"%.100s\"]: paths are relative to /workspace, without "
                                    "\"..\"",
                                    key);
                        if ((r = check_file_value(key, v, inline_files, err)) < 0)
                                return r;
                }
        }
        return 0;
}

/* The client left: stop the work nobody will read. A stateful call is
 * interrupted (its interpreter and variables stay). */
static void run_client_gone(struct rpc_request *req, void *data)
{
        struct python_run *run = data;
        if (run->exec != NULL) {
                exec_signal(run->exec, SIGKILL);
                return;
        }
        struct python_interp *in = run->sb != NULL ? run->sb->python : NULL;
        if (in != NULL && in->in_flight && in->queue == run && in->exec != NULL)
                exec_signal(in->exec, SIGINT);
}

/* A call of req counted against its uid's quota, or NULL when refused
 * (answered). */
static struct python_run *run_new(struct rpc_request *req)
{
        if (quota_refuse_call(req))
                return NULL;
        struct python_run *run = calloc(1, sizeof(*run));
        if (run == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return NULL;
        }
        run->req = req;
        run->uid = req->uid;
        quota_calls_add(run->uid, 1);
        return run;
}

void python_method_run(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *p = req->msg.params;
        unsigned timeout_s;
        json_int_t max_output = -1;
        if (check_run_params(p, &timeout_s, &max_output, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        struct python_run *run = run_new(req);
        if (run == NULL)
                return;
        rpc_request_on_disconnect(req, run_client_gone, run);
        run->stateful = json_is_true(json_object_get(p, "stateful"));
        run->stream = json_is_true(json_object_get(p, "stream"));
        run->timeout_s = timeout_s;
        run->max_output = max_output;
        run->started_mono = now_monotonic_ms();

        json_t *id = json_object_get(p, "sandbox_id");
        if (id != NULL) {
                if (!json_is_string(id) || sb == NULL || sb->state != SANDBOX_RUNNING) {
                        run_fail(run, "not_found", "no such sandbox");
                        return;
                }
                sandbox_touch(sb);
                run->sb = sb;
                run_in_sandbox(run);
                return;
        }
        /* session_id: get or create that session's sandbox, like sandbox.create. */
        _cleanup_json_ json_t *create = json_pack("{s:O}", "session_id", json_object_get(p, "session_id"));
        struct sandbox_policy policy;
        if (policy_from_json(&nsboxd.config.defaults, &nsboxd.config.ceilings, create, &policy, &err) < 0) {
                run_free(run);
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        if (sb != NULL) { /* the session's, found by the dispatcher */
                policy_clear(&policy);
                sandbox_touch(sb);
                if (sb->state == SANDBOX_CREATING)
                        sandbox_when_ready(sb, session_ready, run);
                else
                        session_ready(sb, NULL, run);
                return;
        }
        run->new_session = true;
        int r = sandbox_create(req->uid, &policy, session_ready, run, &sb, &err);
        if (r < 0)
                run_fail(run, r == -EUSERS ? "limit_reached" : "internal", err->message);
}

void python_method_reset(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *p = req->msg.params, *remove = json_object_get(p, "remove");
        if (check_context_name(json_object_get(p, "context"), &err) < 0 ||
            (remove != NULL && !json_is_null(remove) && !json_is_boolean(remove))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s",
                                err ? err->message : "remove must be a boolean");
                return;
        }
        bool main_context = !json_is_string(json_object_get(p, "context"));
        if (main_context && json_is_true(remove)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "the main context cannot be removed, only reset (give a context)");
                return;
        }
        if (sb->python == NULL) { /* no interpreter: nothing to forget */
                rpc_reply_result(req, json_pack("{s:s, s:O, s:b, s:b}", "sandbox_id", sb->id, "context",
                                                main_context ? json_null() : json_object_get(p, "context"),
                                                "found", main_context, "removed", 0));
                return;
        }
        struct python_run *run = run_new(req);
        if (run == NULL)
                return;
        run->sb = sb;
        snprintf(run->sandbox_id, sizeof(run->sandbox_id), "%s", sb->id);
        run->stateful = true;
        run->kind = json_is_true(remove) ? RUN_REMOVE : RUN_RESET;
        run->timeout_s = PARAMS_TIMEOUT_DEFAULT_S;
        run->max_output = -1;
        run->started_mono = now_monotonic_ms();
        python_stateful_submit(run);
}
