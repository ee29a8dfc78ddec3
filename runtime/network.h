/* SPDX-License-Identifier: Apache-2.0 */
/* Links, addresses and routes of the calling thread's network namespace,
 * through libnl-3 (rtnetlink). Callers enter the namespace first. */
#pragma once

#include <netinet/in.h>

#include "error.h"

/* In a fresh network namespace: bring the loopback interface up. */
int network_loopback_up(nsbox_error_t **err);
/* A veth pair: `name` here, `peer_name` in the namespace of peer_netns_fd. */
int network_veth_add(const char *name, const char *peer_name, int peer_netns_fd, nsbox_error_t **err);
/* Delete a link (and so both ends of a veth); a missing one is no error. */
int network_link_delete(const char *name, nsbox_error_t **err);
/* address/prefix on the link, the link up and, with a gateway, the default
 * route through it. */
int network_link_configure(const char *name, struct in_addr address, int prefix,
                           const struct in_addr *gateway, nsbox_error_t **err);
