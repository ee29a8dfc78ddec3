/* SPDX-License-Identifier: Apache-2.0 */
/* The failure line of nsbox and of its nsbox-tar helper: "nsbox: <message>"
 * on stderr, one line whatever the message holds. */
#pragma once

#include <stdarg.h>

void failure_vprint(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
