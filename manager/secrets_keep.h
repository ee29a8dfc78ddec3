/* SPDX-License-Identifier: Apache-2.0 */
/* Live restore of a sandbox's secrets (docs/design/live-restore.md): their
 * values, hosts, headers and placeholders, and its secrets CA's certificate
 * and key, in a memfd its init holds (NSBOX_INIT_SECRETS_FD), rewritten in
 * place as they change. Never a file: the next nsboxd takes the memfd from
 * the init with pidfd_getfd. Used by egress.c and restore.c only. */
#pragma once

#include <jansson.h>

#include "egress_ca.h"
#include "error.h"

/* The most a kept memfd may hold; one over it is not read. */
#define SECRETS_KEEP_MAX (1u << 20)

/* A new memfd (MFD_CLOEXEC), or -1 with *err. */
int secrets_keep_create(nsbox_error_t **err);

/* `secrets` (policy/secrets.h, placeholders included; NULL: none, the
 * memfd is emptied) and `ca` (NULL or without a certificate: none) over
 * what `fd` held. */
int secrets_keep_write(int fd, json_t *secrets, const struct egress_ca *ca, nsbox_error_t **err);

/* What `fd` holds: checked to be a memfd of at most SECRETS_KEEP_MAX bytes
 * that is not empty, and parsed as strictly as sandbox.create's secrets.
 * *ca gets the CA when one was kept (else stays empty); free it with
 * egress_ca_clear. */
int secrets_keep_read(int fd, json_t **secrets, struct egress_ca *ca, nsbox_error_t **err);
