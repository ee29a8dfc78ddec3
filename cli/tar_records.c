/* SPDX-License-Identifier: Apache-2.0 */
/* The record stream between nsbox cp and nsbox-tar: write and read one record. */
#include "tar_records.h"

#include <errno.h>
#include <string.h>

#include "io.h"

int tar_record_write(int fd, enum tar_record_kind kind, mode_t mode, uint64_t size, const char *path,
                     const char *target, const void *data)
{
        size_t path_len = path ? strlen(path) : 0, target_len = target ? strlen(target) : 0;
        if (path_len > TAR_RECORD_PATH_MAX || target_len > TAR_RECORD_PATH_MAX ||
            (kind == TAR_RECORD_DATA && size > TAR_RECORD_DATA_MAX))
                return -ENAMETOOLONG;
        struct tar_record rec = {
                .kind = kind,
                .mode = mode,
                .size = size,
                .path_len = (uint32_t)path_len,
                .target_len = (uint32_t)target_len,
        };
        int r = io_write_all(fd, &rec, sizeof(rec));
        if (r == 0 && path_len > 0)
                r = io_write_all(fd, path, path_len);
        if (r == 0 && target_len > 0)
                r = io_write_all(fd, target, target_len);
        if (r == 0 && kind == TAR_RECORD_DATA && size > 0)
                r = io_write_all(fd, data, (size_t)size);
        return r;
}

static int read_part(int fd, void *buf, size_t len)
{
        ssize_t n = io_read_full(fd, buf, len);
        if (n < 0)
                return (int)n;
        return (size_t)n == len ? 0 : -EPROTO;
}

int tar_record_read(int fd, struct tar_record *rec, char *path, char *target, void *data, bool *in_file)
{
        ssize_t n = io_read_full(fd, rec, sizeof(*rec));
        if (n == 0)
                return 1;
        if (n < 0)
                return (int)n;
        if ((size_t)n != sizeof(*rec) || rec->kind < TAR_RECORD_DIR || rec->kind > TAR_RECORD_END ||
            rec->path_len > TAR_RECORD_PATH_MAX || rec->target_len > TAR_RECORD_PATH_MAX ||
            (rec->kind == TAR_RECORD_DATA && rec->size > TAR_RECORD_DATA_MAX) ||
            (rec->kind == TAR_RECORD_DATA || rec->kind == TAR_RECORD_FILE_END) != *in_file)
                return -EPROTO;
        int r = read_part(fd, path, rec->path_len);
        if (r == 0)
                r = read_part(fd, target, rec->target_len);
        if (r == 0 && rec->kind == TAR_RECORD_DATA)
                r = read_part(fd, data, (size_t)rec->size);
        if (r != 0)
                return r;
        path[rec->path_len] = '\0';
        target[rec->target_len] = '\0';
        if (rec->kind == TAR_RECORD_FILE || rec->kind == TAR_RECORD_FILE_END)
                *in_file = rec->kind == TAR_RECORD_FILE;
        return 0;
}
