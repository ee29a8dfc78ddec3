/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's startup and main loop, also run by `nsbox run` when no daemon
 * is listening.  Everything happens in one epoll loop. */
#include <errno.h>
#include <malloc.h>
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
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "basens.h"
#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "egress.h"
#include "host_pools.h"
#include "io.h"
#include "log.h"
#include "methods.h"
#include "profiles.h"
#include "restore.h"
#include "rpc.h"
#include "shell.h"
#include "idle.h"
#include "keeper.h"
#include "python.h"
#include "removals.h"
#include "sandbox_life.h"
#include "snapshot.h"
#include "state.h"
#include "uidmode.h"
#include "userns.h"

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
        int r = io_memfd_seal(mfd);
        if (r < 0)
                return nsbox_error(err, -r, "seal the nsbox-init copy");
        /* The init's image only executable, not readable, by the sandbox
         * (host root owns it): execve of a file its caller
         * cannot read puts the new memory under the nearest user namespace
         * that owns the file, here the host's (would_dump in fs/exec.c).
         * The /proc/PID files of a non-dumpable process are owned by root
         * of that namespace (task_dump_owner in fs/proc/base.c): for the
         * init and its supervisors, which fork its memory, host root, whom
         * the sandbox cannot even name. Otherwise sandbox root owns them
         * and may write, say, a supervisor's oom_score_adj to 1000, so the
         * OOM killer takes the supervisor and leaves its exec unsupervised.
         * ptrace and /proc/PID/mem of them then take CAP_SYS_PTRACE on the
         * host, too. */
        if (fchmod(mfd, 0111) < 0)
                return nsbox_error(err, errno, "make the nsbox-init copy executable only");
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

static void notify_status(void)
{
        sd_notifyf(0, "STATUS=%u sandbox(es), cgroup %s", nsboxd.n_sandboxes, cgroup_mode_name());
}

/* SIGHUP: what can change without touching running sandboxes does. */
static void reload_config(void)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct nsbox_config fresh;
        sd_notify(0, "RELOADING=1");
        if (config_load(&fresh, nsboxd.argc, nsboxd.argv, &err) < 0) {
                log_error("SIGHUP: keeping the old configuration: %s", err->message);
                config_free(&fresh);
                sd_notify(0, "READY=1");
                return;
        }
        static const char *const fixed[] = { "socket", "state_dir", "image_dir", "init_path", "uid_pool" };
        bool restart_needed = strcmp(fresh.socket_path, nsboxd.config.socket_path) != 0 ||
                              strcmp(fresh.state_dir, nsboxd.config.state_dir) != 0 ||
                              strcmp(fresh.image_dir, nsboxd.config.image_dir) != 0 ||
                              strcmp(fresh.init_path, nsboxd.config.init_path) != 0 ||
                              fresh.uid_pool_base != nsboxd.config.uid_pool_base ||
                              fresh.uid_pool_ranges != nsboxd.config.uid_pool_ranges;
        if (restart_needed)
                log_warn("SIGHUP: %s, %s, %s, %s and %s changes need a restart; they are ignored", fixed[0],
                         fixed[1], fixed[2], fixed[3], fixed[4]);
        enum log_level level;
        if (log_parse_level(fresh.log_level, &level) == 0)
                log_max_level = level;
        nsboxd.config.max_sandboxes = fresh.max_sandboxes;
        nsboxd.config.max_connections = fresh.max_connections;
        nsboxd.config.max_request_bytes = fresh.max_request_bytes;
        nsboxd.config.max_sandboxes_per_uid = fresh.max_sandboxes_per_uid;
        nsboxd.config.max_connections_per_uid = fresh.max_connections_per_uid;
        nsboxd.config.max_execs_per_uid = fresh.max_execs_per_uid;
        nsboxd.config.client_idle_timeout_seconds = fresh.client_idle_timeout_seconds;
        nsboxd.config.request_timeout_seconds = fresh.request_timeout_seconds;
        nsboxd.config.max_memory_bytes = fresh.max_memory_bytes;
        nsboxd.config.max_disk_bytes = fresh.max_disk_bytes;
        nsboxd.config.max_pids = fresh.max_pids;
        nsboxd.config.max_cpus = fresh.max_cpus;
        nsboxd.config.host_cpus = fresh.host_cpus;
        nsboxd.config.ceilings = fresh.ceilings;
        nsboxd.config.memory_commit_bytes = fresh.memory_commit_bytes;
        nsboxd.config.max_buffer_bytes = fresh.max_buffer_bytes;
        if (!userns_active())
                host_pools_reserve(&nsboxd.config);
        sandbox_ensure_fd_limit();
        policy_clear(&nsboxd.config.defaults);
        nsboxd.config.defaults = fresh.defaults;
        memset(&fresh.defaults, 0, sizeof(fresh.defaults));
        sandbox_warn_overcommit();
        egress_reload(&fresh);
        profiles_clear(); /* profile files are read again on next use */
        config_free(&fresh);
        log_info("SIGHUP: configuration reloaded (running sandboxes keep their settings)");
        sd_notify(0, "READY=1");
}

static void on_signal(struct loop_source *source, uint32_t events)
{
        struct signalfd_siginfo si;
        while (read(source->fd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                        if (!nsboxd.stopping)
                                log_info("signal %u: stopping", si.ssi_signo);
                        nsboxd.stopping = true;
                        /* From this moment no new work starts, even on open
                         * connections: it would only be left behind. */
                        rpc_server_refuse_requests();
                } else if (si.ssi_signo == SIGHUP) {
                        reload_config();
                }
        }
}

static void on_tick(struct loop *loop, struct loop_timer *timer, void *data)
{
        sandbox_reap_idle();
        rpc_server_tick();
        notify_status();
}

/* The watchdog is fed from the loop itself: a stuck loop gets restarted. */
static void on_watchdog(struct loop *loop, struct loop_timer *timer, void *data)
{
        sd_notify(0, "WATCHDOG=1");
}

static int setup_watchdog(nsbox_error_t **err)
{
        uint64_t usec = 0;
        if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
                return 0;
        uint64_t half = usec / 2;
        /* In ns: systemd gives the period in us. */
        long long every = (long long)half * 1000;
        if (loop_timer_add_ns(nsboxd.loop, loop_now_ns() + every, every, on_watchdog, NULL) == NULL)
                return nsbox_error(err, ENOMEM, "watchdog timer");
        log_info("systemd watchdog every %llu ms", (unsigned long long)(half / 1000));
        return 0;
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

        long long second = 1000 * LOOP_NS_PER_MS;
        if (loop_timer_add_ns(nsboxd.loop, loop_now_ns() + second, second, on_tick, NULL) == NULL)
                return nsbox_error(err, ENOMEM, "idle timer");
        return 0;
}

/* With live restore, a running client sandbox with a lease stays: its init
 * waits for the next nsboxd. */
static bool outlives_us(const struct sandbox *sb)
{
        return nsboxd.config.live_restore && sb->lease_fd >= 0 && !sb->pooled && sb->state == SANDBOX_RUNNING;
}

static unsigned sandboxes_to_stop(void)
{
        unsigned n = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                n += !outlives_us(sb);
        return n;
}

/* Remove every sandbox (but those live restore keeps) and wait for their cgroups to go. Returns how many
 * things were left behind (sandboxes, cgroup dirs): then nsboxd exits
 * non-zero, so the operator (or systemd) knows to look. */
static unsigned shutdown_sandboxes(void)
{
        sd_notify(0, "STOPPING=1");
        rpc_server_refuse_requests();
        rpc_server_stop();
        long long deadline = now_monotonic_ms() + SHUTDOWN_GRACE_MS;
        while ((sandboxes_to_stop() > 0 || cgroup_removals_pending() > 0) && now_monotonic_ms() < deadline) {
                /* Again on each round: a create already in flight when the
                 * signal came may have added a sandbox since. */
                for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                        if ((sb->state == SANDBOX_RUNNING || sb->state == SANDBOX_CREATING) &&
                            !outlives_us(sb))
                                sandbox_remove(sb, "nsboxd is stopping", NULL, NULL);
                loop_run_once(nsboxd.loop, 100);
        }
        unsigned sandboxes = sandboxes_to_stop(), kept = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                kept += outlives_us(sb);
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                _cleanup_error_ nsbox_error_t *save_err = NULL;
                if (outlives_us(sb) && state_save(sb, &save_err) < 0) /* its idle timer's start */
                        log_warn("sandbox %s: %s", sb->id, save_err->message);
        }
        if (kept > 0)
                log_info("live restore: %u sandbox(es) left running for the next nsboxd (for %u s at most)",
                         kept, nsboxd.config.live_restore_grace_seconds);
        else
                keeper_release(nsboxd.config.state_dir);
        unsigned cgroups = cgroup_removals_pending();
        if (sandboxes > 0 || cgroups > 0)
                log_error(
                    "left behind: %u sandbox(es) did not stop and %u cgroup dir(s) could not be removed "
                    "within %d s",
                    sandboxes, cgroups, SHUTDOWN_GRACE_MS / 1000);
        /* Let the final replies of the killed execs reach their clients. */
        long long flush_deadline = now_monotonic_ms() + 500;
        while (now_monotonic_ms() < flush_deadline && loop_run_once(nsboxd.loop, 50) > 0)
                ;
        return sandboxes + cgroups;
}

/* Everything before serving; each step says what failed. */
static int start(nsbox_error_t **err)
{
        int r;
        nsboxd.loop = loop_new();
        if (nsboxd.loop == NULL)
                return nsbox_error(err, errno, "epoll");
        nsboxd.init_memfd = load_init_binary(nsboxd.config.init_path, err);
        if (nsboxd.init_memfd < 0)
                return nsboxd.init_memfd;
        /* Before anything that cleans up after a previous run (cgroup_init
         * removes stale cgroups, state_recover stale sandboxes): that must
         * never be a live daemon's. */
        /* A next nsboxd of user namespace mode is root of a new user
         * namespace, no ancestor of its predecessor's sandboxes': it could
         * not take their control sockets back (pidfd_getfd). */
        /* Except for `nsboxd --rootless`, whose keeper holds the namespaces
         * for the next one (keeper.h). */
        bool rootless = getenv("NSBOX_ROOTLESS_USER") != NULL;
        if (nsboxd.config.live_restore && userns_active() && !rootless) {
                log_warn(
                    "live_restore is off: nsboxd runs in a user namespace, and the next one could not adopt "
                    "its sandboxes");
                nsboxd.config.live_restore = 0;
        }
        bool joined = keeper_held();
        if (joined)
                log_info("live restore: nsboxd joined the user and mount namespaces its keeper holds");
        if (userns_active() && !joined && (r = userns_enter_mount_namespace(err)) < 0)
                return r;
        if ((r = state_lock(err)) < 0)
                return r;
        sandbox_removals_load();
        cgroup_keep_when(restore_keep);
        cgroup_sandboxes_in_scope(nsboxd.config.live_restore);
        if ((r = cgroup_init(nsboxd.config.allow_degraded || userns_active(), err)) < 0)
                return r;
        if (nsboxd.config.live_restore && cgroup_in_unit_cgroup()) {
                log_warn("live_restore is off: nsboxd runs in its systemd unit's own cgroup, where systemd "
                         "could not start the next nsboxd while sandboxes live (systemd made no scope for "
                         "the sandboxes, and the unit has no DelegateSubgroup=)");
                nsboxd.config.live_restore = 0;
        }
        if (rootless && nsboxd.config.live_restore)
                keeper_ensure(nsboxd.config.state_dir, nsboxd.config.live_restore_grace_seconds);
        if ((r = uidmode_init(nsboxd.config.uid_isolation, err)) < 0)
                return r;
        if (!userns_active())
                host_pools_reserve(&nsboxd.config);
        sandbox_on_ready(python_sandbox_ready);
        if ((r = sandbox_life_init(err)) < 0)
                return r;
        if ((r = basens_init(nsboxd.config.state_dir, err)) < 0)
                return r;
        if (uidmode_shared()) {
                /* Make the shared range's copy of the default image now, not
                 * on the first create while clients wait. */
                char lower[4096];
                _cleanup_error_ nsbox_error_t *copy_err = NULL;
                if (uidmode_image_lower(nsboxd.config.defaults.image, lower, sizeof(lower), &copy_err) < 0)
                        log_warn("image %s: %s", nsboxd.config.defaults.image, copy_err->message);
        }
        /* A previous run may have left sandboxes: with live restore those it
         * leased are adopted, the rest are removed. */
        python_live_restore_init();
        shell_live_restore_init();
        restore_adopt_all();
        state_recover();
        snapshots_discard_unused();
        if ((r = setup_signals_and_timers(err)) < 0 || (r = setup_watchdog(err)) < 0)
                return r;
        if ((r = egress_init(err)) < 0)
                return r;
        restore_networks();
        if ((r = profiles_get(nsboxd.config.defaults.seccomp_profile, err)) < 0)
                return r;
        if ((r = make_socket_dir(nsboxd.config.socket_path, err)) < 0)
                return r;
        /* Socket activation: nsboxd.socket hands over one listening socket. */
        int listen_fd = -1;
        int n = sd_listen_fds(1);
        if (n == 1 && sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) > 0)
                listen_fd = SD_LISTEN_FDS_START;
        else if (n > 0)
                log_warn("socket activation: expected one unix stream socket, got %d fds; ignoring them", n);
        struct rpc_server_config server = {
                .socket_path = nsboxd.config.socket_path,
                .listen_fd = listen_fd,
                .find_method = methods_find,
                .run_method = methods_run,
        };
        if ((r = rpc_server_start(nsboxd.loop, &server, err)) < 0)
                return r;
        /* Last: a start that fails leaves no tmpfs mounted. */
        state_runtime_fs();
        return 0;
}

/* A user's first nsboxd --rootless: ~/.local/share may not exist yet. */
static void make_state_parents(const char *state_dir)
{
        _cleanup_free_ char *path = strdup(state_dir);
        if (path == NULL)
                return;
        for (char *slash = strchr(path + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
                *slash = '\0';
                if (mkdir(path, 0700) < 0 && errno != EEXIST)
                        log_warn("mkdir %s: %s", path, strerror(errno));
                *slash = '/';
        }
}

/* Take --rootless out of argv (config_load knows only KEY VALUE flags). */
static bool take_rootless_flag(int *argc, char **argv)
{
        bool found = false;
        int out = 0;
        for (int i = 0; i < *argc; i++) {
                if (i > 0 && strcmp(argv[i], "--rootless") == 0)
                        found = true;
                else
                        argv[out++] = argv[i];
        }
        argv[out] = NULL;
        *argc = out;
        return found;
}

int nsboxd_main(int argc, char **argv)
{
        _cleanup_error_ nsbox_error_t *err = NULL;

        /* A request line is up to 64 MiB. With glibc's default, freeing one
         * such buffer raises the threshold above which blocks are mapped on
         * their own, and the next large line grew on the heap, copied at
         * each doubling. Fixed here: large buffers are always their own
         * mapping, grown with mremap and handed back to the host when freed. */
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
        int r;

        /* Before anything else: a user's nsboxd --rootless becomes root of a
         * user namespace of its own, then starts again there. */
        if ((r = keeper_main(argc, argv)) >= 0)
                return r;
        if (take_rootless_flag(&argc, argv) && geteuid() != 0) {
                /* The namespaces a keeper holds for the state dir are
                 * joined (the state dir as the re-executed nsboxd will read
                 * it from the same argv and environment): with live
                 * restore to adopt the sandboxes kept there, without it to
                 * clean them up and end the keeper. */
                const char *state_dir = NULL;
                if ((r = config_load(&nsboxd.config, argc, argv, &err)) == 1)
                        return 0;
                if (r == 0)
                        state_dir = nsboxd.config.state_dir;
                nsbox_error_free(&err); /* the re-executed nsboxd says it */
                userns_reexec_rootless(argv, state_dir != NULL ? keeper_join : NULL, state_dir, &err);
                fprintf(stderr, "nsboxd --rootless: %s\n", err->message);
                return 2;
        }
        /* nsboxd holds what no dump may show: secrets' values on their way
         * to nsbox-egress, the per-sandbox CAs' keys, clients' payloads. Not
         * dumpable: no core file is written, and /proc/<nsboxd>/mem and the
         * other ptrace-guarded files of /proc are root's only (an nsboxd run
         * by a user, --rootless, no longer shares them with that user). */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
                fprintf(stderr, "nsboxd: PR_SET_DUMPABLE: %s\n", strerror(errno));
                return 2;
        }
        r = config_load(&nsboxd.config, argc, argv, &err);
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
        if (userns_detect(&err) < 0) {
                fprintf(stderr, "nsboxd: %s\n", err->message);
                return 2;
        }
        if (geteuid() != 0) {
                fprintf(stderr, "nsboxd: must run as root, of the host or of a user namespace (as a user: "
                                "nsboxd --rootless)\n");
                return 2;
        }
        /* Host root's supplementary groups must not follow into sandboxes.
         * In a user namespace whose setgroups is "deny" there are none that
         * could (they show as nobody). */
        if (setgroups(0, NULL) < 0 && !(userns_active() && errno == EPERM)) {
                log_error("drop supplementary groups: %s", strerror(errno));
                return 1;
        }
        umask(022);
        if (getenv("NSBOX_ROOTLESS_USER") != NULL)
                make_state_parents(nsboxd.config.state_dir);

        nsboxd.argc = argc;
        nsboxd.argv = argv;
        /* Clients and sandboxes each hold a few fds here: use the hard limit.
         * Sandboxes get the usual 1024 back (runtime/setup.c). */
        struct rlimit nofile;
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
                nofile.rlim_cur = nofile.rlim_max;
                setrlimit(RLIMIT_NOFILE, &nofile);
        }
        if (start(&err) < 0) {
                log_error("%s", err->message);
                sd_notifyf(0, "STATUS=failed to start: %s", err->message);
                return 1;
        }
        log_info("listening on %s (state %s, images %s, cgroup %s%s)", nsboxd.config.socket_path,
                 nsboxd.config.state_dir, nsboxd.config.image_dir, cgroup_mode_name(),
                 cgroup_degraded() ? ", limits NOT enforced" : "");
        sandbox_pool_fill();
        /* Only now: the socket accepts and the image and profile are loaded. */
        sd_notify(0, "READY=1");
        notify_status();

        while (!nsboxd.stopping) {
                r = loop_run_once(nsboxd.loop, -1);
                if (r < 0) {
                        log_error("event loop: %s", strerror(-r));
                        break;
                }
        }
        unsigned left_behind = shutdown_sandboxes();
        sandbox_removals_save();
        state_runtime_fs_release();
        egress_shutdown();
        profiles_clear();
        log_info("stopped%s", left_behind ? " with things left behind" : "");
        loop_free(nsboxd.loop);
        nsboxd.loop = NULL;
        if (nsboxd.init_memfd >= 0)
                close(nsboxd.init_memfd);
        config_free(&nsboxd.config);
        return left_behind ? 1 : 0;
}
