/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-tar: the tar helper of nsbox cp, the one part of the CLI that needs
 * libarchive (and the libxml2, ICU and compressors it loads). nsbox is a static
 * binary, where a dlopen of libarchive is unsafe; it runs this dynamically
 * linked helper for a tar stream and talks to it in records (tar_records.h):
 *   nsbox-tar create ROOT   records on stdin, a pax tar stream on stdout
 *   nsbox-tar extract       a tar stream (plain or compressed) on stdin, records on stdout
 * Errors are "nsbox: ..." on stderr and exit status 125, as the CLI's own. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "failure.h"
#include "tar_records.h"

#define EXIT_TAR_FAILED 125

static int tar_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int tar_fail(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        failure_vprint(fmt, ap);
        va_end(ap);
        return EXIT_TAR_FAILED;
}

static void archive_write_freep(struct archive **a)
{
        if (*a != NULL)
                archive_write_free(*a);
}

static void archive_read_freep(struct archive **a)
{
        if (*a != NULL)
                archive_read_free(*a);
}

/* ---- create: records in, tar out ---- */

static int create_header(struct archive *a, const char *root, const char *rel, mode_t type, mode_t mode,
                         unsigned long long size, const char *target, time_t now)
{
        _cleanup_free_ char *name = NULL;
        if (asprintf(&name, "%s%s%s", root, rel[0] ? "/" : "", rel) < 0)
                return tar_fail("out of memory");
        struct archive_entry *entry = archive_entry_new();
        if (entry == NULL)
                return tar_fail("out of memory");
        archive_entry_set_pathname(entry, name);
        archive_entry_set_filetype(entry, type);
        archive_entry_set_perm(entry, mode & 07777);
        archive_entry_set_size(entry, (la_int64_t)size);
        archive_entry_set_mtime(entry, now, 0);
        if (target != NULL)
                archive_entry_set_symlink(entry, target);
        int r = archive_write_header(a, entry);
        archive_entry_free(entry);
        if (r < ARCHIVE_WARN)
                return tar_fail("tar: %s: %s", name, archive_error_string(a));
        return 0;
}

static int tar_create(const char *root)
{
        _cleanup_(archive_write_freep) struct archive *a = archive_write_new();
        _cleanup_free_ char *data = malloc(TAR_RECORD_DATA_MAX);
        if (a == NULL || data == NULL)
                return tar_fail("out of memory");
        if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
            archive_write_open_fd(a, STDOUT_FILENO) != ARCHIVE_OK)
                return tar_fail("cannot start a tar stream on standard output: %s", archive_error_string(a));
        time_t now = time(NULL);
        static char path[TAR_RECORD_PATH_MAX + 1], target[TAR_RECORD_PATH_MAX + 1];
        bool in_file = false;
        for (;;) {
                struct tar_record rec;
                int r = tar_record_read(STDIN_FILENO, &rec, path, target, data, &in_file);
                if (r == 1)
                        /* nsbox ended the stream before its end: it has said why. */
                        return EXIT_TAR_FAILED;
                if (r < 0)
                        return tar_fail("tar: reading nsbox's entries: %s", strerror(-r));
                switch (rec.kind) {
                case TAR_RECORD_DIR:
                        r = create_header(a, root, path, AE_IFDIR, rec.mode, 0, NULL, now);
                        break;
                case TAR_RECORD_SYMLINK:
                        r = create_header(a, root, path, AE_IFLNK, 0777, 0, target, now);
                        break;
                case TAR_RECORD_FILE:
                        r = create_header(a, root, path, AE_IFREG, rec.mode, rec.size, NULL, now);
                        break;
                case TAR_RECORD_DATA:
                        for (size_t off = 0; r == 0 && off < rec.size;) {
                                la_ssize_t n = archive_write_data(a, data + off, (size_t)rec.size - off);
                                if (n <= 0)
                                        r = tar_fail("tar: %s", archive_error_string(a));
                                else
                                        off += (size_t)n;
                        }
                        break;
                case TAR_RECORD_FILE_END:
                        /* A file that shrank while read is padded to its header's size. */
                        if (archive_write_finish_entry(a) < ARCHIVE_WARN)
                                r = tar_fail("tar: %s", archive_error_string(a));
                        break;
                case TAR_RECORD_END:
                        if (archive_write_close(a) != ARCHIVE_OK)
                                return tar_fail("tar: %s", archive_error_string(a));
                        return 0;
                }
                if (r != 0)
                        return r;
        }
}

/* ---- extract: tar in, records out ---- */

/* The entry's path relative to the root: "./a//b/" → "a/b", "/a" → "a";
 * false for a ".." component. */
static bool tar_clean_path(const char *in, char *out, size_t size)
{
        size_t n = 0;
        for (const char *p = in; *p;) {
                while (*p == '/')
                        p++;
                const char *end = strchrnul(p, '/');
                size_t len = (size_t)(end - p);
                if (len == 2 && p[0] == '.' && p[1] == '.')
                        return false;
                if (len > 0 && !(len == 1 && p[0] == '.')) {
                        if (n + len + 2 > size)
                                return false;
                        if (n > 0)
                                out[n++] = '/';
                        memcpy(out + n, p, len);
                        n += len;
                }
                p = end;
        }
        out[n] = '\0';
        return true;
}

/* A record to nsbox: it has gone (EPIPE) when its own copy failed, and said why. */
static int send_record(enum tar_record_kind kind, mode_t mode, uint64_t size, const char *path,
                       const char *target, const void *data)
{
        int r = tar_record_write(STDOUT_FILENO, kind, mode, size, path, target, data);
        if (r == -EPIPE)
                return EXIT_TAR_FAILED;
        if (r < 0)
                return tar_fail("tar: %s: %s", path ? path : "", strerror(-r));
        return 0;
}

static int extract_file(struct archive *a, struct archive_entry *entry, const char *rel, char *buf)
{
        const char *name = archive_entry_pathname(entry);
        if (rel[0] == '\0')
                return tar_fail("tar entry %s: a file with no name", name);
        int r = send_record(TAR_RECORD_FILE, archive_entry_perm(entry) & 07777,
                            (uint64_t)archive_entry_size(entry), rel, NULL, NULL);
        while (r == 0) {
                la_ssize_t n = archive_read_data(a, buf, TAR_RECORD_DATA_MAX);
                if (n < 0)
                        return tar_fail("reading the tar stream: %s", archive_error_string(a));
                if (n == 0)
                        break;
                r = send_record(TAR_RECORD_DATA, 0, (uint64_t)n, NULL, NULL, buf);
        }
        return r != 0 ? r : send_record(TAR_RECORD_FILE_END, 0, 0, NULL, NULL, NULL);
}

static int tar_extract(void)
{
        _cleanup_(archive_read_freep) struct archive *a = archive_read_new();
        _cleanup_free_ char *buf = malloc(TAR_RECORD_DATA_MAX);
        if (a == NULL || buf == NULL)
                return tar_fail("out of memory");
        archive_read_support_format_tar(a);
        archive_read_support_format_gnutar(a);
        archive_read_support_filter_all(a);
        if (archive_read_open_fd(a, STDIN_FILENO, 64 << 10) != ARCHIVE_OK)
                return tar_fail("reading the tar stream: %s", archive_error_string(a));
        for (;;) {
                struct archive_entry *entry;
                int r = archive_read_next_header(a, &entry);
                if (r == ARCHIVE_EOF)
                        return send_record(TAR_RECORD_END, 0, 0, NULL, NULL, NULL);
                if (r < ARCHIVE_WARN)
                        return tar_fail("reading the tar stream: %s", archive_error_string(a));
                const char *name = archive_entry_pathname(entry);
                char rel[TAR_RECORD_PATH_MAX + 1];
                if (name == NULL || !tar_clean_path(name, rel, sizeof(rel)))
                        return tar_fail("tar entry %s: a path with \"..\" (or too long) is not extracted",
                                        name ? name : "(none)");
                mode_t mode = archive_entry_perm(entry) & 07777;
                if (archive_entry_hardlink(entry) != NULL) {
                        cp_warn_skipped(name,
                                        "a hard link (only files, directories and symlinks are copied)");
                        continue;
                }
                const char *target = archive_entry_symlink(entry);
                switch (archive_entry_filetype(entry)) {
                case AE_IFDIR:
                        r = send_record(TAR_RECORD_DIR, mode, 0, rel, NULL, NULL);
                        break;
                case AE_IFLNK:
                        if (rel[0] == '\0')
                                r = tar_fail("tar entry %s: the root cannot be a symlink", name);
                        else if (target == NULL || strlen(target) > TAR_RECORD_PATH_MAX)
                                r = tar_fail("tar entry %s: a symlink with no target (or too long)", name);
                        else
                                r = send_record(TAR_RECORD_SYMLINK, 0777, 0, rel, target, NULL);
                        break;
                case AE_IFREG:
                        r = extract_file(a, entry, rel, buf);
                        break;
                default:
                        cp_warn_skipped(
                            name, "not a file, directory or symlink (FIFOs and devices are not copied)");
                        r = 0;
                }
                if (r != 0)
                        return r;
        }
}

int main(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], "create") == 0)
                return tar_create(argv[2]);
        if (argc == 2 && strcmp(argv[1], "extract") == 0)
                return tar_extract();
        fprintf(stderr, "usage: nsbox-tar create ROOT | nsbox-tar extract (nsbox cp runs it)\n");
        return 2;
}
