/* Placeholder until the cgroup v2/v1 implementation lands: no limits. */
#include "cgroup.h"

#include <stdlib.h>

struct sandbox_cgroup {
        int unused;
};

int cgroup_init(bool allow_degraded, nsbox_error_t **err)
{
        return 0;
}

enum cgroup_mode cgroup_mode(void)
{
        return CGROUP_NONE;
}

const char *cgroup_mode_name(void)
{
        return "none";
}

bool cgroup_degraded(void)
{
        return true;
}

int cgroup_sandbox_create(const char *id, const struct sandbox_limits *limits, struct sandbox_cgroup **out,
                          int *clone_fd, nsbox_error_t **err)
{
        *out = calloc(1, sizeof(**out));
        *clone_fd = -1;
        return 0;
}

int cgroup_sandbox_attach(struct sandbox_cgroup *cg, pid_t pid, nsbox_error_t **err)
{
        return 0;
}

void cgroup_sandbox_kill(struct sandbox_cgroup *cg)
{
}

void cgroup_sandbox_destroy(struct sandbox_cgroup *cg)
{
        free(cg);
}

json_t *cgroup_sandbox_stats(struct sandbox_cgroup *cg)
{
        return json_pack("{s:n, s:n, s:n, s:n, s:i}", "memory_bytes", "memory_peak_bytes", "cpu_usage_us",
                         "pids", "oom_kills", 0);
}

uint64_t cgroup_sandbox_oom_kills(struct sandbox_cgroup *cg)
{
        return 0;
}

int cgroup_exec_create(struct sandbox_cgroup *cg, uint32_t exec_number, int *procs_fd, nsbox_error_t **err)
{
        *procs_fd = -1;
        return 0;
}

void cgroup_exec_kill(struct sandbox_cgroup *cg, uint32_t exec_number)
{
}

void cgroup_exec_destroy(struct sandbox_cgroup *cg, uint32_t exec_number)
{
}
