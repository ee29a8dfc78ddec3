/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-file replacement (of JSON files, mostly): temporary file, rename, cleanup. */
#include "json_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "io.h"
#include "jsonrpc.h"

int file_replace(const char *path, const void *data, size_t len, bool durable, nsbox_error_t **err)
{
        char tmp[4096];
        const char *slash = strrchr(path, '/');
        int dir_len = slash ? (int)(slash - path + 1) : 0;
        if (snprintf(tmp, sizeof(tmp), "%.*s.%s.tmp", dir_len, path, path + dir_len) >= (int)sizeof(tmp))
                return nsbox_error(err, ENAMETOOLONG, "%s", path);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return nsbox_error(err, errno, "create %s", tmp);
        int r = io_write_all(fd, data, len);
        const char *doing = "write";
        if (r == 0 && durable && fsync(fd) < 0) {
                r = -errno;
                doing = "sync";
        }
        if (r == 0 && rename(tmp, path) < 0) {
                r = -errno;
                doing = "rename";
        }
        if (r < 0) {
                unlink(tmp);
                return nsbox_error(err, -r, "%s %s", doing, tmp);
        }
        /* The rename is durable once the directory that holds it is. */
        if (durable) {
                char dir[4096];
                snprintf(dir, sizeof(dir), "%.*s", dir_len > 1 ? dir_len - 1 : dir_len, dir_len ? path : ".");
                _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0 || fsync(dfd) < 0)
                        return nsbox_error(err, errno, "sync %s", dir);
        }
        return 0;
}

int json_file_replace(const char *path, const json_t *value, size_t flags, bool durable, nsbox_error_t **err)
{
        size_t len;
        _cleanup_free_ char *text = json_text(value, flags, &len);
        if (text == NULL)
                return nsbox_error(err, ENOMEM, "serialize %s", path);
        return file_replace(path, text, len, durable, err);
}
