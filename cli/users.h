/* SPDX-License-Identifier: Apache-2.0 */
/* User and group names for the CLI, from the files database (users.c). */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/* The name of uid into buf: 0, or -1 when /etc/passwd has none. */
int cli_user_name(uid_t uid, char *buf, size_t len);
/* The uid of the user name: 0, or -1 when /etc/passwd has none. */
int cli_user_uid(const char *name, uid_t *uid);
/* The name of gid into buf: 0, or -1 when /etc/group has none. */
int cli_group_name(gid_t gid, char *buf, size_t len);
