/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's secrets (sandbox.create's "secrets"): checked, each given an
 * opaque placeholder the sandbox sees in its env instead of the value. The
 * values go to nsbox-egress only, which puts them into requests to the
 * secret's hosts: never into a reply, a log line or a file. */
#pragma once

#include <jansson.h>

#include "error.h"

#define POLICY_SECRETS_MAX        16
#define POLICY_SECRET_NAME_MAX    64
#define POLICY_SECRET_VALUE_MAX   4096
#define POLICY_SECRET_HOSTS_MAX   16
#define POLICY_SECRET_HEADER_MAX  1024
#define POLICY_SECRET_ENV_PREFIX  "NSBOX_SECRET_"
#define POLICY_SECRET_PLACEHOLDER "nsbox-secret-" /* then 32 random hex digits */
/* The sandbox's secrets CA, which TLS to the secrets' hosts is signed by:
 * alone, and at the end of the image's bundle (manager/egress_ca.c). */
#define POLICY_SECRETS_CA_FILE   "/etc/nsbox/secrets-ca.pem"
#define POLICY_SECRETS_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

/* `secrets` as a client gave it, {NAME: {value, hosts: [...], header?}},
 * into *out: {NAME: {value, hosts (normalized names), header?, placeholder}}
 * with a fresh random placeholder each. */
int policy_secrets_from_json(json_t *secrets, json_t **out, nsbox_error_t **err);

/* Secrets as policy_secrets_from_json made them (placeholders included),
 * read back from what nsboxd kept for the next nsboxd (live restore):
 * checked as strictly as a client's, each placeholder as one it makes. */
int policy_secrets_from_kept(json_t *kept, json_t **out, nsbox_error_t **err);

/* NSBOX_SECRET_<NAME>=placeholder for each secret into *env (made when
 * NULL); a client's own variable of that name is an error. And the
 * variables that point the TLS stacks which do not read the system's
 * bundle by default at it (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, ...),
 * unless the client set them. */
int policy_secrets_env(json_t *secrets, json_t **env, nsbox_error_t **err);

/* sandbox.update's secrets (made by policy_secrets_from_json) over a
 * sandbox's current ones (NULL: none): a name it had keeps its
 * placeholder, so the env of its running processes stays good; in *env,
 * the placeholders of names it no longer has go and the new ones come.
 * *env is left as it was on an error. */
int policy_secrets_replace(json_t *fresh, json_t *current, json_t **env, nsbox_error_t **err);

/* The secrets' names: all sandbox.info shows of them. */
json_t *policy_secrets_names(json_t *secrets);
