/* SPDX-License-Identifier: Apache-2.0 */
/* Reading a compiled seccomp program: its verdict for one syscall, and the runtime's own needs. */
#include "seccomp_check.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "proto.h"

#define SCRATCH_WORDS 16   /* BPF_MEMWORDS */
#define MAX_INSNS     4096 /* BPF_MAXINSNS */

/* The instructions the kernel takes in a seccomp filter
 * (seccomp_check_filter, bpf_check_classic): whole opcodes, size bits
 * included. */
static bool opcode_allowed(uint16_t code)
{
        switch (code) {
        case BPF_LD | BPF_W | BPF_ABS:
        case BPF_LD | BPF_W | BPF_LEN:
        case BPF_LDX | BPF_W | BPF_LEN:
        case BPF_LD | BPF_IMM:
        case BPF_LDX | BPF_IMM:
        case BPF_LD | BPF_MEM:
        case BPF_LDX | BPF_MEM:
        case BPF_ST:
        case BPF_STX:
        case BPF_MISC | BPF_TAX:
        case BPF_MISC | BPF_TXA:
        case BPF_RET | BPF_K:
        case BPF_RET | BPF_A:
        case BPF_ALU | BPF_NEG:
        case BPF_JMP | BPF_JA:
                return true;
        }
        if ((code & ~(BPF_CLASS(~0) | BPF_OP(~0) | BPF_SRC(~0))) != 0)
                return false; /* bits above the opcode byte */
        uint16_t op = BPF_OP(code);
        if (BPF_CLASS(code) == BPF_ALU)
                return op <= BPF_RSH || op == BPF_XOR; /* ADD SUB MUL DIV OR AND LSH RSH XOR: no MOD */
        if (BPF_CLASS(code) == BPF_JMP)
                return op >= BPF_JEQ && op <= BPF_JSET; /* JEQ JGT JGE JSET */
        return false;
}

/* Whether the kernel loads the program: every instruction allowed and in
 * range, every jump inside the program, the last instruction a return, and
 * no scratch word read on a path where it was never written. */
static bool program_valid(const struct sock_fprog *prog)
{
        unsigned len = prog->len;
        if (len == 0 || len > MAX_INSNS)
                return false;
        uint16_t written_at[MAX_INSNS]; /* scratch words written on every path to pc */
        memset(written_at, 0xff, len * sizeof(written_at[0]));
        uint16_t written = 0;
        for (unsigned pc = 0; pc < len; pc++) {
                const struct sock_filter *in = &prog->filter[pc];
                if (!opcode_allowed(in->code))
                        return false;
                written &= written_at[pc];
                switch (in->code) {
                case BPF_LD | BPF_W | BPF_ABS:
                        if (in->k % 4 != 0 || in->k > sizeof(struct seccomp_data) - 4)
                                return false;
                        break;
                case BPF_ALU | BPF_DIV | BPF_K:
                        if (in->k == 0)
                                return false;
                        break;
                case BPF_ALU | BPF_LSH | BPF_K:
                case BPF_ALU | BPF_RSH | BPF_K:
                        if (in->k >= 32)
                                return false;
                        break;
                case BPF_ST:
                case BPF_STX:
                        if (in->k >= SCRATCH_WORDS)
                                return false;
                        written |= 1u << in->k;
                        break;
                case BPF_LD | BPF_MEM:
                case BPF_LDX | BPF_MEM:
                        if (in->k >= SCRATCH_WORDS || !(written & (1u << in->k)))
                                return false;
                        break;
                case BPF_JMP | BPF_JA:
                        if (in->k >= len - pc - 1)
                                return false;
                        written_at[pc + 1 + in->k] &= written;
                        written = 0xffff;
                        break;
                default:
                        if (BPF_CLASS(in->code) != BPF_JMP)
                                break;
                        if (pc + in->jt + 1 >= len || pc + in->jf + 1 >= len)
                                return false;
                        written_at[pc + 1 + in->jt] &= written;
                        written_at[pc + 1 + in->jf] &= written;
                        written = 0xffff;
                        break;
                }
        }
        return BPF_CLASS(prog->filter[len - 1].code) == BPF_RET;
}

static int alu(uint16_t op, uint32_t *a, uint32_t operand)
{
        switch (op) {
        case BPF_ADD:
                *a += operand;
                return 0;
        case BPF_SUB:
                *a -= operand;
                return 0;
        case BPF_MUL:
                *a *= operand;
                return 0;
        case BPF_DIV:
                if (operand == 0)
                        return -EINVAL; /* the kernel returns 0, KILL_THREAD: not a call to let through */
                *a /= operand;
                return 0;
        case BPF_OR:
                *a |= operand;
                return 0;
        case BPF_AND:
                *a &= operand;
                return 0;
        case BPF_XOR:
                *a ^= operand;
                return 0;
        case BPF_LSH:
                *a <<= operand & 31; /* a constant shift is below 32; the kernel masks X */
                return 0;
        case BPF_RSH:
                *a >>= operand & 31;
                return 0;
        case BPF_NEG:
                *a = -*a;
                return 0;
        }
        return -EINVAL;
}

static bool jump_taken(uint16_t op, uint32_t a, uint32_t operand)
{
        switch (op) {
        case BPF_JEQ:
                return a == operand;
        case BPF_JGT:
                return a > operand;
        case BPF_JGE:
                return a >= operand;
        default: /* BPF_JSET */
                return (a & operand) != 0;
        }
}

/* Runs a program program_valid() took. */
static int interpret(const struct sock_fprog *prog, const struct seccomp_data *data, uint32_t *action)
{
        uint32_t a = 0, x = 0, mem[SCRATCH_WORDS] = { 0 };
        for (unsigned pc = 0;; pc++) {
                const struct sock_filter *in = &prog->filter[pc];
                switch (in->code) {
                case BPF_LD | BPF_W | BPF_ABS:
                        memcpy(&a, (const char *)data + in->k, 4);
                        continue;
                case BPF_LD | BPF_W | BPF_LEN:
                        a = sizeof(*data);
                        continue;
                case BPF_LDX | BPF_W | BPF_LEN:
                        x = sizeof(*data);
                        continue;
                case BPF_LD | BPF_IMM:
                        a = in->k;
                        continue;
                case BPF_LDX | BPF_IMM:
                        x = in->k;
                        continue;
                case BPF_LD | BPF_MEM:
                        a = mem[in->k];
                        continue;
                case BPF_LDX | BPF_MEM:
                        x = mem[in->k];
                        continue;
                case BPF_ST:
                        mem[in->k] = a;
                        continue;
                case BPF_STX:
                        mem[in->k] = x;
                        continue;
                case BPF_MISC | BPF_TAX:
                        x = a;
                        continue;
                case BPF_MISC | BPF_TXA:
                        a = x;
                        continue;
                case BPF_RET | BPF_K:
                        *action = in->k;
                        return 0;
                case BPF_RET | BPF_A:
                        *action = a;
                        return 0;
                case BPF_JMP | BPF_JA:
                        pc += in->k;
                        continue;
                }
                uint32_t operand = BPF_SRC(in->code) == BPF_X ? x : in->k;
                if (BPF_CLASS(in->code) == BPF_ALU) {
                        if (alu(BPF_OP(in->code), &a, operand) < 0)
                                return -EINVAL;
                } else {
                        pc += jump_taken(BPF_OP(in->code), a, operand) ? in->jt : in->jf;
                }
        }
}

int seccomp_check_run(const struct sock_fprog *prog, const struct seccomp_data *data, uint32_t *action)
{
        if (!program_valid(prog))
                return -EINVAL;
        return interpret(prog, data, action);
}

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef NATIVE_ARCH
#define ARG(v) ((uint64_t)(int64_t)(v))

/* What the runtime calls once the init carries the filter (runtime/init.c,
 * supervisor.c, process.c and what glibc does for them), with the
 * arguments that rules in profiles commonly look at. */
static const struct {
        int nr;
        uint64_t args[6];
} runtime_calls[] = {
/* the init and the supervisor */
#ifdef SYS_poll
        { SYS_poll, { 0, 2, ARG(-1) } },
        { SYS_poll, { 0, 3, ARG(-1) } },
#else
        { SYS_ppoll, { 0, 2, 0, 0, 8 } },
        { SYS_ppoll, { 0, 3, 0, 0, 8 } },
#endif
        { SYS_recvmsg, { 3, 0, MSG_CMSG_CLOEXEC } },
        { SYS_sendmsg, { 3, 0, MSG_NOSIGNAL } },
        { SYS_read, { 3 } },
        { SYS_clone, { CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID | SIGCHLD } },
        { SYS_clone, { CLONE_VM | SIGCHLD } }, /* the exec's child */
        { SYS_mmap,
          { 0, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, ARG(-1), 0 } },
        { SYS_mprotect, { 0, 4096, PROT_NONE } },
        { SYS_set_robust_list, { 0, 24 } }, /* glibc, in a forked child */
        { SYS_wait4, { 2, 0, WNOHANG } },   /* the exec's own process first */
        { SYS_wait4, { ARG(-1), 0, WNOHANG } },
        { SYS_wait4, { ARG(-1), 0, 0 } },
        { SYS_close, { 3 } },
        { SYS_exit_group, { 0 } },
        { SYS_prctl, { PR_SET_CHILD_SUBREAPER, 1 } },
        { SYS_setresuid, { 65533, 0, 65533 } },
        { SYS_pipe2, { 0, O_CLOEXEC | O_NONBLOCK } },
        { SYS_fcntl, { 3, F_SETFL, O_NONBLOCK } },
        { SYS_signalfd4, { ARG(-1), 0, 8, SFD_CLOEXEC | SFD_NONBLOCK } },
        { SYS_openat, { ARG(AT_FDCWD), 0, O_RDONLY | O_CLOEXEC } },
        { SYS_getpid, { 0 } },
        { SYS_getpgid, { 2 } }, /* does the exec still lead its group (a signal for it) */
        /* the exec's child, up to its execve */
        { SYS_fcntl, { 3, F_DUPFD_CLOEXEC, 3 } },
        { SYS_fcntl, { 3, F_DUPFD_CLOEXEC, 10 } },
        { SYS_dup3, { 10, 3, O_CLOEXEC } },
        { SYS_close_range, { 4, ~0u, 0 } },
        { SYS_close_range, { 5, ~0u, 0 } },
        { SYS_rt_sigprocmask, { SIG_SETMASK, 0, 0, 8 } },
        { SYS_setsid, { 0 } },
        { SYS_prctl, { PR_SET_PDEATHSIG, SIGKILL } },
        { SYS_prctl, { PR_SET_PDEATHSIG, 0 } },
        { SYS_getppid, { 0 } },
        { SYS_munmap, { 0 } },
        { SYS_brk, { 0 } },
        { SYS_write, { 3 } },
#ifdef SYS_dup2
        { SYS_dup2, { 5, 0 } },
#else
        { SYS_dup3, { 5, 0, 0 } },
#endif
        { SYS_chdir, { 0 } },
        { SYS_setresgid, { 1000, 1000, 1000 } },
        { SYS_setresuid, { 1000, 1000, 1000 } },
        { SYS_setresgid, { 0, 0, 0 } },
        { SYS_setresuid, { 0, 0, 0 } },
        { SYS_prctl, { PR_SET_DUMPABLE, 0 } },
        { SYS_capset, { 0 } },
        { SYS_prctl, { PR_SET_NO_NEW_PRIVS, 1 } },
        { SYS_execve, { 0 } },
};

static bool runtime_call_allowed(const struct sock_fprog *prog, int nr, const uint64_t args[6])
{
        struct seccomp_data data = { .nr = nr, .arch = NATIVE_ARCH };
        memcpy(data.args, args, sizeof(data.args));
        uint32_t action;
        if (interpret(prog, &data, &action) < 0)
                return false;
        action &= SECCOMP_RET_ACTION_FULL;
        return action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG;
}

bool seccomp_check_runtime_allowed(const struct sock_fprog *prog)
{
        if (!program_valid(prog))
                return false;
        for (size_t i = 0; i < sizeof(runtime_calls) / sizeof(runtime_calls[0]); i++) {
                if (!runtime_call_allowed(prog, runtime_calls[i].nr, runtime_calls[i].args))
                        return false;
        }
        /* A supervisor passes on any signal a client sends an exec, to the
         * exec's process group and to its process. */
        for (int sig = 1; sig <= CTL_MAX_SIGNAL; sig++) {
                const uint64_t to_group[6] = { ARG(-2), (uint64_t)sig }, to_process[6] = { 2, (uint64_t)sig };
                if (!runtime_call_allowed(prog, SYS_kill, to_group) ||
                    !runtime_call_allowed(prog, SYS_kill, to_process))
                        return false;
        }
        return true;
}
#else
bool seccomp_check_runtime_allowed(const struct sock_fprog *prog)
{
        return false; /* an architecture this list was not written for */
}
#endif
