/* runtime/seccomp_check.c: the BPF interpreter that decides whether the
 * sandbox init can carry the seccomp filter itself, checked against real
 * profiles and against the kernel. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <linux/audit.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "seccomp_check.h"
#include "seccomp_profile.h"

#define DEFAULT_PROFILE "seccomp-profiles/default.json"
#define DOCKER_PROFILE  "../shared/compat/docker-default-seccomp.json"

static struct sock_fprog as_fprog(const struct seccomp_program *prog)
{
        return (struct sock_fprog){ .len = prog->len, .filter = prog->filter };
}

/* default.json without `name` in any entry: its default action (ERRNO)
 * applies to it. */
static void compile_default_without(const char *name, struct seccomp_program *prog)
{
        json_error_t jerr;
        json_t *root = json_load_file(DEFAULT_PROFILE, 0, &jerr);
        assert_non_null(root);
        size_t i, j;
        json_t *entry, *n;
        int removed = 0;
        json_array_foreach(json_object_get(root, "syscalls"), i, entry)
        {
                json_t *names = json_object_get(entry, "names");
                json_array_foreach(names, j, n)
                {
                        if (strcmp(json_string_value(n), name) == 0) {
                                json_array_remove(names, j);
                                removed++;
                                break;
                        }
                }
        }
        assert_true(removed > 0);
        char *text = json_dumps(root, 0);
        json_decref(root);
        nsbox_error_t *err = NULL;
        int r = seccomp_profile_compile_string("modified", text, prog, &err);
        free(text);
        if (r < 0)
                fail_msg("compile: %s", err->message);
}

static uint32_t action_of(const struct seccomp_program *prog, uint32_t arch, int nr, uint64_t arg0)
{
        struct sock_fprog f = as_fprog(prog);
        struct seccomp_data d = { .nr = nr, .arch = arch, .args = { arg0 } };
        uint32_t action = 0;
        assert_int_equal(seccomp_check_run(&f, &d, &action), 0);
        return action & SECCOMP_RET_ACTION_FULL;
}

static bool file_lets_the_runtime_through(const char *path)
{
        struct seccomp_program prog = { 0 };
        nsbox_error_t *err = NULL;
        assert_int_equal(seccomp_profile_compile_file(path, &prog, &err), 0);
        struct sock_fprog f = as_fprog(&prog);
        bool allowed = seccomp_check_runtime_allowed(&f);
        seccomp_program_free(&prog);
        return allowed;
}

static void test_runtime_is_allowed_by_the_default_profile(void **state)
{
        assert_true(file_lets_the_runtime_through(DEFAULT_PROFILE));
}

static void test_runtime_is_allowed_by_dockers_profile(void **state)
{
        if (access(DOCKER_PROFILE, R_OK) < 0)
                skip();
        assert_true(file_lets_the_runtime_through(DOCKER_PROFILE));
}

static void test_a_profile_denying_a_runtime_syscall_is_not_carried_by_the_init(void **state)
{
        static const char *const needed[] = { "setresuid", "capset",      "wait4",
                                              "execve",    "close_range", "setsid" };
        for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
                struct seccomp_program prog = { 0 };
                compile_default_without(needed[i], &prog);
                struct sock_fprog f = as_fprog(&prog);
                if (seccomp_check_runtime_allowed(&f))
                        fail_msg("a profile denying %s was judged fit for the init", needed[i]);
                seccomp_program_free(&prog);
        }
        /* Denying something the runtime never calls changes nothing. */
        struct seccomp_program prog = { 0 };
        compile_default_without("getcpu", &prog);
        struct sock_fprog f = as_fprog(&prog);
        assert_true(seccomp_check_runtime_allowed(&f));
        seccomp_program_free(&prog);
}

static void test_an_allow_list_profile_is_not_carried_by_the_init(void **state)
{
        static const char profile[] = "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": "
                                      "[\"read\", \"write\", \"exit_group\", \"execve\"], \"action\": "
                                      "\"SCMP_ACT_ALLOW\"}]}";
        struct seccomp_program prog = { 0 };
        nsbox_error_t *err = NULL;
        assert_int_equal(seccomp_profile_compile_string("allow-list", profile, &prog, &err), 0);
        struct sock_fprog f = as_fprog(&prog);
        assert_false(seccomp_check_runtime_allowed(&f));
        assert_int_equal(action_of(&prog, AUDIT_ARCH_X86_64, SYS_read, 0), SECCOMP_RET_ALLOW);
        assert_int_equal(action_of(&prog, AUDIT_ARCH_X86_64, SYS_getpid, 0), SECCOMP_RET_ERRNO);
        seccomp_program_free(&prog);
}

/* What the kernel does with the program: the child loads it, makes the
 * call and reports -errno (0 on success) through the pipe. */
static int kernel_result(const struct seccomp_program *prog, long nr, long a0, long a1, long a2)
{
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                struct sock_fprog f = as_fprog(prog);
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f) < 0)
                        _exit(2);
                long r = syscall(nr, a0, a1, a2);
                int result = r < 0 ? -errno : 0;
                if (r >= 0 && nr == SYS_socket)
                        close((int)r);
                if (write(p[1], &result, sizeof(result)) != sizeof(result))
                        _exit(3);
                _exit(0);
        }
        close(p[1]);
        int result = 1;
        ssize_t n = read(p[0], &result, sizeof(result));
        close(p[0]);
        int status;
        waitpid(pid, &status, 0);
        assert_int_equal(n, sizeof(result));
        return result;
}

static void test_the_interpreter_agrees_with_the_kernel(void **state)
{
        struct seccomp_program prog = { 0 };
        nsbox_error_t *err = NULL;
        assert_int_equal(seccomp_profile_compile_file(DEFAULT_PROFILE, &prog, &err), 0);
        static const struct {
                long nr, a0, a1, a2;
        } calls[] = {
                { SYS_getpid, 0, 0, 0 },
                { SYS_unshare, CLONE_NEWUSER, 0, 0 },
                { SYS_unshare, CLONE_NEWNET, 0, 0 },
                { SYS_socket, AF_UNIX, SOCK_STREAM, 0 },
                { SYS_socket, AF_PACKET, SOCK_RAW, 0 },
                { SYS_socket, AF_INET, SOCK_STREAM, IPPROTO_TCP },
                { SYS_socket, AF_INET, SOCK_STREAM, 262 /* IPPROTO_MPTCP */ },
                { SYS_setns, -1, 0, 0 },
                { SYS_personality, 0xffffffff, 0, 0 },
        };
        for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
                struct sock_fprog f = as_fprog(&prog);
                struct seccomp_data d = { .nr = (int)calls[i].nr,
                                          .arch = AUDIT_ARCH_X86_64,
                                          .args = { (uint64_t)calls[i].a0, (uint64_t)calls[i].a1,
                                                    (uint64_t)calls[i].a2 } };
                uint32_t action;
                assert_int_equal(seccomp_check_run(&f, &d, &action), 0);
                int kernel = kernel_result(&prog, calls[i].nr, calls[i].a0, calls[i].a1, calls[i].a2);
                uint32_t what = action & SECCOMP_RET_ACTION_FULL;
                if (what == SECCOMP_RET_ERRNO) {
                        if (kernel != -(int)(action & SECCOMP_RET_DATA))
                                fail_msg("syscall %ld: interpreter says errno %u, kernel gave %d",
                                         calls[i].nr, action & SECCOMP_RET_DATA, kernel);
                } else if (what == SECCOMP_RET_ALLOW) {
                        /* Allowed: whatever the kernel answers, it is not the filter's errno. */
                        if (kernel == -EPERM && calls[i].nr == SYS_getpid)
                                fail_msg("getpid denied by the kernel, allowed by the interpreter");
                } else {
                        fail_msg("syscall %ld: unexpected action 0x%x", calls[i].nr, action);
                }
        }
        /* Another ABI is never let through. */
        assert_int_equal(action_of(&prog, AUDIT_ARCH_I386, 20 /* getpid on i386 */, 0),
                         SECCOMP_RET_KILL_PROCESS);
        seccomp_program_free(&prog);
}

static void test_malformed_programs_are_refused(void **state)
{
        struct seccomp_data d = { .nr = SYS_getpid, .arch = AUDIT_ARCH_X86_64 };
        uint32_t action;
        const struct sock_filter out_of_range[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64),
                                                    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        const struct sock_filter misaligned[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2),
                                                  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        const struct sock_filter jump_out[] = { BPF_JUMP(BPF_JMP | BPF_JA, 5, 0, 0),
                                                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        const struct sock_filter no_return[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0) };
        const struct sock_filter divide_by_zero[] = { BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 0),
                                                      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        const struct sock_filter unknown[] = { { 0xffff, 0, 0, 0 },
                                               BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        const struct {
                const struct sock_filter *f;
                unsigned short len;
        } bad[] = {
                { out_of_range, 2 }, { misaligned, 2 },     { jump_out, 2 },
                { no_return, 1 },    { divide_by_zero, 2 }, { unknown, 2 },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct sock_fprog f = { .len = bad[i].len, .filter = (struct sock_filter *)bad[i].f };
                assert_int_equal(seccomp_check_run(&f, &d, &action), -EINVAL);
                assert_false(seccomp_check_runtime_allowed(&f));
        }
        /* And a well-formed one runs. */
        const struct sock_filter good[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
                                            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpid, 0, 1),
                                            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 7),
                                            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        struct sock_fprog f = { .len = 4, .filter = (struct sock_filter *)good };
        assert_int_equal(seccomp_check_run(&f, &d, &action), 0);
        assert_int_equal(action, SECCOMP_RET_ERRNO | 7);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_runtime_is_allowed_by_the_default_profile),
                cmocka_unit_test(test_runtime_is_allowed_by_dockers_profile),
                cmocka_unit_test(test_a_profile_denying_a_runtime_syscall_is_not_carried_by_the_init),
                cmocka_unit_test(test_an_allow_list_profile_is_not_carried_by_the_init),
                cmocka_unit_test(test_the_interpreter_agrees_with_the_kernel),
                cmocka_unit_test(test_malformed_programs_are_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
