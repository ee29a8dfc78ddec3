/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's secrets CA: made by nsboxd for a sandbox with secrets when
 * its network is attached (never reused), its key given to nsbox-egress
 * only, its certificate installed in the sandbox's trust store so TLS to a
 * secret's host, which the proxy intercepts, verifies. */
#pragma once

#include "error.h"

struct sandbox;

struct egress_ca {
        char *cert_pem;
        char *key_pem; /* wiped when freed */
};

int egress_ca_make(const char *sandbox_id, struct egress_ca *ca, nsbox_error_t **err);
void egress_ca_clear(struct egress_ca *ca);
/* The certificate into the running sandbox's files (POLICY_SECRETS_CA_FILE,
 * and the bundle with it in place of an earlier one). */
int egress_ca_install(struct sandbox *sb, const struct egress_ca *ca, nsbox_error_t **err);
