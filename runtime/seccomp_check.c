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

#define SCRATCH_WORDS 16 /* BPF_MEMWORDS */

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
                        return -EINVAL;
                *a /= operand;
                return 0;
        case BPF_MOD:
                if (operand == 0)
                        return -EINVAL;
                *a %= operand;
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
                *a = operand < 32 ? *a << operand : 0;
                return 0;
        case BPF_RSH:
                *a = operand < 32 ? *a >> operand : 0;
                return 0;
        case BPF_NEG:
                *a = -*a;
                return 0;
        }
        return -EINVAL;
}

static int jump_taken(uint16_t op, uint32_t a, uint32_t operand)
{
        switch (op) {
        case BPF_JEQ:
                return a == operand;
        case BPF_JGT:
                return a > operand;
        case BPF_JGE:
                return a >= operand;
        case BPF_JSET:
                return (a & operand) != 0;
        }
        return -EINVAL;
}

int seccomp_check_run(const struct sock_fprog *prog, const struct seccomp_data *data, uint32_t *action)
{
        uint32_t a = 0, x = 0, mem[SCRATCH_WORDS] = { 0 };
        for (unsigned pc = 0; pc < prog->len; pc++) {
                const struct sock_filter *in = &prog->filter[pc];
                uint16_t cls = BPF_CLASS(in->code);
                switch (cls) {
                case BPF_LD:
                case BPF_LDX: {
                        uint32_t value;
                        if (BPF_MODE(in->code) == BPF_ABS && BPF_SIZE(in->code) == BPF_W) {
                                if (in->k % 4 != 0 || in->k > sizeof(*data) - 4)
                                        return -EINVAL;
                                memcpy(&value, (const char *)data + in->k, 4);
                        } else if (BPF_MODE(in->code) == BPF_IMM) {
                                value = in->k;
                        } else if (BPF_MODE(in->code) == BPF_MEM && in->k < SCRATCH_WORDS) {
                                value = mem[in->k];
                        } else if (BPF_MODE(in->code) == BPF_LEN) {
                                value = sizeof(*data);
                        } else {
                                return -EINVAL;
                        }
                        if (cls == BPF_LD)
                                a = value;
                        else
                                x = value;
                        break;
                }
                case BPF_ST:
                case BPF_STX:
                        if (in->k >= SCRATCH_WORDS)
                                return -EINVAL;
                        mem[in->k] = cls == BPF_ST ? a : x;
                        break;
                case BPF_ALU:
                        if (alu(BPF_OP(in->code), &a, BPF_SRC(in->code) == BPF_X ? x : in->k) < 0)
                                return -EINVAL;
                        break;
                case BPF_JMP: {
                        if (BPF_OP(in->code) == BPF_JA) {
                                if (in->k >= prog->len - pc)
                                        return -EINVAL;
                                pc += in->k;
                                break;
                        }
                        int taken = jump_taken(BPF_OP(in->code), a, BPF_SRC(in->code) == BPF_X ? x : in->k);
                        if (taken < 0)
                                return -EINVAL;
                        pc += taken ? in->jt : in->jf;
                        break;
                }
                case BPF_RET:
                        if (BPF_RVAL(in->code) == BPF_K)
                                *action = in->k;
                        else if (BPF_RVAL(in->code) == BPF_A)
                                *action = a;
                        else
                                return -EINVAL;
                        return 0;
                case BPF_MISC:
                        if (BPF_MISCOP(in->code) == BPF_TAX)
                                x = a;
                        else if (BPF_MISCOP(in->code) == BPF_TXA)
                                a = x;
                        else
                                return -EINVAL;
                        break;
                default:
                        return -EINVAL;
                }
        }
        return -EINVAL; /* ran off the end: the kernel refuses such programs */
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
        { SYS_poll, { 0, 3, ARG(-1) } },
        { SYS_recvmsg, { 3, 0, MSG_CMSG_CLOEXEC } },
        { SYS_sendmsg, { 3, 0, MSG_NOSIGNAL } },
        { SYS_read, { 0 } },
        { SYS_clone, { CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID | SIGCHLD } },
        { SYS_wait4, { ARG(-1), 0, WNOHANG } },
        { SYS_wait4, { ARG(-1), 0, 0 } },
        { SYS_close, { 0 } },
        { SYS_exit_group, { 0 } },
        { SYS_prctl, { PR_SET_CHILD_SUBREAPER, 1 } },
        { SYS_setresuid, { 65533, 0, 65533 } },
        { SYS_pipe2, { 0, O_CLOEXEC } },
        { SYS_fcntl, { 3, F_SETFL, O_NONBLOCK } },
        { SYS_signalfd4, { ARG(-1), 0, 8, SFD_CLOEXEC | SFD_NONBLOCK } },
        { SYS_openat, { ARG(AT_FDCWD), 0, O_RDONLY | O_CLOEXEC } },
        { SYS_getpid, { 0 } },
        { SYS_kill, { 2, SIGKILL } },
        { SYS_kill, { 2, SIGINT } },
        /* the exec's child, up to its execve */
        { SYS_fcntl, { 3, F_DUPFD_CLOEXEC, 3 } },
        { SYS_dup3, { 10, 3, O_CLOEXEC } },
        { SYS_close_range, { 5, ~0u, 0 } },
        { SYS_rt_sigprocmask, { SIG_SETMASK, 0, 0, 8 } },
        { SYS_setsid, { 0 } },
        { SYS_mmap, { 0, 4u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, ARG(-1), 0 } },
        { SYS_munmap, { 0 } },
        { SYS_brk, { 0 } },
        { SYS_write, { 0 } },
#ifdef SYS_dup2
        { SYS_dup2, { 0 } },
#endif
        { SYS_chdir, { 0 } },
        { SYS_setresgid, { 1000, 1000, 1000 } },
        { SYS_setresuid, { 1000, 1000, 1000 } },
        { SYS_setresgid, { 0 } },
        { SYS_setresuid, { 0 } },
        { SYS_capget, { 0 } },
        { SYS_capset, { 0 } },
        { SYS_prctl, { PR_SET_NO_NEW_PRIVS, 1 } },
        { SYS_execve, { 0 } },
};

bool seccomp_check_runtime_allowed(const struct sock_fprog *prog)
{
        for (size_t i = 0; i < sizeof(runtime_calls) / sizeof(runtime_calls[0]); i++) {
                struct seccomp_data data = { .nr = runtime_calls[i].nr, .arch = NATIVE_ARCH };
                memcpy(data.args, runtime_calls[i].args, sizeof(data.args));
                uint32_t action;
                if (seccomp_check_run(prog, &data, &action) < 0)
                        return false;
                action &= SECCOMP_RET_ACTION_FULL;
                if (action != SECCOMP_RET_ALLOW && action != SECCOMP_RET_LOG)
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
