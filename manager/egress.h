/* SPDX-License-Identifier: Apache-2.0 */
/* Network egress: nsboxd's side. A private network namespace (the egress
 * namespace) holds one veth end per sandbox with network; nftables there
 * hands every TCP connection and DNS query from a sandbox to nsbox-egress,
 * an unprivileged proxy process that decides them by the sandbox's policy
 * (see egress/ and README "Network"). Sandboxes without network cost
 * nothing here. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "error.h"
#include "policy.h"

struct sandbox;
struct sandbox_egress;

/* At startup, when the config names network policies or lets clients pass
 * their own: the egress namespace and the proxy. */
int egress_init(nsbox_error_t **err);
void egress_shutdown(void);
/* SIGHUP: the policies and allow_client_network_policies of `fresh` (a
 * config just loaded), when they are valid; the rest needs a restart. */
struct nsbox_config;
void egress_reload(struct nsbox_config *fresh);

/* sandbox.update's secrets (NULL: none) to the proxy, with a CA made and
 * installed if the sandbox had none. */
int egress_update_secrets(struct sandbox *sb, json_t *secrets, nsbox_error_t **err);

/* Live restore: the sandbox's secrets (sb->policy.secrets) and its CA
 * into the memfd its leased init holds (sb->secrets_fd, given to the init
 * the first time), for the next nsboxd; emptied when it has none. A
 * no-op without a lease. A failure is logged: the sandbox is then not
 * adopted by the next nsboxd. */
void egress_keep_secrets(struct sandbox *sb);

/* A running sandbox with secrets: its CA into its trust store (a failure
 * is logged: TLS to the secrets' hosts then fails verification). */
void egress_install_ca(struct sandbox *sb);

/* A sandbox.create or sandbox.update "network" the operator allows
 * (invalid_params otherwise). */
int egress_check(const struct sandbox_policy *policy, nsbox_error_t **err);
/* The sandbox (running) gets the network of `wanted` (its own policy, or
 * the one it is about to take from the warm pool); "none" is a no-op. */
int egress_attach(struct sandbox *sb, const struct sandbox_policy *wanted, nsbox_error_t **err);
/* Live restore: an adopted sandbox gets its network back as its record
 * beside sandbox.json says (its address and exposed ports, where still
 * free), with the policy it has, and its secrets CA as kept
 * (secrets_keep.h). Where the proxy of the old nsboxd was adopted too
 * (egress_init) and still serves it, its veth and connections carry on;
 * else it gets a new veth, and connections open at the restart are gone. */
int egress_reattach(struct sandbox *sb, nsbox_error_t **err);
/* After the last egress_reattach: what an adopted proxy still served for
 * sandboxes that were not adopted is dropped. */
void egress_reattach_done(void);
/* Its veth, sockets and proxy state go; safe on a sandbox without network.
 * A sandbox no longer `alive` has lost its veth with its namespace. */
void egress_detach(struct sandbox *sb, bool alive);
/* sandbox.update: `network` as policy_network_from_json gives it (custom
 * taken over). */
int egress_update(struct sandbox *sb, const char *network, json_t *custom, nsbox_error_t **err);

int egress_expose(struct sandbox *sb, unsigned port, json_t **result, nsbox_error_t **err);
int egress_unexpose(struct sandbox *sb, unsigned port, nsbox_error_t **err);

/* sandbox.info's "egress" object, or NULL without network. */
json_t *egress_info(const struct sandbox *sb);
/* What the proxy refused for the sandbox since `since_mono_ms`, as
 * "network_refused": ["name:port", ...] in reply, and with in_stderr a line
 * "nsbox: network policy refused name:port" per refusal added to its
 * "stderr" (utf-8 replies only). Nothing when nothing was refused. */
void egress_note_refused(json_t *reply, const struct sandbox *sb, long long since_mono_ms, bool in_stderr);
