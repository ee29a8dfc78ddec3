/* SPDX-License-Identifier: Apache-2.0 */
/* User and group names for the CLI, from /etc/passwd and /etc/group. nsbox is
 * a static binary, where getpwnam and friends would load the NSS modules of
 * the glibc it was built with (unsafe with any other): it reads the files
 * database itself, and a name from elsewhere (LDAP, sssd) shows as its number. */
#include "users.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"

int cli_user_name(uid_t uid, char *buf, size_t len)
{
        _cleanup_fclose_ FILE *f = fopen("/etc/passwd", "re");
        for (struct passwd *pw; f != NULL && (pw = fgetpwent(f)) != NULL;) {
                if (pw->pw_uid == uid) {
                        snprintf(buf, len, "%s", pw->pw_name);
                        return 0;
                }
        }
        return -1;
}

int cli_user_uid(const char *name, uid_t *uid)
{
        _cleanup_fclose_ FILE *f = fopen("/etc/passwd", "re");
        for (struct passwd *pw; f != NULL && (pw = fgetpwent(f)) != NULL;) {
                if (strcmp(pw->pw_name, name) == 0) {
                        *uid = pw->pw_uid;
                        return 0;
                }
        }
        return -1;
}

int cli_group_name(gid_t gid, char *buf, size_t len)
{
        _cleanup_fclose_ FILE *f = fopen("/etc/group", "re");
        for (struct group *g; f != NULL && (g = fgetgrent(f)) != NULL;) {
                if (g->gr_gid == gid) {
                        snprintf(buf, len, "%s", g->gr_name);
                        return 0;
                }
        }
        return -1;
}
