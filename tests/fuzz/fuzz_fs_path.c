/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: fs.* paths as a client sends them (any bytes, any
 * length) through fs_path_parse, the pure half of fs_ops.c's path handling,
 * and the prefix walk mkdir -p uses. Checks the invariants fs_ops.c relies on:
 * a refusal has a message; an accepted path is bounded (bytes, components)
 * and normalized (no empty or "." component, no NUL), parent + name is rel,
 * and every prefix the walk opens is a prefix of rel ending at a "/". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs_path.h"

static void check_accepted(const struct fs_path *p)
{
        size_t len = strlen(p->rel);
        if (len == 0 || len >= sizeof(p->rel) || strlen(p->parent) >= sizeof(p->parent))
                abort();
        if (strcmp(p->shown + 1, strcmp(p->rel, ".") == 0 ? "" : p->rel) != 0 || p->shown[0] != '/')
                abort();
        if (strcmp(p->rel, ".") == 0) {
                if (p->name != NULL || p->components != 0 || !p->dir_only)
                        abort();
                return;
        }
        if (p->rel[0] == '/' || p->rel[len - 1] == '/' || strstr(p->rel, "//") != NULL)
                abort();
        unsigned components = 0;
        for (const char *c = p->rel; c != NULL;) {
                const char *slash = strchr(c, '/');
                size_t clen = slash ? (size_t)(slash - c) : strlen(c);
                if (clen == 0 || (clen == 1 && c[0] == '.') || clen > 255)
                        abort();
                components++;
                c = slash ? slash + 1 : NULL;
        }
        if (components != p->components || components > FS_PATH_MAX_COMPONENTS)
                abort();
        if (p->name != NULL) {
                if (p->name < p->rel || p->name >= p->rel + len || strcmp(p->name, "..") == 0)
                        abort();
                size_t plen = (size_t)(p->name - p->rel);
                if (plen == 0 ? strcmp(p->parent, ".") != 0
                              : (strncmp(p->parent, p->rel, plen - 1) != 0 || p->parent[plen - 1] != '\0'))
                        abort();
        }
        size_t previous = 0;
        for (unsigned n = 1; n <= components; n++) {
                size_t prefix = fs_path_prefix_len(p->rel, n);
                if (prefix <= previous || prefix > len || (p->rel[prefix] != '/' && p->rel[prefix] != '\0'))
                        abort();
                previous = prefix;
        }
        if (previous != len || fs_path_prefix_len(p->rel, components + 1) != 0)
                abort();
}

/* Relative paths from a sandbox's /workspace, and from the root (a volume's). */
static void check_parse(const uint8_t *data, size_t size, const char *base)
{
        static struct fs_path path;
        nsbox_error_t *err = NULL;
        int r = fs_path_parse((const char *)data, size, base, &path, &err);
        if (r < 0) {
                if (err == NULL || err->message == NULL || err->message[0] == '\0')
                        abort();
                nsbox_error_free(&err);
                return;
        }
        if (err != NULL || size == 0 || size > FS_PATH_MAX || memchr(data, '\0', size) != NULL)
                abort();
        check_accepted(&path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_parse(data, size, FS_PATH_WORKSPACE);
        check_parse(data, size, NULL);
        return 0;
}
