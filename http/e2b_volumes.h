/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's volume content API (e2b_volumes.c): a volume's files without a
 * sandbox, /volumecontent/{volumeID}/{dir,path,file}, on nsboxd's
 * volume.fs.* methods. A handler of the E2B router. */
#pragma once

#include <microhttpd.h>

#include "request.h"

/* A request under /volumecontent/{volume}/, volume its id (its name). */
enum MHD_Result http_e2b_volume_content(struct http_request *r, const char *volume);
