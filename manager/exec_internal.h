/* SPDX-License-Identifier: Apache-2.0 */
/* What exec.c and exec_api.c share, and no one else sees: struct exec, the
 * per-sandbox exec state, and the steps the methods take on an exec. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "loop.h"
#include "rpc.h"
#include "sandbox.h"

struct exec_hooks;

#include "proto.h"

/* Streamed stdin (exec.stdin): at most this much waits in nsboxd for a
 * command that does not read; a call that fills it past this is answered
 * only once the command has taken enough, so a client that waits for its
 * answers never holds more than this plus one call in the daemon. */
#define EXEC_STDIN_STREAM_BUFFER (1u << 20)
#define EXEC_STDIN_MAX_CALL      (1u << 20) /* decoded bytes of one exec.stdin */
#define EXEC_OUTPUT_WAIT_MAX_MS  60000      /* the longest exec.output may wait for output */

enum { OUT_STDOUT, OUT_STDERR };
extern const char *const exec_stream_names[2]; /* by OUT_STDOUT, OUT_STDERR */

struct output {
        struct loop_source *source;
        char *data; /* collected output; a background exec's head (exec_log.h) */
        size_t len, cap;
        char *tail; /* a background exec's: the ring of its last bytes (exec_log.c) */
        size_t tail_cap, tail_len, tail_start;
        size_t written; /* a background exec's: every byte the stream wrote, kept or not */
        size_t carry;   /* stream mode: bytes of an incomplete UTF-8 sequence kept back */
        bool eof;
};

/* Our ends of an exec slot the init was asked to start. */
struct exec_slot {
        bool open;
        int request; /* the exec request goes here */
        int control; /* the supervisor's reports and our kill requests */
        uint32_t number;
};

/* The stdout and stderr pipes of the next exec, made ahead like its slot:
 * our read ends watched, the write ends to send to its child. */
struct exec_outputs {
        bool ready;
        struct loop_source *read[2];
        int write[2];
};

/* What exec keeps per sandbox (struct sandbox holds it opaque). */
struct exec_sandbox {
        struct exec *execs; /* background ones kept after their end too */
        uint32_t next_exec_number;
        struct exec_slot slot;       /* started ahead for the next exec */
        struct exec_outputs outputs; /* its pipes, made ahead too */
};

struct exec {
        char id[37];
        uint32_t number;
        struct sandbox *sb;
        struct rpc_request *req;        /* the client waiting for the result, if any */
        const struct exec_hooks *hooks; /* an internal caller instead of a client */
        void *hooks_data;
        bool stream, background, base64, finished;
        bool notify_started; /* a foreground one's client hears exec.started (its id) too */
        bool counted;        /* in quota_uid's calls in flight (quota.c): a client's exec, not yet finished */
        uid_t quota_uid;     /* the uid whose request started it, as python.run counts its calls */
        struct output out[2];
        size_t max_output, total_output;
        bool truncated;
        unsigned long long dropped_output; /* bytes read past max_output (or the budget) and dropped */
        struct loop_source *stdin_src;
        char *stdin_data;
        size_t stdin_len, stdin_off;
        bool keep_stdin;                  /* attached: stdin stays open for exec_write_stdin() */
        bool stdin_stream;                /* a client feeds stdin with exec.stdin */
        bool stdin_eof;                   /* exec.stdin said eof: close once the queue is written */
        struct rpc_request *stdin_waiter; /* an exec.stdin answered once the queue drains */
        bool tty;                         /* stdio is a pty of the sandbox; `pty` is its master */
        int pty;
        uid_t uid;                   /* the client's, for the audit line */
        char *audit;                 /* "uid=... argv=..." for the audit line */
        char *command_text;          /* the command as exec.list shows it */
        long long start_realtime_ms; /* when it started, for exec.list */
        bool service;                /* not a client's work: not "busy", not activity */
        unsigned leftover;           /* processes its main process left running, ended with it */
        struct rpc_request *notify;  /* an internal caller's request its output streams to */
        struct loop_timer *deadline; /* the timeout, then the drain grace */
        unsigned timeout_s;
        pid_t pid;
        struct loop_source *slot; /* the control socket of the exec's supervisor */
        int slot_request;         /* our end of its request socket, or -1 */
        int held[2];              /* copies of the exec's stdout and stderr: see exec_release_output */
        bool started, exited, timed_out, killed;
        int keep_fd;           /* live restore: its record, kept by the init too (exec_keep.h), or -1 */
        bool kept_by_init;     /* the init holds its fds (CTL_KEEP): to drop as it ends (CTL_UNKEEP) */
        bool keep_in_ring;     /* the bytes being appended are in its kept ring already (exec_keep_read) */
        const char *keep_kind; /* its hooks' (exec.h), for exec_keep.c */
        json_t *(*keep_state)(struct exec *ex, void *data);
        bool adopted;         /* taken over from a previous nsboxd */
        bool supervisor_died; /* its supervisor ended without reporting the exit */
        bool sandbox_gone;    /* killed by its sandbox's removal or nsboxd's stop */
        bool paused;          /* its pipes are not read for now: see exec_pause */
        bool held_for_start;  /* streamed output read before exec.started waits for it: see stream_pending */
        size_t charged;       /* bytes of the budget (budget.h) its buffers hold */
        uint64_t oom_kills_at_start;
        int wait_status;
        int start_errno;
        int start_exit_code; /* the start failure's own (126 or 127), else 0 */
        char *start_error;
        long long start_mono, end_mono;
        struct exec_output_wait *output_waiters; /* exec.output calls waiting for output or the end */
        struct exec *next;
};

/* Start an exec in sb (params as sandbox.exec takes them); NULL with err
 * and *kind ("invalid_params", "limit_reached", ...) when it cannot. */
struct exec *exec_launch(struct sandbox *sb, json_t *params, const struct exec_hooks *hooks, void *data,
                         const char **kind, nsbox_error_t **err);
/* The client of a foreground exec left: the exec is killed. */
void exec_client_gone(struct rpc_request *req, void *data);
/* How ex ended (or that it runs), in one word: see exec_result. */
const char *exec_status_word(const struct exec *ex);
/* What sandbox.exec answers for ex (as it stands). */
json_t *exec_result(struct exec *ex);
/* How ex ended, into result: exit_code, signal, timed_out, oom_killed,
 * duration_ms, status, and error and ended_by when they apply. */
void exec_result_end(struct exec *ex, json_t *result);
/* Answer the exec.output calls waiting on ex that have something new (all
 * of them once it has ended, or with gone: it is being freed). */
void exec_output_wake(struct exec *ex, bool gone);
void exec_send_kill(struct exec *ex, int sig);
/* A client's exec counts in its caller's calls in flight until it ends. */
void exec_count(struct exec *ex, uid_t uid);
json_t *exec_output_to_json(const char *data, size_t len, bool base64);
/* exec.stdin's answer: the bytes still queued for the command. */
json_t *exec_stdin_result(struct exec *ex);
void exec_stdin_close(struct exec *ex);
