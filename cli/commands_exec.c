/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox exec, sh and run: commands with live output and docker's exit codes. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "textenc.h"
#include "io.h"

/* Standard input goes to the command (exec.stdin) in pieces of at most
 * this size, each sent once the daemon has answered the one before: its
 * answer waits while the command does not read (back-pressure). */
#define STDIN_CHUNK (64u << 10)
/* The daemon's default cap of collected output (--json, -d). */
#define DEFAULT_MAX_OUTPUT (1u << 20)
/* A background exec without --timeout gets the daemon's longest one
 * (EXEC_MAX_TIMEOUT_S), as the daemon itself now gives it; said here too
 * for a daemon that defaults to 30 s. */
#define BACKGROUND_TIMEOUT_S (24 * 3600)

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE, OPT_CWD, OPT_USER, OPT_MAX_OUTPUT };

/* What the options of exec, sh and run asked for, beyond sandbox.exec params. */
struct exec_opts {
        bool with_stdin, detach, tty;
};

struct stream_state {
        char exec_id[64]; /* learnt from the first exec.output, for exec.kill */
        bool base64;
        const char *socket_path;
        bool feed_stdin;        /* -i: our standard input goes to the exec (exec.stdin) */
        bool stdin_fed;         /* the thread that does it is started */
        bool tty;               /* -t: a terminal exec, whose window size we pass on */
        json_t *collected[2];   /* --json with -i (streamed): stdout and stderr for the result */
        bool kept;              /* nsboxd keeps the exec should it stop (live restore): we may take it back */
        json_int_t received[2]; /* bytes of stdout and stderr we have: where a taking back starts */
        bool interrupted;       /* the first Ctrl-C went to the command */
};

/* Write an exec's output; the number of its bytes (decoded), or -1. */
static json_int_t write_output(int fd, const json_t *text, bool base64)
{
        if (!json_is_string(text) || json_string_length(text) == 0)
                return 0;
        size_t len = json_string_length(text);
        _cleanup_free_ void *bytes = base64 ? base64_decode(json_string_value(text), len, &len) : NULL;
        if (bytes == NULL) /* not base64 (after all: the daemon's own text) */
                len = json_string_length(text);
        return io_write_all(fd, bytes != NULL ? bytes : json_string_value(text), len) < 0 ? -1
                                                                                          : (json_int_t)len;
}

int cli_write_output(int fd, const json_t *text, bool base64)
{
        return write_output(fd, text, base64) < 0 ? -1 : 0;
}

void cli_print_truncated(const json_t *result, size_t cap)
{
        if (!json_is_true(json_object_get(result, "truncated")))
                return;
        char size[64];
        if (cap >= (1u << 20) && cap % (1u << 20) == 0)
                snprintf(size, sizeof(size), "%zu MiB", cap >> 20);
        else if (cap >= 1024 && cap % 1024 == 0)
                snprintf(size, sizeof(size), "%zu KiB", cap >> 10);
        else
                snprintf(size, sizeof(size), "%zu bytes", cap);
        char dropped[64] = "";
        json_t *more = json_object_get(result, "output_dropped_bytes");
        if (json_is_integer(more) && json_integer_value(more) > 0)
                snprintf(dropped, sizeof(dropped), " (%lld more bytes dropped)",
                         (long long)json_integer_value(more));
        fflush(stdout);
        fprintf(stderr, "nsbox: output truncated at %s%s; raise it with --max-output BYTES\n", size, dropped);
}

int cli_fail_json(const struct cli *cli, const json_t *error, const char *fmt, ...)
{
        char message[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        if (cli->json) {
                const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
                _cleanup_json_ json_t *out = json_pack("{s:{s:s, s:s}}", "error", "message", message, "kind",
                                                       kind ? kind : "nsbox_failed");
                cli_print_json(out);
        }
        return cli_fail("%s", message);
}

struct stdin_feed {
        char socket_path[4096];
        char exec_id[64];
        bool kept; /* the exec outlives nsboxd (live restore): a lost connection is made again */
};

/* How long we wait for the next nsboxd when the exec's one went away, in
 * pauses between tries (a connect to a socket no one listens on fails at once). */
#define REATTACH_WAIT_MS  30000
#define REATTACH_PAUSE_MS 200

/* exec.stdin, again on a new connection while nsboxd is away, if `kept`:
 * the bytes of a call whose answer was lost are sent again (the old nsboxd
 * may have written them, or not). */
static int stdin_call(struct client **c, const char *socket_path, bool kept, json_t *params)
{
        for (unsigned pauses = 0;; pauses++) {
                _cleanup_error_ nsbox_error_t *err = NULL;
                _cleanup_json_ json_t *result = NULL;
                _cleanup_json_ json_t *error = NULL;
                if (*c != NULL &&
                    client_call(*c, "exec.stdin", params, NULL, NULL, &result, &error, &err) == 0)
                        return 0;
                if (error != NULL || !kept || pauses == REATTACH_WAIT_MS / REATTACH_PAUSE_MS)
                        return -1; /* answered (the exec ended or closed its input), or no nsboxd came */
                if (*c != NULL)
                        client_close(*c);
                *c = NULL;
                struct timespec pause = { 0, REATTACH_PAUSE_MS * 1000000L };
                nanosleep(&pause, NULL);
                nsbox_error_free(&err);
                client_connect(socket_path, c, &err);
        }
}

/* Our standard input, as it comes, to the exec's, on a connection of its
 * own (the exec's one waits for its answer): one exec.stdin at a time, so
 * the command's reading paces us and the daemon holds a bounded amount.
 * Ends at EOF (sent as eof) or when the exec no longer takes input; the
 * process may exit while it waits in read(). */
static int feed_stdin(const char *socket_path, const char *exec_id, bool kept)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *c = NULL;
        if (client_connect(socket_path, &c, &err) < 0)
                return -1;
        _cleanup_free_ char *buf = malloc(STDIN_CHUNK);
        for (bool eof = false; buf != NULL && !eof;) {
                ssize_t n = read(STDIN_FILENO, buf, STDIN_CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                eof = n <= 0;
                size_t b64_len = 0;
                _cleanup_free_ char *b64 = base64_encode(buf, n > 0 ? (size_t)n : 0, &b64_len);
                _cleanup_json_ json_t *params =
                    json_pack("{s:s, s:s%, s:s, s:b}", "exec_id", exec_id, "data", b64 ? b64 : "", b64_len,
                              "encoding", "base64", "eof", eof);
                if (stdin_call(&c, socket_path, kept, params) < 0)
                        break; /* the exec ended or closed its input: the rest has nowhere to go */
        }
        if (c != NULL)
                client_close(c);
        return 0;
}

static void *stdin_feed_thread(void *data)
{
        struct stdin_feed *feed = data;
        feed_stdin(feed->socket_path, feed->exec_id, feed->kept);
        free(feed);
        return NULL;
}

static void start_stdin_feed(struct stream_state *state)
{
        struct stdin_feed *feed = calloc(1, sizeof(*feed));
        if (feed == NULL)
                return;
        snprintf(feed->socket_path, sizeof(feed->socket_path), "%s", state->socket_path);
        snprintf(feed->exec_id, sizeof(feed->exec_id), "%s", state->exec_id);
        feed->kept = state->kept;
        pthread_t thread;
        if (pthread_create(&thread, NULL, stdin_feed_thread, feed) != 0) {
                free(feed);
                return;
        }
        pthread_detach(thread);
        state->stdin_fed = true;
}

static void print_stream(const char *method, json_t *params, void *data);

/* With --json the output comes in the result; the notifications still
 * name the exec (for -i and Ctrl-C). */
static void learn_exec_id(const char *method, json_t *params, void *data)
{
        struct stream_state *state = data;
        const char *id = json_string_value(json_object_get(params, "exec_id"));
        if (id != NULL && state->exec_id[0] == '\0')
                snprintf(state->exec_id, sizeof(state->exec_id), "%s", id);
        if (state->feed_stdin && !state->stdin_fed && state->exec_id[0] != '\0')
                start_stdin_feed(state);
        json_t *stream = json_object_get(params, "stream");
        json_t *text = json_object_get(params, "data");
        if (strcmp(method, "exec.output") != 0 || !json_is_string(stream) || !json_is_string(text))
                return;
        int which = strcmp(json_string_value(stream), "stderr") == 0;
        json_t **into = &state->collected[which];
        _cleanup_free_ char *joined = NULL;
        const char *before = *into ? json_string_value(*into) : "";
        size_t before_len = *into ? json_string_length(*into) : 0;
        if (asprintf(&joined, "%s%s", before, json_string_value(text)) < 0)
                return;
        json_decref(*into);
        *into = json_stringn(joined, before_len + json_string_length(text));
}

static client_notify_cb print_stream_or_learn_id(const struct cli *cli)
{
        return cli->json ? learn_exec_id : print_stream;
}

static void print_stream(const char *method, json_t *params, void *data)
{
        struct stream_state *state = data;
        /* Any notification naming the exec will do (a daemon that announces
         * the start of an exec lets Ctrl-C reach a command that printed nothing). */
        const char *id = json_string_value(json_object_get(params, "exec_id"));
        if (id != NULL && state->exec_id[0] == '\0')
                snprintf(state->exec_id, sizeof(state->exec_id), "%s", id);
        if (strcmp(method, "exec.started") == 0)
                state->kept = json_is_true(json_object_get(params, "kept"));
        if (state->feed_stdin && !state->stdin_fed && state->exec_id[0] != '\0')
                start_stdin_feed(state);
        if (strcmp(method, "exec.output") != 0)
                return;
        json_t *stream = json_object_get(params, "stream");
        if (!json_is_string(stream))
                return;
        bool is_stderr = strcmp(json_string_value(stream), "stderr") == 0;
        if (!is_stderr)
                fflush(stdout);
        json_int_t n = write_output(is_stderr ? STDERR_FILENO : STDOUT_FILENO,
                                    json_object_get(params, "data"), state->base64);
        if (n > 0)
                state->received[is_stderr] += n;
}

/* exec.kill sent on the exec's own connection, its answer left unread
 * (client_wait skips replies to other ids): nsboxd takes requests while a
 * streamed exec runs, and no new connect stands between a Ctrl-C and the
 * command (one that failed under load lost the Ctrl-C without a word). */
static void kill_exec(struct client *c, const char *exec_id, int sig)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:i}", "exec_id", exec_id, "signal", sig);
        long long id;
        if (client_send(c, "exec.kill", params, &id, &err) < 0)
                fprintf(stderr, "nsbox: could not pass signal %d on to the command: %s\n", sig, err->message);
}

/* The size of our terminal (stdin's, else stdout's); false without one. */
static bool terminal_size(struct winsize *size)
{
        return ioctl(STDIN_FILENO, TIOCGWINSZ, size) == 0 || ioctl(STDOUT_FILENO, TIOCGWINSZ, size) == 0;
}

/* SIGWINCH: our terminal's new size to the exec's (exec.resize), sent on
 * the exec's own connection as kill_exec does. Best effort. */
static void resize_exec(struct client *c, const char *exec_id)
{
        struct winsize size;
        if (!terminal_size(&size) || size.ws_row == 0 || size.ws_col == 0)
                return;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:i, s:i}", "exec_id", exec_id, "rows", size.ws_row, "cols", size.ws_col);
        long long id;
        client_send(c, "exec.resize", params, &id, &err);
}

/* A signal caught while we wait for the exec, on connection c (NULL while
 * nsboxd is away): a resize and the first Ctrl-C are passed on (as a
 * terminal would: the command decides what Ctrl-C means), and 0 returned;
 * a second Ctrl-C, SIGTERM or SIGHUP stop us: the command is killed (the
 * closing connection would end it too, a moment later) and 128+N returned. */
static int exec_signal_caught(struct client *c, struct stream_state *state, int sig)
{
        bool known = c != NULL && state->exec_id[0] != '\0';
        if (sig == 0 || (sig == SIGWINCH && !known))
                return 0;
        if (sig == SIGWINCH) {
                if (state->tty)
                        resize_exec(c, state->exec_id);
                return 0;
        }
        if (sig == SIGINT && !state->interrupted && known) {
                state->interrupted = true;
                kill_exec(c, state->exec_id, SIGINT);
                return 0;
        }
        if (known)
                kill_exec(c, state->exec_id, SIGKILL);
        else if (state->exec_id[0] != '\0')
                fprintf(stderr, "%snsbox: nsboxd is away: the command runs on as exec %s%s\n",
                        state->tty ? "\r\n" : "", state->exec_id, state->tty ? "\r" : "");
        return 128 + sig;
}

/* nsboxd went away during an exec it keeps (live restore): wait for the next
 * one and follow the exec's output (exec.output) from the bytes we have to
 * its end, so that every byte is shown once; *result is the last answer,
 * which says how the command ended. 0, 128+N for a signal that stopped us
 * (exec_signal_caught), -1 when no nsboxd took the exec back (then err, and
 * error if nsboxd answered, say why). */
static int reattach(struct stream_state *state, int signal_fd, json_t **result, json_t **error,
                    nsbox_error_t **err)
{
        fflush(stdout);
        /* A terminal in raw mode (-it) needs its carriage returns. */
        fprintf(stderr,
                "%snsbox: nsboxd went away during the command, which runs on (live restore); waiting up to "
                "%d s for nsboxd to come back%s\n",
                state->tty ? "\r\n" : "", REATTACH_WAIT_MS / 1000, state->tty ? "\r" : "");
        /* Counted in pauses: a connect to a socket no one listens on fails at once. */
        unsigned pauses_left = REATTACH_WAIT_MS / REATTACH_PAUSE_MS;
        struct client *c = NULL;
        int r = -1;
        for (;;) {
                nsbox_error_free(err);
                json_decref(*error);
                *error = NULL;
                if (c == NULL && client_connect(state->socket_path, &c, err) == 0) {
                        pauses_left =
                            REATTACH_WAIT_MS / REATTACH_PAUSE_MS; /* a later stop gets its own wait */
                        client_set_interrupt_fd(c, signal_fd);
                }
                _cleanup_json_ json_t *out = NULL;
                long long id;
                _cleanup_json_ json_t *params =
                    json_pack("{s:s, s:{s:I, s:I}, s:i}", "exec_id", state->exec_id, "since", "stdout",
                              state->received[0], "stderr", state->received[1], "wait_ms", 10000);
                int sent = c != NULL ? client_send(c, "exec.output", params, &id, err) : -1;
                while (sent == 0 && (sent = client_wait(c, id, NULL, NULL, &out, error, err)) == -EINTR) {
                        nsbox_error_free(err);
                        if ((r = exec_signal_caught(c, state, cli_caught_signal(signal_fd))) > 0)
                                goto done;
                }
                if (sent < 0 && c != NULL) {
                        client_close(c);
                        c = NULL;
                        if (*error != NULL) /* answered: not_found, the exec was not adopted */
                                break;
                }
                if (out == NULL) {
                        /* The pause, cut short by a signal (poll skips a signal_fd of -1). */
                        struct pollfd p = { .fd = signal_fd, .events = POLLIN };
                        if (poll(&p, 1, REATTACH_PAUSE_MS) > 0 &&
                            (r = exec_signal_caught(NULL, state, cli_caught_signal(signal_fd))) > 0)
                                break;
                        r = -1;
                        if (pauses_left-- == 0)
                                break;
                        continue;
                }
                for (int i = 0; i < 2; i++) {
                        const char *name = i ? "stderr" : "stdout";
                        json_int_t lost =
                            json_integer_value(json_object_get(json_object_get(out, "dropped"), name));
                        if (lost > 0)
                                fprintf(stderr, "nsbox: %lld bytes of %s were lost across the restart\n",
                                        (long long)lost, name);
                        if (i == 0)
                                fflush(stdout);
                        write_output(i ? STDERR_FILENO : STDOUT_FILENO, json_object_get(out, name), true);
                        state->received[i] =
                            json_integer_value(json_object_get(json_object_get(out, "next"), name));
                }
                if (!json_is_true(json_object_get(out, "more")) &&
                    !json_is_true(json_object_get(out, "running"))) {
                        /* How it ended; its output is written above. */
                        json_object_del(out, "stdout");
                        json_object_del(out, "stderr");
                        *result = json_incref(out);
                        r = 0;
                        break;
                }
        }
done:
        if (c != NULL)
                client_close(c);
        return r;
}

/* The connection closed, or nsboxd answered that it stops, before the
 * command's own end: say so, with a code no command's end gives here. */
static int daemon_gone(const struct cli *cli)
{
        fflush(stdout);
        if (cli->json) {
                _cleanup_json_ json_t *out =
                    json_pack("{s:{s:s, s:s}}", "error", "message",
                              "nsboxd went away during the command (its exit status is unknown)", "kind",
                              "daemon_gone");
                cli_print_json(out);
        }
        fprintf(stderr, "nsbox: nsboxd went away during the command (its exit status is unknown)\n");
        return EXIT_DAEMON_GONE;
}

/* Run an exec with streamed output (or, with --json, the whole result at the
 * end); returns the exit code. The first Ctrl-C is passed on to the command
 * as SIGINT (once its exec id is known, from its first output); a second one,
 * SIGTERM or SIGHUP stop the wait: then *signo is set, the command is killed
 * and the exit code is 128+N. */
static int run_exec(const struct cli *cli, struct client *c, const char *socket_path, json_t *params,
                    int signal_fd, int *signo)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL;
        _cleanup_json_ json_t *error = NULL;
        struct stream_state state = { .base64 = !cli->json,
                                      .socket_path = socket_path,
                                      .feed_stdin = json_is_true(json_object_get(params, "stdin_stream")),
                                      .tty = json_is_true(json_object_get(params, "tty")) };
        *signo = 0;
        if (!cli->json) {
                json_object_set_new(params, "stream", json_true());
                json_object_set_new(params, "encoding", json_string("base64"));
                if (json_object_get(params, "max_output_bytes") == NULL)
                        json_object_set_new(params, "max_output_bytes", json_integer(CLI_STREAM_MAX_OUTPUT));
        }
        if (state.feed_stdin) /* exec.stdin needs the exec's id before its end */
                json_object_set_new(params, "stream", json_true());
        json_t *max = json_object_get(params, "max_output_bytes");
        size_t cap = json_is_integer(max) ? (size_t)json_integer_value(max) : DEFAULT_MAX_OUTPUT;
        long long id;
        if (client_send(c, "sandbox.exec", params, &id, &err) < 0)
                return cli_fail_json(cli, NULL, "%s", err->message);
        int r;
        client_set_interrupt_fd(c, signal_fd);
        for (;;) {
                r = client_wait(c, id, print_stream_or_learn_id(cli), &state, &result, &error, &err);
                if (r != -EINTR)
                        break;
                nsbox_error_free(&err);
                int stop = exec_signal_caught(c, &state, cli_caught_signal(signal_fd));
                if (stop > 0) {
                        *signo = stop - 128;
                        client_set_interrupt_fd(c, -1);
                        return stop;
                }
        }
        client_set_interrupt_fd(c, -1);
        if (r < 0 && err->errnum == ECONNRESET && state.kept && state.exec_id[0] != '\0' && !cli->json) {
                r = reattach(&state, signal_fd, &result, &error, &err);
                if (r > 0) { /* stopped by a signal */
                        *signo = r - 128;
                        return r;
                }
                if (r < 0 && error == NULL)
                        return daemon_gone(cli);
        }
        if (r < 0 && err->errnum == ECONNRESET)
                return daemon_gone(cli);
        if (r < 0) {
                if (cli_error_is_missing_method(error))
                        return cli_fail_json(cli, error, "this nsboxd does not offer sandbox.exec (%s)",
                                             err->message);
                return cli_fail_json(cli, error, "%s", err->message);
        }
        if (cli->json) {
                for (int i = 0; i < 2; i++) {
                        if (state.collected[i] != NULL)
                                json_object_set_new(result, i ? "stderr" : "stdout", state.collected[i]);
                }
                cli_print_json(result);
        } else {
                /* Streamed, stdout and stderr come as notifications; the result's
                 * stderr then holds only the daemon's own word, e.g. "nsbox:
                 * cannot run the command: ...". */
                fflush(stdout);
                cli_write_output(STDERR_FILENO, json_object_get(result, "stderr"), false);
                cli_print_network_refused(result);
                json_t *left = json_object_get(result, "background_killed");
                if (json_integer_value(left) > 0)
                        fprintf(stderr,
                                "nsbox: %lld process%s the command left running in the background ended with "
                                "it (keep one with nsbox exec -d, or in a shell session: nsbox shell)\n",
                                (long long)json_integer_value(left),
                                json_integer_value(left) > 1 ? "es" : "");
        }
        fflush(stdout);
        cli_print_truncated(result, cap);
        const char *ended_by = json_string_value(json_object_get(result, "ended_by"));
        if (ended_by != NULL && strcmp(ended_by, "nsboxd_stopping") == 0)
                return daemon_gone(cli);
        /* How it ended when that was not the command's doing (an OOM kill's is said below). */
        if (json_is_string(json_object_get(result, "error")) &&
            !json_is_true(json_object_get(result, "oom_killed")))
                fprintf(stderr, "nsbox: %s\n", json_string_value(json_object_get(result, "error")));
        double timeout = json_number_value(json_object_get(params, "timeout_seconds"));
        /* nsboxd says the timeout itself on stderr (with its `status`): then
         * only how to raise it is ours to add. */
        bool said = json_is_string(json_object_get(result, "status"));
        if (json_is_true(json_object_get(result, "timed_out")) && said)
                fprintf(stderr, "nsbox: raise it with --timeout S (the default is %s; at most 24 h)\n",
                        state.tty ? "24 h with -t" : "30 s");
        else if (json_is_true(json_object_get(result, "timed_out")) && state.tty)
                fprintf(stderr,
                        "nsbox: the command timed out after %g s (with -t the default is the daemon's "
                        "longest, 24 h)\n",
                        timeout > 0 ? timeout : 24 * 3600);
        else if (json_is_true(json_object_get(result, "timed_out")))
                fprintf(stderr,
                        "nsbox: the command timed out after %g s (the default is 30 s; raise it with "
                        "--timeout S, up to 24 h)\n",
                        timeout > 0 ? timeout : 30);
        else if (json_is_true(json_object_get(result, "oom_killed")))
                fprintf(stderr, "nsbox: %s\n",
                        json_is_string(json_object_get(result, "error"))
                            ? json_string_value(json_object_get(result, "error"))
                            : "the sandbox ran out of memory (OOM kill)");
        return cli_exec_exit_code(result);
}

/* An exec option into params: 0 done, 1 not an exec option, else an exit code. */
static int exec_option(json_t *params, int opt, const char *arg)
{
        double seconds;
        unsigned long long bytes;
        switch (opt) {
        case OPT_TIMEOUT:
                if (cli_parse_seconds(arg, &seconds) < 0)
                        return cli_fail("bad --timeout \"%s\" (seconds)", arg);
                json_object_set_new(params, "timeout_seconds", json_real(seconds));
                return 0;
        case 'w':
        case OPT_CWD:
                if (arg[0] == '/') {
                        json_object_set_new(params, "cwd", json_string(arg));
                } else {
                        /* As sandbox paths elsewhere (cp, fs.*): relative to /workspace. */
                        _cleanup_free_ char *path = NULL;
                        if (asprintf(&path, "/workspace/%s", arg) < 0)
                                return cli_fail("out of memory");
                        json_object_set_new(params, "cwd", json_string(path));
                }
                return 0;
        case 'e':
        case CLI_OPT_ENV:
                return cli_add_env(params, arg) == 0 ? 0 : EXIT_NSBOX_FAILED;
        case 'u':
        case OPT_USER:
                json_object_set_new(params, "user", json_string(arg));
                return 0;
        case OPT_MAX_OUTPUT:
                if (cli_parse_size(arg, &bytes) < 0 || bytes > CLI_STREAM_MAX_OUTPUT)
                        return cli_fail("bad --max-output \"%s\" (bytes, e.g. 4M; at most 256M)", arg);
                json_object_set_new(params, "max_output_bytes", json_integer((json_int_t)bytes));
                return 0;
        default:
                return 1;
        }
}

#define EXEC_LONG_OPTIONS                                                                                   \
        { "timeout", required_argument, NULL, OPT_TIMEOUT }, { "cwd", required_argument, NULL, OPT_CWD },   \
            { "env", required_argument, NULL, CLI_OPT_ENV }, { "user", required_argument, NULL, OPT_USER }, \
            { "max-output", required_argument, NULL, OPT_MAX_OUTPUT },                                      \
        {                                                                                                   \
                "workdir", required_argument, NULL, OPT_CWD                                                 \
        }

/* Options of exec and sh. Returns -1 to go on, else an exit code. */
static int parse_exec_options(const struct cli *cli, int argc, char **argv, json_t *params,
                              struct exec_opts *o)
{
        static const struct option longopts[] = { EXEC_LONG_OPTIONS,
                                                  { "stdin", no_argument, NULL, 'i' },
                                                  { "interactive", no_argument, NULL, 'i' },
                                                  { "detach", no_argument, NULL, 'd' },
                                                  { "tty", no_argument, NULL, 't' },
                                                  { 0 } };
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "idte:w:u:", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                if (opt == 'i' || opt == 'd' || opt == 't') {
                        *(opt == 'i' ? &o->with_stdin : opt == 'd' ? &o->detach : &o->tty) = true;
                        continue;
                }
                int r = exec_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (o->tty && o->with_stdin && !isatty(STDIN_FILENO))
                return cli_fail(
                    "the input device is not a TTY (-t with -i needs a terminal on standard input; "
                    "run without -t)");
        /* Background and terminal execs have no timeout unless asked: the
         * daemon's longest (24 h) then holds. */
        if (o->tty) {
                struct winsize size;
                json_object_set_new(params, "tty", json_true());
                /* The terminal is ours: its type too, as ssh and docker exec -t pass
                 * it (programs such as less, vi and top need it), unless -e set one. */
                json_t *env = json_object_get(params, "env");
                if (env == NULL || json_object_get(env, "TERM") == NULL) {
                        const char *term = getenv("TERM");
                        _cleanup_free_ char *kv = NULL;
                        if (asprintf(&kv, "TERM=%s",
                                     term != NULL && term[0] != '\0' ? term : "xterm-256color") < 0 ||
                            cli_add_env(params, kv) != 0)
                                return EXIT_NSBOX_FAILED;
                }
                if (terminal_size(&size) && size.ws_row > 0 && size.ws_col > 0) {
                        json_object_set_new(params, "rows", json_integer(size.ws_row));
                        json_object_set_new(params, "cols", json_integer(size.ws_col));
                }
        }
        if (o->with_stdin)
                json_object_set_new(params, "stdin_stream", json_true());
        if (o->detach && json_object_get(params, "timeout_seconds") == NULL)
                json_object_set_new(params, "timeout_seconds", json_integer(BACKGROUND_TIMEOUT_S));
        return -1;
}

/* -t -i: our terminal in raw mode, so that every key (Ctrl-C, Ctrl-D,
 * arrows) goes to the exec's terminal as typed, and its line discipline,
 * not ours, decides what they mean. Restored on every way out: the normal
 * return, exit() (atexit), and the signals we catch, which return. */
static struct termios saved_termios;
static bool termios_saved;

static void terminal_restore(void)
{
        if (termios_saved)
                tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_termios);
        termios_saved = false;
}

static int terminal_raw(void)
{
        if (tcgetattr(STDIN_FILENO, &saved_termios) < 0)
                return -errno;
        struct termios raw = saved_termios;
        cfmakeraw(&raw);
        termios_saved = true;
        atexit(terminal_restore);
        if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) < 0)
                return -errno;
        return 0;
}

/* SIGWINCH too, on the same signalfd, for a terminal exec. */
static void catch_window_changes(int signal_fd)
{
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGWINCH);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) == 0)
                signalfd(signal_fd, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

static int exec_in_sandbox(const struct cli *cli, json_t *params, const struct exec_opts *o)
{
        int signal_fd = cli_catch_signals();
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        int r = 0;
        if (o->detach) {
                json_object_set_new(params, "background", json_true());
                if (!cli->json)
                        json_object_set_new(params, "encoding", json_string("base64"));
                _cleanup_json_ json_t *result = NULL;
                _cleanup_json_ json_t *error = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (client_call(c, "sandbox.exec", params, NULL, NULL, &result, &error, &err) < 0) {
                        r = cli_fail_json(cli, error, "%s", err->message);
                } else {
                        const char *id = json_string_value(json_object_get(result, "exec_id"));
                        /* -d -i: our input to its end, then the exec runs on alone. */
                        if (o->with_stdin && id != NULL)
                                feed_stdin(cli->socket_path, id, false);
                        if (cli->json)
                                cli_print_json(result);
                        else
                                printf("%s\n", id ? id : "");
                }
                client_close(c);
                return r;
        }
        if (o->tty && signal_fd >= 0)
                catch_window_changes(signal_fd);
        if (o->tty && o->with_stdin && (r = terminal_raw()) < 0) {
                terminal_restore();
                client_close(c);
                return cli_fail("put the terminal in raw mode: %s", strerror(-r));
        }
        int signo;
        r = run_exec(cli, c, cli->socket_path, params, signal_fd, &signo);
        terminal_restore();
        client_close(c);
        return r;
}

int cmd_exec(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        struct exec_opts o = { 0 };
        int r = parse_exec_options(cli, argc, argv, params, &o);
        if (r != -1)
                return r;
        if (argc - optind < 2)
                return cli_usage_error(cli);
        const char *id = argv[optind++];
        if (strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(id));
        json_object_set_new(params, "argv", cli_argv_to_json(argc - optind, argv + optind));
        return exec_in_sandbox(cli, params, &o);
}

int cmd_sh(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        struct exec_opts o = { 0 };
        int r = parse_exec_options(cli, argc, argv, params, &o);
        if (r != -1)
                return r;
        if (argc - optind != 2)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        json_object_set_new(params, "command", json_string(argv[optind + 1]));
        return exec_in_sandbox(cli, params, &o);
}

/* Connect to nsboxd, or start a private one when none listens there. */
static struct client *connect_or_start(const struct cli *cli, struct private_daemon *pd, int signal_fd)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *c = NULL;
        int r = client_connect(cli->socket_path, &c, &err);
        if (r == 0)
                return c;
        if (r != -ENOENT && r != -ECONNREFUSED) {
                cli_fail("%s", err->message);
                return NULL;
        }
        /* Not root: the private nsboxd runs --rootless (a user namespace
         * from the user's /etc/subuid range); it says what is missing. */
        nsbox_error_free(&err);
        r = private_daemon_start(pd, signal_fd, &err);
        if (r == -EINTR)
                return NULL; /* the caller exits 128+N */
        if (r < 0 || client_connect(pd->socket_path, &c, &err) < 0) {
                cli_fail("private nsboxd: %s", err->message);
                return NULL;
        }
        return c;
}

static int remove_sandbox(struct client *c, const char *id)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:b}", "sandbox_id", id, "force", 1);
        _cleanup_json_ json_t *result = NULL;
        if (client_call(c, "sandbox.remove", params, NULL, NULL, &result, NULL, &err) < 0)
                return cli_fail("remove sandbox %s: %s", id, err->message);
        return 0;
}

static int run_in_new_sandbox(const struct cli *cli, struct client *c, const char *socket_path,
                              json_t *create, json_t *exec, int signal_fd)
{
        _cleanup_json_ json_t *created = cli_call(cli, c, "sandbox.create", create);
        if (created == NULL)
                return EXIT_NSBOX_FAILED;
        const char *id = json_string_value(json_object_get(created, "sandbox_id"));
        if (id == NULL)
                return cli_fail("sandbox.create answered without a sandbox_id");
        int signo = cli_caught_signal(signal_fd);
        int status;
        if (signo != 0) {
                status = 128 + signo;
        } else {
                json_object_set_new(exec, "sandbox_id", json_string(id));
                status = run_exec(cli, c, socket_path, exec, signal_fd, &signo);
        }
        if (signo != 0) {
                /* The connection may still wait for the exec's reply: remove on a fresh one. */
                struct client *fresh = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (client_connect(socket_path, &fresh, &err) == 0) {
                        remove_sandbox(fresh, id);
                        client_close(fresh);
                } else {
                        cli_fail("remove sandbox %s: %s", id, err->message);
                }
                return status;
        }
        if (remove_sandbox(c, id) != 0 && status == 0)
                status = EXIT_NSBOX_FAILED;
        return status;
}

int cmd_run(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CLI_CREATE_OPTIONS, EXEC_LONG_OPTIONS, { 0 } };
        _cleanup_json_ json_t *create = json_object();
        _cleanup_json_ json_t *exec = json_object();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "e:w:u:v:", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                int r = exec_option(exec, opt, optarg);
                if (r == 1)
                        r = cli_create_option(create, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_usage_error(cli);
        json_object_set_new(exec, "argv", cli_argv_to_json(argc - optind, argv + optind));

        int signal_fd = cli_catch_signals();
        struct private_daemon pd = { .pid = -1 };
        struct client *c = connect_or_start(cli, &pd, signal_fd);
        int status = EXIT_NSBOX_FAILED;
        if (c == NULL) {
                int signo = cli_caught_signal(signal_fd);
                if (signo != 0)
                        status = 128 + signo;
        } else {
                status = run_in_new_sandbox(cli, c, pd.socket_path ? pd.socket_path : cli->socket_path,
                                            create, exec, signal_fd);
                client_close(c);
        }
        private_daemon_stop(&pd);
        return status;
}
