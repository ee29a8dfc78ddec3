/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd without host root: as root of a user namespace that holds one
 * delegated range of ids (a pod with hostUsers: false, a rootless CI job,
 * `nsboxd --rootless` on a laptop).
 *
 * Then every sandbox maps that same range (no per-sandbox host ranges can
 * be had), its image must be owned by ids of the range (as a pod's image
 * is, through the runtime's idmapped mount), and what needs real host root
 * (egress veths in the host's network namespace, idmapped mounts of host
 * file systems, host-wide sysctls, lowering oom_score_adj, cgroup v1
 * hierarchies) is off, each listed by userns_json() with why. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* The ids a sandbox maps in userns mode: 0 to 65535 of nsboxd's namespace. */
#define USERNS_SANDBOX_IDS 65536u

/* Read /proc/self/{uid,gid}_map: anything but the identity map of all
 * 4294967295 ids is userns mode. Fails when nsboxd is not uid 0 of its
 * namespace or the namespace lacks 65536 ids from 0. */
int userns_detect(nsbox_error_t **err);
bool userns_active(void);
/* The uid_map (gids false) or gid_map text of a sandbox in userns mode. */
const char *userns_sandbox_map(bool gids);
/* How many ids from 0 up nsboxd's namespace maps (uids and gids both). */
uint32_t userns_delegated_ids(void);
/* The uid every client outside nsboxd's namespace reads as (SO_PEERCRED):
 * the kernel's overflow uid. */
bool userns_client_unmapped(uid_t uid);

/* For server.info: {delegated_ids, sandbox_ids, unavailable: [{feature, why}]}. */
json_t *userns_json(void);

/* The mount namespace nsboxd mounts sandboxes' file systems in must be
 * owned by its user namespace: one of its own, private. */
int userns_enter_mount_namespace(nsbox_error_t **err);

/* `nsboxd --rootless` started by a user other than root: re-exec argv as
 * root of a new user namespace mapped by newuidmap/newgidmap from
 * /etc/subuid and /etc/subgid, or of the one join(arg) joined when it
 * returns true (a keeper's, live restore). Returns only on failure. */
int userns_reexec_rootless(char **argv, bool (*join)(const char *arg), const char *arg, nsbox_error_t **err);
