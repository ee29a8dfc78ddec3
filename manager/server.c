/* nsboxd's startup and main loop, also run by `nsbox run` when no daemon
 * is listening.  Everything happens in one epoll loop. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "log.h"
#include "methods.h"
#include "profiles.h"
#include "rpc.h"
#include "sandbox.h"

#define SHUTDOWN_GRACE_MS 10000

/* A sealed in-memory copy of nsbox-init: what every sandbox execs as its
 * PID 1, so no host file backs /proc/1/exe (CVE-2019-5736). */
static int load_init_binary(const char *path, nsbox_error_t **err)
{
        _cleanup_close_ int src = open(path, O_RDONLY | O_CLOEXEC);
        if (src < 0)
                return nsbox_error(err, errno, "open %s", path);
        _cleanup_close_ int mfd = memfd_create("nsbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (mfd < 0)
                return nsbox_error(err, errno, "memfd_create");
        char buf[65536];
        ssize_t n;
        while ((n = read(src, buf, sizeof(buf))) > 0) {
                if (write(mfd, buf, n) != n)
                        return nsbox_error(err, errno, "copy %s", path);
        }
        if (n < 0)
                return nsbox_error(err, errno, "read %s", path);
        if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
                return nsbox_error(err, errno, "seal the nsbox-init copy");
        return steal_fd(&mfd);
}

static int make_socket_dir(const char *socket_path, nsbox_error_t **err)
{
        _cleanup_free_ char *copy = strdup(socket_path);
        if (copy == NULL)
                return nsbox_error(err, ENOMEM, "socket path");
        const char *dir = dirname(copy);
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", dir);
        return 0;
}

static void on_signal(struct loop_source *source, uint32_t events)
{
        struct signalfd_siginfo si;
        while (read(source->fd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                        if (!nsboxd.stopping)
                                log_info("signal %u: stopping", si.ssi_signo);
                        nsboxd.stopping = true;
                } else if (si.ssi_signo == SIGHUP) {
                        log_info("SIGHUP: nothing to reload yet");
                }
        }
}

static void on_tick(struct loop_source *source, uint32_t events)
{
        uint64_t expirations;
        if (read(source->fd, &expirations, sizeof(expirations)) > 0)
                sandbox_reap_idle();
}

static int setup_signals_and_timers(nsbox_error_t **err)
{
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return nsbox_error(err, errno, "block signals");
        signal(SIGPIPE, SIG_IGN);
        int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                return nsbox_error(err, errno, "signalfd");
        if (loop_add(nsboxd.loop, sfd, EPOLLIN, on_signal, NULL) == NULL)
                return nsbox_error(err, errno, "watch signals");

        int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        struct itimerspec tick = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
        if (tfd < 0 || timerfd_settime(tfd, 0, &tick, NULL) < 0)
                return nsbox_error(err, errno, "idle timer");
        if (loop_add(nsboxd.loop, tfd, EPOLLIN, on_tick, NULL) == NULL)
                return nsbox_error(err, errno, "watch idle timer");
        return 0;
}

static void shutdown_sandboxes(void)
{
        rpc_server_stop();
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                sandbox_remove(sb, NULL, NULL);
        long long deadline = now_monotonic_ms() + SHUTDOWN_GRACE_MS;
        while (nsboxd.sandboxes != NULL && now_monotonic_ms() < deadline)
                loop_run_once(nsboxd.loop, 100);
        if (nsboxd.sandboxes != NULL)
                log_error("%u sandbox(es) did not stop in time", nsboxd.n_sandboxes);
}

int nsboxd_main(int argc, char **argv)
{
        _cleanup_error_ nsbox_error_t *err = NULL;

        int r = config_load(&nsboxd.config, argc, argv, &err);
        if (r == 1)
                return 0;
        if (r < 0) {
                fprintf(stderr, "nsboxd: %s\n", err->message);
                return 2;
        }
        if (log_parse_level(nsboxd.config.log_level, &log_max_level) < 0) {
                fprintf(stderr, "nsboxd: unknown log level \"%s\"\n", nsboxd.config.log_level);
                return 2;
        }
        if (geteuid() != 0) {
                fprintf(stderr, "nsboxd: must run as root\n");
                return 2;
        }
        /* Host root's supplementary groups must not follow into sandboxes. */
        if (setgroups(0, NULL) < 0) {
                log_error("drop supplementary groups: %s", strerror(errno));
                return 1;
        }
        umask(022);

        nsboxd.loop = loop_new();
        if (nsboxd.loop == NULL) {
                log_error("epoll: %s", strerror(errno));
                return 1;
        }
        nsboxd.init_memfd = load_init_binary(nsboxd.config.init_path, &err);
        if (nsboxd.init_memfd < 0 || cgroup_init(nsboxd.config.allow_degraded, &err) < 0 ||
            sandbox_registry_init(&err) < 0 || setup_signals_and_timers(&err) < 0 ||
            profiles_get(nsboxd.config.defaults.seccomp_profile, &err) < 0 ||
            make_socket_dir(nsboxd.config.socket_path, &err) < 0) {
                log_error("%s", err->message);
                return 1;
        }
        struct rpc_server_config server = {
                .socket_path = nsboxd.config.socket_path,
                .max_request_bytes = nsboxd.config.max_request_bytes,
                .max_connections = nsboxd.config.max_connections,
                .methods = nsboxd_methods,
        };
        if (rpc_server_start(nsboxd.loop, &server, &err) < 0) {
                log_error("%s", err->message);
                return 1;
        }
        log_info("listening on %s (state %s, images %s, cgroup %s%s)", nsboxd.config.socket_path,
                 nsboxd.config.state_dir, nsboxd.config.image_dir, cgroup_mode_name(),
                 cgroup_degraded() ? ", limits NOT enforced" : "");

        while (!nsboxd.stopping) {
                r = loop_run_once(nsboxd.loop, -1);
                if (r < 0) {
                        log_error("event loop: %s", strerror(-r));
                        break;
                }
        }
        shutdown_sandboxes();
        profiles_clear();
        log_info("stopped");
        config_free(&nsboxd.config);
        return 0;
}
