/* SPDX-License-Identifier: Apache-2.0 */
/* envd's process.Process service over Connect (e2b_process.c): Start and
 * Connect stream a command's events, List, SendInput, SendSignal,
 * CloseStdin and Update (a pty's size) act on it; each command is a
 * background exec of nsboxd. A handler of the router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

/* POST /process.Process/<method> for the sandbox the request names. */
enum MHD_Result http_e2b_process(struct http_request *r, const char *sandbox_id, const char *method);
