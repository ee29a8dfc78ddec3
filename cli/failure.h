/* SPDX-License-Identifier: Apache-2.0 */
/* The failure line of nsbox and of its nsbox-tar helper: "nsbox: <message>"
 * on stderr, one line whatever the message holds. */
#pragma once

#include <stdarg.h>

void failure_vprint(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* "nsbox: skipped WHAT: WHY" on stderr: what a copy leaves out (FIFOs,
 * devices, sockets, hard links in a tar) does not fail it. */
void cp_warn_skipped(const char *what, const char *why);
