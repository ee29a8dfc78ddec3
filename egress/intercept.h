/* SPDX-License-Identifier: Apache-2.0 */
/* TLS interception for the hosts of a sandbox's secrets, and for nothing
 * else (and, the same way without TLS, their plain HTTP on port 80): the
 * sandbox's TLS ends here, with a certificate for the host signed by the
 * sandbox's own CA (which nsboxd made and installed in the sandbox),
 * and a new TLS connection to the host, whose certificate is verified (the
 * system's CAs and --ca-file), carries the request with the secrets put in
 * (inject.h). Each intercepted connection runs in a thread of its own with
 * blocking I/O bounded by timeouts: the proxy's loop never waits on it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "inject.h"

#define INTERCEPT_MAX         256 /* intercepted connections at once, all sandboxes */
#define INTERCEPT_PER_SANDBOX 32  /* of them, one sandbox's: the others keep theirs */
/* The last INTERCEPT_RESERVE of INTERCEPT_MAX go only to a sandbox that
 * holds fewer than INTERCEPT_RESERVE_EACH: busy sandboxes (however many)
 * fill at most INTERCEPT_MAX - INTERCEPT_RESERVE, and a sandbox that
 * comes later still gets its first connections. */
#define INTERCEPT_RESERVE      64
#define INTERCEPT_RESERVE_EACH 4
#define INTERCEPT_TIMEOUT_SECS 30 /* each read and write */
#define INTERCEPT_HEAD_SECS    30 /* the TLS handshake and a request's head, all of it */
#define EGRESS_INTERCEPT_IO    16384

/* Once, before the privileges are dropped: the TLS contexts, the system's
 * CAs and ca_file (NULL: none) to verify servers with. */
int intercept_init(const char *ca_file, nsbox_error_t **err);

struct intercept_ca;
/* The add message's "tls": {cert, key} (PEM); NULL with *why. */
struct intercept_ca *intercept_ca_parse(json_t *tls, const char **why);
/* Freed with the last reference (the sandbox's, its connections'). */
void intercept_ca_unref(struct intercept_ca *ca);

/* NULL when one more connection of the sandbox whose CA is ca may be
 * intercepted now; else why not (INTERCEPT_MAX, INTERCEPT_PER_SANDBOX,
 * INTERCEPT_RESERVE). */
const char *intercept_full(const struct intercept_ca *ca);

/* Intercept the connection between client_fd (the sandbox; prefix: what it
 * sent so far, its ClientHello) and upstream_fd (connected to host, on
 * port): both fds are the thread's from here, even when this fails
 * (-errno; -EBUSY: intercept_full, checked again here where the count is
 * taken). tls false: plain HTTP to a secret's host (port 80), its requests
 * (the first in prefix) judged and given the secrets the same way, with
 * keep-alive, over no TLS. */
int intercept_start(int client_fd, int upstream_fd, const uint8_t *prefix, size_t len, bool tls,
                    unsigned port, const char *host, const char *sandbox_id, struct intercept_ca *ca,
                    struct inject_secrets *secrets);
