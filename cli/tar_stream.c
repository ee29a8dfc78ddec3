/* SPDX-License-Identifier: Apache-2.0 */
/* Tar streams of nsbox cp (`nsbox cp ID:DIR -`, `tar c . | nsbox cp - ID:DIR`),
 * through the nsbox-tar helper: pax archives out, any tar libarchive reads in.
 * nsbox is a static binary (fewer page faults at every start of every command)
 * and a static binary cannot load libarchive safely, so libarchive lives in
 * the helper, which turns tar into the records of tar_records.h and back. */
#include "tar_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "tar_records.h"

#define TAR_HELPER "nsbox-tar"

extern char **environ;

/* The helper, beside nsbox (the build tree) or in PREFIX/libexec/nsbox. */
static int tar_helper_path(char *path, size_t len)
{
        if (cli_sibling_binary(TAR_HELPER, path, len) == 0 && access(path, X_OK) == 0)
                return 0;
        snprintf(path, len, "%s/libexec/nsbox/%s", NSBOX_PREFIX, TAR_HELPER);
        if (access(path, X_OK) == 0)
                return 0;
        return cli_fail("tar streams need the %s helper, installed beside nsbox or in %s/libexec/nsbox "
                        "(make install puts it there): not found",
                        TAR_HELPER, NSBOX_PREFIX);
}

/* The helper running with argv, stdin and stdout as given: its pid, or -1 with the reason said. */
static pid_t tar_helper_start(char *const argv[], int in_fd, int out_fd, int close_fd)
{
        char path[4096];
        if (tar_helper_path(path, sizeof(path)) != 0)
                return -1;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, in_fd, STDIN_FILENO);
        posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&actions, close_fd);
        /* nsbox ignores SIGPIPE; the helper takes it as any tar would. */
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t defaults;
        sigemptyset(&defaults);
        sigaddset(&defaults, SIGPIPE);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
        fflush(stdout); /* what nsbox printed comes before what the helper writes */
        pid_t pid;
        int r = posix_spawn(&pid, path, &actions, &attr, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        if (r != 0) {
                cli_fail("cannot run %s: %s", path, strerror(r));
                return -1;
        }
        return pid;
}

/* The helper's end: 0, or an exit code (the helper has said why, or this says it). */
static int tar_helper_wait(pid_t pid)
{
        int status;
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return cli_fail("waiting for %s: %s", TAR_HELPER, strerror(errno));
        }
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        if (WTERMSIG(status) == SIGPIPE)
                return cli_fail("the tar stream's reader went away before its end");
        return cli_fail("%s was killed by signal %d", TAR_HELPER, WTERMSIG(status));
}

/* ---- out: a tar stream ---- */

struct tar_sink {
        struct cp_sink base;
        int records; /* to the helper */
        pid_t helper;
};

/* A record to the helper; one it no longer reads (it failed) ends the copy with its reason. */
static int tar_sink_send(struct tar_sink *t, enum tar_record_kind kind, mode_t mode, uint64_t size,
                         const char *path, const char *target, const void *data)
{
        int r = tar_record_write(t->records, kind, mode, size, path, target, data);
        if (r == 0)
                return 0;
        if (r == -ENAMETOOLONG)
                return cli_fail("tar: %s: name or target too long", path ? path : "");
        if (r != -EPIPE)
                return cli_fail("tar: writing to %s: %s", TAR_HELPER, strerror(-r));
        close(t->records);
        t->records = -1;
        int code = tar_helper_wait(t->helper);
        t->helper = -1;
        return code != 0 ? code : cli_fail("%s stopped reading", TAR_HELPER);
}

static int tar_sink_dir(struct cp_sink *sink, const char *rel, mode_t mode)
{
        return tar_sink_send((struct tar_sink *)sink, TAR_RECORD_DIR, mode & 07777, 0, rel, NULL, NULL);
}

static int tar_sink_file_begin(struct cp_sink *sink, const char *rel, mode_t mode, unsigned long long size)
{
        return tar_sink_send((struct tar_sink *)sink, TAR_RECORD_FILE, mode & 07777, size, rel, NULL, NULL);
}

static int tar_sink_file_data(struct cp_sink *sink, const void *data, size_t len)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        while (len > 0) {
                size_t n = len < TAR_RECORD_DATA_MAX ? len : TAR_RECORD_DATA_MAX;
                int r = tar_sink_send(t, TAR_RECORD_DATA, 0, n, NULL, NULL, data);
                if (r != 0)
                        return r;
                data = (const char *)data + n;
                len -= n;
                sink->bytes += n;
        }
        return 0;
}

static int tar_sink_file_end(struct cp_sink *sink)
{
        return tar_sink_send((struct tar_sink *)sink, TAR_RECORD_FILE_END, 0, 0, NULL, NULL, NULL);
}

static int tar_sink_symlink(struct cp_sink *sink, const char *rel, const char *target)
{
        return tar_sink_send((struct tar_sink *)sink, TAR_RECORD_SYMLINK, 0777, 0, rel, target, NULL);
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
        struct tar_sink *t = calloc(1, sizeof(*t));
        int pipe_fds[2];
        if (t == NULL || pipe2(pipe_fds, O_CLOEXEC) < 0) {
                cli_fail("cannot start a tar stream: %s", t ? strerror(errno) : "out of memory");
                free(t);
                return NULL;
        }
        char *argv[] = { TAR_HELPER, "create", (char *)root_name, NULL };
        t->base.ops = &tar_sink_ops;
        t->records = pipe_fds[1];
        t->helper = tar_helper_start(argv, pipe_fds[0], fd, pipe_fds[1]);
        close(pipe_fds[0]);
        if (t->helper < 0) {
                close(t->records);
                free(t);
                return NULL;
        }
        return &t->base;
}

int tar_sink_finish(struct cp_sink *sink)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        int r = tar_sink_send(t, TAR_RECORD_END, 0, 0, NULL, NULL, NULL);
        if (r != 0)
                return r;
        close(t->records);
        t->records = -1;
        r = tar_helper_wait(t->helper);
        t->helper = -1;
        return r;
}

void tar_sink_free(struct cp_sink *sink)
{
        struct tar_sink *t = (struct tar_sink *)sink;
        if (t == NULL)
                return;
        /* A copy that failed: the helper reads the end of its records without
         * their END, and ends without a word (nsbox has said why). */
        if (t->records >= 0)
                close(t->records);
        if (t->helper > 0)
                tar_helper_wait(t->helper);
        free(t);
}

/* ---- in: a tar stream ---- */

int tar_source_copy(int fd, struct cp_sink *sink)
{
        int pipe_fds[2];
        if (pipe2(pipe_fds, O_CLOEXEC) < 0)
                return cli_fail("pipe: %s", strerror(errno));
        char *argv[] = { TAR_HELPER, "extract", NULL };
        pid_t helper = tar_helper_start(argv, fd, pipe_fds[1], pipe_fds[0]);
        close(pipe_fds[1]);
        _cleanup_close_ int records = pipe_fds[0];
        if (helper < 0)
                return EXIT_NSBOX_FAILED;
        _cleanup_free_ char *data = malloc(TAR_RECORD_DATA_MAX);
        static char path[TAR_RECORD_PATH_MAX + 1], target[TAR_RECORD_PATH_MAX + 1];
        int r = data ? 0 : cli_fail("out of memory");
        bool in_file = false;
        while (r == 0) {
                struct tar_record rec;
                int got = tar_record_read(records, &rec, path, target, data, &in_file);
                if (got == 1) {
                        /* The helper ended before the archive's end: it has said why. */
                        int code = tar_helper_wait(helper);
                        return code != 0 ? code
                                         : cli_fail("%s ended before the tar stream's end", TAR_HELPER);
                }
                if (got < 0) {
                        r = cli_fail("reading %s's entries: %s", TAR_HELPER, strerror(-got));
                        break;
                }
                switch (rec.kind) {
                case TAR_RECORD_DIR:
                        r = sink->ops->dir(sink, path, rec.mode & 07777);
                        break;
                case TAR_RECORD_SYMLINK:
                        r = sink->ops->symlink(sink, path, target);
                        break;
                case TAR_RECORD_FILE:
                        r = sink->ops->file_begin(sink, path, rec.mode & 07777, rec.size);
                        break;
                case TAR_RECORD_DATA:
                        r = sink->ops->file_data(sink, data, (size_t)rec.size);
                        break;
                case TAR_RECORD_FILE_END:
                        r = sink->ops->file_end(sink);
                        break;
                case TAR_RECORD_END:
                        return tar_helper_wait(helper);
                }
        }
        /* This side failed: the helper goes, even one that waits for more of
         * its stream (it inherits the signals the copy blocks, as they are
         * the CLI's to handle). */
        close(records);
        records = -1;
        kill(helper, SIGKILL);
        while (waitpid(helper, NULL, 0) < 0 && errno == EINTR)
                ;
        return r;
}
