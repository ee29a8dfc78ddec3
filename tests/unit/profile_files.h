/* Seccomp profiles for the unit tests: the repo's, Docker's (beside the
 * repo in CI) and inline JSON, compiled or the test fails. Include after
 * cmocka.h. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
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
