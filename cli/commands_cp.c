/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox cp: copy files, directories and symlinks out of or into a sandbox,
 * as docker cp does, through nsboxd's own file API.
 *
 * Data moves through fs.read / fs.write in base64 (nsboxd resolves every
 * path inside the sandbox's root, as host root, whatever the sandbox user
 * may read), 4 MiB per call: fs.write appending after the first, fs.read
 * from an offset.
 *
 * No half copy is left behind: a new file or tree is written under a
 * temporary name (.nsbox-cp-<16 hex digits>) beside its target, renamed into place
 * at the end and removed on failure; on the host with rename(2), in the
 * sandbox with fs.rename. Symlinks and directory modes are made on the
 * temporary tree by fs.symlink and fs.chmod before the rename, so cp runs
 * no process in the sandbox. Into an existing directory (a merge), each
 * file of more than one piece is written under .nsbox-upload-* beside it
 * and renamed over it once whole: the file it replaces stays whole until
 * then. Everything goes on one connection to nsboxd, which removes the
 * temporary files that connection wrote if it closes with them still
 * there: a cp killed mid-way (SIGKILL, where it cannot clean up) leaves
 * nothing either. FIFOs, sockets and devices are skipped with a warning.
 *
 * `-` as the source or destination is a tar stream for a directory (docker
 * cp's semantics: `nsbox cp ID:DIR - > out.tar`, `tar c . | nsbox cp - ID:DIR`,
 * extracted into the existing directory), and the raw bytes for a file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <libgen.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "relpath.h"
#include "tar_stream.h"
#include "textenc.h"
#include "io.h"

#define CP_CHUNK         (4u << 20) /* per fs.write and fs.read, and per read of a host file */
#define CP_LIST_MAX      100000     /* nsboxd's fs.list max_entries */
#define CP_DEFAULT_DMODE 0755

struct cp {
        const struct cli *cli;
        struct client *c;
        const char *sandbox_id;
        /* A copy into a sandbox: SIGINT, SIGTERM and SIGHUP are read here
         * between calls, so that an interrupted copy removes what it wrote
         * before it exits; -1 otherwise. */
        int signal_fd;
};

/* 0, or 128 + the signal that interrupts the copy (said once). Checked
 * between calls, never in one: a call cut short would go on in nsboxd
 * after the removal of what it writes. */
static int cp_interrupted(struct cp *cp)
{
        int sig = cli_caught_signal(cp->signal_fd);
        if (sig == 0)
                return 0;
        cli_fail("interrupted by %s: nothing half-copied is left behind", strsignal(sig));
        return 128 + sig;
}

/* ---- calls ---- */

/* The sandbox itself is not there (not_found without the errno of a path):
 * its own message ("no sandbox ID"), not a path in it, is what to say. */
static bool sandbox_missing(const json_t *error, const nsbox_error_t *err)
{
        const json_t *data = json_object_get(error, "data");
        const char *kind = json_string_value(json_object_get(data, "kind"));
        return err != NULL && kind != NULL && strcmp(kind, "not_found") == 0 &&
               json_object_get(data, "errno") == NULL;
}

/* A call whose failure is printed as "WHAT: message" (not found as "No such
 * file or directory", the words of cp(1)). The result, or NULL with
 * *exit_code set; *kind_out (if given) gets the error's kind. */
static json_t *cp_call(struct cp *cp, const char *method, json_t *params, const char *what, int *exit_code,
                       char *kind_out, size_t kind_size)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        json_t *result = NULL;
        json_object_set_new(params, "sandbox_id", json_string(cp->sandbox_id));
        if (client_call(cp->c, method, params, NULL, NULL, &result, &error, &err) == 0)
                return result;
        const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
        if (kind_out != NULL)
                snprintf(kind_out, kind_size, "%s", kind ? kind : "");
        if (sandbox_missing(error, err))
                *exit_code = cli_fail("%s", err->message);
        else if (kind != NULL && strcmp(kind, "not_found") == 0 &&
                 strstr(err->message, "no such file") != NULL)
                *exit_code = cli_fail("%s in the sandbox: No such file or directory", what);
        else if (err != NULL && strncmp(err->message, what, strlen(what)) == 0)
                *exit_code = cli_fail("%s (in the sandbox)", err->message);
        else
                *exit_code = cli_fail("%s in the sandbox: %s", what, err ? err->message : "failed");
        return NULL;
}

/* fs.stat of path: the result, NULL with *missing when there is nothing
 * there, or NULL with *exit_code after printing why. */
static json_t *sandbox_stat(struct cp *cp, const char *path, bool *missing, int *exit_code)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s}", "sandbox_id", cp->sandbox_id, "path", path);
        json_t *result = NULL;
        *missing = false;
        if (client_call(cp->c, "fs.stat", params, NULL, NULL, &result, &error, &err) == 0)
                return result;
        const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
        if (sandbox_missing(error, err)) {
                *exit_code = cli_fail("%s", err->message);
                return NULL;
        }
        if (kind != NULL && strcmp(kind, "not_found") == 0) {
                *missing = true;
                return NULL;
        }
        if (err != NULL && strncmp(err->message, path, strlen(path)) == 0)
                *exit_code = cli_fail("%s (in the sandbox)", err->message);
        else
                *exit_code = cli_fail("%s in the sandbox: %s", path, err ? err->message : "failed");
        return NULL;
}

static char *path_join(const char *dir, const char *name)
{
        char *out = NULL;
        size_t n = strlen(dir);
        if (name[0] == '\0' || dir[0] == '\0')
                return strdup(name[0] ? name : dir);
        if (asprintf(&out, "%s%s%s", dir, n > 0 && dir[n - 1] == '/' ? "" : "/", name) < 0)
                return NULL;
        return out;
}

/* The last component of a path ("a/b/" → "b", "/" → "/"). */
static char *path_base(const char *path)
{
        _cleanup_free_ char *copy = strdup(path);
        if (copy == NULL)
                return NULL;
        for (size_t n = strlen(copy); n > 1 && copy[n - 1] == '/'; n--)
                copy[n - 1] = '\0';
        return strdup(basename(copy));
}

static char *path_dir(const char *path)
{
        _cleanup_free_ char *copy = strdup(path);
        if (copy == NULL)
                return NULL;
        for (size_t n = strlen(copy); n > 1 && copy[n - 1] == '/'; n--)
                copy[n - 1] = '\0';
        return strdup(dirname(copy));
}

static bool path_ends_with_dot(const char *path)
{
        size_t n = strlen(path);
        return (n == 1 && path[0] == '.') || (n >= 2 && strcmp(path + n - 2, "/.") == 0);
}

static int temp_name(char *out, size_t size)
{
        int r = staging_name(STAGING_CP_PREFIX, out, size);
        return r < 0 ? cli_fail("a temporary name: %s", strerror(-r)) : 0;
}

/* ---- sink: a sandbox tree, through fs.* ---- */

struct sandbox_sink {
        struct cp_sink base;
        struct cp *cp;
        char *root;       /* the sandbox path of rel "" */
        char *shown_root; /* what messages call rel "": the target, not its temporary name */
        char *file;       /* the file being written */
        char *shown_file;
        mode_t file_mode;
        bool file_started; /* a first chunk went: the rest appends */
        /* Files go straight into an existing directory (a merge), not into
         * a temporary tree: one written in pieces goes to `staged` beside
         * it, renamed over it once whole. */
        bool in_place;
        char *staged;
        char *buf;
        size_t buf_len;
        json_t *links; /* "target", "path" pairs: ln -s, at the end */
        json_t *modes; /* "mode", "path" pairs: chmod of directories, after that */
};

static char *sandbox_sink_path(struct sandbox_sink *s, const char *rel)
{
        char *path = path_join(s->root, rel);
        if (path == NULL)
                cli_fail("out of memory");
        return path;
}

static void sandbox_remove(struct cp *cp, const char *path, bool recursive)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:b}", "sandbox_id", cp->sandbox_id, "path", path, "recursive", recursive);
        client_call(cp->c, "fs.remove", params, NULL, NULL, &result, NULL, &err);
}

/* The file written in pieces is given up: its temporary file goes (the
 * file it was to replace is untouched); in a temporary tree, the part
 * written goes. */
static void sandbox_sink_abandon(struct sandbox_sink *s)
{
        if (s->staged != NULL)
                sandbox_remove(s->cp, s->staged, false);
        else if (s->file_started)
                sandbox_remove(s->cp, s->file, false);
        free(s->staged);
        s->staged = NULL;
}

/* Write the buffer: the whole file when it is the first and the last piece
 * (nsboxd replaces a file whole), else a piece of it. */
static int sandbox_sink_flush(struct sandbox_sink *s, bool last)
{
        int stop = cp_interrupted(s->cp);
        if (stop != 0)
                return stop;
        if (!s->file_started && !last && s->in_place) {
                char staged[4096];
                int r = staging_path(s->file, staged, sizeof(staged));
                if (r < 0)
                        return cli_fail("%s: a temporary name beside it: %s", s->shown_file, strerror(-r));
                if ((s->staged = strdup(staged)) == NULL)
                        return cli_fail("out of memory");
        }
        size_t b64_len;
        _cleanup_free_ char *b64 = base64_encode(s->buf, s->buf_len, &b64_len);
        if (b64 == NULL)
                return cli_fail("out of memory");
        _cleanup_json_ json_t *params = json_pack(
            "{s:s, s:s%, s:s, s:b, s:i}", "path", s->staged ? s->staged : s->file, "content", b64, b64_len,
            "encoding", "base64", "append", s->file_started, "mode", (int)(s->file_mode & 0777));
        int code = 0;
        _cleanup_json_ json_t *result = cp_call(s->cp, "fs.write", params, s->shown_file, &code, NULL, 0);
        if (result == NULL) {
                /* No half file: nsboxd undid this chunk, the ones before are ours to remove. */
                sandbox_sink_abandon(s);
                return code;
        }
        s->base.bytes += s->buf_len;
        s->buf_len = 0;
        s->file_started = true;
        if (!last || s->staged == NULL)
                return 0;
        _cleanup_json_ json_t *move =
            json_pack("{s:s, s:s, s:b}", "from", s->staged, "to", s->file, "overwrite", true);
        _cleanup_json_ json_t *moved = cp_call(s->cp, "fs.rename", move, s->shown_file, &code, NULL, 0);
        if (moved == NULL) {
                sandbox_sink_abandon(s);
                return code;
        }
        free(s->staged);
        s->staged = NULL;
        return 0;
}

static int sandbox_sink_dir(struct cp_sink *sink, const char *rel, mode_t mode)
{
        struct sandbox_sink *s = (struct sandbox_sink *)sink;
        int stop = cp_interrupted(s->cp);
        if (stop != 0)
                return stop;
        _cleanup_free_ char *path = sandbox_sink_path(s, rel);
        if (path == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:b}", "path", path, "parents", true);
        int code = 0;
        _cleanup_json_ json_t *result = cp_call(s->cp, "fs.mkdir", params, path, &code, NULL, 0);
        if (result == NULL)
                return code;
        if ((mode & 07777) != CP_DEFAULT_DMODE) {
                json_array_append_new(s->modes, json_integer(mode & 0777));
                json_array_append_new(s->modes, json_string(path));
        }
        return 0;
}

static int sandbox_sink_file_begin(struct cp_sink *sink, const char *rel, mode_t mode,
                                   unsigned long long size)
{
        struct sandbox_sink *s = (struct sandbox_sink *)sink;
        free(s->file);
        if ((s->file = sandbox_sink_path(s, rel)) == NULL)
                return EXIT_NSBOX_FAILED;
        free(s->shown_file);
        if ((s->shown_file = path_join(s->shown_root ? s->shown_root : s->root, rel)) == NULL)
                return cli_fail("out of memory");
        s->file_mode = mode;
        s->file_started = false;
        s->buf_len = 0;
        return 0;
}

static int sandbox_sink_file_data(struct cp_sink *sink, const void *data, size_t len)
{
        struct sandbox_sink *s = (struct sandbox_sink *)sink;
        while (len > 0) {
                size_t n = CP_CHUNK - s->buf_len < len ? CP_CHUNK - s->buf_len : len;
                memcpy(s->buf + s->buf_len, data, n);
                s->buf_len += n;
                data = (const char *)data + n;
                len -= n;
                if (s->buf_len == CP_CHUNK) {
                        int r = sandbox_sink_flush(s, false);
                        if (r != 0)
                                return r;
                }
        }
        return 0;
}

static int sandbox_sink_file_end(struct cp_sink *sink)
{
        struct sandbox_sink *s = (struct sandbox_sink *)sink;
        if (s->buf_len > 0 || !s->file_started || s->staged != NULL)
                return sandbox_sink_flush(s, true);
        return 0;
}

static int sandbox_sink_symlink(struct cp_sink *sink, const char *rel, const char *target)
{
        struct sandbox_sink *s = (struct sandbox_sink *)sink;
        _cleanup_free_ char *path = sandbox_sink_path(s, rel);
        if (path == NULL)
                return EXIT_NSBOX_FAILED;
        json_array_append_new(s->links, json_string(target));
        json_array_append_new(s->links, json_string(path));
        return 0;
}

static const struct cp_sink_ops sandbox_sink_ops = {
        .dir = sandbox_sink_dir,
        .file_begin = sandbox_sink_file_begin,
        .file_data = sandbox_sink_file_data,
        .file_end = sandbox_sink_file_end,
        .symlink = sandbox_sink_symlink,
};

static int sandbox_sink_init(struct sandbox_sink *s, struct cp *cp, const char *root)
{
        *s = (struct sandbox_sink){ .base.ops = &sandbox_sink_ops, .cp = cp };
        s->root = strdup(root);
        s->buf = malloc(CP_CHUNK);
        s->links = json_array();
        s->modes = json_array();
        if (s->root == NULL || s->buf == NULL || s->links == NULL || s->modes == NULL)
                return cli_fail("out of memory");
        return 0;
}

static void sandbox_sink_done(struct sandbox_sink *s)
{
        free(s->root);
        free(s->shown_root);
        free(s->file);
        free(s->shown_file);
        free(s->staged);
        free(s->buf);
        json_decref(s->links);
        json_decref(s->modes);
}

/* Symlinks, then the modes of directories (a read-only one last), by
 * nsboxd's fs.symlink and fs.chmod: no process runs in the sandbox. Links
 * come last so that no file of the copy is written through one. */
static int sandbox_sink_finish(struct sandbox_sink *s)
{
        int code = 0;
        for (size_t i = 0; i + 1 < json_array_size(s->links); i += 2) {
                json_t *path = json_array_get(s->links, i + 1);
                _cleanup_json_ json_t *params =
                    json_pack("{s:O, s:O, s:b}", "target", json_array_get(s->links, i), "path", path,
                              "overwrite", true);
                _cleanup_json_ json_t *result =
                    cp_call(s->cp, "fs.symlink", params, json_string_value(path), &code, NULL, 0);
                if (result == NULL)
                        return code;
        }
        for (size_t i = 0; i + 1 < json_array_size(s->modes); i += 2) {
                json_t *path = json_array_get(s->modes, i + 1);
                _cleanup_json_ json_t *params =
                    json_pack("{s:O, s:O}", "mode", json_array_get(s->modes, i), "path", path);
                _cleanup_json_ json_t *result =
                    cp_call(s->cp, "fs.chmod", params, json_string_value(path), &code, NULL, 0);
                if (result == NULL)
                        return code;
        }
        return 0;
}

/* ---- sink: a host tree ---- */

struct host_sink {
        struct cp_sink base;
        int dirfd;
        const char *top; /* the name of rel "" in dirfd; NULL: dirfd is rel "" */
        int fd;          /* the file being written */
        mode_t file_mode;
        char *file;
        json_t *dirs; /* [rel, mode]: modes set at the end, deepest first */
};

static int host_openat2(int dirfd, const char *path, int flags)
{
        struct open_how how = { .flags = flags | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        return fd < 0 ? -errno : (int)fd;
}

/* The directory holding rel's entry, opened beneath the sink's root without
 * following a symlink, and the entry's name in it. */
static int host_sink_parent(struct host_sink *h, const char *rel, char **name_out)
{
        _cleanup_free_ char *path = NULL;
        if (h->top != NULL)
                path = rel[0] ? path_join(h->top, rel) : strdup(h->top);
        else
                path = strdup(rel[0] ? rel : ".");
        if (path == NULL)
                return -ENOMEM;
        char *slash = strrchr(path, '/');
        int fd;
        if (slash == NULL) {
                fd = host_openat2(h->dirfd, ".", O_PATH | O_DIRECTORY);
                *name_out = strdup(path);
        } else {
                *slash = '\0';
                fd = host_openat2(h->dirfd, path, O_PATH | O_DIRECTORY);
                *name_out = strdup(slash + 1);
        }
        if (*name_out == NULL) {
                if (fd >= 0)
                        close(fd);
                return -ENOMEM;
        }
        return fd;
}

static int host_sink_dir(struct cp_sink *sink, const char *rel, mode_t mode)
{
        struct host_sink *h = (struct host_sink *)sink;
        if (!(h->top == NULL && rel[0] == '\0')) {
                _cleanup_free_ char *name = NULL;
                _cleanup_close_ int parent = host_sink_parent(h, rel, &name);
                if (parent < 0)
                        return cli_fail("open the directory of %s: %s", rel, strerror(-parent));
                struct stat st;
                if (mkdirat(parent, name, 0700) < 0 &&
                    !(errno == EEXIST && fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISDIR(st.st_mode)))
                        return cli_fail("mkdir %s: %s", rel[0] ? rel : h->top, strerror(errno));
        }
        json_array_append_new(h->dirs, json_pack("[s, i]", rel, (int)(mode & 0777)));
        return 0;
}

static int host_sink_file_begin(struct cp_sink *sink, const char *rel, mode_t mode, unsigned long long size)
{
        struct host_sink *h = (struct host_sink *)sink;
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int parent = host_sink_parent(h, rel, &name);
        if (parent < 0)
                return cli_fail("open the directory of %s: %s", rel, strerror(-parent));
        for (int attempt = 0;; attempt++) {
                h->fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (h->fd >= 0 || errno != EEXIST || attempt > 0)
                        break;
                /* Into an existing directory: the copy replaces what is there. */
                if (unlinkat(parent, name, 0) < 0)
                        break;
        }
        if (h->fd < 0)
                return cli_fail("create %s: %s", rel[0] ? rel : h->top, strerror(errno));
        free(h->file);
        h->file = strdup(rel[0] ? rel : (h->top ? h->top : "."));
        h->file_mode = mode & 0777;
        return 0;
}

static int host_sink_file_data(struct cp_sink *sink, const void *data, size_t len)
{
        struct host_sink *h = (struct host_sink *)sink;
        int r = io_write_all(h->fd, data, len);
        if (r < 0)
                return cli_fail("write %s: %s", h->file, strerror(-r));
        sink->bytes += len;
        return 0;
}

static int host_sink_file_end(struct cp_sink *sink)
{
        struct host_sink *h = (struct host_sink *)sink;
        int fd = steal_fd(&h->fd);
        if (fchmod(fd, h->file_mode) < 0) {
                int e = errno;
                close(fd);
                return cli_fail("chmod %s: %s", h->file, strerror(e));
        }
        if (close(fd) < 0)
                return cli_fail("write %s: %s", h->file, strerror(errno));
        return 0;
}

static int host_sink_symlink(struct cp_sink *sink, const char *rel, const char *target)
{
        struct host_sink *h = (struct host_sink *)sink;
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int parent = host_sink_parent(h, rel, &name);
        if (parent < 0)
                return cli_fail("open the directory of %s: %s", rel, strerror(-parent));
        int r = symlinkat(target, parent, name);
        if (r < 0 && errno == EEXIST && unlinkat(parent, name, 0) == 0)
                r = symlinkat(target, parent, name);
        if (r < 0)
                return cli_fail("symlink %s: %s", rel[0] ? rel : h->top, strerror(errno));
        return 0;
}

static const struct cp_sink_ops host_sink_ops = {
        .dir = host_sink_dir,
        .file_begin = host_sink_file_begin,
        .file_data = host_sink_file_data,
        .file_end = host_sink_file_end,
        .symlink = host_sink_symlink,
};

/* Directory modes last, deepest first: a read-only directory was writable
 * while the copy filled it. */
static int host_sink_finish(struct host_sink *h)
{
        for (size_t i = json_array_size(h->dirs); i-- > 0;) {
                json_t *d = json_array_get(h->dirs, i);
                const char *rel = json_string_value(json_array_get(d, 0));
                _cleanup_free_ char *name = NULL;
                _cleanup_close_ int parent = host_sink_parent(h, rel, &name);
                if (parent < 0)
                        return cli_fail("open the directory of %s: %s", rel, strerror(-parent));
                _cleanup_close_ int fd =
                    openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fchmod(fd, (mode_t)json_integer_value(json_array_get(d, 1))) < 0)
                        return cli_fail("chmod %s: %s", rel[0] ? rel : name, strerror(errno));
        }
        return 0;
}

/* The bytes of a sandbox file, CP_CHUNK at a time from offset 0, to
 * chunk(ctx, data, len): `size` of them when `exact` (a file that is not
 * that long any more is an error; one that grew is read to `size`), else
 * to its end. */
static int sandbox_read(struct cp *cp, const char *path, unsigned long long size, bool exact,
                        int (*chunk)(void *ctx, const char *data, size_t len), void *ctx)
{
        unsigned long long offset = 0;
        for (;;) {
                unsigned long long want = CP_CHUNK;
                if (exact && size - offset < want)
                        want = size - offset;
                if (exact && want == 0)
                        return 0;
                _cleanup_json_ json_t *params =
                    json_pack("{s:s, s:s, s:I, s:I}", "path", path, "encoding", "base64", "max_bytes",
                              (json_int_t)want, "offset", (json_int_t)offset);
                int code = 0;
                _cleanup_json_ json_t *result = cp_call(cp, "fs.read", params, path, &code, NULL, 0);
                if (result == NULL)
                        return code;
                json_t *content = json_object_get(result, "content");
                size_t len = 0;
                _cleanup_free_ char *data =
                    json_is_string(content)
                        ? base64_decode(json_string_value(content), json_string_length(content), &len)
                        : NULL;
                if (data == NULL)
                        return cli_fail("reading %s in the sandbox: nsboxd sent bad base64", path);
                if (len > 0) {
                        int r = chunk(ctx, data, len);
                        if (r != 0)
                                return r;
                }
                offset += len;
                if (!json_is_true(json_object_get(result, "truncated")) || len == 0) {
                        if (exact && offset != size)
                                return cli_fail("%s in the sandbox shrank while it was copied", path);
                        return 0;
                }
        }
}

struct sink_chunks {
        struct cp_sink *sink;
};

static int sink_chunk(void *ctx, const char *data, size_t len)
{
        struct sink_chunks *c = ctx;
        return c->sink->ops->file_data(c->sink, data, len);
}

static int stdout_chunk(void *ctx, const char *data, size_t len)
{
        unsigned long long *bytes = ctx;
        int r = io_write_all(STDOUT_FILENO, data, len);
        if (r < 0)
                return cli_fail("write: %s", strerror(-r));
        *bytes += len;
        return 0;
}

/* ---- source: a sandbox tree ---- */

static int sandbox_source_file(struct cp *cp, const char *path, const char *rel, mode_t mode,
                               unsigned long long size, struct cp_sink *sink)
{
        int r = sink->ops->file_begin(sink, rel, mode, size);
        struct sink_chunks c = { sink };
        if (r == 0)
                r = sandbox_read(cp, path, size, true, sink_chunk, &c);
        return r == 0 ? sink->ops->file_end(sink) : r;
}

static int sandbox_source_symlink(struct cp *cp, const char *path, const char *rel, struct cp_sink *sink)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "path", path);
        int code = 0;
        _cleanup_json_ json_t *result = cp_call(cp, "fs.stat", params, path, &code, NULL, 0);
        if (result == NULL)
                return code;
        const char *target = json_string_value(json_object_get(result, "target"));
        if (target == NULL)
                return cli_fail("%s in the sandbox: cannot read the symlink", path);
        return sink->ops->symlink(sink, rel, target);
}

/* One entry, described by fs.stat or an fs.list entry. */
static int sandbox_source_entry(struct cp *cp, const char *path, const char *rel, json_t *info,
                                struct cp_sink *sink)
{
        const char *type = json_string_value(json_object_get(info, "type"));
        mode_t mode = (mode_t)json_integer_value(json_object_get(info, "mode")) & 0777;
        unsigned long long size = (unsigned long long)json_integer_value(json_object_get(info, "size"));
        if (type == NULL)
                return cli_fail("%s in the sandbox: nsboxd sent no type", path);
        if (strcmp(type, "file") == 0)
                return sandbox_source_file(cp, path, rel, mode, size, sink);
        if (strcmp(type, "symlink") == 0)
                return sandbox_source_symlink(cp, path, rel, sink);
        if (strcmp(type, "dir") != 0) {
                cp_warn_skipped(
                    path, "not a file, directory or symlink (FIFOs, sockets and devices are not copied)");
                return 0;
        }
        int r = sink->ops->dir(sink, rel, mode);
        if (r != 0)
                return r;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:i}", "path", path, "max_entries", CP_LIST_MAX);
        int code = 0;
        _cleanup_json_ json_t *list = cp_call(cp, "fs.list", params, path, &code, NULL, 0);
        if (list == NULL)
                return code;
        if (json_is_true(json_object_get(list, "truncated")))
                return cli_fail("%s in the sandbox holds more than %d entries, more than fs.list answers",
                                path, CP_LIST_MAX);
        size_t i;
        json_t *entry;
        json_array_foreach(json_object_get(list, "entries"), i, entry)
        {
                const char *name = json_string_value(json_object_get(entry, "name"));
                if (name == NULL || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strchr(name, '/'))
                        continue;
                _cleanup_free_ char *child = path_join(path, name);
                _cleanup_free_ char *child_rel = path_join(rel, name);
                if (child == NULL || child_rel == NULL)
                        return cli_fail("out of memory");
                r = sandbox_source_entry(cp, child, child_rel, entry, sink);
                if (r != 0)
                        return r;
        }
        return 0;
}

/* ---- source: a host tree ---- */

/* The bytes of fd as one file of the sink. */
static int host_source_fd(int fd, const char *shown, const char *rel, mode_t mode, unsigned long long size,
                          struct cp_sink *sink)
{
        int r = sink->ops->file_begin(sink, rel, mode, size);
        _cleanup_free_ char *buf = malloc(CP_CHUNK);
        if (r == 0 && buf == NULL)
                r = cli_fail("out of memory");
        while (r == 0) {
                ssize_t n = read(fd, buf, CP_CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return cli_fail("read %s: %s", shown, strerror(errno));
                if (n == 0)
                        break;
                r = sink->ops->file_data(sink, buf, (size_t)n);
        }
        return r == 0 ? sink->ops->file_end(sink) : r;
}

static int host_source_entry(int parent, const char *name, const char *shown, const char *rel,
                             struct cp_sink *sink)
{
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return cli_fail("%s: %s", shown, strerror(errno));
        if (S_ISLNK(st.st_mode)) {
                char target[PATH_MAX];
                ssize_t n = readlinkat(parent, name, target, sizeof(target) - 1);
                if (n < 0)
                        return cli_fail("readlink %s: %s", shown, strerror(errno));
                target[n] = '\0';
                return sink->ops->symlink(sink, rel, target);
        }
        if (S_ISREG(st.st_mode)) {
                _cleanup_close_ int fd = openat(parent, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fstat(fd, &st) < 0)
                        return cli_fail("open %s: %s", shown, strerror(errno));
                return host_source_fd(fd, shown, rel, st.st_mode & 0777, (unsigned long long)st.st_size,
                                      sink);
        }
        if (!S_ISDIR(st.st_mode)) {
                cp_warn_skipped(
                    shown, "not a file, directory or symlink (FIFOs, sockets and devices are not copied)");
                return 0;
        }
        int r = sink->ops->dir(sink, rel, st.st_mode & 0777);
        if (r != 0)
                return r;
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *dir = fd < 0 ? NULL : fdopendir(fd);
        if (dir == NULL) {
                if (fd >= 0)
                        close(fd);
                return cli_fail("open %s: %s", shown, strerror(errno));
        }
        struct dirent *d;
        while (r == 0 && (errno = 0, d = readdir(dir)) != NULL) {
                if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                        continue;
                _cleanup_free_ char *child_shown = path_join(shown, d->d_name);
                _cleanup_free_ char *child_rel = path_join(rel, d->d_name);
                if (child_shown == NULL || child_rel == NULL)
                        r = cli_fail("out of memory");
                else
                        r = host_source_entry(dirfd(dir), d->d_name, child_shown, child_rel, sink);
        }
        if (r == 0 && errno != 0)
                r = cli_fail("read the directory %s: %s", shown, strerror(errno));
        closedir(dir);
        return r;
}

/* ---- out of the sandbox ---- */

static int remove_host_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        if (flag == FTW_DP)
                rmdir(path);
        else
                unlink(path);
        return 0;
}

static int copy_out_to_stdout(struct cp *cp, const char *path, json_t *info, unsigned long long *bytes)
{
        const char *type = json_string_value(json_object_get(info, "type"));
        if (type == NULL || strcmp(type, "dir") != 0) {
                /* A file (or a symlink to one): its bytes, as `cat`. */
                *bytes = 0;
                return sandbox_read(cp, path, 0, false, stdout_chunk, bytes);
        }
        _cleanup_free_ char *root = path_base(path);
        if (root == NULL)
                return cli_fail("out of memory");
        struct cp_sink *tar = tar_sink_new(STDOUT_FILENO, strcmp(root, "/") == 0 ? "." : root);
        if (tar == NULL)
                return EXIT_NSBOX_FAILED;
        int r = sandbox_source_entry(cp, path, "", info, tar);
        if (r == 0)
                r = tar_sink_finish(tar);
        *bytes = tar->bytes;
        tar_sink_free(tar);
        return r;
}

static int copy_out(struct cp *cp, const char *path, const char *local, unsigned long long *bytes)
{
        bool missing;
        int code = 0;
        _cleanup_json_ json_t *info = sandbox_stat(cp, path, &missing, &code);
        if (missing)
                return cli_fail("%s:%s: No such file or directory in the sandbox", cp->sandbox_id, path);
        if (info == NULL)
                return code;
        if (strcmp(local, "-") == 0)
                return copy_out_to_stdout(cp, path, info, bytes);
        bool is_dir = strcmp(json_string_value(json_object_get(info, "type")) ?: "", "dir") == 0;

        /* Into an existing directory: under the source's name, or merged with
         * it for SRC/. (docker cp's rules). */
        _cleanup_free_ char *target = NULL;
        struct stat st;
        bool local_is_dir = stat(local, &st) == 0 && S_ISDIR(st.st_mode);
        bool merge = false;
        if (local_is_dir && is_dir && path_ends_with_dot(path)) {
                target = strdup(local);
                merge = true;
        } else if (local_is_dir) {
                _cleanup_free_ char *base = path_base(path);
                target = base ? path_join(local, strcmp(base, "/") == 0 ? "." : base) : NULL;
                merge = is_dir && target && lstat(target, &st) == 0 && S_ISDIR(st.st_mode);
        } else {
                target = strdup(local);
        }
        if (target == NULL)
                return cli_fail("out of memory");

        struct host_sink h = { .base.ops = &host_sink_ops, .fd = -1, .dirs = json_array() };
        _cleanup_json_ json_t *dirs = h.dirs;
        _cleanup_free_ char *parent_path = path_dir(target);
        _cleanup_free_ char *name = path_base(target);
        if (parent_path == NULL || name == NULL || dirs == NULL)
                return cli_fail("out of memory");
        char temp[32] = "";
        _cleanup_close_ int dirfd = -1;
        if (merge) {
                dirfd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dirfd < 0)
                        return cli_fail("open %s: %s", target, strerror(errno));
        } else {
                /* Write beside the target and rename: a failed copy leaves nothing. */
                dirfd = open(parent_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dirfd < 0)
                        return cli_fail("open the directory %s: %s", parent_path, strerror(errno));
                int r = temp_name(temp, sizeof(temp));
                if (r != 0)
                        return r;
                h.top = temp;
        }
        h.dirfd = dirfd;
        int r = sandbox_source_entry(cp, path, "", info, &h.base);
        if (h.fd >= 0)
                close(h.fd);
        free(h.file);
        if (r == 0)
                r = host_sink_finish(&h);
        if (r == 0 && !merge && renameat(dirfd, temp, dirfd, name) < 0)
                r = cli_fail("rename into %s: %s", target, strerror(errno));
        if (r != 0 && !merge) {
                _cleanup_free_ char *temp_path = path_join(parent_path, temp);
                if (temp_path != NULL)
                        nftw(temp_path, remove_host_entry, 64, FTW_DEPTH | FTW_PHYS);
        }
        *bytes = h.base.bytes;
        return r;
}

/* ---- into the sandbox ---- */

/* Relative sandbox paths are under /workspace (as the file API has them). */
static char *sandbox_absolute(const char *path)
{
        if (path[0] == '/')
                return strdup(path);
        return path_join("/workspace", path);
}

static int copy_in(struct cp *cp, const char *local, const char *dest_arg, unsigned long long *bytes)
{
        _cleanup_free_ char *dest = sandbox_absolute(dest_arg);
        if (dest == NULL)
                return cli_fail("out of memory");
        bool from_stdin = strcmp(local, "-") == 0;
        struct stat st;
        if (!from_stdin && lstat(local, &st) < 0)
                return cli_fail("%s: %s", local, strerror(errno));
        bool is_dir = !from_stdin && S_ISDIR(st.st_mode);

        bool missing;
        int code = 0;
        _cleanup_json_ json_t *dest_info = sandbox_stat(cp, dest, &missing, &code);
        if (dest_info == NULL && !missing)
                return code;
        bool dest_is_dir =
            dest_info && strcmp(json_string_value(json_object_get(dest_info, "type")) ?: "", "dir") == 0;

        struct sandbox_sink s;
        int r = sandbox_sink_init(&s, cp, dest);
        if (r != 0) {
                sandbox_sink_done(&s);
                return r;
        }
        if (from_stdin && dest_is_dir) {
                /* A tar stream, extracted into the existing directory. */
                r = tar_source_copy(STDIN_FILENO, &s.base);
                if (r == 0)
                        r = sandbox_sink_finish(&s);
                *bytes = s.base.bytes;
                sandbox_sink_done(&s);
                return r;
        }

        _cleanup_free_ char *target = NULL;
        bool merge = false;
        size_t dlen = strlen(dest);
        if (is_dir && dest_is_dir && path_ends_with_dot(local)) {
                target = strdup(dest);
                merge = true;
        } else if (dest_is_dir) {
                if (from_stdin) {
                        sandbox_sink_done(&s);
                        return cli_fail("%s is a directory in the sandbox: name the file to write", dest);
                }
                _cleanup_free_ char *base = path_base(local);
                target = base ? path_join(dest, base) : NULL;
                bool target_missing;
                _cleanup_json_ json_t *info =
                    target ? sandbox_stat(cp, target, &target_missing, &code) : NULL;
                if (target != NULL && info == NULL && !target_missing) {
                        sandbox_sink_done(&s);
                        return code;
                }
                merge = is_dir && info &&
                        strcmp(json_string_value(json_object_get(info, "type")) ?: "", "dir") == 0;
        } else if (dest[dlen - 1] == '/') {
                sandbox_sink_done(&s);
                return cli_fail(
                    "%s: No such directory in the sandbox (nsbox cp makes no directories, as docker "
                    "cp: nsbox exec ID -- mkdir -p %s first)",
                    dest, dest);
        } else {
                target = strdup(dest);
        }
        if (target == NULL) {
                sandbox_sink_done(&s);
                return cli_fail("out of memory");
        }

        _cleanup_free_ char *parent = path_dir(target);
        char temp[32] = "";
        _cleanup_free_ char *staged = NULL;
        if (!merge) {
                /* The parent must exist (docker cp's rule). */
                bool parent_missing;
                _cleanup_json_ json_t *pinfo =
                    parent ? sandbox_stat(cp, parent, &parent_missing, &code) : NULL;
                if (pinfo == NULL) {
                        sandbox_sink_done(&s);
                        return parent == NULL   ? cli_fail("out of memory")
                               : parent_missing ? cli_fail("%s: No such directory in the sandbox", parent)
                                                : code;
                }
                if ((r = temp_name(temp, sizeof(temp))) != 0 || (staged = path_join(parent, temp)) == NULL) {
                        sandbox_sink_done(&s);
                        return r ? r : cli_fail("out of memory");
                }
        }
        free(s.root);
        s.root = strdup(merge ? target : staged);
        s.in_place = merge;
        s.shown_root = strdup(target);
        if (s.root == NULL || s.shown_root == NULL)
                r = cli_fail("out of memory");
        else if (from_stdin)
                r = host_source_fd(STDIN_FILENO, "standard input", "", 0644, 0, &s.base);
        else
                r = host_source_entry(AT_FDCWD, local, local, "", &s.base);
        if (r == 0)
                r = sandbox_sink_finish(&s);
        if (r == 0 && !merge) {
                /* One rename(2) in nsboxd: the target appears whole or not at all. */
                _cleanup_json_ json_t *params =
                    json_pack("{s:s, s:s, s:b}", "from", staged, "to", target, "overwrite", true);
                _cleanup_json_ json_t *result = cp_call(cp, "fs.rename", params, target, &r, NULL, 0);
        }
        if (r != 0 && !merge)
                sandbox_remove(cp, staged, true);
        if (r != 0 && s.staged != NULL) /* a file cut short: the source failed */
                sandbox_sink_abandon(&s);
        *bytes = s.base.bytes;
        sandbox_sink_done(&s);
        return r;
}

/* "ID:PATH" → the id and path; NULL when arg is a local path. A local path
 * with a colon can be written ./a:b. */
static char *split_sandbox_path(const char *arg, const char **path)
{
        const char *colon = strchr(arg, ':');
        if (colon == NULL || colon == arg || memchr(arg, '/', colon - arg) != NULL)
                return NULL;
        *path = colon + 1;
        return strndup(arg, colon - arg);
}

int cmd_cp(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (argc - optind != 2)
                return cli_usage_error(cli);
        const char *src = argv[optind], *dst = argv[optind + 1];
        const char *src_path = NULL, *dst_path = NULL;
        _cleanup_free_ char *src_id = split_sandbox_path(src, &src_path);
        _cleanup_free_ char *dst_id = split_sandbox_path(dst, &dst_path);
        if ((src_id == NULL) == (dst_id == NULL))
                return cli_fail("nsbox cp copies between a sandbox and here: one of the two must be ID:PATH");
        if ((src_id ? src_path : dst_path)[0] == '\0')
                return cli_fail("name the sandbox path to copy: ID:PATH");

        struct cp cp = { .cli = cli, .sandbox_id = src_id ? src_id : dst_id, .signal_fd = -1 };
        cp.c = cli_connect(cli);
        if (cp.c == NULL)
                return EXIT_NSBOX_FAILED;
        if (dst_id != NULL && (cp.signal_fd = cli_catch_signals()) < 0) {
                client_close(cp.c);
                return cli_fail("signalfd: %s", strerror(errno));
        }
        unsigned long long bytes = 0;
        int r = src_id ? copy_out(&cp, src_path, dst, &bytes) : copy_in(&cp, src, dst_path, &bytes);
        client_close(cp.c);
        if (cp.signal_fd >= 0)
                close(cp.signal_fd);
        if (r == 0 && cli->json && strcmp(dst, "-") != 0) {
                _cleanup_json_ json_t *summary = json_pack(
                    "{s:s, s:s, s:s, s:s, s:I}", "sandbox_id", cp.sandbox_id, "direction",
                    src_id ? "out" : "in", "source", src, "destination", dst, "bytes", (json_int_t)bytes);
                cli_print_json(summary);
        }
        return r;
}
