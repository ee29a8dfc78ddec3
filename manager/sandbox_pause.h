/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.pause and sandbox.resume. */
#pragma once

#include <stdbool.h>

#include "sandbox.h"

/* Freeze every process of the sandbox. `done` (may be NULL) runs once it is
 * frozen, or with why not, the kind in sb->pause_error_kind (the sandbox
 * then runs on); at once when already paused. Fails at once (-ENOTSUP)
 * where the host's cgroups cannot freeze. */
int sandbox_pause(struct sandbox *sb, sandbox_ready_cb done, void *data, nsbox_error_t **err);
/* Thaw it; true when it was paused or being paused. */
bool sandbox_resume(struct sandbox *sb);
/* A pause ends (frozen, failed, or overtaken by a resume or the sandbox's
 * end): its waiters are answered with `error` (NULL: frozen) and `kind`. */
void sandbox_pause_end(struct sandbox *sb, const char *error, const char *kind);
/* Before a request that needs the sandbox's processes to run (the init
 * starts execs, supervisors deliver signals and input, the interpreter
 * answers): a paused sandbox is resumed (auto_resume), or the request
 * fails. The file API works on a paused sandbox as it is (it goes through
 * /proc/PID/root from nsboxd, whose workers are not frozen), and so do the
 * methods that only read what nsboxd holds (info, exec.status/output).
 * False after replying. */
bool sandbox_resume_for(struct rpc_request *req, struct sandbox *sb);
