/* SPDX-License-Identifier: Apache-2.0 */
/* Persistent shell sessions: a named bash per session in a sandbox that
 * keeps its cwd, exported variables and functions between commands
 * (shell.create, shell.run, shell.check, shell.terminate, shell.list).
 *
 * How a command is framed. Each session is one long-lived exec (exec.c,
 * a service exec with keep_stdin, as the stateful python interpreter is)
 * of `bash --noediting --norc --noprofile -i` reading our lines on its
 * stdin. Interactive, because that is the mode in which SIGINT aborts the
 * command line being run and returns to the prompt instead of ending the
 * shell or going on with the rest of the line, and in which bash itself
 * ignores SIGTERM: both are what a timeout needs (below). Job control is
 * off, so the command runs in the shell's own process group.
 *
 * The first line we write sets the shell up: no prompts, no history, and a
 * read-only PROMPT_COMMAND function that bash runs after every command line,
 * interrupted or not. It prints an end record on stdout,
 *     "\036NSBOXEND <nonce> <exit status> <$PWD>\0"
 * and "\036NSBOXEND <nonce>\0" on stderr. A command is then one line:
 *     __nsbox_n=<nonce>; __nsbox_ret; { eval $'<command>'; } </dev/null
 * The command's text is written as a $'...' string with every byte that is
 * not plainly safe as \xHH, so no byte of it is parsed as anything but the
 * one argument of eval; stdin is /dev/null, so the command cannot read our
 * later lines; __nsbox_ret gives it the previous command's $?. The
 * command's stdout and stderr are the shell's, read by us as they come
 * (exec hooks on_stdout/on_stderr): bytes before the end record are the
 * command's output, kept up to max_output_bytes (the rest counted and
 * dropped: truncated), charged to nsboxd's output budget (budget.h). A
 * command has ended when both records are seen (each pipe is in order, the
 * two are not ordered with each other).
 *
 * The nonce is 128 random bits per command, made by nsboxd: output that
 * merely looks like a record (another nonce, a partial one) is output. Code
 * in the sandbox that finds the current nonce (it is a shell variable) can
 * forge the end of its own command, which confuses only its own session.
 *
 * A timeout (or the client of a blocking run going away) sends SIGINT to
 * the shell's process group: the command is interrupted, the shell reads
 * on with its state. A command that ignores SIGINT gets SIGTERM 2 s later
 * (the interactive shell ignores it); one that ignores both 2 s after that
 * costs the session: the shell is killed and the reply says its state is
 * lost. Commands run one at a time per session (a second run: busy); at
 * most SHELL_MAX_SESSIONS per sandbox. A session ends with its sandbox, on
 * shell.terminate, when its shell exits (`exit`), and after the exec's
 * longest timeout (24 h). */
#pragma once

#include <stdbool.h>

#include "rpc.h"

#define SHELL_MAX_SESSIONS 16

struct sandbox;

void shell_method_create(struct rpc_request *req, struct sandbox *sb);
void shell_method_run(struct rpc_request *req, struct sandbox *sb);
void shell_method_check(struct rpc_request *req, struct sandbox *sb);
void shell_method_terminate(struct rpc_request *req, struct sandbox *sb);
void shell_method_list(struct rpc_request *req, struct sandbox *sb);
/* A session of the sandbox runs a command or is starting: the idle reaper
 * leaves the sandbox alone. */
bool shell_busy(const struct sandbox *sb);
/* Live restore: the sessions a previous nsboxd left are taken over
 * (exec_on_adopt). Called at start, before sandboxes are adopted. */
void shell_live_restore_init(void);
