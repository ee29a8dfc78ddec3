/* SPDX-License-Identifier: Apache-2.0 */
/* An exec slot's supervisor (runtime/supervisor.c), driven over its two
 * sockets the way nsboxd drives it, on the host and without a sandbox: the
 * cases the integration tests cannot time, such as a child stopped before
 * its execve. Needs root (the supervisor takes NSBOX_SUPERVISOR_UID). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "supervisor.h"

#define EXEC_ID   7
#define WAIT_MS   5000
#define CHILD_UID 65534

struct slot {
        pid_t supervisor;
        int request; /* our ends */
        int control;
};

/* The test's slot, for the teardown to end whatever a failed test left. */
static struct slot current = { .supervisor = -1, .request = -1, .control = -1 };

static long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static int setup(void **state)
{
        /* The supervisor expects SIGCHLD blocked, as the init leaves it. */
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, NULL);
        return 0;
}

static struct slot slot_start(void)
{
        int request[2], control[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, request), 0);
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(request[0]);
                close(control[0]);
                supervisor_main(EXEC_ID, request[1], control[1], NULL);
        }
        close(request[1]);
        close(control[1]);
        current = (struct slot){ .supervisor = pid, .request = request[0], .control = control[0] };
        return current;
}

static pid_t first_child_of(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, pid);
        FILE *f = fopen(path, "r");
        int child = 0;
        if (f != NULL) {
                if (fscanf(f, "%d", &child) != 1)
                        child = 0;
                fclose(f);
        }
        return child;
}

static char process_state(pid_t pid);

/* The supervisor's one child, once it has one. */
static pid_t slot_child(const struct slot *s)
{
        for (long long end = now_ms() + WAIT_MS; now_ms() < end; usleep(2000)) {
                pid_t child = first_child_of(s->supervisor);
                if (child > 0)
                        return child;
        }
        fail_msg("the supervisor started no child");
        return -1;
}

/* The supervisor, back in its poll: no child of its own until a request. */
static void slot_waits_childless(const struct slot *s)
{
        for (long long end = now_ms() + WAIT_MS; process_state(s->supervisor) != 'S'; usleep(1000))
                assert_true(now_ms() < end);
        assert_int_equal(first_child_of(s->supervisor), 0);
}

/* After each test: a supervisor that is still there, and its child (a test
 * that failed may have left one blocked), go. */
static int teardown(void **state)
{
        if (current.supervisor > 0 && waitpid(current.supervisor, NULL, WNOHANG) == 0) {
                pid_t child = first_child_of(current.supervisor);
                if (child > 0)
                        kill(child, SIGKILL);
                kill(current.supervisor, SIGKILL);
                waitpid(current.supervisor, NULL, 0);
        }
        if (current.request >= 0)
                close(current.request);
        if (current.control >= 0)
                close(current.control);
        current = (struct slot){ .supervisor = -1, .request = -1, .control = -1 };
        return 0;
}

static char process_state(pid_t pid)
{
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        char *paren = strrchr(buf, ')');
        return paren != NULL && paren[1] == ' ' ? paren[2] : 0;
}

/* An exec of argv with env, stdio on /dev/null. */
static void send_exec(const struct slot *s, const char *const *argv, const char *const *env)
{
        char payload[4096];
        size_t len = 0;
        unsigned argc = 0, envc = 0;
        const char *cwd = "/";
        memcpy(payload, cwd, strlen(cwd) + 1);
        len += strlen(cwd) + 1;
        for (; argv[argc] != NULL; argc++) {
                memcpy(payload + len, argv[argc], strlen(argv[argc]) + 1);
                len += strlen(argv[argc]) + 1;
        }
        for (; env[envc] != NULL; envc++) {
                memcpy(payload + len, env[envc], strlen(env[envc]) + 1);
                len += strlen(env[envc]) + 1;
        }
        struct ctl_exec hdr = { .hdr = { CTL_EXEC, EXEC_ID },
                                .uid = CHILD_UID,
                                .gid = CHILD_UID,
                                .argc = argc,
                                .envc = envc,
                                .payload_len = (uint32_t)len };
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        assert_true(null >= 0);
        int fds[3] = { null, null, null };
        assert_true(ctl_send(s->request, &hdr, sizeof(hdr), payload, len, fds, 3) > 0);
        close(null);
}

static void send_control(const struct slot *s, uint32_t type, int signal)
{
        struct ctl_kill msg = { .hdr = { type, EXEC_ID }, .signal = signal };
        size_t len = type == CTL_KILL ? sizeof(msg) : sizeof(msg.hdr);
        assert_true(ctl_send(s->control, &msg, len, NULL, 0, NULL, 0) > 0);
}

/* Send the request and catch the child the supervisor starts for it before
 * its first instruction, and leave it stopped (SIGSTOP): the supervisor is
 * traced across its clone (PTRACE_O_TRACEFORK), which stops the new child
 * too, and both are let go, the child into its stop. What a process of the
 * exec's uid may do to the child between its setresuid and its execve, at
 * the earliest. */
static pid_t send_exec_and_stop_child(const struct slot *s, const char *const *argv, const char *const *env)
{
        assert_int_equal(
            ptrace(PTRACE_SEIZE, s->supervisor, NULL, (void *)(PTRACE_O_TRACEFORK | PTRACE_O_TRACECLONE)), 0);
        send_exec(s, argv, env);
        int status;
        for (;;) {
                assert_int_equal(waitpid(s->supervisor, &status, __WALL), s->supervisor);
                assert_true(WIFSTOPPED(status));
                /* A clone with SIGCHLD as its exit signal is reported as a fork. */
                if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_FORK << 8)) ||
                    status >> 8 == (SIGTRAP | (PTRACE_EVENT_CLONE << 8)))
                        break;
                int sig = WSTOPSIG(status) == SIGTRAP ? 0 : WSTOPSIG(status);
                assert_int_equal(ptrace(PTRACE_CONT, s->supervisor, NULL, (void *)(long)sig), 0);
        }
        unsigned long child = 0;
        assert_int_equal(ptrace(PTRACE_GETEVENTMSG, s->supervisor, NULL, &child), 0);
        assert_int_equal(waitpid((pid_t)child, &status, __WALL), (pid_t)child);
        /* Pending before it runs again: it stops before its first instruction. */
        assert_int_equal(kill((pid_t)child, SIGSTOP), 0);
        assert_int_equal(ptrace(PTRACE_DETACH, (pid_t)child, NULL, NULL), 0);
        assert_int_equal(ptrace(PTRACE_DETACH, s->supervisor, NULL, NULL), 0);
        for (long long end = now_ms() + WAIT_MS; process_state((pid_t)child) != 'T'; usleep(1000))
                assert_true(now_ms() < end);
        return (pid_t)child;
}

/* The wait status in the supervisor's CTL_EXITED, skipping CTL_STARTED. */
static int wait_exited(const struct slot *s)
{
        for (long long end = now_ms() + WAIT_MS;;) {
                struct pollfd p = { .fd = s->control, .events = POLLIN };
                int left = (int)(end - now_ms());
                if (left <= 0 || poll(&p, 1, left) != 1)
                        fail_msg("no CTL_EXITED from the supervisor within %d ms", WAIT_MS);
                union ctl_message msg;
                unsigned nfds;
                ssize_t n = ctl_recv(s->control, &msg, sizeof(msg), NULL, 0, &nfds);
                assert_true(n > 0);
                assert_int_not_equal(msg.hdr.type, CTL_FAILED);
                if (msg.hdr.type == CTL_EXITED)
                        return msg.exited.wait_status;
        }
}

static void slot_close_and_reap(void)
{
        close(current.request);
        close(current.control);
        current.request = current.control = -1;
        for (long long end = now_ms() + WAIT_MS;; usleep(2000)) {
                int status;
                if (waitpid(current.supervisor, &status, WNOHANG) == current.supervisor) {
                        current.supervisor = -1;
                        assert_true(WIFEXITED(status));
                        return;
                }
                if (now_ms() > end)
                        fail_msg("the supervisor did not exit when the manager hung up");
        }
}

static void test_an_exec_runs_and_its_slot_serves_the_next(void **state)
{
        struct slot s = slot_start();
        static const char *const argv[] = { "/bin/true", NULL }, *const env[] = { NULL };
        static const char *const false_argv[] = { "/bin/false", NULL };
        slot_waits_childless(&s);
        send_exec(&s, argv, env);
        int status = wait_exited(&s);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        send_control(&s, CTL_SLOT, 0); /* the same exec id serves as the next one here */
        slot_child(&s);                /* made ahead, once the slot has served */
        send_exec(&s, false_argv, env);
        status = wait_exited(&s);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
        slot_close_and_reap();
}

/* A child made ahead that gets no request retires unused, unheard of by
 * the manager; the next request starts one. */
static void test_a_child_made_ahead_retires_and_the_next_request_starts_one(void **state)
{
        struct slot s = slot_start();
        static const char *const argv[] = { "/bin/true", NULL }, *const env[] = { NULL };
        static const char *const false_argv[] = { "/bin/false", NULL };
        send_exec(&s, argv, env);
        int status = wait_exited(&s);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        send_control(&s, CTL_SLOT, 0);
        pid_t ahead = slot_child(&s);
        for (long long end = now_ms() + 3 * WAIT_MS; first_child_of(s.supervisor) == ahead; usleep(10000))
                assert_true(now_ms() < end);
        slot_waits_childless(&s);
        struct pollfd p = { .fd = s.control, .events = POLLIN };
        assert_int_equal(poll(&p, 1, 0), 0); /* nothing said of it */
        send_exec(&s, false_argv, env);
        status = wait_exited(&s);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
        slot_close_and_reap();
}

/* A process of the exec's uid may stop the child between its setresuid
 * and its execve, while it shares its supervisor's memory: a kill, even
 * after a background exec's request for its pid, must still end it. */
static void test_a_kill_ends_a_child_stopped_before_its_execve(void **state)
{
        struct slot s = slot_start();
        static const char *const argv[] = { "/bin/true", NULL }, *const env[] = { NULL };
        send_exec_and_stop_child(&s, argv, env);
        send_control(&s, CTL_STARTED, 0);
        send_control(&s, CTL_KILL, SIGKILL);
        int status = wait_exited(&s);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        slot_close_and_reap();
}

static void test_the_managers_hangup_ends_a_stopped_child_and_its_supervisor(void **state)
{
        struct slot s = slot_start();
        static const char *const argv[] = { "/bin/true", NULL }, *const env[] = { NULL };
        send_exec_and_stop_child(&s, argv, env);
        slot_close_and_reap();
}

/* The request (argv, env) lands in the supervisor's memory, which the
 * child shares until its execve: it is wiped once the child has left. */
static bool memory_holds(pid_t pid, const char *needle)
{
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/maps", pid);
        FILE *maps = fopen(path, "r");
        assert_non_null(maps);
        snprintf(path, sizeof(path), "/proc/%d/mem", pid);
        int mem = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(mem >= 0);
        size_t nlen = strlen(needle);
        bool found = false;
        while (!found && fgets(line, sizeof(line), maps) != NULL) {
                unsigned long start, end;
                char perms[8];
                if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3 || perms[0] != 'r' ||
                    perms[1] != 'w')
                        continue;
                size_t size = end - start;
                char *buf = malloc(size);
                assert_non_null(buf);
                ssize_t n = pread(mem, buf, size, (off_t)start);
                if (n > 0)
                        found = memmem(buf, (size_t)n, needle, nlen) != NULL;
                free(buf);
        }
        close(mem);
        fclose(maps);
        return found;
}

static void test_the_request_is_wiped_from_the_supervisor_after_the_execve(void **state)
{
        struct slot s = slot_start();
        uint8_t random[16];
        assert_int_equal(getrandom(random, sizeof(random), 0), (ssize_t)sizeof(random));
        char secret[64] = "NSBOX_TEST_SECRET=";
        for (size_t i = 0; i < sizeof(random); i++)
                snprintf(secret + strlen(secret), sizeof(secret) - strlen(secret), "%02x", random[i]);
        const char *const argv[] = { "/bin/true", NULL }, *const env[] = { secret, NULL };
        send_exec(&s, argv, env);
        int status = wait_exited(&s);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        assert_false(memory_holds(s.supervisor, secret + strlen("NSBOX_TEST_SECRET=")));
        slot_close_and_reap();
}

int main(void)
{
        if (geteuid() != 0) {
                printf("skipped: the supervisor takes uid %d, which needs root\n", NSBOX_SUPERVISOR_UID);
                return 0;
        }
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_an_exec_runs_and_its_slot_serves_the_next, teardown),
                cmocka_unit_test_teardown(test_a_child_made_ahead_retires_and_the_next_request_starts_one,
                                          teardown),
                cmocka_unit_test_teardown(test_a_kill_ends_a_child_stopped_before_its_execve, teardown),
                cmocka_unit_test_teardown(test_the_managers_hangup_ends_a_stopped_child_and_its_supervisor,
                                          teardown),
                cmocka_unit_test_teardown(test_the_request_is_wiped_from_the_supervisor_after_the_execve,
                                          teardown),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
