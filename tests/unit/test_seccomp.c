/* SPDX-License-Identifier: Apache-2.0 */
/* Seccomp profile compiler: parsing, error messages, and what the compiled
 * programs make the kernel do. The kernel checks fork a child that loads the
 * program and reports each probe's result through a pipe. Every probe also
 * runs once without the filter, so a denial the kernel would hand out anyway
 * (no privilege, a sysctl) is reported as proving nothing on this host. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <linux/keyctl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asm/prctl.h>
#include <linux/bpf.h>

#include "cleanup.h"
#include "profile_files.h"
#include "seccomp_profile.h"

#define AF_VSOCK_FAMILY 40
#define X32_SYSCALL_BIT 0x40000000L
#define I386_NR_GETPID  20L

/* Probe results: -errno, or the syscall's non-negative return value. */
#define SUCCEEDS LONG_MIN

/* ---- running probes in a filtered child ---------------------------------- */

struct probe {
        const char *what;
        long (*run)(void);
        long want; /* an exact result, or SUCCEEDS */
};

/* A result only the filter should produce: EPERM for sandboxed calls, ENOSYS
 * for clone3, EACCES in the semantics test. Anything else the probes expect
 * (success, ENOENT, ESRCH) means the call reached the kernel. */
static bool probe_expects_denial(const struct probe *p)
{
        return p->want == -EPERM || p->want == -ENOSYS || p->want == -EACCES;
}

static long result_of(long r)
{
        return r < 0 ? -errno : r;
}

static bool probe_matches(const struct probe *p, long got)
{
        return p->want == SUCCEEDS ? got >= 0 : got == p->want;
}

/* Child: no_new_privs, load prog (NULL: run unfiltered), run every probe and
 * write the results to the pipe. Only syscalls after the load. */
static void run_probes(const struct seccomp_program *prog, const struct probe *probes, size_t n,
                       long *results)
{
        int fds[2];
        pid_t pid;
        int status;

        assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(fds[0]);
                probe_child_start(prog);
                for (size_t i = 0; i < n; i++) {
                        errno = 0;
                        long r = probes[i].run();
                        if (write(fds[1], &r, sizeof(r)) != sizeof(r))
                                _exit(4);
                }
                _exit(0);
        }
        close(fds[1]);
        size_t want = n * sizeof(long), got = 0;
        while (got < want) {
                ssize_t k = read(fds[0], (char *)results + got, want - got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                got += (size_t)k;
        }
        close(fds[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("probe child died: status 0x%x (exit 3 = seccomp_program_load failed)", status);
        assert_int_equal(got, want);
}

static void check_probes(const struct seccomp_program *prog, const struct probe *probes, size_t n)
{
        long filtered[n], baseline[n];
        bool ok = true;

        run_probes(NULL, probes, n, baseline);
        run_probes(prog, probes, n, filtered);
        for (size_t i = 0; i < n; i++) {
                if (probe_matches(&probes[i], filtered[i]))
                        continue;
                fprintf(stderr, "  probe %s: got %ld (%s), want %ld (unfiltered: %ld)\n", probes[i].what,
                        filtered[i], filtered[i] < 0 ? strerror((int)-filtered[i]) : "ok", probes[i].want,
                        baseline[i]);
                ok = false;
        }
        /* A denial the kernel hands out even without the filter proves
         * nothing about the filter; say so rather than count it. */
        for (size_t i = 0; i < n; i++) {
                if (probe_expects_denial(&probes[i]) && probe_matches(&probes[i], baseline[i]))
                        fprintf(stderr, "  note: probe %s is inconclusive here (unfiltered: %ld)\n",
                                probes[i].what, baseline[i]);
        }
        assert_true(ok);
}

/* Runs fn in a filtered child and returns its wait status. */
static int run_killable(const struct seccomp_program *prog, long (*fn)(void))
{
        pid_t pid;
        int status;

        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                probe_child_start(prog);
                long r = fn();
                _exit(r == getpid() ? 0 : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        return status;
}

/* ---- probes -------------------------------------------------------------- */

static long probe_getpid(void)
{
        return result_of(syscall(SYS_getpid));
}

static long probe_unshare_user(void)
{
        return result_of(unshare(CLONE_NEWUSER));
}

static long probe_setns(void)
{
        return result_of(setns(-1, 0)); /* EBADF when allowed */
}

static long probe_clone_newuser(void)
{
        long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0);

        if (r == 0)
                _exit(0);
        if (r > 0)
                waitpid((pid_t)r, NULL, 0);
        return result_of(r);
}

static long probe_fork(void)
{
        pid_t pid = fork();
        int status;

        if (pid == 0)
                _exit(7);
        if (pid < 0)
                return -errno;
        if (waitpid(pid, &status, 0) != pid)
                return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0 : -ECHILD;
}

static long probe_clone3(void)
{
        /* A NULL, zero-sized argument: EINVAL if the call got through. */
        return result_of(syscall(SYS_clone3, NULL, 0));
}

static long probe_mount(void)
{
        /* A target that does not exist: ENOENT if the call got through. */
        return result_of(mount("none", "/nonexistent-nsbox-test", "tmpfs", 0, NULL));
}

static long probe_fsopen(void)
{
        return result_of(syscall(SYS_fsopen, "tmpfs", 0));
}

static long probe_socket_packet(void)
{
        return result_of(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
}

static long probe_socket_inet_raw(void)
{
        return result_of(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
}

static long probe_socket_inet6_raw(void)
{
        return result_of(socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6));
}

static long probe_socket_inet_packet_type(void)
{
        /* The obsolete SOCK_PACKET type on AF_INET becomes an AF_PACKET socket. */
        return result_of(socket(AF_INET, 10 /* SOCK_PACKET */ | SOCK_CLOEXEC, 0));
}

static long probe_socket_vsock(void)
{
        return result_of(socket(AF_VSOCK_FAMILY, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

static long probe_socket_inet_stream(void)
{
        return result_of(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

static long probe_socket_inet6_dgram(void)
{
        return result_of(socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

static long probe_socket_unix(void)
{
        return result_of(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
}

static long probe_socket_netlink(void)
{
        return result_of(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */));
}

static long probe_socketpair_unix(void)
{
        int sv[2];

        return result_of(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
}

static long probe_socketpair_inet(void)
{
        int sv[2];

        return result_of(socketpair(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
}

static long probe_keyctl(void)
{
        return result_of(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, 0));
}

static long probe_add_key(void)
{
        return result_of(syscall(SYS_add_key, "user", "nsbox-test", "x", 1, KEY_SPEC_PROCESS_KEYRING));
}

static long probe_bpf(void)
{
        union bpf_attr attr;

        memset(&attr, 0, sizeof(attr));
        return result_of(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
}

static long probe_io_uring_setup(void)
{
        /* Zero entries: EINVAL (or EFAULT) if the call got through. */
        return result_of(syscall(SYS_io_uring_setup, 0, NULL));
}

static long probe_userfaultfd(void)
{
        return result_of(syscall(SYS_userfaultfd, O_CLOEXEC));
}

static long probe_perf_event_open(void)
{
        return result_of(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
}

static long probe_ptrace(void)
{
        /* We do not trace ourselves: ESRCH if the call got through. */
        return result_of(ptrace(PTRACE_PEEKDATA, getpid(), NULL, NULL));
}

static long probe_open_by_handle_at(void)
{
        return result_of(syscall(SYS_open_by_handle_at, -1, NULL, O_RDONLY));
}

static long probe_personality_query(void)
{
        return result_of(personality(0xffffffff));
}

static long probe_personality_no_randomize(void)
{
        return result_of(personality(ADDR_NO_RANDOMIZE));
}

static long probe_arch_prctl(void)
{
        unsigned long fs = 0;

        return result_of(syscall(SYS_arch_prctl, ARCH_GET_FS, &fs));
}

static long probe_execve_missing(void)
{
        char *argv[] = { NULL };

        /* Only asks the kernel to look the file up: ENOENT means allowed. */
        return result_of(execve("/nonexistent-nsbox-test", argv, argv));
}

static long i386_getpid(void)
{
        long ret;

        /* The 32-bit entry point, which numbers getpid 20, not 39. */
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(I386_NR_GETPID) : "memory", "r8", "r9", "r10", "r11");
        return ret;
}

static long x32_getpid(void)
{
        return syscall(X32_SYSCALL_BIT | SYS_getpid);
}

/* ---- compiling ----------------------------------------------------------- */

static void test_docker_profile_compiles(void **state)
{
        struct seccomp_program prog;

        compile_docker_profile(&prog);
        fprintf(stderr, "  docker default profile: %u BPF instructions\n", prog.len);
        assert_true(prog.len <= BPF_MAXINSNS);
        seccomp_program_free(&prog);
        assert_null(prog.filter);
        assert_int_equal(prog.len, 0);
}

static void test_default_profile_compiles(void **state)
{
        struct seccomp_program prog;

        compile_repo_file(DEFAULT_PROFILE, &prog);
        fprintf(stderr, "  nsbox default profile: %u BPF instructions\n", prog.len);
        seccomp_program_free(&prog);
}

/* Compiling must not filter the compiling process (the daemon). */
static void test_compiling_loads_nothing(void **state)
{
        struct seccomp_program prog;
        char line[256];
        FILE *status;
        bool found = false;

        compile_repo_file(DEFAULT_PROFILE, &prog);
        seccomp_program_free(&prog);
        status = fopen("/proc/self/status", "re");
        assert_non_null(status);
        while (fgets(line, sizeof(line), status) != NULL) {
                if (strncmp(line, "Seccomp:", 8) == 0) {
                        found = true;
                        assert_string_equal(line, "Seccomp:\t0\n");
                }
        }
        fclose(status);
        assert_true(found);
}

struct bad_profile {
        const char *json;
        const char *field; /* must appear in the message */
};

static const struct bad_profile bad_profiles[] = {
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\",", "invalid JSON" },
        { "[]", "must be a JSON object" },
        { "{\"syscalls\": []}", "defaultAction: missing" },
        { "{\"defaultAction\": 1}", "defaultAction: must be a string" },
        { "{\"defaultAction\": \"SCMP_ACT_DENY\"}", "defaultAction: unknown action \"SCMP_ACT_DENY\"" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"defaultErrnoRet\": \"1\"}",
          "defaultErrnoRet: must be a non-negative integer" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"defaultErrnoRet\": 5000}",
          "defaultErrnoRet: errno 5000" },
        { "{\"defaultAction\": \"SCMP_ACT_NOTIFY\"}", "defaultAction: SCMP_ACT_NOTIFY is not supported" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"architectures\": \"SCMP_ARCH_X86_64\"}",
          "architectures: must be an array" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"architectures\": [64]}",
          "architectures[0]: must be a string" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"archMap\": [{\"subArchitectures\": []}]}",
          "archMap[0].architecture: missing" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": {}}", "syscalls: must be an array" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [\"read\"]}",
          "syscalls[0]: must be an object" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\"}, {\"names\": [\"write\"], \"action\": \"SCMP_ACT_FOO\"}]}",
          "syscalls[1].action: unknown action \"SCMP_ACT_FOO\"" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"]}]}",
          "syscalls[0].action: missing" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_NOTIFY\"}]}",
          "syscalls[0].action: SCMP_ACT_NOTIFY is not supported" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\", 3], \"action\": "
          "\"SCMP_ACT_ALLOW\"}]}",
          "syscalls[0].names[1]: must be a string" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": \"read\", \"action\": "
          "\"SCMP_ACT_ALLOW\"}]}",
          "syscalls[0].names: must be an array" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"action\": \"SCMP_ACT_ALLOW\"}]}",
          "syscalls[0].names: missing" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ERRNO\", \"errnoRet\": -1}]}",
          "syscalls[0].errnoRet: must be a non-negative integer" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"args\": [{\"index\": 0, \"value\": 1, \"op\": \"SCMP_CMP_LIKE\"}]}]}",
          "syscalls[0].args[0].op: unknown operator \"SCMP_CMP_LIKE\"" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"args\": [{\"index\": 0, \"value\": 1, \"op\": \"SCMP_CMP_EQ\"}, {\"index\": "
          "6, "
          "\"value\": 1, \"op\": \"SCMP_CMP_EQ\"}]}]}",
          "syscalls[0].args[1].index: 6 is not an argument index" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"args\": [{\"index\": 0, \"value\": \"1\", \"op\": \"SCMP_CMP_EQ\"}]}]}",
          "syscalls[0].args[0].value: must be a non-negative integer" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"args\": [{\"value\": 1, \"op\": \"SCMP_CMP_EQ\"}]}]}",
          "syscalls[0].args[0].index: missing" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"args\": {}}]}",
          "syscalls[0].args: must be an array" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"includes\": {\"caps\": \"CAP_SYS_ADMIN\"}}]}",
          "syscalls[0].includes.caps: must be an array" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"excludes\": {\"arches\": [1]}}]}",
          "syscalls[0].excludes.arches[0]: must be a string" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"includes\": {\"minKernel\": \"four\"}}]}",
          "syscalls[0].includes.minKernel: invalid kernel version \"four\"" },
        { "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": [\"read\"], \"action\": "
          "\"SCMP_ACT_ALLOW\", \"includes\": []}]}",
          "syscalls[0].includes: must be an object" },
};

static void test_bad_profiles_name_the_field(void **state)
{
        for (size_t i = 0; i < ARRAY_SIZE(bad_profiles); i++) {
                _cleanup_error_ nsbox_error_t *err = NULL;
                struct seccomp_program prog = { (struct sock_filter *)&prog, 1 };
                int r = seccomp_profile_compile_string("bad.json", bad_profiles[i].json, &prog, &err);

                if (r != -EINVAL || err == NULL ||
                    strstr(err->message, "seccomp profile bad.json: ") == NULL ||
                    strstr(err->message, bad_profiles[i].field) == NULL)
                        fail_msg("profile %zu: r=%d, message \"%s\", want \"%s\"", i, r,
                                 err != NULL ? err->message : "(none)", bad_profiles[i].field);
                assert_null(prog.filter);
                assert_int_equal(prog.len, 0);
        }
}

static void test_bad_profile_file_is_named(void **state)
{
        char dir[] = "/tmp/nsbox-test-seccomp-XXXXXX";
        _cleanup_free_ char *path = NULL, *fifo = NULL, *missing = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct seccomp_program prog;
        const char *text = "{\"defaultAction\": \"SCMP_ACT_ERRNO\",\n \"syscalls\": [{\"names\": [\"read\"], "
                           "\"action\": \"SCMP_ACT_FOO\"}]}\n";
        FILE *f;

        assert_non_null(mkdtemp(dir));
        assert_true(asprintf(&path, "%s/profile.json", dir) >= 0);
        assert_true(asprintf(&fifo, "%s/fifo.json", dir) >= 0);
        assert_true(asprintf(&missing, "%s/missing.json", dir) >= 0);

        f = fopen(path, "we");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(seccomp_profile_compile_file(path, &prog, &err), -EINVAL);
        assert_non_null(strstr(err->message, path));
        assert_non_null(strstr(err->message, "syscalls[0].action: unknown action \"SCMP_ACT_FOO\""));
        nsbox_error_free(&err);

        /* A FIFO would block a plain open() until someone writes to it. */
        assert_int_equal(mkfifo(fifo, 0600), 0);
        assert_int_equal(seccomp_profile_compile_file(fifo, &prog, &err), -EINVAL);
        assert_non_null(strstr(err->message, "not a regular file"));
        nsbox_error_free(&err);

        assert_int_equal(seccomp_profile_compile_file(missing, &prog, &err), -ENOENT);
        assert_non_null(strstr(err->message, missing));
        nsbox_error_free(&err);

        unlink(path);
        unlink(fifo);
        rmdir(dir);
}

static void test_load_refuses_empty_program(void **state)
{
        struct seccomp_program empty = { NULL, 0 };

        assert_int_equal(seccomp_program_load(&empty), -EINVAL);
        assert_int_equal(seccomp_program_load(NULL), -EINVAL);
}

/* ---- what the kernel does with the programs ------------------------------ */

static void test_default_profile_in_kernel(void **state)
{
        static const struct probe probes[] = {
                { "getpid", probe_getpid, SUCCEEDS },
                { "fork (clone without namespace flags)", probe_fork, 0 },
                { "execve (reaches the kernel)", probe_execve_missing, -ENOENT },
                { "arch_prctl", probe_arch_prctl, 0 },
                { "setns", probe_setns, -EPERM },
                { "clone3", probe_clone3, -ENOSYS },
                { "mount", probe_mount, -EPERM },
                { "fsopen", probe_fsopen, -EPERM },
                { "socket(AF_PACKET)", probe_socket_packet, -EPERM },
                { "socket(AF_INET, SOCK_RAW)", probe_socket_inet_raw, -EPERM },
                { "socket(AF_INET6, SOCK_RAW)", probe_socket_inet6_raw, -EPERM },
                { "socket(AF_INET, SOCK_PACKET)", probe_socket_inet_packet_type, -EPERM },
                { "socket(AF_VSOCK)", probe_socket_vsock, -EPERM },
                { "socket(AF_INET, SOCK_STREAM)", probe_socket_inet_stream, SUCCEEDS },
                { "socket(AF_INET6, SOCK_DGRAM|SOCK_NONBLOCK)", probe_socket_inet6_dgram, SUCCEEDS },
                { "socket(AF_UNIX)", probe_socket_unix, SUCCEEDS },
                { "socket(AF_NETLINK)", probe_socket_netlink, SUCCEEDS },
                { "socketpair(AF_UNIX)", probe_socketpair_unix, 0 },
                { "socketpair(AF_INET)", probe_socketpair_inet, -EPERM },
                { "keyctl", probe_keyctl, -EPERM },
                { "add_key", probe_add_key, -EPERM },
                { "bpf", probe_bpf, -EPERM },
                { "io_uring_setup", probe_io_uring_setup, -EPERM },
                { "userfaultfd", probe_userfaultfd, -EPERM },
                { "perf_event_open", probe_perf_event_open, -EPERM },
                { "ptrace", probe_ptrace, -EPERM },
                { "open_by_handle_at", probe_open_by_handle_at, -EPERM },
                { "personality(query)", probe_personality_query, SUCCEEDS },
                { "personality(ADDR_NO_RANDOMIZE)", probe_personality_no_randomize, -EPERM },
                { "clone(CLONE_NEWUSER)", probe_clone_newuser, -EPERM },
                { "unshare(CLONE_NEWUSER)", probe_unshare_user, -EPERM },
        };
        struct seccomp_program prog;

        compile_repo_file(DEFAULT_PROFILE, &prog);
        check_probes(&prog, probes, ARRAY_SIZE(probes));
        seccomp_program_free(&prog);
}

/* int $0x80 and x32 reach the kernel under another audit arch or syscall
 * numbering; the default profile lists x86_64 only, so both must kill. */
static void test_default_profile_kills_other_abis(void **state)
{
        struct seccomp_program prog;
        int status;

        compile_repo_file(DEFAULT_PROFILE, &prog);

        status = run_killable(NULL, i386_getpid);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                status = run_killable(&prog, i386_getpid);
                if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS)
                        fail_msg("int $0x80 getpid under the filter: status 0x%x, want SIGSYS", status);
        } else {
                fprintf(stderr, "  note: no i386 emulation here (status 0x%x), int $0x80 not checked\n",
                        status);
        }

        /* seccomp sees x32 calls before the kernel decides whether it
         * supports x32 at all, so this holds on every x86_64 kernel. */
        status = run_killable(&prog, x32_getpid);
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS)
                fail_msg("x32 getpid under the filter: status 0x%x, want SIGSYS", status);

        seccomp_program_free(&prog);
}

/* Docker's profile through our semantics: capability-gated entries skipped
 * (unshare), excludes.caps kept (clone3 → ENOSYS), minKernel 4.8 applied
 * (ptrace allowed), arches "amd64" applied (arch_prctl), NE on args (no
 * AF_VSOCK), and archMap bringing in the i386 ABI. */
static void test_docker_profile_in_kernel(void **state)
{
        static const struct probe probes[] = {
                { "getpid", probe_getpid, SUCCEEDS },
                { "fork", probe_fork, 0 },
                { "clone3", probe_clone3, -ENOSYS },
                { "mount", probe_mount, -EPERM },
                { "ptrace", probe_ptrace, -ESRCH },
                { "arch_prctl", probe_arch_prctl, 0 },
                { "socket(AF_VSOCK)", probe_socket_vsock, -EPERM },
                { "socket(AF_INET, SOCK_STREAM)", probe_socket_inet_stream, SUCCEEDS },
                { "keyctl", probe_keyctl, -EPERM },
                { "personality(query)", probe_personality_query, SUCCEEDS },
                { "personality(ADDR_NO_RANDOMIZE)", probe_personality_no_randomize, -EPERM },
                { "clone(CLONE_NEWUSER)", probe_clone_newuser, -EPERM },
                { "unshare(CLONE_NEWUSER)", probe_unshare_user, -EPERM },
        };
        struct seccomp_program prog;
        int status;

        compile_docker_profile(&prog);
        check_probes(&prog, probes, ARRAY_SIZE(probes));

        status = run_killable(NULL, i386_getpid);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                status = run_killable(&prog, i386_getpid);
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        fail_msg("int $0x80 getpid under Docker's profile: status 0x%x, want allowed",
                                 status);
        }
        seccomp_program_free(&prog);
}

/* ---- profile semantics, checked in the kernel ---------------------------- */

static long probe_umask_022(void)
{
        return result_of(syscall(SYS_umask, 022));
}

static long probe_umask_077(void)
{
        return result_of(syscall(SYS_umask, 077));
}

static long probe_umask_000(void)
{
        return result_of(syscall(SYS_umask, 0));
}

static long probe_getpriority_match(void)
{
        return result_of(syscall(SYS_getpriority, PRIO_PROCESS, 12345));
}

static long probe_getpriority_half_match(void)
{
        return result_of(syscall(SYS_getpriority, PRIO_PROCESS, 0));
}

static long probe_getppid(void)
{
        return result_of(syscall(SYS_getppid));
}

static long probe_getpgrp(void)
{
        return result_of(syscall(SYS_getpgrp));
}

static long probe_getuid(void)
{
        return result_of(syscall(SYS_getuid));
}

static long probe_getgid(void)
{
        return result_of(syscall(SYS_getgid));
}

static long probe_geteuid(void)
{
        return result_of(syscall(SYS_geteuid));
}

static long probe_getegid(void)
{
        return result_of(syscall(SYS_getegid));
}

static long probe_getsid(void)
{
        return result_of(syscall(SYS_getsid, 0));
}

static long probe_getpgid(void)
{
        return result_of(syscall(SYS_getpgid, 0));
}

static long probe_gettid(void)
{
        return result_of(syscall(SYS_gettid));
}

static void test_profile_semantics_in_kernel(void **state)
{
        /* Deny-list style, so the child can do everything else; every rule
         * answers EACCES (13) so it cannot be confused with the kernel. */
        static const char *profile =
            "{\"defaultAction\": \"SCMP_ACT_ALLOW\", \"unknownTopLevel\": {\"ignored\": true},"
            " \"architectures\": [\"SCMP_ARCH_X86_64\", \"SCMP_ARCH_NO_SUCH_ARCH\"],"
            " \"syscalls\": ["
            "  {\"names\": [\"read\", \"write\"], \"action\": \"SCMP_ACT_ALLOW\"},"
            "  {\"names\": [\"no_such_syscall_nsbox\", \"umask\"], \"action\": \"SCMP_ACT_ERRNO\","
            "   \"errnoRet\": 13, \"comment\": \"same index twice: either value\","
            "   \"args\": [{\"index\": 0, \"value\": 18, \"op\": \"SCMP_CMP_EQ\"},"
            "            {\"index\": 0, \"value\": 63, \"op\": \"SCMP_CMP_EQ\"}]},"
            "  {\"names\": [\"getpriority\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"args\": [{\"index\": 0, \"value\": 0, \"op\": \"SCMP_CMP_EQ\"},"
            "            {\"index\": 1, \"value\": 12345, \"valueTwo\": 0, \"op\": \"SCMP_CMP_EQ\"}]},"
            "  {\"names\": [\"getppid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"includes\": {\"caps\": [\"CAP_SYS_ADMIN\"]}},"
            "  {\"names\": [\"getpgrp\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"excludes\": {\"caps\": [\"CAP_SYS_ADMIN\"]}},"
            "  {\"names\": [\"getuid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"includes\": {\"minKernel\": \"3.0\"}},"
            "  {\"names\": [\"getgid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"includes\": {\"minKernel\": \"999.0\"}},"
            "  {\"names\": [\"getpgid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"excludes\": {\"minKernel\": \"999.0.1\"}},"
            "  {\"names\": [\"geteuid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"includes\": {\"arches\": [\"s390x\", \"amd64\"]}},"
            "  {\"names\": [\"getegid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"includes\": {\"arches\": [\"arm64\", \"SCMP_ARCH_PPC64LE\"]}},"
            "  {\"names\": [\"getsid\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13,"
            "   \"excludes\": {\"arches\": [\"SCMP_ARCH_X86_64\"]}},"
            "  {\"name\": \"gettid\", \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 13}"
            " ]}";
        static const struct probe probes[] = {
                { "umask(022), first of two values on arg 0", probe_umask_022, -EACCES },
                { "umask(077), second of two values on arg 0", probe_umask_077, -EACCES },
                { "umask(0), neither value", probe_umask_000, SUCCEEDS },
                { "getpriority, both args match", probe_getpriority_match, -EACCES },
                { "getpriority, one arg matches", probe_getpriority_half_match, SUCCEEDS },
                { "getppid, includes.caps skipped", probe_getppid, SUCCEEDS },
                { "getpgrp, excludes.caps kept", probe_getpgrp, -EACCES },
                { "getuid, includes.minKernel 3.0 kept", probe_getuid, -EACCES },
                { "getgid, includes.minKernel 999.0 skipped", probe_getgid, SUCCEEDS },
                { "getpgid, excludes.minKernel 999.0.1 kept", probe_getpgid, -EACCES },
                { "geteuid, includes.arches amd64 kept", probe_geteuid, -EACCES },
                { "getegid, includes.arches arm64/ppc64le skipped", probe_getegid, SUCCEEDS },
                { "getsid, excludes.arches x86_64 skipped", probe_getsid, SUCCEEDS },
                { "gettid, legacy \"name\"", probe_gettid, -EACCES },
        };
        struct seccomp_program prog;

        compile_text(profile, &prog);
        check_probes(&prog, probes, ARRAY_SIZE(probes));
        seccomp_program_free(&prog);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_docker_profile_compiles),
                cmocka_unit_test(test_default_profile_compiles),
                cmocka_unit_test(test_compiling_loads_nothing),
                cmocka_unit_test(test_bad_profiles_name_the_field),
                cmocka_unit_test(test_bad_profile_file_is_named),
                cmocka_unit_test(test_load_refuses_empty_program),
                cmocka_unit_test(test_default_profile_in_kernel),
                cmocka_unit_test(test_default_profile_kills_other_abis),
                cmocka_unit_test(test_docker_profile_in_kernel),
                cmocka_unit_test(test_profile_semantics_in_kernel),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
