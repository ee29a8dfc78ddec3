/* SPDX-License-Identifier: Apache-2.0 */
/* One process run in a sandbox at a client's request: pipes the manager
 * reads, timeout, output caps, streaming, background bookkeeping. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "rpc.h"

struct sandbox;
struct sandbox_removal;

struct exec;

/* An internal caller of an exec (python.run, package.install, the stateful
 * interpreter) instead of a client. */
struct exec_hooks {
        /* Stdout bytes as they arrive, instead of collecting them. */
        void (*on_stdout)(struct exec *ex, const char *data, size_t len, void *data_);
        /* Stderr bytes likewise (NULL: collected as usual). */
        void (*on_stderr)(struct exec *ex, const char *data, size_t len, void *data_);
        /* The exec ended; `result` (as sandbox.exec returns it) is borrowed.
         * The exec is freed right after, unless it runs in the background. */
        void (*done)(struct exec *ex, json_t *result, void *data_);
        bool keep_stdin; /* the stdin pipe stays open for exec_write_stdin() */
        bool service;    /* a helper of the sandbox (the stateful interpreter): it does not make
                          * the sandbox busy or keep it from being reaped when idle */
        /* Live restore: a helper that outlives nsboxd names its kind here;
         * `keep_state` says what the next nsboxd needs to take it over (NULL:
         * nothing), which the adopt function registered for the kind
         * (exec_on_adopt) gets back. */
        const char *keep_kind;
        json_t *(*keep_state)(struct exec *ex, void *data_);
};

/* Take over exec `ex` of kind `kind` with its `state` (as keep_state said
 * it): set its hooks (exec_adopted_hooks) and return 0, or refuse (<0: the
 * exec is ended). */
typedef int (*exec_adopt_fn)(struct sandbox *sb, struct exec *ex, json_t *state);
void exec_on_adopt(const char *kind, exec_adopt_fn adopt);
void exec_adopted_hooks(struct exec *ex, const struct exec_hooks *hooks, void *data);
/* What keep_state says changed: saved for the next nsboxd. */
void exec_keep_update(struct exec *ex);

/* sandbox.exec */
void exec_method_run(struct rpc_request *req, struct sandbox *sb);
/* exec.status, exec.output, exec.kill (by exec_id) and exec.list (of a sandbox) */
void exec_method_status(struct rpc_request *req, struct sandbox *sb);
void exec_method_output(struct rpc_request *req, struct sandbox *sb);
void exec_method_kill(struct rpc_request *req, struct sandbox *sb);
void exec_method_list(struct rpc_request *req, struct sandbox *sb);
/* exec.stdin: bytes (or eof) for an exec started with stdin_stream or tty */
void exec_method_stdin(struct rpc_request *req, struct sandbox *sb);
/* exec.resize: the window size of a tty exec */
void exec_method_resize(struct rpc_request *req, struct sandbox *sb);

/* The audit line names req's uid, and the front that acted for it (auth.act_as):
 * for an exec started on behalf of a request (python.run, package.install). */
void exec_attribute(struct exec *ex, const struct rpc_request *req);

/* Start an exec with sandbox.exec params for an internal caller. */
int exec_run(struct sandbox *sb, json_t *params, const struct exec_hooks *hooks, void *data,
             struct exec **out, nsbox_error_t **err);
/* Queue bytes for the exec's stdin (keep_stdin execs). */
int exec_write_stdin(struct exec *ex, const void *buf, size_t len);
void exec_signal(struct exec *ex, int sig);
/* The sandbox's client execs still running that nobody has killed yet: one
 * whose client left (a cancelled call) is on its way out, and keeps nothing
 * busy (sandbox.remove). */
unsigned exec_running_unkilled(const struct sandbox *sb);
/* Send the output of an exec started with "stream": true (by exec_run) to
 * this request as exec.output notifications, paced by its client; until the
 * exec ends. */
void exec_stream_to(struct exec *ex, struct rpc_request *req);
const char *exec_id(const struct exec *ex);
/* A control message from the sandbox's init about one of its execs. */
void exec_on_control(struct sandbox *sb, const void *msg, size_t len);
/* Have the init start the slot for the next exec (see runtime/supervisor.c)
 * unless one is started already. Called when a sandbox is ready and as each
 * exec takes the slot. */
int exec_prepare_slot(struct sandbox *sb, nsbox_error_t **err);
/* Live restore, as a sandbox is adopted: take over the execs its init
 * kept for us (exec_keep.h), before any slot of this run is asked for. */
void exec_sandbox_adopt(struct sandbox *sb);
/* The sandbox is going away: finish every exec (killed). */
void exec_sandbox_gone(struct sandbox *sb);
/* Its client execs' ids into the record of its removal, newest first (as
 * many as the record keeps): a call naming one is told it went with it. */
void exec_sandbox_record_ids(struct sandbox *sb, struct sandbox_removal *removal);
/* A sandbox's exec state (its execs, the slot and pipes made ahead for the
 * next one), opaque to everyone else: made with the sandbox, freed with it. */
struct exec_sandbox *exec_sandbox_new(void);
void exec_sandbox_free(struct exec_sandbox *state);
