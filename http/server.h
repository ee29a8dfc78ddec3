/* SPDX-License-Identifier: Apache-2.0 */
/* The router of nsbox-http (server.c): MHD's access handler, which
 * authenticates each request, bounds its body and routes it to a handler,
 * and its completion callback. main.c hands both to MHD_start_daemon. */
#pragma once

#include <microhttpd.h>

extern MHD_AccessHandlerCallback http_access_handler;
extern MHD_RequestCompletedCallback http_request_completed;
