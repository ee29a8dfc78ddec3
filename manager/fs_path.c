/* SPDX-License-Identifier: Apache-2.0 */
/* Pure normalization of fs.* paths (see fs_path.h). */
#include "fs_path.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

int fs_path_parse(const char *text, size_t len, const char *base, struct fs_path *out, nsbox_error_t **err)
{
        if (len == 0)
                return nsbox_refuse(err, EINVAL, "the path is empty");
        if (memchr(text, '\0', len) != NULL)
                return nsbox_refuse(err, EINVAL, "the path contains a NUL byte");
        if (len > FS_PATH_MAX)
                return nsbox_refuse(err, ENAMETOOLONG, "the path is longer than %d bytes", FS_PATH_MAX);

        size_t n = 0;
        size_t last = 0; /* offset of the last component in rel */
        unsigned components = 0;
        const char *p = text, *end = text + len;
        if (*p != '/' && base != NULL) {
                n = strlen(base);
                memcpy(out->rel, base, n);
                components = 1;
        }
        const char *last_component = NULL;
        size_t last_len = 0;
        while (p < end) {
                while (p < end && *p == '/')
                        p++;
                const char *c = p;
                while (p < end && *p != '/')
                        p++;
                size_t clen = (size_t)(p - c);
                if (clen == 0 || (clen == 1 && c[0] == '.'))
                        continue;
                if (clen > NAME_MAX)
                        return nsbox_refuse(err, ENAMETOOLONG, "a path component is longer than %d bytes",
                                            NAME_MAX);
                if (++components > FS_PATH_MAX_COMPONENTS)
                        return nsbox_refuse(err, ENAMETOOLONG,
                                            "the path has more than %d components (the limit of fs.* "
                                            "paths)",
                                            FS_PATH_MAX_COMPONENTS);
                /* base + "/" + at most FS_PATH_MAX bytes of text: rel has room. */
                if (n > 0)
                        out->rel[n++] = '/';
                last = n;
                memcpy(out->rel + n, c, clen);
                n += clen;
                last_component = c;
                last_len = clen;
        }
        /* The kernel takes a path of PATH_MAX bytes with its NUL: rel is what
         * it is given, from the root ("/" + rel is what the client reads). */
        if (n > FS_PATH_MAX - 1)
                return nsbox_refuse(err, ENAMETOOLONG, "the path is longer than %d bytes from the root%s%s%s",
                                    FS_PATH_MAX, base != NULL ? " (a relative path is from /" : "",
                                    base != NULL ? base : "", base != NULL ? ")" : "");
        char final = text[len - 1];
        out->dir_only = final == '/' || (last_component != NULL && last_component + last_len != end);
        out->components = components;
        if (n == 0) {
                strcpy(out->rel, ".");
                strcpy(out->parent, ".");
                out->name = NULL;
                out->dir_only = true;
        } else {
                out->rel[n] = '\0';
                if (last == 0) {
                        strcpy(out->parent, ".");
                } else {
                        memcpy(out->parent, out->rel, last - 1);
                        out->parent[last - 1] = '\0';
                }
                out->name = out->rel + last;
                if (strcmp(out->name, "..") == 0) {
                        out->name = NULL;
                        out->dir_only = true;
                }
        }
        snprintf(out->shown, sizeof(out->shown), "/%s", n == 0 ? "" : out->rel);
        return 0;
}

size_t fs_path_prefix_len(const char *rel, unsigned n)
{
        if (n == 0 || strcmp(rel, ".") == 0)
                return 0;
        const char *p = rel;
        for (unsigned i = 0;; i++) {
                const char *slash = strchr(p, '/');
                if (i + 1 == n)
                        return slash ? (size_t)(slash - rel) : strlen(rel);
                if (slash == NULL)
                        return 0;
                p = slash + 1;
        }
}
