/* SPDX-License-Identifier: Apache-2.0 */
/* Seccomp profiles for the unit tests: the repo's, Docker's (beside the
 * repo in CI) and inline JSON, compiled or the test fails; and the forked
 * child that makes calls under one. Include after cmocka.h. */
#pragma once

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cleanup.h"
#include "seccomp_profile.h"

#define DEFAULT_PROFILE "seccomp-profiles/default.json"
#define DOCKER_PROFILE  "../shared/compat/docker-default-seccomp.json"

/* `relative` under $NSBOX_SRC, or under the current directory. */
static char *repo_path(const char *relative)
{
        const char *root = getenv("NSBOX_SRC");
        char *path = NULL;

        if (root == NULL || root[0] == '\0')
                root = ".";
        assert_true(asprintf(&path, "%s/%s", root, relative) >= 0);
        return path;
}

static void compile_repo_file(const char *relative, struct seccomp_program *prog)
{
        _cleanup_free_ char *path = repo_path(relative);
        _cleanup_error_ nsbox_error_t *err = NULL;

        if (seccomp_profile_compile_file(path, prog, &err) < 0)
                fail_msg("compile %s: %s", path, err != NULL ? err->message : "(no message)");
        assert_non_null(prog->filter);
        assert_true(prog->len > 0);
}

/* Docker's profile is third-party data kept beside the repo (shared/compat/),
 * not in it: CI has it; a bare clone elsewhere does not, and skips. */
static void compile_docker_profile(struct seccomp_program *prog)
{
        _cleanup_free_ char *path = repo_path(DOCKER_PROFILE);

        if (access(path, R_OK) < 0) {
                print_message("skipped: %s not found (shared/compat sits beside the repo in CI)\n", path);
                skip();
        }
        compile_repo_file(DOCKER_PROFILE, prog);
}

static void compile_text(const char *json, struct seccomp_program *prog)
{
        _cleanup_error_ nsbox_error_t *err = NULL;

        if (seccomp_profile_compile_string("test.json", json, prog, &err) < 0)
                fail_msg("compile: %s", err != NULL ? err->message : "(no message)");
}

/* In a forked probe child: no core files, and a crash ends the child (cmocka
 * catches these signals in the test process, and in a child that inherits
 * its handlers would run the rest of the suite; int $0x80 where the kernel
 * has no i386 entry raises SIGSEGV). Then no_new_privs and prog, if any:
 * exit 2 or 3 if either fails. */
static void probe_child_start(const struct seccomp_program *prog)
{
        static const int crashes[] = { SIGSEGV, SIGILL, SIGBUS, SIGFPE, SIGABRT, SIGSYS };
        struct rlimit no_core = { 0, 0 };

        for (size_t i = 0; i < sizeof(crashes) / sizeof(crashes[0]); i++)
                signal(crashes[i], SIG_DFL);
        setrlimit(RLIMIT_CORE, &no_core);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                _exit(2);
        if (prog != NULL && seccomp_program_load(prog) < 0)
                _exit(3);
}
