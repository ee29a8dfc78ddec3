/* SPDX-License-Identifier: Apache-2.0 */
/* Which package requirements nsbox hands to pip: PEP 508 names with extras
 * and version specifiers, nothing that pip could read as an option, a
 * path, a URL or a shell word. */
#pragma once

#include <stdbool.h>

#define REQUIREMENT_MAX_LEN 200

/* True for e.g. "numpy", "pandas==2.1.*", "requests[socks]>=2,<3", "my_pkg~=1.0".
 * On false, *why says what is wrong. */
bool requirement_valid(const char *text, const char **why);
