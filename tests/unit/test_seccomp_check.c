/* SPDX-License-Identifier: Apache-2.0 */
/* runtime/seccomp_check.c: the BPF interpreter and the check that decides
 * whether nsbox-init can carry a sandbox's seccomp filter itself.
 *
 * The interpreter is held to what the kernel does: each comparison forks a
 * child that loads the program, makes the call and reports the result
 * through a pipe, and runs the call once more unfiltered, so that a result
 * the kernel would give anyway (no privilege, no i386 emulation) is reported
 * as proving nothing about the filter. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/audit.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "seccomp_check.h"
#include "profile_files.h"
#include "seccomp_profile.h"

#define X32_SYSCALL_BIT 0x40000000L
#define I386_NR_GETPID  20L
#define AF_VSOCK_FAMILY 40
#define UNASSIGNED_NR   1000L /* no syscall has this number on x86_64 */

#define ERRNO(e)   (SECCOMP_RET_ERRNO | (e))
#define RET_ALLOW  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define ARG_LOW(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define NR_OFFSET  offsetof(struct seccomp_data, nr)
#define POINTER(p) ((uint64_t)(uintptr_t)(p))
#define ANY_ACTION 0xffffffffu /* no expectation: the kernel alone judges */

/* ---- profiles ------------------------------------------------------------ */

/* default.json with `rule` (a JSON object, or NULL) as its first entry, and
 * without `unlisted` (or NULL) in any other entry. First, because libseccomp
 * keeps the first unconditional rule it is given for a syscall: after the
 * allow list, a rule for a syscall on it would change nothing. */
static void compile_default_with(const char *rule, const char *unlisted, struct seccomp_program *prog)
{
        _cleanup_free_ char *path = repo_path(DEFAULT_PROFILE);
        _cleanup_json_ json_t *profile = NULL;
        _cleanup_free_ char *text = NULL;
        json_t *syscalls, *entry, *name;
        json_error_t jerr;
        size_t i, j;

        profile = json_load_file(path, 0, &jerr);
        if (profile == NULL)
                fail_msg("%s: %s", path, jerr.text);
        syscalls = json_object_get(profile, "syscalls");
        json_array_foreach(syscalls, i, entry)
        {
                json_t *names = json_object_get(entry, "names");

                json_array_foreach(names, j, name)
                {
                        if (unlisted != NULL && strcmp(json_string_value(name), unlisted) == 0) {
                                json_array_remove(names, j);
                                break;
                        }
                }
        }
        if (rule != NULL) {
                json_t *first = json_loads(rule, 0, &jerr);
                if (first == NULL)
                        fail_msg("rule %s: %s", rule, jerr.text);
                assert_int_equal(json_array_insert_new(syscalls, 0, first), 0);
        }
        text = json_dumps(profile, 0);
        assert_non_null(text);
        compile_text(text, prog);
}

static struct sock_fprog as_fprog(const struct seccomp_program *prog)
{
        return (struct sock_fprog){ .len = prog->len, .filter = prog->filter };
}

static bool lets_the_runtime_through(const struct seccomp_program *prog)
{
        struct sock_fprog fprog = as_fprog(prog);

        return seccomp_check_runtime_allowed(&fprog);
}

/* ---- one syscall, through the interpreter and through the kernel --------- */

struct syscall_case {
        const char *what;
        long nr;
        uint64_t args[6];
        uint32_t action; /* what the profile under test answers, or ANY_ACTION */
        bool i386;       /* made through int $0x80 (AUDIT_ARCH_I386), not syscall */
};

#define CALL(what, action, nr, ...)                      \
        {                                                \
                what, nr, { __VA_ARGS__ }, action, false \
        }

/* What became of a call: killed by a signal, or its result (0 for success,
 * -errno). */
struct outcome {
        int signal;
        long result;
};

static bool outcome_equal(struct outcome a, struct outcome b)
{
        return a.signal == b.signal && a.result == b.result;
}

static const char *describe(struct outcome o, char *buf, size_t size)
{
        if (o.signal != 0)
                snprintf(buf, size, "killed by signal %d", o.signal);
        else if (o.result == 0)
                snprintf(buf, size, "success");
        else
                snprintf(buf, size, "%s", strerror((int)-o.result));
        return buf;
}

static uint32_t interpreted_action(const struct seccomp_program *prog, const struct syscall_case *c)
{
        struct sock_fprog fprog = as_fprog(prog);
        struct seccomp_data data = { .nr = (int)c->nr,
                                     .arch = c->i386 ? AUDIT_ARCH_I386 : AUDIT_ARCH_X86_64 };
        uint32_t action = 0;

        memcpy(data.args, c->args, sizeof(data.args));
        if (seccomp_check_run(&fprog, &data, &action) < 0)
                fail_msg("%s: the interpreter refused a program the compiler made", c->what);
        return action;
}

/* In the probe child: make the call, return 0 or -errno. */
static long make_call(const struct syscall_case *c)
{
        long r;

        if (c->i386) {
                /* The 32-bit entry point returns -errno itself. */
                __asm__ volatile("int $0x80"
                                 : "=a"(r)
                                 : "a"(c->nr), "b"(c->args[0]), "c"(c->args[1]), "d"(c->args[2])
                                 : "memory", "r8", "r9", "r10", "r11");
                return r < 0 ? r : 0;
        }
        r = syscall(c->nr, c->args[0], c->args[1], c->args[2], c->args[3], c->args[4], c->args[5]);
        if (r < 0)
                return -errno;
        if (c->nr == SYS_clone) {
                if (r == 0)
                        _exit(0);
                waitpid((pid_t)r, NULL, 0);
        }
        return 0;
}

/* prog NULL: the call unfiltered. */
static struct outcome kernel_outcome(const struct seccomp_program *prog, const struct syscall_case *c)
{
        int fds[2], status;
        long result = 0;
        ssize_t n;

        assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(fds[0]);
                probe_child_start(prog);
                result = make_call(c);
                _exit(write(fds[1], &result, sizeof(result)) == sizeof(result) ? 0 : 4);
        }
        close(fds[1]);
        do
                n = read(fds[0], &result, sizeof(result));
        while (n < 0 && errno == EINTR);
        close(fds[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status))
                return (struct outcome){ .signal = WTERMSIG(status) };
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n != sizeof(result))
                fail_msg("%s: probe child status 0x%x (exit 3: the program did not load)", c->what, status);
        return (struct outcome){ .result = result };
}

static bool is_allow(uint32_t action)
{
        action &= SECCOMP_RET_ACTION_FULL;
        return action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG;
}

/* What the kernel does with the call if the program answers `action`. */
static struct outcome outcome_of(uint32_t action, struct outcome unfiltered)
{
        switch (action & SECCOMP_RET_ACTION_FULL) {
        case SECCOMP_RET_ALLOW:
        case SECCOMP_RET_LOG:
                return unfiltered;
        case SECCOMP_RET_ERRNO:
                return (struct outcome){ .result = -(long)(action & SECCOMP_RET_DATA) };
        case SECCOMP_RET_TRACE:
                /* No tracer is attached. */
                return (struct outcome){ .result = -ENOSYS };
        default:
                /* KILL_PROCESS, KILL_THREAD, TRAP */
                return (struct outcome){ .signal = SIGSYS };
        }
}

/* Whether the kernel, running prog on the call, does what `action` says. */
static bool kernel_agrees(const struct seccomp_program *prog, const struct syscall_case *c, uint32_t action)
{
        char want_text[64], got_text[64];
        struct outcome unfiltered = kernel_outcome(NULL, c);

        if (unfiltered.signal != 0) {
                /* The call cannot be made here at all (an ABI this kernel
                 * lacks): only the expected action speaks for it. */
                fprintf(stderr, "  note: %s is %s even unfiltered; not compared with the kernel\n", c->what,
                        describe(unfiltered, got_text, sizeof(got_text)));
                return true;
        }
        struct outcome want = outcome_of(action, unfiltered);
        struct outcome got = kernel_outcome(prog, c);
        if (!outcome_equal(got, want)) {
                fprintf(stderr,
                        "  %s: the interpreter answers 0x%x, so the kernel should give %s; it gave %s\n",
                        c->what, action, describe(want, want_text, sizeof(want_text)),
                        describe(got, got_text, sizeof(got_text)));
                return false;
        }
        /* EPERM and ENOSYS are also what profiles deny with. */
        bool looks_denied = unfiltered.result == -EPERM || unfiltered.result == -ENOSYS;
        if (is_allow(action) ? looks_denied : outcome_equal(want, unfiltered))
                fprintf(stderr, "  note: %s is inconclusive here (unfiltered: %s)\n", c->what,
                        describe(unfiltered, got_text, sizeof(got_text)));
        return true;
}

static void check_cases(const struct seccomp_program *prog, const struct syscall_case *cases, size_t n)
{
        bool ok = true;

        for (size_t i = 0; i < n; i++) {
                uint32_t action = interpreted_action(prog, &cases[i]);

                if (cases[i].action != ANY_ACTION && action != cases[i].action) {
                        fprintf(stderr, "  %s: the interpreter answers 0x%x, the profile means 0x%x\n",
                                cases[i].what, action, cases[i].action);
                        ok = false;
                }
                if (!kernel_agrees(prog, &cases[i], action))
                        ok = false;
        }
        assert_true(ok);
}

/* ---- the interpreter agrees with the kernel ------------------------------ */

static const char missing_path[] = "/nonexistent-nsbox-test";
static int socket_pair[2];

/* Calls that are safe to make (in a throwaway child) with or without the
 * filter, and what the default profile answers. Each denied call is one the
 * kernel answers otherwise (success as root, EBADF, ENOENT, EINVAL), so that
 * the filter's EPERM stands out. */
static const struct syscall_case default_profile_cases[] = {
        CALL("getpid", SECCOMP_RET_ALLOW, SYS_getpid),
        CALL("clone with fork's flags", SECCOMP_RET_ALLOW, SYS_clone, SIGCHLD),
        CALL("clone with the runtime's flags", SECCOMP_RET_ALLOW, SYS_clone,
             CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID | SIGCHLD),
        CALL("clone(CLONE_NEWUSER)", ERRNO(EPERM), SYS_clone, CLONE_NEWUSER | SIGCHLD),
        CALL("clone(CLONE_NEWNET)", ERRNO(EPERM), SYS_clone, CLONE_NEWNET | SIGCHLD),
        CALL("unshare(CLONE_NEWUSER)", ERRNO(EPERM), SYS_unshare, CLONE_NEWUSER),
        CALL("clone3", ERRNO(ENOSYS), SYS_clone3, 0, 0),
        CALL("socket(AF_UNIX)", SECCOMP_RET_ALLOW, SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0),
        CALL("socket(AF_INET, SOCK_STREAM)", SECCOMP_RET_ALLOW, SYS_socket, AF_INET,
             SOCK_STREAM | SOCK_CLOEXEC, 0),
        CALL("socket(AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6)", SECCOMP_RET_ALLOW, SYS_socket, AF_INET6,
             SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMPV6),
        CALL("socket(AF_INET, SOCK_RAW)", ERRNO(EPERM), SYS_socket, AF_INET, SOCK_RAW | SOCK_CLOEXEC,
             IPPROTO_ICMP),
        CALL("socket(AF_PACKET)", ERRNO(EPERM), SYS_socket, AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0),
        CALL("socket(AF_VSOCK)", ERRNO(EPERM), SYS_socket, AF_VSOCK_FAMILY, SOCK_STREAM | SOCK_CLOEXEC, 0),
        /* The kernel reads an int; the filter compares all 64 bits. */
        CALL("socket(AF_INET) with bit 32 set in the family", ERRNO(EPERM), SYS_socket,
             (1ULL << 32) | AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
        CALL("socketpair(AF_UNIX)", SECCOMP_RET_ALLOW, SYS_socketpair, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
             POINTER(socket_pair)),
        CALL("socketpair(AF_INET)", ERRNO(EPERM), SYS_socketpair, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0,
             POINTER(socket_pair)),
        CALL("personality(query)", SECCOMP_RET_ALLOW, SYS_personality, 0xffffffff),
        CALL("personality(query) with the upper 32 bits set", ERRNO(EPERM), SYS_personality, UINT64_MAX),
        CALL("personality(ADDR_NO_RANDOMIZE)", ERRNO(EPERM), SYS_personality, ADDR_NO_RANDOMIZE),
        CALL("setns", ERRNO(EPERM), SYS_setns, (uint64_t)-1, 0),
        CALL("mount on a missing directory", ERRNO(EPERM), SYS_mount, POINTER("none"), POINTER(missing_path),
             POINTER("tmpfs"), 0, 0),
        CALL("execve of a missing file", SECCOMP_RET_ALLOW, SYS_execve, POINTER(missing_path), 0, 0),
        CALL("an unassigned syscall number", ERRNO(EPERM), UNASSIGNED_NR),
        CALL("getpid through the x32 ABI", SECCOMP_RET_KILL_PROCESS, X32_SYSCALL_BIT | SYS_getpid),
        { "getpid through int $0x80 (i386)", I386_NR_GETPID, { 0 }, SECCOMP_RET_KILL_PROCESS, true },
};

static void test_interpreter_agrees_with_the_kernel_on_the_default_profile(void **state)
{
        struct seccomp_program prog;

        compile_repo_file(DEFAULT_PROFILE, &prog);
        check_cases(&prog, default_profile_cases, ARRAY_SIZE(default_profile_cases));
        seccomp_program_free(&prog);
}

/* Another shape of program (archMap brings in i386 and x32, rules with NE
 * and MASKED_EQ): the kernel alone says what the answers must be. */
static void test_interpreter_agrees_with_the_kernel_on_dockers_profile(void **state)
{
        struct syscall_case cases[ARRAY_SIZE(default_profile_cases)];
        struct seccomp_program prog;

        compile_docker_profile(&prog);
        memcpy(cases, default_profile_cases, sizeof(cases));
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
                cases[i].action = ANY_ACTION;
        check_cases(&prog, cases, ARRAY_SIZE(cases));
        seccomp_program_free(&prog);
}

/* A program that puts getppid's first argument in A and its second in X,
 * runs `body`, and returns the low 12 bits of A as an errno: the kernel's
 * answer is the syscall's error. Every other syscall is allowed. */
#define BODY_MAX 4

struct computation {
        const char *what;
        struct sock_filter body[BODY_MAX];
        unsigned short body_len;
        uint64_t a, x;
};

static unsigned short build_errno_program(const struct computation *c, struct sock_filter *out)
{
        const struct sock_filter head[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 1, 0),
                RET_ALLOW,
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(1)),
                BPF_STMT(BPF_MISC | BPF_TAX, 0),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(0)),
        };
        const struct sock_filter tail[] = {
                BPF_STMT(BPF_ALU | BPF_AND | BPF_K, SECCOMP_RET_DATA & 0xfff),
                BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_ERRNO),
                BPF_STMT(BPF_RET | BPF_A, 0),
        };
        unsigned short n = 0;

        memcpy(out, head, sizeof(head));
        n += ARRAY_SIZE(head);
        memcpy(out + n, c->body, c->body_len * sizeof(out[0]));
        n += c->body_len;
        memcpy(out + n, tail, sizeof(tail));
        return n + ARRAY_SIZE(tail);
}

/* Jump bodies: A = 111 if the jump is taken, 222 if not. */
#define JUMP_BODY(op)                                                         \
        { op, BPF_STMT(BPF_LD | BPF_IMM, 222), BPF_STMT(BPF_JMP | BPF_JA, 1), \
          BPF_STMT(BPF_LD | BPF_IMM, 111) },                                  \
            4

static const struct computation computations[] = {
        { "add k", { BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 1000) }, 1, 9, 0 },
        { "add x", { BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0) }, 1, 7, 30 },
        { "sub x, wrapping", { BPF_STMT(BPF_ALU | BPF_SUB | BPF_X, 0) }, 1, 5, 9 },
        { "mul k", { BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, 37) }, 1, 91, 0 },
        { "div k", { BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 7) }, 1, 4000, 0 },
        { "div x", { BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0) }, 1, 4000, 3 },
        { "and x", { BPF_STMT(BPF_ALU | BPF_AND | BPF_X, 0) }, 1, 0xabc, 0x0f0 },
        { "or k", { BPF_STMT(BPF_ALU | BPF_OR | BPF_K, 0x300) }, 1, 0x10c, 0 },
        { "xor x", { BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0) }, 1, 0xff0, 0x0ff },
        { "lsh k", { BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 4) }, 1, 0x2b, 0 },
        { "rsh x", { BPF_STMT(BPF_ALU | BPF_RSH | BPF_X, 0) }, 1, 0xabc000, 12 },
        { "neg", { BPF_STMT(BPF_ALU | BPF_NEG, 0) }, 1, 5, 0 },
        { "txa", { BPF_STMT(BPF_MISC | BPF_TXA, 0) }, 1, 5, 77 },
        { "scratch memory",
          { BPF_STMT(BPF_ST, 15), BPF_STMT(BPF_LD | BPF_IMM, 1), BPF_STMT(BPF_LDX | BPF_MEM, 15),
            BPF_STMT(BPF_MISC | BPF_TXA, 0) },
          4,
          321,
          0 },
        { "stx and ld mem",
          { BPF_STMT(BPF_STX, 0), BPF_STMT(BPF_LD | BPF_MEM, 0), BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 1) },
          3,
          0,
          41 },
        { "the length of seccomp_data", { BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0) }, 1, 0, 0 },
        { "the upper half of an argument",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(0) + 4) },
          1,
          (0x123ULL << 32) | 7,
          0 },
        { "jgt k, taken", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 10, 2, 0)), 11, 0 },
        { "jgt k, equal", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 10, 2, 0)), 10, 0 },
        { "jge x, equal", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_X, 0, 2, 0)), 10, 10 },
        { "jge x, below", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_X, 0, 2, 0)), 9, 10 },
        { "jeq x", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 2, 0)), 6, 6 },
        { "jset k, no common bit", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x10, 2, 0)), 0xef, 0 },
        { "jset x, a common bit", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_X, 0, 2, 0)), 0x11, 0x10 },
        { "lsh x by 33: the kernel takes the low 5 bits",
          { BPF_STMT(BPF_ALU | BPF_LSH | BPF_X, 0) },
          1,
          0x2b,
          33 },
        { "rsh x by 36", { BPF_STMT(BPF_ALU | BPF_RSH | BPF_X, 0) }, 1, 0xabc0, 36 },
        { "unsigned comparison", JUMP_BODY(BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 1, 2, 0)), 0xffffffff, 0 },
};

static void test_interpreter_computes_like_the_kernel(void **state)
{
        bool ok = true;

        for (size_t i = 0; i < ARRAY_SIZE(computations); i++) {
                struct sock_filter filter[16];
                struct seccomp_program prog = { .filter = filter };
                const struct syscall_case call =
                    CALL(computations[i].what, ANY_ACTION, SYS_getppid, computations[i].a, computations[i].x);

                prog.len = build_errno_program(&computations[i], filter);
                uint32_t action = interpreted_action(&prog, &call);
                if ((action & SECCOMP_RET_ACTION_FULL) != SECCOMP_RET_ERRNO) {
                        fprintf(stderr, "  %s: the interpreter answers 0x%x, not an errno\n", call.what,
                                action);
                        ok = false;
                        continue;
                }
                if (!kernel_agrees(&prog, &call, action))
                        ok = false;
        }
        assert_true(ok);
}

/* ---- whether the init can carry the filter ------------------------------- */

static void test_the_default_profile_lets_the_runtime_through(void **state)
{
        struct seccomp_program prog;

        compile_repo_file(DEFAULT_PROFILE, &prog);
        assert_true(lets_the_runtime_through(&prog));
        seccomp_program_free(&prog);
}

static void test_dockers_profile_lets_the_runtime_through(void **state)
{
        struct seccomp_program prog;

        compile_docker_profile(&prog);
        assert_true(lets_the_runtime_through(&prog));
        seccomp_program_free(&prog);
}

/* default.json changed one way: `rule` made its first entry (NULL: none)
 * and `unlisted` taken out of its allow list (NULL: none); runtime_passes
 * is the verdict, and `call` what the interpreter must then answer for the
 * syscall concerned. */
struct profile_change {
        const char *rule;
        const char *unlisted;
        bool runtime_passes;
        struct syscall_case call;
};

static const struct profile_change one_denial[] = {
        { "{\"names\": [\"setresuid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13}", NULL, false,
          CALL("setresuid", ERRNO(EACCES), SYS_setresuid, 1000, 1000, 1000) },
        { "{\"names\": [\"capset\"], \"action\": \"SCMP_ACT_KILL_THREAD\"}", NULL, false,
          CALL("capset", SECCOMP_RET_KILL_THREAD, SYS_capset) },
        { "{\"names\": [\"prctl\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 22}", NULL, false,
          CALL("prctl", ERRNO(EINVAL), SYS_prctl, PR_SET_NO_NEW_PRIVS, 1) },
        { "{\"names\": [\"clone\"], \"action\": \"SCMP_ACT_KILL_PROCESS\"}", NULL, false,
          CALL("clone", SECCOMP_RET_KILL_PROCESS, SYS_clone, SIGCHLD) },
        { "{\"names\": [\"wait4\"], \"action\": \"SCMP_ACT_TRAP\"}", NULL, false,
          CALL("wait4", SECCOMP_RET_TRAP, SYS_wait4, (uint64_t)-1) },
        /* No tracer is attached: the call fails with ENOSYS. (The compiler
         * gives TRACE the data EPERM, as runc does.) */
        { "{\"names\": [\"execve\"], \"action\": \"SCMP_ACT_TRACE\"}", NULL, false,
          CALL("execve", SECCOMP_RET_TRACE | EPERM, SYS_execve) },
        /* Left off the allow list: the default action (EPERM) applies. */
        { NULL, "close_range", false, CALL("close_range", ERRNO(EPERM), SYS_close_range, 5, ~0u, 0) },
        /* Denying what the runtime never calls changes nothing. */
        { "{\"names\": [\"getcpu\"], \"action\": \"SCMP_ACT_KILL_PROCESS\"}", NULL, true,
          CALL("getcpu", SECCOMP_RET_KILL_PROCESS, SYS_getcpu) },
        /* Logged is let through. */
        { "{\"names\": [\"setresuid\"], \"action\": \"SCMP_ACT_LOG\"}", NULL, true,
          CALL("setresuid", SECCOMP_RET_LOG, SYS_setresuid, 0, 0, 0) },
};

static void check_profile_changes(const struct profile_change *changes, size_t n)
{
        bool ok = true;

        for (size_t i = 0; i < n; i++) {
                const struct profile_change *change = &changes[i];
                const char *how = change->rule != NULL ? change->rule : change->unlisted;
                struct seccomp_program prog;

                compile_default_with(change->rule, change->unlisted, &prog);
                /* The change must have taken, or the verdict proves nothing. */
                uint32_t action = interpreted_action(&prog, &change->call);
                if (action != change->call.action) {
                        fprintf(stderr, "  %s: %s answers 0x%x, want 0x%x\n", how, change->call.what, action,
                                change->call.action);
                        ok = false;
                }
                if (lets_the_runtime_through(&prog) != change->runtime_passes) {
                        fprintf(stderr, "  %s: judged %s for the init\n", how,
                                change->runtime_passes ? "unfit" : "fit");
                        ok = false;
                }
                seccomp_program_free(&prog);
        }
        assert_true(ok);
}

static void test_a_profile_denying_the_runtime_one_syscall_is_left_to_each_exec(void **state)
{
        check_profile_changes(one_denial, ARRAY_SIZE(one_denial));
}

/* prctl allowed for every option but one: the verdict follows the options
 * the runtime passes. */
static const struct profile_change prctl_but_one[] = {
        { "{\"names\": [\"prctl\"], \"action\": \"SCMP_ACT_ALLOW\", "
          "\"args\": [{\"index\": 0, \"value\": 38, \"op\": \"SCMP_CMP_NE\"}]}",
          "prctl", false,
          CALL("prctl(PR_SET_NO_NEW_PRIVS)", ERRNO(EPERM), SYS_prctl, PR_SET_NO_NEW_PRIVS, 1) },
        { "{\"names\": [\"prctl\"], \"action\": \"SCMP_ACT_ALLOW\", "
          "\"args\": [{\"index\": 0, \"value\": 21, \"op\": \"SCMP_CMP_NE\"}]}",
          "prctl", true, CALL("prctl(PR_GET_SECCOMP)", ERRNO(EPERM), SYS_prctl, PR_GET_SECCOMP) },
};

/* kill allowed for every signal but one: a supervisor passes on whatever
 * signal exec.kill brings (1 to 64), so only a signal outside that range
 * may be denied to the init. */
static const struct profile_change kill_but_one[] = {
        { "{\"names\": [\"kill\"], \"action\": \"SCMP_ACT_ALLOW\", "
          "\"args\": [{\"index\": 1, \"value\": 10, \"op\": \"SCMP_CMP_NE\"}]}",
          "kill", false, CALL("kill(SIGUSR1)", ERRNO(EPERM), SYS_kill, 2, SIGUSR1) },
        { "{\"names\": [\"kill\"], \"action\": \"SCMP_ACT_ALLOW\", "
          "\"args\": [{\"index\": 1, \"value\": 65, \"op\": \"SCMP_CMP_NE\"}]}",
          "kill", true, CALL("kill(65)", ERRNO(EPERM), SYS_kill, 2, 65) },
};

static void test_the_verdict_follows_the_arguments_the_runtime_passes(void **state)
{
        check_profile_changes(prctl_but_one, ARRAY_SIZE(prctl_but_one));
        check_profile_changes(kill_but_one, ARRAY_SIZE(kill_but_one));
}

static void test_an_allow_list_of_a_few_syscalls_is_left_to_each_exec(void **state)
{
        static const char *const profiles[] = {
                "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\", \"write\", "
                "\"exit_group\", \"execve\", \"brk\", \"mmap\"], \"action\": \"SCMP_ACT_ALLOW\"}]}",
                "{\"defaultAction\": \"SCMP_ACT_KILL_PROCESS\", \"syscalls\": [{\"names\": [\"read\", "
                "\"write\", \"exit_group\", \"execve\"], \"action\": \"SCMP_ACT_ALLOW\"}]}",
        };

        for (size_t i = 0; i < ARRAY_SIZE(profiles); i++) {
                struct seccomp_program prog;

                compile_text(profiles[i], &prog);
                assert_false(lets_the_runtime_through(&prog));
                seccomp_program_free(&prog);
        }
}

/* The other side of the line: an allow list of just what the runtime calls
 * once the init has loaded the filter (runtime/init.c, supervisor.c,
 * process.c, and glibc on their behalf) is enough. */
static void test_an_allow_list_of_what_the_runtime_calls_is_carried_by_the_init(void **state)
{
        static const char profile[] =
            "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": ["
            "\"poll\", \"recvmsg\", \"sendmsg\", \"read\", \"write\", \"close\", \"clone\", "
            "\"set_robust_list\", \"wait4\", \"exit_group\", \"prctl\", \"setresuid\", \"setresgid\", "
            "\"pipe2\", \"fcntl\", \"signalfd4\", \"openat\", \"getpid\", \"getpgid\", \"kill\", \"dup2\", "
            "\"dup3\", "
            "\"close_range\", \"rt_sigprocmask\", \"setsid\", \"mmap\", \"mprotect\", \"munmap\", \"brk\", "
            "\"chdir\", \"getppid\", \"capset\", \"execve\"], \"action\": "
            "\"SCMP_ACT_ALLOW\"}]}";
        struct seccomp_program prog;

        compile_text(profile, &prog);
        assert_true(lets_the_runtime_through(&prog));
        seccomp_program_free(&prog);
}

/* ---- programs the interpreter refuses ------------------------------------ */

/* Does the kernel take the program? Asked in a child, which it then filters. */
static bool kernel_loads(const struct sock_filter *filter, unsigned short len)
{
        struct sock_fprog fprog = { .len = len, .filter = (struct sock_filter *)filter };
        int status;
        pid_t pid = fork();

        assert_true(pid >= 0);
        if (pid == 0) {
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                        _exit(2);
                /* Not seccomp_program_load: it refuses an empty program itself. */
                if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) == 0)
                        _exit(0);
                _exit(errno == EINVAL ? 1 : 3);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
                return true; /* loaded, and it kills exit_group */
        if (!WIFEXITED(status) || WEXITSTATUS(status) > 1)
                fail_msg("seccomp() child: status 0x%x", status);
        return WEXITSTATUS(status) == 0;
}

/* A malformed program, and where there is one, its twin that differs only
 * in what is wrong with it: the refusal is for that, not something else. */
struct malformed {
        const char *what;
        struct sock_filter bad[4], good[4];
        unsigned short len;
        bool has_twin;
};

#define LD_ALLOW BPF_STMT(BPF_LD | BPF_IMM, SECCOMP_RET_ALLOW)

static const struct malformed malformed_programs[] = {
        { "a load past the end of seccomp_data",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, sizeof(struct seccomp_data)), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, sizeof(struct seccomp_data) - 4), RET_ALLOW },
          2,
          true },
        { "a load far past the end",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0xfffffffc), RET_ALLOW },
          { { 0 } },
          2,
          false },
        { "a misaligned load",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4), RET_ALLOW },
          2,
          true },
        { "a half-word load",
          { BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0), RET_ALLOW },
          2,
          true },
        { "a jump past the end",
          { BPF_STMT(BPF_JMP | BPF_JA, 1), RET_ALLOW },
          { BPF_STMT(BPF_JMP | BPF_JA, 0), RET_ALLOW },
          2,
          true },
        { "a taken conditional jump past the end",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpid, 1, 0), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpid, 0, 0), RET_ALLOW },
          3,
          true },
        { "no return",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0), BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4) },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0), RET_ALLOW },
          2,
          true },
        { "an unknown opcode",
          { { 0xffff, 0, 0, 0 }, RET_ALLOW },
          { BPF_STMT(BPF_MISC | BPF_TAX, 0), RET_ALLOW },
          2,
          true },
        { "an indirect load", { BPF_STMT(BPF_LD | BPF_W | BPF_IND, 0), RET_ALLOW }, { { 0 } }, 2, false },
        { "a return of X",
          { LD_ALLOW, BPF_STMT(BPF_RET | BPF_X, 0) },
          { LD_ALLOW, BPF_STMT(BPF_RET | BPF_A, 0) },
          2,
          true },
        { "division by zero",
          { BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 0), RET_ALLOW },
          { BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 2), RET_ALLOW },
          2,
          true },
        { "a store past the scratch memory",
          { BPF_STMT(BPF_ST, 16), RET_ALLOW },
          { BPF_STMT(BPF_ST, 15), RET_ALLOW },
          2,
          true },
        { "a remainder",
          { BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, 3), RET_ALLOW },
          { BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, 3), RET_ALLOW },
          2,
          true },
        { "an absolute load into X",
          { BPF_STMT(BPF_LDX | BPF_W | BPF_ABS, 0), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0), RET_ALLOW },
          2,
          true },
        { "size bits on an immediate load",
          { BPF_STMT(BPF_LD | BPF_B | BPF_IMM, 1), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_IMM, 1), RET_ALLOW },
          2,
          true },
        { "a constant shift by 32",
          { BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 32), RET_ALLOW },
          { BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 31), RET_ALLOW },
          2,
          true },
        { "a load of a scratch word never stored",
          { LD_ALLOW, BPF_STMT(BPF_ST, 3), BPF_STMT(BPF_LD | BPF_MEM, 4), BPF_STMT(BPF_RET | BPF_A, 0) },
          { LD_ALLOW, BPF_STMT(BPF_ST, 4), BPF_STMT(BPF_LD | BPF_MEM, 4), BPF_STMT(BPF_RET | BPF_A, 0) },
          4,
          true },
        { "a load of a scratch word stored on one path only",
          { BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0), BPF_STMT(BPF_ST, 2), BPF_STMT(BPF_LD | BPF_MEM, 2),
            BPF_STMT(BPF_RET | BPF_A, 0) },
          { BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 0), BPF_STMT(BPF_ST, 2), BPF_STMT(BPF_LD | BPF_MEM, 2),
            BPF_STMT(BPF_RET | BPF_A, 0) },
          4,
          true },
        { "an untaken conditional jump past the end",
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffff, 5, 0), RET_ALLOW },
          { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffff, 0, 0), RET_ALLOW },
          3,
          true },
        { "a load past the scratch memory",
          { LD_ALLOW, BPF_STMT(BPF_ST, 15), BPF_STMT(BPF_LD | BPF_MEM, 16), BPF_STMT(BPF_RET | BPF_A, 0) },
          { LD_ALLOW, BPF_STMT(BPF_ST, 15), BPF_STMT(BPF_LD | BPF_MEM, 15), BPF_STMT(BPF_RET | BPF_A, 0) },
          4,
          true },
};

static void test_malformed_programs_are_refused_as_the_kernel_refuses_them(void **state)
{
        const struct seccomp_data data = { .nr = SYS_getpid, .arch = AUDIT_ARCH_X86_64 };
        bool ok = true;

        for (size_t i = 0; i < ARRAY_SIZE(malformed_programs); i++) {
                const struct malformed *m = &malformed_programs[i];
                struct sock_fprog bad = { .len = m->len, .filter = (struct sock_filter *)m->bad };
                struct sock_fprog good = { .len = m->len, .filter = (struct sock_filter *)m->good };
                uint32_t action = 0;
                int r = seccomp_check_run(&bad, &data, &action);

                if (r != -EINVAL || seccomp_check_runtime_allowed(&bad)) {
                        fprintf(stderr, "  %s: the interpreter returns %d\n", m->what, r);
                        ok = false;
                }
                if (kernel_loads(m->bad, m->len)) {
                        fprintf(stderr, "  %s: the kernel loads it (the test is wrong)\n", m->what);
                        ok = false;
                }
                if (!m->has_twin)
                        continue;
                r = seccomp_check_run(&good, &data, &action);
                if (r != 0 || !kernel_loads(m->good, m->len)) {
                        fprintf(stderr, "  %s, corrected: the interpreter returns %d\n", m->what, r);
                        ok = false;
                }
        }

        /* One instruction more than BPF_MAXINSNS. */
        static struct sock_filter longest[4097];
        for (size_t i = 0; i < ARRAY_SIZE(longest); i++)
                longest[i] = (struct sock_filter)RET_ALLOW;
        for (unsigned short len = 4096; len <= 4097; len++) {
                struct sock_fprog f = { .len = len, .filter = longest };
                uint32_t action = 0;
                bool interpreted = seccomp_check_run(&f, &data, &action) == 0;
                if (interpreted != (len == 4096) || kernel_loads(longest, len) != (len == 4096)) {
                        fprintf(stderr, "  a program of %u instructions: interpreter %d, kernel %d\n", len,
                                interpreted, kernel_loads(longest, len));
                        ok = false;
                }
        }

        /* An empty program: nothing to run, nothing to return. */
        struct sock_fprog empty = { .len = 0, .filter = (struct sock_filter *)malformed_programs[0].bad };
        uint32_t action = 0;
        if (seccomp_check_run(&empty, &data, &action) != -EINVAL || kernel_loads(empty.filter, 0)) {
                fprintf(stderr, "  an empty program is not refused\n");
                ok = false;
        }
        assert_true(ok);
}

/* Dividing by an X of zero cannot be seen before running: the kernel loads
 * the program and then returns 0 from it (SECCOMP_RET_KILL_THREAD). The
 * interpreter answers -EINVAL, which keeps the filter out of the init. */
static void test_division_by_zero_at_run_time_is_an_error(void **state)
{
        const struct sock_filter divide[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFFSET),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpid, 0, 1),
                RET_ALLOW,
                BPF_STMT(BPF_LDX | BPF_W | BPF_IMM, 0),
                BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
                RET_ALLOW,
        };
        struct seccomp_program prog = { .filter = (struct sock_filter *)divide, .len = ARRAY_SIZE(divide) };
        struct sock_fprog fprog = as_fprog(&prog);
        const struct syscall_case call = CALL("getppid", ANY_ACTION, SYS_getppid);
        struct seccomp_data data = { .nr = SYS_getppid, .arch = AUDIT_ARCH_X86_64 };
        uint32_t action = 0;

        assert_int_equal(seccomp_check_run(&fprog, &data, &action), -EINVAL);
        assert_false(seccomp_check_runtime_allowed(&fprog));
        assert_int_equal(kernel_outcome(&prog, &call).signal, SIGSYS);
        /* Only the path that divides is refused. */
        data.nr = SYS_getpid;
        assert_int_equal(seccomp_check_run(&fprog, &data, &action), 0);
        assert_int_equal(action, SECCOMP_RET_ALLOW);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_interpreter_agrees_with_the_kernel_on_the_default_profile),
                cmocka_unit_test(test_interpreter_agrees_with_the_kernel_on_dockers_profile),
                cmocka_unit_test(test_interpreter_computes_like_the_kernel),
                cmocka_unit_test(test_the_default_profile_lets_the_runtime_through),
                cmocka_unit_test(test_dockers_profile_lets_the_runtime_through),
                cmocka_unit_test(test_a_profile_denying_the_runtime_one_syscall_is_left_to_each_exec),
                cmocka_unit_test(test_the_verdict_follows_the_arguments_the_runtime_passes),
                cmocka_unit_test(test_an_allow_list_of_a_few_syscalls_is_left_to_each_exec),
                cmocka_unit_test(test_an_allow_list_of_what_the_runtime_calls_is_carried_by_the_init),
                cmocka_unit_test(test_malformed_programs_are_refused_as_the_kernel_refuses_them),
                cmocka_unit_test(test_division_by_zero_at_run_time_is_an_error),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
