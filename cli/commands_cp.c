/* nsbox cp: copy one file out of or into a sandbox, byte for byte, of any
 * size the sandbox's disk holds.
 *
 * In: fs.write in base64 chunks (append after the first). Out: fs.read has
 * no offset and a bounded size, so the file is read in chunks by `dd` run in
 * the sandbox, its output base64-encoded by the daemon. Daemons without
 * fs.write get the chunks through `base64 -d` in the sandbox instead. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "textenc.h"

#define CP_IN_CHUNK     (4u << 20)  /* 5.3 MiB of base64 per request line */
#define CP_OUT_CHUNK    (16u << 20) /* per dd run; the daemon allows 256 MiB of output */
#define CP_EXEC_TIMEOUT 600

struct cp {
        const struct cli *cli;
        struct client *c;
        const char *sandbox_id;
        unsigned long long bytes;
};

/* Run argv in the sandbox and wait for it; the result or NULL after printing why. */
static json_t *sandbox_run(struct cp *cp, json_t *argv, const char *stdin_text, size_t stdin_len, bool base64,
                           size_t max_output)
{
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:O, s:i, s:s, s:I}", "sandbox_id", cp->sandbox_id, "argv", argv,
                      "timeout_seconds", CP_EXEC_TIMEOUT, "encoding", base64 ? "base64" : "utf-8",
                      "max_output_bytes", (json_int_t)max_output);
        if (stdin_text != NULL)
                json_object_set_new(params, "stdin", json_stringn(stdin_text, stdin_len));
        json_t *result = cli_call(cp->cli, cp->c, "sandbox.exec", params);
        if (result == NULL)
                return NULL;
        if (cli_exec_exit_code(result) != 0) {
                json_t *err = json_object_get(result, "stderr");
                size_t len = 0;
                _cleanup_free_ char *text = NULL;
                if (base64 && json_is_string(err))
                        text = base64_decode(json_string_value(err), json_string_length(err), &len);
                else if (json_is_string(err))
                        text = strndup(json_string_value(err), len = json_string_length(err));
                while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
                        len--;
                cli_fail("%s in the sandbox failed (exit %d): %.*s",
                         json_string_value(json_array_get(argv, 0)), cli_exec_exit_code(result), (int)len,
                         text ? text : "");
                json_decref(result);
                return NULL;
        }
        return result;
}

/* --- out of the sandbox ------------------------------------------------ */

/* Type, size and mode of a sandbox file. 0, or an exit code. */
static int stat_sandbox_file(struct cp *cp, const char *path, unsigned long long *size, mode_t *mode)
{
        _cleanup_json_ json_t *argv =
            json_pack("[s, s, s, s, s, s]", "stat", "-L", "--printf", "%F\n%s\n%a\n", "--", path);
        _cleanup_json_ json_t *result = sandbox_run(cp, argv, NULL, 0, false, 4096);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        const char *out = json_string_value(json_object_get(result, "stdout"));
        char type[64];
        unsigned long long sz;
        unsigned m;
        if (out == NULL || sscanf(out, "%63[^\n]\n%llu\n%o", type, &sz, &m) != 3)
                return cli_fail("cannot read the file type of %s in the sandbox", path);
        if (strcmp(type, "regular file") != 0 && strcmp(type, "regular empty file") != 0)
                return cli_fail("%s in the sandbox is a %s, not a regular file", path, type);
        *size = sz;
        *mode = m & 0777;
        return 0;
}

/* Append the sandbox file, chunk by chunk, to fd. 0, or an exit code. */
static int copy_out_data(struct cp *cp, const char *path, int fd)
{
        _cleanup_free_ char *input = NULL;
        if (asprintf(&input, "if=%s", path) < 0)
                return cli_fail("out of memory");
        for (unsigned long long offset = 0;;) {
                char skip[64], count[64];
                snprintf(skip, sizeof(skip), "skip=%llu", offset);
                snprintf(count, sizeof(count), "count=%u", CP_OUT_CHUNK);
                _cleanup_json_ json_t *argv =
                    json_pack("[s, s, s, s, s, s, s]", "dd", input, "bs=1M", skip, count,
                              "iflag=skip_bytes,count_bytes,fullblock", "status=none");
                _cleanup_json_ json_t *result = sandbox_run(cp, argv, NULL, 0, true, CP_OUT_CHUNK);
                if (result == NULL)
                        return EXIT_NSBOX_FAILED;
                if (json_is_true(json_object_get(result, "truncated")))
                        return cli_fail("reading %s in the sandbox: output truncated", path);
                json_t *data = json_object_get(result, "stdout");
                size_t len;
                _cleanup_free_ char *bytes =
                    json_is_string(data)
                        ? base64_decode(json_string_value(data), json_string_length(data), &len)
                        : NULL;
                if (bytes == NULL)
                        return cli_fail("reading %s in the sandbox: nsboxd sent bad base64", path);
                int r = cli_write_all(fd, bytes, len);
                if (r < 0)
                        return cli_fail("write: %s", strerror(-r));
                offset += len;
                cp->bytes += len;
                if (len < CP_OUT_CHUNK)
                        return 0;
        }
}

static int copy_out(struct cp *cp, const char *path, const char *local)
{
        unsigned long long size = 0;
        mode_t mode = 0644;
        int r = stat_sandbox_file(cp, path, &size, &mode);
        if (r != 0)
                return r;
        if (strcmp(local, "-") == 0) {
                r = copy_out_data(cp, path, STDOUT_FILENO);
                return r;
        }
        /* Into a directory: keep the file's name. */
        _cleanup_free_ char *target = NULL;
        struct stat st;
        if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
                _cleanup_free_ char *copy = strdup(path);
                if (copy == NULL || asprintf(&target, "%s/%s", local, basename(copy)) < 0)
                        return cli_fail("out of memory");
        } else {
                target = strdup(local);
                if (target == NULL)
                        return cli_fail("out of memory");
        }
        /* Write beside the target and rename: a failed copy leaves no half file. */
        _cleanup_free_ char *temp = NULL;
        if (asprintf(&temp, "%s.nsbox-XXXXXX", target) < 0)
                return cli_fail("out of memory");
        _cleanup_close_ int fd = mkostemp(temp, O_CLOEXEC);
        if (fd < 0)
                return cli_fail("create %s: %s", temp, strerror(errno));
        r = copy_out_data(cp, path, fd);
        if (r == 0 && fchmod(fd, mode) < 0)
                r = cli_fail("chmod %s: %s", temp, strerror(errno));
        if (r == 0 && close(steal_fd(&fd)) < 0)
                r = cli_fail("write %s: %s", temp, strerror(errno));
        if (r == 0 && rename(temp, target) < 0)
                r = cli_fail("rename %s to %s: %s", temp, target, strerror(errno));
        if (r != 0)
                unlink(temp);
        return r;
}

/* --- into the sandbox -------------------------------------------------- */

/* Read up to len bytes (less only at end of file). */
static ssize_t read_full(int fd, char *buf, size_t len)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = read(fd, buf + done, len - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                done += n;
        }
        return done;
}

static bool sandbox_is_dir(struct cp *cp, const char *path)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:[s, s, s]}", "sandbox_id", cp->sandbox_id, "argv", "test", "-d", path);
        _cleanup_json_ json_t *result = NULL;
        if (client_call(cp->c, "sandbox.exec", params, NULL, NULL, &result, NULL, &err) < 0)
                return false;
        return cli_exec_exit_code(result) == 0;
}

/* One chunk through fs.write. 0, 1 when the daemon has no fs.write, or an exit code. */
static int write_chunk_fs(struct cp *cp, const char *path, const char *b64, size_t b64_len, size_t len,
                          bool append, mode_t mode)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_json_ json_t *result = NULL;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:s%, s:s, s:b, s:i}", "sandbox_id", cp->sandbox_id, "path", path,
                      "content", b64, b64_len, "encoding", "base64", "append", append, "mode", (int)mode);
        if (client_call(cp->c, "fs.write", params, NULL, NULL, &result, &error, &err) < 0) {
                if (cli_error_is_missing_method(error))
                        return 1;
                return cli_fail("write %s in the sandbox: %s", path, err->message);
        }
        json_t *written = json_object_get(result, "bytes_written");
        if (json_is_integer(written) && (size_t)json_integer_value(written) != len)
                return cli_fail("write %s in the sandbox: %lld of %zu bytes written", path,
                                (long long)json_integer_value(written), len);
        return 0;
}

/* One chunk through base64 -d in the sandbox, for daemons without fs.write. */
static int write_chunk_exec(struct cp *cp, const char *path, const char *b64, size_t b64_len, bool append)
{
        _cleanup_json_ json_t *argv = json_pack("[s, s, s, s]", "sh", "-c",
                                                append ? "base64 -d >> \"$1\"" : "base64 -d > \"$1\"", "sh");
        json_array_append_new(argv, json_string(path));
        _cleanup_json_ json_t *result = sandbox_run(cp, argv, b64, b64_len, false, 65536);
        return result == NULL ? EXIT_NSBOX_FAILED : 0;
}

static int copy_in(struct cp *cp, const char *local, const char *path)
{
        bool from_stdin = strcmp(local, "-") == 0;
        _cleanup_close_ int fd = from_stdin ? dup(STDIN_FILENO) : open(local, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return cli_fail("open %s: %s", local, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return cli_fail("stat %s: %s", local, strerror(errno));
        if (!from_stdin && !S_ISREG(st.st_mode))
                return cli_fail("%s is not a regular file", local);
        mode_t mode = from_stdin ? 0644 : st.st_mode & 0777;

        /* Into a directory: keep the file's name. */
        _cleanup_free_ char *target = NULL;
        size_t plen = strlen(path);
        if (plen == 0 || path[plen - 1] == '/' || sandbox_is_dir(cp, path)) {
                if (from_stdin)
                        return cli_fail("%s is a directory in the sandbox: name the file to write", path);
                _cleanup_free_ char *copy = strdup(local);
                if (copy == NULL ||
                    asprintf(&target, "%s%s%s", path, plen == 0 || path[plen - 1] == '/' ? "" : "/",
                             basename(copy)) < 0)
                        return cli_fail("out of memory");
        } else if ((target = strdup(path)) == NULL) {
                return cli_fail("out of memory");
        }

        _cleanup_free_ char *buf = malloc(CP_IN_CHUNK);
        if (buf == NULL)
                return cli_fail("out of memory");
        bool use_fs = true;
        for (bool first = true;; first = false) {
                ssize_t n = read_full(fd, buf, CP_IN_CHUNK);
                if (n < 0)
                        return cli_fail("read %s: %s", local, strerror(-n));
                if (n == 0 && !first)
                        break;
                size_t b64_len;
                _cleanup_free_ char *b64 = base64_encode(buf, n, &b64_len);
                if (b64 == NULL)
                        return cli_fail("out of memory");
                int r = use_fs ? write_chunk_fs(cp, target, b64, b64_len, n, !first, mode) : 1;
                if (r == 1) {
                        if (!first)
                                return cli_fail("nsboxd stopped offering fs.write in the middle of a copy");
                        use_fs = false;
                        r = write_chunk_exec(cp, target, b64, b64_len, !first);
                }
                if (r != 0)
                        return r;
                cp->bytes += n;
                if ((size_t)n < CP_IN_CHUNK)
                        break;
        }
        if (!use_fs) {
                char octal[16];
                snprintf(octal, sizeof(octal), "%o", mode);
                _cleanup_json_ json_t *argv = json_pack("[s, s, s, s]", "chmod", octal, "--", target);
                _cleanup_json_ json_t *result = sandbox_run(cp, argv, NULL, 0, false, 65536);
                if (result == NULL)
                        return EXIT_NSBOX_FAILED;
        }
        return 0;
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
        if ((src_id ? src_path : dst_path)[0] == '\0' && src_id != NULL)
                return cli_fail("name the sandbox file to copy: ID:PATH");

        struct cp cp = { .cli = cli, .sandbox_id = src_id ? src_id : dst_id };
        cp.c = cli_connect(cli);
        if (cp.c == NULL)
                return EXIT_NSBOX_FAILED;
        int r = src_id ? copy_out(&cp, src_path, dst) : copy_in(&cp, src, dst_path);
        client_close(cp.c);
        if (r == 0 && cli->json && strcmp(dst, "-") != 0) {
                _cleanup_json_ json_t *summary = json_pack(
                    "{s:s, s:s, s:s, s:s, s:I}", "sandbox_id", cp.sandbox_id, "direction",
                    src_id ? "out" : "in", "source", src, "destination", dst, "bytes", (json_int_t)cp.bytes);
                cli_print_json(summary);
        }
        return r;
}
