/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's configuration: defaults, the JSON file, NSBOX_* variables, flags; checked once at start. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "size.h"
#include "version.h"

enum option_kind { OPT_STRING, OPT_UINT };

struct option_def {
        const char *key; /* config file key; flag is --key with '_' → '-' */
        const char *env; /* NSBOX_... */
        enum option_kind kind;
        size_t offset; /* into struct nsbox_config */
        size_t size;   /* of the field, for OPT_UINT */
        unsigned long long max;
        const char *help;
};

#define CFG(field) offsetof(struct nsbox_config, field), sizeof(((struct nsbox_config *)0)->field)

static const struct option_def options[] = {
        { "socket", "NSBOX_SOCKET", OPT_STRING, CFG(socket_path), 0, "unix socket to listen on" },
        { "state_dir", "NSBOX_STATE_DIR", OPT_STRING, CFG(state_dir), 0, "per-sandbox state" },
        { "image_dir", "NSBOX_IMAGE_DIR", OPT_STRING, CFG(image_dir), 0, "images (NAME/rootfs)" },
        { "seccomp_dir", "NSBOX_SECCOMP_DIR", OPT_STRING, CFG(seccomp_dir), 0, "seccomp profiles (*.json)" },
        { "init_path", "NSBOX_INIT_PATH", OPT_STRING, CFG(init_path), 0, "the nsbox-init binary" },
        { "config", "NSBOX_CONFIG", OPT_STRING, CFG(config_path), 0, "JSON config file" },
        { "log_level", "NSBOX_LOG_LEVEL", OPT_STRING, CFG(log_level), 0, "error, warn, info or debug" },
        { "unmapped_clients", "NSBOX_UNMAPPED_CLIENTS", OPT_STRING, CFG(unmapped_clients), 0,
          "in a user namespace: refuse or one-owner (clients whose uid it does not map)" },
        { "uid_isolation", "NSBOX_UID_ISOLATION", OPT_STRING, CFG(uid_isolation), 0,
          "per-sandbox (default), shared, or auto (shared where idmapped mounts are missing)" },
        { "max_request_bytes", "NSBOX_MAX_REQUEST_BYTES", OPT_UINT, CFG(max_request_bytes), 1ull << 32,
          "longest request line" },
        { "max_sandboxes", "NSBOX_MAX_SANDBOXES", OPT_UINT, CFG(max_sandboxes), 100000,
          "live sandboxes at most" },
        { "max_connections", "NSBOX_MAX_CONNECTIONS", OPT_UINT, CFG(max_connections), 100000,
          "client connections at most" },
        { "uid_pool_base", "NSBOX_UID_POOL_BASE", OPT_UINT, CFG(uid_pool_base), UINT_MAX - NSBOX_UID_RANGE,
          "first host uid given to sandboxes" },
        { "uid_pool_ranges", "NSBOX_UID_POOL_RANGES", OPT_UINT, CFG(uid_pool_ranges), 60000,
          "number of 65536-id ranges in the pool (each 65664 ids from the next)" },
        { "warm_pool", "NSBOX_WARM_POOL", OPT_UINT, CFG(warm_pool), 256,
          "sandboxes kept ready with the default policy (0: none)" },
        { "live_restore", "NSBOX_LIVE_RESTORE", OPT_UINT, CFG(live_restore), 1,
          "1: sandboxes outlive nsboxd (stop, upgrade, crash); the next nsboxd adopts them" },
        { "live_restore_grace_seconds", "NSBOX_LIVE_RESTORE_GRACE_SECONDS", OPT_UINT,
          CFG(live_restore_grace_seconds), 30 * 24 * 3600,
          "with live_restore: how long a sandbox waits for a new nsboxd before it ends itself" },
        { "allow_degraded", "NSBOX_ALLOW_DEGRADED", OPT_UINT, CFG(allow_degraded), 1,
          "1: run sandboxes unlimited where cgroups cannot limit them" },
        { "max_sandboxes_per_uid", "NSBOX_MAX_SANDBOXES_PER_UID", OPT_UINT, CFG(max_sandboxes_per_uid),
          100000, "live sandboxes one non-root uid may own" },
        { "max_connections_per_uid", "NSBOX_MAX_CONNECTIONS_PER_UID", OPT_UINT, CFG(max_connections_per_uid),
          100000, "client connections of one non-root uid" },
        { "max_execs_per_uid", "NSBOX_MAX_EXECS_PER_UID", OPT_UINT, CFG(max_execs_per_uid), 100000,
          "running execs and python.run calls of one non-root uid" },
        { "client_idle_timeout_seconds", "NSBOX_CLIENT_IDLE_TIMEOUT_SECONDS", OPT_UINT,
          CFG(client_idle_timeout_seconds), 7 * 24 * 3600, "close a connection idle this long (0: never)" },
        { "request_timeout_seconds", "NSBOX_REQUEST_TIMEOUT_SECONDS", OPT_UINT, CFG(request_timeout_seconds),
          3600, "a request line must arrive whole within this (0: no limit)" },
        { "max_memory_bytes", "NSBOX_MAX_MEMORY_BYTES", OPT_UINT, CFG(max_memory_bytes),
          POLICY_MAX_MEMORY_BYTES, "largest memory limit a client may ask for (0: the host's memory)" },
        { "max_disk_bytes", "NSBOX_MAX_DISK_BYTES", OPT_UINT, CFG(max_disk_bytes), POLICY_MAX_DISK_BYTES,
          "largest disk limit a client may ask for (0: the host's memory)" },
        { "max_pids", "NSBOX_MAX_PIDS", OPT_UINT, CFG(max_pids), POLICY_MAX_PIDS,
          "largest pids limit a client may ask for" },
        { "max_cpus", "NSBOX_MAX_CPUS", OPT_UINT, CFG(max_cpus), 1024,
          "largest cpus limit a client may ask for (0: the host's CPUs)" },
        { "memory_commit_bytes", "NSBOX_MEMORY_COMMIT_BYTES", OPT_UINT, CFG(memory_commit_bytes), 1ull << 50,
          "sum of the memory limits of live sandboxes at most (0: the host's memory)" },
        { "max_buffer_bytes", "NSBOX_MAX_BUFFER_BYTES", OPT_UINT, CFG(max_buffer_bytes), 1ull << 40,
          "nsboxd memory for output not yet read, all clients together (0: an eighth of the host's)" },
        { "allow_client_network_policies", "NSBOX_ALLOW_CLIENT_NETWORK_POLICIES", OPT_UINT,
          CFG(allow_client_network_policies), 1, "1: sandbox.create may pass its own network policy object" },
        { "network_subnet", "NSBOX_NETWORK_SUBNET", OPT_STRING, CFG(network_subnet), 0,
          "IPv4 CIDR the sandboxes' network addresses come from" },
        { "egress_dns_servers", "NSBOX_EGRESS_DNS_SERVERS", OPT_STRING, CFG(egress_dns_servers), 0,
          "resolvers of the egress proxy, IP[:PORT],... (default: /etc/resolv.conf)" },
        { "egress_ca_file", "NSBOX_EGRESS_CA_FILE", OPT_STRING, CFG(egress_ca_file), 0,
          "more CA certificates (PEM) the egress proxy trusts, beside the system's, to verify the servers "
          "of secrets' hosts" },
        { "egress_path", "NSBOX_EGRESS_PATH", OPT_STRING, CFG(egress_path), 0, "the nsbox-egress binary" },
        { "egress_uid", "NSBOX_EGRESS_UID", OPT_UINT, CFG(egress_uid), UINT32_MAX - 1,
          "uid and gid of the egress proxy (0: uid_pool_base - 1)" },
        { "host_mount_roots", "NSBOX_HOST_MOUNT_ROOTS", OPT_STRING, CFG(host_mount_roots), 0,
          "directories (comma-separated, absolute) under which a client may mount its own host "
          "directories into a sandbox (sandbox.create mounts[].host_path); \"\": none" },
        { "python_fork_server", "NSBOX_PYTHON_FORK_SERVER", OPT_STRING, CFG(python_fork_server), 0,
          "stateless python.run through a per-sandbox fork server: lazy, eager or off" },
        { "python_fork_server_idle_seconds", "NSBOX_PYTHON_FORK_SERVER_IDLE_SECONDS", OPT_UINT,
          CFG(python_fork_server_idle_seconds), 7 * 24 * 3600,
          "stop a sandbox's fork server after this long without a stateless call" },
        { "python_fork_server_min_memory_bytes", "NSBOX_PYTHON_FORK_SERVER_MIN_MEMORY_BYTES", OPT_UINT,
          CFG(python_fork_server_min_memory_bytes), POLICY_MAX_MEMORY_BYTES,
          "no fork server in sandboxes with a smaller memory limit" },
        { "layer_disk_bytes", "NSBOX_LAYER_DISK_BYTES", OPT_UINT, CFG(layer_disk_bytes), 1ull << 50,
          "disk for snapshots and committed images, all users together" },
        { "max_snapshots_per_uid", "NSBOX_MAX_SNAPSHOTS_PER_UID", OPT_UINT, CFG(max_snapshots_per_uid),
          100000, "snapshots one non-root uid may keep" },
        { "volume_bytes_per_uid", "NSBOX_VOLUME_BYTES_PER_UID", OPT_UINT, CFG(volume_bytes_per_uid),
          1ull << 50,
          "the sizes of one non-root uid's volumes together (0: the size of the state dir's file system)" },
        { "max_images_per_uid", "NSBOX_MAX_IMAGES_PER_UID", OPT_UINT, CFG(max_images_per_uid), 100000,
          "committed images one non-root uid may keep" },
        { "layer_inodes", "NSBOX_LAYER_INODES", OPT_UINT, CFG(layer_inodes), 1ull << 40,
          "inodes of snapshots and committed images, all users together" },
        { "layer_inodes_per_uid", "NSBOX_LAYER_INODES_PER_UID", OPT_UINT, CFG(layer_inodes_per_uid),
          1ull << 40, "inodes of the snapshots and committed images of one non-root uid" },
        { "layer_inodes_per_snapshot", "NSBOX_LAYER_INODES_PER_SNAPSHOT", OPT_UINT,
          CFG(layer_inodes_per_snapshot), 1ull << 40, "inodes of one snapshot or committed image" },
        { "disk_inodes", "NSBOX_DISK_INODES", OPT_UINT, CFG(disk_inodes), 1ull << 32,
          "inodes of each sandbox's writable disk (files, directories, symlinks it may make)" },
        { "memory_bytes", "NSBOX_MEMORY_BYTES", OPT_UINT, CFG(defaults.limits.memory_bytes),
          POLICY_MAX_MEMORY_BYTES, "default memory limit" },
        { "pids", "NSBOX_PIDS", OPT_UINT, CFG(defaults.limits.pids), POLICY_MAX_PIDS, "default pids limit" },
        { "disk_bytes", "NSBOX_DISK_BYTES", OPT_UINT, CFG(defaults.limits.disk_bytes), POLICY_MAX_DISK_BYTES,
          "default disk limit" },
        { "idle_timeout_seconds", "NSBOX_IDLE_TIMEOUT_SECONDS", OPT_UINT, CFG(defaults.idle_timeout_seconds),
          POLICY_MAX_IDLE_SECONDS, "default idle timeout" },
        { "idle_action", "NSBOX_IDLE_ACTION", OPT_STRING, CFG(idle_action), 0,
          "what happens to a sandbox idle for its idle timeout: pause or remove" },
        { "auto_resume", "NSBOX_AUTO_RESUME", OPT_UINT, CFG(auto_resume), 1,
          "1: a request that runs something in a paused sandbox resumes it; 0: it fails" },
        { "paused_timeout_seconds", "NSBOX_PAUSED_TIMEOUT_SECONDS", OPT_UINT,
          CFG(defaults.paused_timeout_seconds), UINT32_MAX,
          "remove a sandbox paused (or, without a freezer, idle after its idle timeout) this long (0: "
          "never)" },
};

/* A size (a key in _bytes) takes a unit as the CLI's options and the
 * JSON-RPC params do: "8G". */
static bool is_size_key(const char *key)
{
        size_t len = strlen(key);
        return len > 6 && strcmp(key + len - 6, "_bytes") == 0;
}

static int set_uint(struct nsbox_config *config, const struct option_def *opt, unsigned long long v,
                    nsbox_error_t **err)
{
        void *field = (char *)config + opt->offset;
        switch (opt->size) {
        case sizeof(uint64_t):
                *(uint64_t *)field = v;
                break;
        case sizeof(uint32_t):
                *(uint32_t *)field = (uint32_t)v;
                break;
        default:
                return nsbox_error(err, EINVAL, "config key %s: unsupported field size", opt->key);
        }
        return 0;
}

static int set_value(struct nsbox_config *config, const struct option_def *opt, const char *text,
                     const char *source, nsbox_error_t **err)
{
        if (opt->kind == OPT_STRING) {
                if (text[0] == '\0')
                        return nsbox_invalid(err, "%s: %s must not be empty", source, opt->key);
                char **slot = (char **)((char *)config + opt->offset);
                free(*slot);
                *slot = strdup(text);
                return *slot ? 0 : nsbox_error(err, ENOMEM, "config");
        }
        if (is_size_key(opt->key)) {
                uint64_t bytes;
                char most[SIZE_FORMAT_MAX];
                if (size_parse(text, &bytes) < 0 || bytes > opt->max)
                        return nsbox_invalid(err,
                                             "%s: %s must be a size from 0 to %s (bytes, or e.g. 512M, 8G)",
                                             source, opt->key, size_format(opt->max, most, sizeof(most)));
                return set_uint(config, opt, bytes, err);
        }
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v > opt->max)
                return nsbox_invalid(err, "%s: %s must be an integer from 0 to %llu", source, opt->key,
                                     opt->max);
        return set_uint(config, opt, v, err);
}

static int load_file(struct nsbox_config *config, const char *path, bool required, nsbox_error_t **err)
{
        json_error_t jerr;
        if (access(path, F_OK) < 0 && !required)
                return 0;
        _cleanup_json_ json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (root == NULL)
                return nsbox_invalid(err, "config %s: line %d: %s", path, jerr.line, jerr.text);
        if (!json_is_object(root))
                return nsbox_invalid(err, "config %s: not a JSON object", path);
        const char *key;
        json_t *value;
        json_object_foreach(root, key, value)
        {
                const struct option_def *opt = NULL;
                for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
                        if (strcmp(options[i].key, key) == 0)
                                opt = &options[i];
                }
                if (strcmp(key, "network_policies") == 0) {
                        /* An object, not a flag: checked by the egress module. */
                        if (!json_is_object(value))
                                return nsbox_invalid(err, "config %s: network_policies must be an object",
                                                     path);
                        json_decref(config->network_policies);
                        config->network_policies = json_incref(value);
                        continue;
                }
                if (opt == NULL || strcmp(key, "config") == 0)
                        return nsbox_invalid(err, "config %s: unknown key \"%s\"", path, key);
                char number[32];
                const char *text;
                if (opt->kind == OPT_STRING && json_is_string(value)) {
                        text = json_string_value(value);
                } else if (opt->kind == OPT_UINT && json_is_string(value) && is_size_key(key)) {
                        text = json_string_value(value); /* a size with a unit */
                } else if (opt->kind == OPT_UINT && opt->max == 1 && json_is_boolean(value)) {
                        text = json_is_true(value) ? "1" : "0"; /* a switch: "live_restore": true */
                } else if (opt->kind == OPT_UINT && json_is_integer(value)) {
                        snprintf(number, sizeof(number), "%lld", (long long)json_integer_value(value));
                        text = number;
                } else {
                        return nsbox_invalid(err, "config %s: \"%s\" has the wrong type", path, key);
                }
                char source[512];
                snprintf(source, sizeof(source), "config %s", path);
                int r = set_value(config, opt, text, source, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* nsbox-init and the seccomp profiles sit next to nsboxd in a build tree,
 * or under PREFIX once installed. */
static char *sibling_path(const char *name, const char *installed)
{
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n > 0) {
                exe[n] = '\0';
                char *slash = strrchr(exe, '/');
                if (slash != NULL) {
                        *slash = '\0';
                        char *candidate = NULL;
                        if (asprintf(&candidate, "%s/%s", exe, name) >= 0) {
                                if (access(candidate, F_OK) == 0)
                                        return candidate;
                                free(candidate);
                        }
                }
        }
        return strdup(installed);
}

static void usage(const struct nsbox_config *defaults)
{
        printf("usage: nsboxd [options]\n\nEvery option is also a key of the JSON config file "
               "(--max-sandboxes:\n"
               "\"max_sandboxes\") and an "
               "NSBOX_* environment variable; flags win over the environment, which wins over the file.\n"
               "The file is --config, else $NSBOX_CONFIG, else /etc/nsbox/nsboxd.json (if it exists).\n"
               "An option in -bytes is a size: bytes, or a number with a unit (512M, 8G, 1T).\n"
               "--rootless (a user other than root): run as root of a new user namespace mapped from\n"
               "/etc/subuid and /etc/subgid by newuidmap/newgidmap (docs/rootless.md).\n\n");
        for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
                char flag[64];
                snprintf(flag, sizeof(flag), "--%s", options[i].key);
                for (char *p = flag; *p; p++)
                        if (*p == '_')
                                *p = '-';
                const void *field = (const char *)defaults + options[i].offset;
                char value[128];
                if (options[i].kind == OPT_STRING) {
                        const char *text = *(char *const *)field;
                        snprintf(value, sizeof(value), "\"%s\"", text != NULL ? text : "");
                } else {
                        unsigned long long v = options[i].size == sizeof(uint64_t) ? *(const uint64_t *)field
                                                                                   : *(const uint32_t *)field;
                        snprintf(value, sizeof(value), "%llu", v);
                }
                printf("  %-32s %s (%s; default %s)\n", flag, options[i].help, options[i].env,
                       strcmp(options[i].key, "config") == 0 ? "none" : value);
        }
        printf("\nOnly in the config file: \"network_policies\", an object of named network policies,\n"
               "e.g. {\"pypi\": {\"allow\": [\"pypi.org\", \"files.pythonhosted.org\"]}} (see "
               "docs/networking.md).\n"
               "A default of 0 for a max_* bound or memory_commit_bytes means: derived from the host.\n");
}

/* Settings left at 0 that follow the host: its memory and CPUs. */
static void derive_host_bounds(struct nsbox_config *config)
{
        struct sysinfo si;
        uint64_t host_memory = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : 0;
        if (config->max_memory_bytes == 0)
                config->max_memory_bytes = host_memory;
        if (config->max_disk_bytes == 0)
                config->max_disk_bytes = host_memory;
        if (config->memory_commit_bytes == 0)
                config->memory_commit_bytes = host_memory;
        if (config->max_buffer_bytes == 0)
                config->max_buffer_bytes = host_memory / 8;
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        config->host_cpus = n > 0 ? (uint32_t)n : 1;
        if (config->max_cpus == 0)
                config->max_cpus = config->host_cpus;
}

/* Host root: /run and /var/lib. Anyone else, or `nsboxd --rootless` after
 * its re-exec (NSBOX_ROOTLESS_USER): the user's own runtime and data dirs. */
static void set_default_paths(struct nsbox_config *config)
{
        if (geteuid() == 0 && getenv("NSBOX_ROOTLESS_USER") == NULL) {
                config->socket_path = strdup("/run/nsbox/nsbox.sock");
                config->state_dir = strdup("/var/lib/nsbox");
                config->image_dir = strdup("/var/lib/nsbox/images");
                return;
        }
        const char *home = getenv("HOME") ? getenv("HOME") : "/tmp";
        const char *data = getenv("XDG_DATA_HOME");
        if (data != NULL && data[0] == '/')
                config->state_dir = strdup(data);
        else if (asprintf(&config->state_dir, "%s/.local/share", home) < 0)
                config->state_dir = NULL;
        char *base = config->state_dir;
        if (base == NULL || asprintf(&config->state_dir, "%s/nsbox", base) < 0)
                config->state_dir = strdup("/tmp/nsbox");
        free(base);
        if (asprintf(&config->image_dir, "%s/images", config->state_dir) < 0)
                config->image_dir = NULL;
        const char *runtime = getenv("XDG_RUNTIME_DIR");
        int n = runtime != NULL && runtime[0] == '/'
                    ? asprintf(&config->socket_path, "%s/nsbox/nsbox.sock", runtime)
                    : asprintf(&config->socket_path, "%s/nsbox.sock", config->state_dir);
        if (n < 0)
                config->socket_path = NULL;
}

int config_load(struct nsbox_config *config, int argc, char **argv, nsbox_error_t **err)
{
        memset(config, 0, sizeof(*config));
        set_default_paths(config);
        config->seccomp_dir = sibling_path("../seccomp-profiles", NSBOX_PREFIX "/share/nsbox/seccomp");
        config->init_path = sibling_path("nsbox-init", NSBOX_PREFIX "/libexec/nsbox/nsbox-init");
        config->egress_path = sibling_path("nsbox-egress", NSBOX_PREFIX "/libexec/nsbox/nsbox-egress");
        config->network_subnet = strdup("10.250.0.0/16");
        config->egress_dns_servers = strdup("");
        config->egress_ca_file = strdup("");
        config->log_level = strdup("info");
        config->uid_isolation = strdup("per-sandbox");
        config->unmapped_clients = strdup("refuse");
        config->python_fork_server = strdup("lazy");
        /* Where users keep their own files; never /etc, /usr, /var/lib, /root
         * or the state dir, whatever their modes say. */
        config->host_mount_roots = strdup("/home,/srv,/tmp,/var/tmp");
        config->python_fork_server_idle_seconds = 60;
        /* The server holds about 100 MiB (numpy, pandas, matplotlib, PIL):
         * in a smaller sandbox that is more than the imports it saves. */
        config->python_fork_server_min_memory_bytes = 256ull << 20;
        config->max_request_bytes = 64u << 20;
        config->max_sandboxes = 64;
        config->max_connections = 1024;
        config->warm_pool = 2;
        config->live_restore_grace_seconds = 600;
        config->uid_pool_base = 1u << 20; /* 1048576, above /etc/subuid's usual 100000 ranges */
        config->uid_pool_ranges = 1024;
        config->max_sandboxes_per_uid = 32;
        config->max_connections_per_uid = 128;
        config->max_execs_per_uid = 128;
        config->layer_disk_bytes = 8ull << 30;
        config->max_snapshots_per_uid = 32;
        config->max_images_per_uid = 16;
        /* As many inodes as layer_disk_bytes holds in 4 KiB blocks: what
         * the byte bound already let files of a block each take, now also
         * for empty ones (2 Mi, an eighth of this VM's 16 M free). A uid a
         * quarter of that, one snapshot twice a full default disk (a fork's
         * layer merges its snapshot's). */
        config->layer_inodes = 2u << 20;
        config->layer_inodes_per_uid = 512u << 10;
        config->layer_inodes_per_snapshot = 256u << 10;
        /* The default disk_bytes (512 MiB) in 4 KiB blocks: the most files
         * with data it holds; each tmpfs inode is also about 1 KiB of
         * kernel memory charged to the sandbox. */
        config->disk_inodes = 128u << 10;
        config->client_idle_timeout_seconds = 600;
        config->request_timeout_seconds = 60;
        config->max_pids = 4096;
        config->idle_action = strdup("pause");
        config->auto_resume = 1;
        policy_defaults(&config->defaults);

        /* Collect flags first: --config decides which file to read. */
        struct option long_options[ARRAY_SIZE(options) + 3];
        char names[ARRAY_SIZE(options)][64];
        for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
                snprintf(names[i], sizeof(names[i]), "%s", options[i].key);
                for (char *p = names[i]; *p; p++)
                        if (*p == '_')
                                *p = '-';
                long_options[i] = (struct option){ names[i], required_argument, NULL, (int)i };
        }
        long_options[ARRAY_SIZE(options)] = (struct option){ "help", no_argument, NULL, 'h' + 1000 };
        long_options[ARRAY_SIZE(options) + 1] = (struct option){ "version", no_argument, NULL, 'v' + 1000 };
        long_options[ARRAY_SIZE(options) + 2] = (struct option){ 0 };

        const char *flag_values[ARRAY_SIZE(options)] = { 0 };
        optind = 1;
        int c;
        while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
                if (c == 'h' + 1000) {
                        usage(config);
                        return 1;
                }
                if (c == 'v' + 1000) {
                        printf("nsboxd %s\n", NSBOX_VERSION);
                        return 1;
                }
                if (c < 0 || (size_t)c >= ARRAY_SIZE(options))
                        return nsbox_invalid(err, "unknown option (see nsboxd --help)");
                flag_values[c] = optarg;
        }
        if (optind < argc)
                return nsbox_invalid(err, "unexpected argument \"%s\"", argv[optind]);

        const char *file = "/etc/nsbox/nsboxd.json";
        bool required = false;
        const char *env_config = getenv("NSBOX_CONFIG");
        for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
                if (strcmp(options[i].key, "config") == 0 && (flag_values[i] || env_config)) {
                        file = flag_values[i] ? flag_values[i] : env_config;
                        required = true;
                }
        }
        int r = load_file(config, file, required, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
                const char *v = getenv(options[i].env);
                if (v != NULL && (r = set_value(config, &options[i], v, options[i].env, err)) < 0)
                        return r;
        }
        for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
                if (flag_values[i] != NULL &&
                    (r = set_value(config, &options[i], flag_values[i], "command line", err)) < 0)
                        return r;
        }
        derive_host_bounds(config);
        config->ceilings = (struct policy_ceilings){
                .memory_bytes = config->max_memory_bytes,
                .disk_bytes = config->max_disk_bytes,
                .pids = config->max_pids,
                .cpus = config->max_cpus,
        };
        /* A default no client could ask for is a mistake in the config. */
        if ((r = policy_check_ceilings(&config->defaults.limits, &config->ceilings, "the default limits",
                                       err)) < 0)
                return r;
        if (config->max_request_bytes < 1024)
                return nsbox_invalid(err, "max_request_bytes must be at least 1024");
        if ((unsigned long long)config->uid_pool_base +
                (unsigned long long)config->uid_pool_ranges * NSBOX_UID_STRIDE >
            UINT_MAX)
                return nsbox_invalid(err, "uid pool runs past the largest uid");
        if (config->egress_uid == 0)
                config->egress_uid = config->uid_pool_base - 1;
        if (strcmp(config->python_fork_server, "lazy") != 0 &&
            strcmp(config->python_fork_server, "eager") != 0 &&
            strcmp(config->python_fork_server, "off") != 0)
                return nsbox_invalid(err, "python_fork_server must be lazy, eager or off");
        if (strcmp(config->unmapped_clients, "refuse") != 0 &&
            strcmp(config->unmapped_clients, "one-owner") != 0)
                return nsbox_invalid(err, "unmapped_clients must be \"refuse\" or \"one-owner\"");
        if (!policy_valid_idle_action(config->idle_action))
                return nsbox_invalid(err, "idle_action must be \"pause\" or \"remove\", not \"%.64s\"",
                                     config->idle_action);
        snprintf(config->defaults.idle_action, sizeof(config->defaults.idle_action), "%s",
                 config->idle_action);
        if (config->layer_inodes == 0 || config->layer_inodes_per_uid == 0 ||
            config->layer_inodes_per_snapshot == 0)
                return nsbox_invalid(err, "layer_inodes, layer_inodes_per_uid and layer_inodes_per_snapshot "
                                          "must be at least 1");
        if (config->disk_inodes < 64)
                return nsbox_invalid(err, "disk_inodes must be at least 64 (the sandbox's own directories)");
        if (config->uid_pool_base < NSBOX_UID_RANGE)
                return nsbox_error(err, EINVAL,
                                   "uid_pool_base must be at least 65536 (host system ids live below)");
        return 0;
}

void config_free(struct nsbox_config *config)
{
        free(config->socket_path);
        free(config->state_dir);
        free(config->image_dir);
        free(config->seccomp_dir);
        free(config->init_path);
        free(config->config_path);
        free(config->log_level);
        free(config->uid_isolation);
        free(config->unmapped_clients);
        free(config->python_fork_server);
        free(config->host_mount_roots);
        free(config->network_subnet);
        free(config->egress_dns_servers);
        free(config->egress_ca_file);
        free(config->egress_path);
        free(config->idle_action);
        json_decref(config->network_policies);
        policy_clear(&config->defaults);
}
