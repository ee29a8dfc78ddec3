/* SPDX-License-Identifier: Apache-2.0 */
/* Tar streams of nsbox cp (`nsbox cp ID:DIR -`, `tar c . | nsbox cp - ID:DIR`),
 * through libarchive: pax archives out, any tar libarchive reads in. libarchive (and the
 * libxml2, ICU and compressors it pulls in) is loaded when a tar stream is used, not linked:
 * loading it cost every other command of the CLI about 1.5 ms at start. */
#include "tar_stream.h"

#include <archive.h>
#include <archive_entry.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cleanup.h"
#include "cli.h"

#define TAR_READ_CHUNK (4u << 20)

#define LIBARCHIVE_SONAME "libarchive.so.13"
#define LIBARCHIVE_FUNCTIONS(X)               \
        X(archive_entry_filetype)             \
        X(archive_entry_free)                 \
        X(archive_entry_hardlink)             \
        X(archive_entry_new)                  \
        X(archive_entry_pathname)             \
        X(archive_entry_perm)                 \
        X(archive_entry_set_filetype)         \
        X(archive_entry_set_mtime)            \
        X(archive_entry_set_pathname)         \
        X(archive_entry_set_perm)             \
        X(archive_entry_set_size)             \
        X(archive_entry_set_symlink)          \
        X(archive_entry_size)                 \
        X(archive_entry_symlink)              \
        X(archive_error_string)               \
        X(archive_read_data)                  \
        X(archive_read_free)                  \
        X(archive_read_new)                   \
        X(archive_read_next_header)           \
        X(archive_read_open_fd)               \
        X(archive_read_support_filter_all)    \
        X(archive_read_support_format_gnutar) \
        X(archive_read_support_format_tar)    \
        X(archive_write_close)                \
        X(archive_write_data)                 \
        X(archive_write_finish_entry)         \
        X(archive_write_free)                 \
        X(archive_write_header)               \
        X(archive_write_new)                  \
        X(archive_write_open_fd)              \
        X(archive_write_set_format_pax_restricted)
static struct {
#define LIBARCHIVE_POINTER(name) __typeof__(name) *name;
        LIBARCHIVE_FUNCTIONS(LIBARCHIVE_POINTER)
#undef LIBARCHIVE_POINTER
} la;

/* libarchive's functions in la, loaded once: 0, or EXIT_NSBOX_FAILED with the reason said. */
static int libarchive_load(void)
{
        static bool loaded;
        if (loaded)
                return 0;
        void *lib = dlopen(LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL)
                return cli_fail("tar streams need %s (Debian: libarchive13): %s", LIBARCHIVE_SONAME,
                                dlerror());
#define LIBARCHIVE_RESOLVE(name)                                       \
        if ((la.name = (__typeof__(name) *)dlsym(lib, #name)) == NULL) \
                return cli_fail("%s has no %s", LIBARCHIVE_SONAME, #name);
        LIBARCHIVE_FUNCTIONS(LIBARCHIVE_RESOLVE)
#undef LIBARCHIVE_RESOLVE
        loaded = true;
        return 0;
}

void cp_warn_skipped(const char *what, const char *why)
{
        fflush(stdout);
        fprintf(stderr, "nsbox: skipped %s: %s\n", what, why);
}

/* ---- out: a tar stream ---- */

struct tar_sink {
        struct cp_sink base;
        struct archive *archive;
        char *root_name;
        time_t now;
};

static char *tar_sink_name(struct tar_sink *t, const char *rel)
{
        char *name = NULL;
        if (asprintf(&name, "%s%s%s", t->root_name, rel[0] ? "/" : "", rel) < 0)
                return NULL;
        return name;
}

static int tar_sink_header(struct tar_sink *t, const char *rel, mode_t type, mode_t mode,
                           unsigned long long size, const char *target)
{
        _cleanup_free_ char *name = tar_sink_name(t, rel);
        struct archive_entry *entry = la.archive_entry_new();
        if (name == NULL || entry == NULL) {
                la.archive_entry_free(entry);
                return cli_fail("out of memory");
        }
        la.archive_entry_set_pathname(entry, name);
        la.archive_entry_set_filetype(entry, type);
        la.archive_entry_set_perm(entry, mode & 07777);
        la.archive_entry_set_size(entry, (la_int64_t)size);
        la.archive_entry_set_mtime(entry, t->now, 0);
        if (target != NULL)
                la.archive_entry_set_symlink(entry, target);
        int r = la.archive_write_header(t->archive, entry);
        la.archive_entry_free(entry);
        if (r < ARCHIVE_WARN)
                return cli_fail("tar: %s: %s", name, la.archive_error_string(t->archive));
        return 0;
}

static int tar_sink_dir(struct cp_sink *sink, const char *rel, mode_t mode)
{
        return tar_sink_header((struct tar_sink *)sink, rel, AE_IFDIR, mode, 0, NULL);
}

static int tar_sink_file_begin(struct cp_sink *sink, const char *rel, mode_t mode, unsigned long long size)
{
        return tar_sink_header((struct tar_sink *)sink, rel, AE_IFREG, mode, size, NULL);
}

static int tar_sink_file_data(struct cp_sink *sink, const void *data, size_t len)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        while (len > 0) {
                la_ssize_t n = la.archive_write_data(t->archive, data, len);
                if (n <= 0)
                        return cli_fail("tar: %s", la.archive_error_string(t->archive));
                data = (const char *)data + n;
                len -= (size_t)n;
                sink->bytes += (unsigned long long)n;
        }
        return 0;
}

static int tar_sink_file_end(struct cp_sink *sink)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        /* A file that shrank while read is padded to its header's size. */
        if (la.archive_write_finish_entry(t->archive) < ARCHIVE_WARN)
                return cli_fail("tar: %s", la.archive_error_string(t->archive));
        return 0;
}

static int tar_sink_symlink(struct cp_sink *sink, const char *rel, const char *target)
{
        return tar_sink_header((struct tar_sink *)sink, rel, AE_IFLNK, 0777, 0, target);
}

static const struct cp_sink_ops tar_sink_ops = {
        .dir = tar_sink_dir,
        .file_begin = tar_sink_file_begin,
        .file_data = tar_sink_file_data,
        .file_end = tar_sink_file_end,
        .symlink = tar_sink_symlink,
};

struct cp_sink *tar_sink_new(int fd, const char *root_name)
{
        if (libarchive_load() != 0)
                return NULL;
        struct tar_sink *t = calloc(1, sizeof(*t));
        if (t == NULL)
                return NULL;
        t->base.ops = &tar_sink_ops;
        t->now = time(NULL);
        t->root_name = strdup(root_name);
        t->archive = la.archive_write_new();
        if (t->root_name == NULL || t->archive == NULL ||
            la.archive_write_set_format_pax_restricted(t->archive) != ARCHIVE_OK ||
            la.archive_write_open_fd(t->archive, fd) != ARCHIVE_OK) {
                tar_sink_free(&t->base);
                return NULL;
        }
        return &t->base;
}

int tar_sink_finish(struct cp_sink *sink)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        if (la.archive_write_close(t->archive) != ARCHIVE_OK)
                return cli_fail("tar: %s", la.archive_error_string(t->archive));
        return 0;
}

void tar_sink_free(struct cp_sink *sink)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        if (t == NULL)
                return;
        if (t->archive != NULL)
                la.archive_write_free(t->archive);
        free(t->root_name);
        free(t);
}

/* ---- in: a tar stream ---- */

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

static void archive_read_freep(struct archive **a)
{
        if (*a != NULL)
                la.archive_read_free(*a);
}

int tar_source_copy(int fd, struct cp_sink *sink)
{
        int loaded = libarchive_load();
        if (loaded != 0)
                return loaded;
        _cleanup_(archive_read_freep) struct archive *a = la.archive_read_new();
        if (a == NULL)
                return cli_fail("out of memory");
        la.archive_read_support_format_tar(a);
        la.archive_read_support_format_gnutar(a);
        la.archive_read_support_filter_all(a);
        if (la.archive_read_open_fd(a, fd, 64 << 10) != ARCHIVE_OK)
                return cli_fail("reading the tar stream: %s", la.archive_error_string(a));
        _cleanup_free_ char *buf = malloc(TAR_READ_CHUNK);
        if (buf == NULL)
                return cli_fail("out of memory");
        for (;;) {
                struct archive_entry *entry;
                int r = la.archive_read_next_header(a, &entry);
                if (r == ARCHIVE_EOF)
                        return 0;
                if (r < ARCHIVE_WARN)
                        return cli_fail("reading the tar stream: %s", la.archive_error_string(a));
                const char *name = la.archive_entry_pathname(entry);
                char rel[4096];
                if (name == NULL || !tar_clean_path(name, rel, sizeof(rel)))
                        return cli_fail("tar entry %s: a path with \"..\" (or too long) is not extracted",
                                        name ? name : "(none)");
                mode_t mode = la.archive_entry_perm(entry) & 07777;
                if (la.archive_entry_hardlink(entry) != NULL) {
                        cp_warn_skipped(name,
                                        "a hard link (only files, directories and symlinks are copied)");
                        continue;
                }
                switch (la.archive_entry_filetype(entry)) {
                case AE_IFDIR:
                        r = sink->ops->dir(sink, rel, mode);
                        break;
                case AE_IFLNK:
                        r = rel[0] ? sink->ops->symlink(sink, rel, la.archive_entry_symlink(entry))
                                   : cli_fail("tar entry %s: the root cannot be a symlink", name);
                        break;
                case AE_IFREG:
                        if (rel[0] == '\0') {
                                r = cli_fail("tar entry %s: a file with no name", name);
                                break;
                        }
                        r = sink->ops->file_begin(sink, rel, mode,
                                                  (unsigned long long)la.archive_entry_size(entry));
                        while (r == 0) {
                                la_ssize_t n = la.archive_read_data(a, buf, TAR_READ_CHUNK);
                                if (n < 0) {
                                        r = cli_fail("reading the tar stream: %s",
                                                     la.archive_error_string(a));
                                        break;
                                }
                                if (n == 0)
                                        break;
                                r = sink->ops->file_data(sink, buf, (size_t)n);
                        }
                        if (r == 0)
                                r = sink->ops->file_end(sink);
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
