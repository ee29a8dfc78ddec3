/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox create, ls, info, rm, status: the sandbox lifecycle. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "users.h"
#include "version.h"

#define NETWORK_POLICY_MAX_BYTES (1u << 20) /* a policy is a few lists of names */

static int set_limit(json_t *params, const char *key, json_t *value)
{
        json_t *limits = json_object_get(params, "limits");
        if (limits == NULL) {
                limits = json_object();
                json_object_set_new(params, "limits", limits);
        }
        return json_object_set_new(limits, key, value);
}

static int parse_count(const char *text, unsigned long long *out)
{
        char *end;
        errno = 0;
        if (text[0] == '-')
                return -EINVAL;
        *out = strtoull(text, &end, 10);
        return errno == 0 && end != text && *end == '\0' ? 0 : -EINVAL;
}

/* The POLICY object of --network-policy FILE|-; NULL after printing why. */
static json_t *read_network_policy(const char *path)
{
        const char *what = strcmp(path, "-") == 0 ? "the network policy on standard input" : path;
        _cleanup_json_ json_t *text = cli_read_path(
            path, "--network-policy: ", "the network policy on standard input", NETWORK_POLICY_MAX_BYTES);
        if (text == NULL)
                return NULL;
        json_error_t jerr;
        json_t *policy =
            json_loadb(json_string_value(text), json_string_length(text), JSON_REJECT_DUPLICATES, &jerr);
        if (policy == NULL) {
                cli_fail("--network-policy: %s is not JSON: %s (line %d)", what, jerr.text, jerr.line);
                return NULL;
        }
        if (!json_is_object(policy)) {
                cli_fail("--network-policy: %s must hold a JSON object, a network policy such as "
                         "{\"allow\": [\"pypi.org\", \"*.pythonhosted.org\"], \"deny\": []}",
                         what);
                json_decref(policy);
                return NULL;
        }
        return policy;
}

int cli_network_option(json_t *params, int opt, const char *arg)
{
        /* Two network options would silently drop one of them. */
        if (json_object_get(params, "network") != NULL)
                return cli_fail("give one of --network and --network-policy, once");
        if (opt == CLI_OPT_NETWORK) {
                if (arg[0] == '\0')
                        return cli_fail("--network takes a policy name, or none");
                json_object_set_new(params, "network", json_string(arg));
                return 0;
        }
        json_t *policy = read_network_policy(arg);
        if (policy == NULL)
                return EXIT_NSBOX_FAILED;
        json_object_set_new(params, "network", policy);
        return 0;
}

/* -v SRC:PATH[:ro|:rw], docker's form: SRC a volume name, or a host
 * directory when it holds a slash or is "." (made absolute here, symlinks
 * resolved: nsboxd refuses a path through one). Without a mode nsboxd's
 * default: a volume writable, a host directory read-only. */
static int add_mount(json_t *params, const char *arg)
{
        _cleanup_free_ char *spec = strdup(arg);
        if (spec == NULL)
                return cli_fail("out of memory");
        char *path = strchr(spec, ':');
        if (path == NULL || path == spec || path[1] != '/')
                return cli_fail("bad -v \"%s\" (use VOLUME:/PATH or /HOST/DIR:/PATH, then :ro or :rw)", arg);
        *path++ = '\0';
        char *mode = strchr(path, ':');
        if (mode != NULL) {
                *mode++ = '\0';
                if (strcmp(mode, "ro") != 0 && strcmp(mode, "rw") != 0)
                        return cli_fail("bad -v \"%s\": the mode is ro or rw", arg);
        }
        json_t *m = json_pack("{s:s}", "path", path);
        if (strchr(spec, '/') != NULL || strcmp(spec, ".") == 0 || strcmp(spec, "..") == 0) {
                char host[PATH_MAX];
                if (realpath(spec, host) == NULL) {
                        json_decref(m);
                        return cli_fail("-v %s: %s", spec, strerror(errno));
                }
                json_object_set_new(m, "host_path", json_string(host));
        } else {
                json_object_set_new(m, "volume", json_string(spec));
        }
        if (mode != NULL)
                json_object_set_new(m, "read_only", json_boolean(strcmp(mode, "ro") == 0));
        json_t *mounts = json_object_get(params, "mounts");
        if (mounts == NULL) {
                mounts = json_array();
                json_object_set_new(params, "mounts", mounts);
        }
        json_array_append_new(mounts, m);
        return 0;
}

#define SECRET_FILE_MAX 4096

/* params.secrets.NAME, made when missing. */
static json_t *secret_entry(json_t *params, const char *name)
{
        json_t *secrets = json_object_get(params, "secrets");
        if (secrets == NULL) {
                secrets = json_object();
                json_object_set_new(params, "secrets", secrets);
        }
        json_t *one = json_object_get(secrets, name);
        if (one == NULL) {
                one = json_object();
                json_object_set_new(secrets, name, one);
        }
        return one;
}

/* --secret NAME=VALUE@HOST,... and --secret-file NAME=PATH@HOST,... (PATH
 * -: standard input; one trailing newline dropped). The hosts follow the
 * last '@': a value may hold one, a host name never does. */
static int secret_option(json_t *params, int opt, const char *arg)
{
        const char *option = opt == CLI_OPT_SECRET ? "--secret" : "--secret-file";
        const char *eq = strchr(arg, '=');
        const char *at = strrchr(arg, '@');
        if (eq == NULL || eq == arg || at == NULL || at < eq || at[1] == '\0')
                return cli_fail("bad %s (use %s NAME=%s@HOST[,HOST...])", option, option,
                                opt == CLI_OPT_SECRET ? "VALUE" : "PATH");
        _cleanup_free_ char *name = strndup(arg, (size_t)(eq - arg));
        _cleanup_free_ char *middle = strndup(eq + 1, (size_t)(at - eq - 1));
        _cleanup_free_ char *hosts_text = strdup(at + 1);
        if (name == NULL || middle == NULL || hosts_text == NULL)
                return cli_fail("out of memory");
        _cleanup_json_ json_t *value = NULL;
        if (opt == CLI_OPT_SECRET) {
                value = json_string(middle);
        } else {
                _cleanup_json_ json_t *text =
                    cli_read_path(middle, "--secret-file: ", "the secret on standard input", SECRET_FILE_MAX);
                if (text == NULL)
                        return EXIT_NSBOX_FAILED;
                size_t len = json_string_length(text);
                const char *v = json_string_value(text);
                if (len > 0 && v[len - 1] == '\n')
                        len--;
                if (len > 0 && v[len - 1] == '\r')
                        len--;
                value = json_stringn(v, len);
        }
        if (value == NULL)
                return cli_fail("%s %s: the value is not UTF-8 text", option, name);
        json_t *hosts = json_array();
        char *save = NULL;
        for (char *h = strtok_r(hosts_text, ",", &save); h != NULL; h = strtok_r(NULL, ",", &save))
                json_array_append_new(hosts, json_string(h));
        json_t *one = secret_entry(params, name);
        json_object_set(one, "value", value);
        json_object_set_new(one, "hosts", hosts);
        return 0;
}

int cli_create_option(json_t *params, int opt, const char *arg)
{
        unsigned long long n;
        switch (opt) {
        case CLI_OPT_SESSION:
                json_object_set_new(params, "session_id", json_string(arg));
                return 0;
        case CLI_OPT_IMAGE:
                json_object_set_new(params, "image", json_string(arg));
                return 0;
        case CLI_OPT_FROM_SNAPSHOT:
                json_object_set_new(params, "from_snapshot", json_string(arg));
                return 0;
        case CLI_OPT_PROFILE:
                json_object_set_new(params, "seccomp_profile", json_string(arg));
                return 0;
        case CLI_OPT_MEMORY:
        case CLI_OPT_DISK:
                if (cli_parse_size(arg, &n) < 0)
                        return cli_fail("bad size \"%s\" (use e.g. 512M or 1G)", arg);
                set_limit(params, opt == CLI_OPT_MEMORY ? "memory_bytes" : "disk_bytes",
                          json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_PIDS:
                if (parse_count(arg, &n) < 0)
                        return cli_fail("bad --pids \"%s\" (a number of processes, e.g. 256)", arg);
                set_limit(params, "pids", json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_CPUS: {
                char *end;
                double cpus = strtod(arg, &end);
                if (*end != '\0' || end == arg)
                        return cli_fail("bad --cpus \"%s\" (a number of CPUs, e.g. 0.5 or 2)", arg);
                set_limit(params, "cpus", json_real(cpus));
                return 0;
        }
        case CLI_OPT_IDLE:
                if (parse_count(arg, &n) < 0)
                        return cli_fail("bad --idle-timeout \"%s\" (seconds, e.g. 3600)", arg);
                json_object_set_new(params, "idle_timeout_seconds", json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_IDLE_ACTION:
                /* nsboxd checks the word and says what it takes. */
                json_object_set_new(params, "idle_action", json_string(arg));
                return 0;
        case CLI_OPT_PAUSED_TIMEOUT:
                if (parse_count(arg, &n) < 0)
                        return cli_fail("bad --paused-timeout \"%s\"", arg);
                json_object_set_new(params, "paused_timeout_seconds", json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_ENV:
                return cli_add_env(params, arg) == 0 ? 0 : EXIT_NSBOX_FAILED;
        case CLI_OPT_LABEL: {
                /* docker's --label KEY=VALUE; a bare KEY is an empty value. */
                const char *eq = strchr(arg, '=');
                size_t key_len = eq ? (size_t)(eq - arg) : strlen(arg);
                if (key_len == 0)
                        return cli_fail("bad --label \"%s\" (use KEY=VALUE)", arg);
                json_t *labels = json_object_get(params, "labels");
                if (labels == NULL) {
                        labels = json_object();
                        json_object_set_new(params, "labels", labels);
                }
                _cleanup_free_ char *key = strndup(arg, key_len);
                if (key == NULL)
                        return cli_fail("out of memory");
                json_object_set_new(labels, key, json_string(eq ? eq + 1 : ""));
                return 0;
        }
        case CLI_OPT_NETWORK:
        case CLI_OPT_NETWORK_POLICY:
                return cli_network_option(params, opt, arg);
        case CLI_OPT_MOUNT:
                return add_mount(params, arg) == 0 ? 0 : EXIT_NSBOX_FAILED;
        case CLI_OPT_SECRET:
        case CLI_OPT_SECRET_FILE:
                return secret_option(params, opt, arg);
        case CLI_OPT_SECRET_HEADER: {
                /* NAME=HEADER: nsboxd checks the header line. */
                const char *eq = strchr(arg, '=');
                if (eq == NULL || eq == arg)
                        return cli_fail(
                            "bad --secret-header (use --secret-header 'NAME=Authorization: Bearer "
                            "{value}')");
                _cleanup_free_ char *name = strndup(arg, (size_t)(eq - arg));
                if (name == NULL)
                        return cli_fail("out of memory");
                json_object_set_new(secret_entry(params, name), "header", json_string(eq + 1));
                return 0;
        }
        default:
                return 1;
        }
}

int cmd_create(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CLI_CREATE_OPTIONS,
                                                  { "env", required_argument, NULL, CLI_OPT_ENV },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "v:", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                int r = cli_create_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (optind != argc)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *result = cli_call_once(cli, "sandbox.create", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        else
                puts(json_string_value(json_object_get(result, "sandbox_id")));
        /* get-or-create: the session's sandbox as it is, whatever else was asked. */
        if (json_is_true(json_object_get(result, "existing")) && json_object_size(params) > 1 && !cli->json) {
                fflush(stdout);
                fprintf(stderr,
                        "nsbox: session %s already has this sandbox; it is given as it is (the other "
                        "options apply to a new sandbox only: nsbox rm it first to change them)\n",
                        json_string_value(json_object_get(params, "session_id")));
        }
        return 0;
}

/* --- ls: filters and --format --------------------------------------------- */

/* "label=KEY", "label=KEY=VALUE", "id=PREFIX", "session=NAME", "state=STATE":
 * docker's --filter, the ones that mean something here. */
static bool ls_filter_matches(const char *filter, json_t *sb)
{
        const char *value = strchr(filter, '=') + 1;
        if (strncmp(filter, "label=", 6) == 0) {
                const char *eq = strchr(value, '=');
                _cleanup_free_ char *key = strndup(value, eq ? (size_t)(eq - value) : strlen(value));
                json_t *have = json_object_get(json_object_get(sb, "labels"), key ? key : "");
                return json_is_string(have) && (eq == NULL || strcmp(json_string_value(have), eq + 1) == 0);
        }
        const char *field = strncmp(filter, "id=", 3) == 0        ? "sandbox_id"
                            : strncmp(filter, "session=", 8) == 0 ? "session_id"
                                                                  : "state";
        const char *have = json_string_value(json_object_get(sb, field));
        if (have == NULL)
                return false;
        return strcmp(field, "sandbox_id") == 0 ? strncmp(have, value, strlen(value)) == 0
                                                : strcmp(have, value) == 0;
}

static int ls_check_filter(const char *filter)
{
        static const char *const keys[] = { "label=", "id=", "session=", "state=" };
        for (size_t k = 0; k < ARRAY_SIZE(keys); k++)
                if (strncmp(filter, keys[k], strlen(keys[k])) == 0 && filter[strlen(keys[k])] != '\0')
                        return 0;
        return cli_fail("bad --filter \"%s\" (use label=KEY, label=KEY=VALUE, id=PREFIX, session=NAME or "
                        "state=STATE)",
                        filter);
}

static int ls_key_compare(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "k1=v1,k2=v2", sorted by key as docker prints them. */
static char *ls_labels_text(json_t *labels)
{
        size_t n = json_object_size(labels), k = 0;
        _cleanup_free_ const char **keys = calloc(n + 1, sizeof(*keys));
        char *out = NULL;
        size_t size = 0;
        FILE *f = keys ? open_memstream(&out, &size) : NULL;
        if (f == NULL)
                return NULL;
        const char *key;
        json_t *value;
        json_object_foreach(labels, key, value)
        {
                keys[k++] = key;
        }
        qsort(keys, k, sizeof(*keys), ls_key_compare);
        for (size_t i = 0; i < k; i++)
                fprintf(f, "%s%s=%s", i ? "," : "", keys[i],
                        json_string_value(json_object_get(labels, keys[i])) ?: "");
        fclose(f);
        return out;
}

/* The fields of --format, docker's names for sandbox.list's. */
static json_t *ls_field(json_t *sb, const char *name)
{
        static const char *const fields[][2] = {
                { "ID", "sandbox_id" },      { "Image", "image" },        { "Status", "state" },
                { "State", "state" },        { "Session", "session_id" }, { "CreatedAt", "created_at" },
                { "LastUsed", "last_used" }, { "Network", "network" },    { "Labels", "labels" },
        };
        for (size_t k = 0; k < ARRAY_SIZE(fields); k++)
                if (strcmp(name, fields[k][0]) == 0) {
                        json_t *v = json_object_get(sb, fields[k][1]);
                        return v != NULL ? v : json_null();
                }
        return NULL;
}

#define LS_FORMAT_FIELDS "ID, Image, Status, State, Session, CreatedAt, LastUsed, Network, Labels"

/* Expand one {{...}} action of --format into f, or print why it is not one
 * (unknown fields are an error, never an empty string). */
static int ls_format_action(FILE *f, const char *action, size_t len, json_t *sb)
{
        _cleanup_free_ char *text = strndup(action, len);
        if (text == NULL)
                return cli_fail("out of memory");
        char *a = text, *end = text + strlen(text);
        while (*a == ' ')
                a++;
        while (end > a && end[-1] == ' ')
                *--end = '\0';
        if (strcmp(a, "json .") == 0) {
                _cleanup_free_ char *dump = json_text(sb, JSON_COMPACT | JSON_SORT_KEYS, NULL);
                fputs(dump ? dump : "null", f);
                return 0;
        }
        if (strcmp(a, ".Labels") == 0) {
                _cleanup_free_ char *labels = ls_labels_text(json_object_get(sb, "labels"));
                fputs(labels ? labels : "", f);
                return 0;
        }
        if (strncmp(a, ".Label ", 7) == 0) {
                char *key = a + 7;
                while (*key == ' ')
                        key++;
                size_t klen = strlen(key);
                if (klen < 2 || key[0] != '"' || key[klen - 1] != '"')
                        return cli_fail("--format: {{.Label \"KEY\"}} takes a quoted key, not %s", key);
                key[klen - 1] = '\0';
                json_t *v = json_object_get(json_object_get(sb, "labels"), key + 1);
                fputs(json_is_string(v) ? json_string_value(v) : "", f);
                return 0;
        }
        bool as_json = strncmp(a, "json ", 5) == 0;
        const char *name = as_json ? a + 5 : a;
        while (*name == ' ')
                name++;
        json_t *v = name[0] == '.' ? ls_field(sb, name + 1) : NULL;
        if (v == NULL)
                return cli_fail("--format: unknown {{%s}} (fields: " LS_FORMAT_FIELDS
                                "; {{.Label \"KEY\"}}, {{json .}}, {{json .FIELD}})",
                                a);
        if (as_json) {
                _cleanup_free_ char *dump = json_text(v, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
                fputs(dump ? dump : "null", f);
        } else if (json_is_string(v)) {
                fputs(json_string_value(v), f);
        } else if (!json_is_null(v)) {
                _cleanup_free_ char *dump = json_text(v, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
                fputs(dump ? dump : "", f);
        }
        return 0;
}

/* One line of --format for sb: text as given, "\t" and "\n" as docker's,
 * each {{...}} expanded. */
static int ls_format_line(const char *format, json_t *sb)
{
        _cleanup_free_ char *out = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&out, &size);
        if (f == NULL)
                return cli_fail("out of memory");
        int r = 0;
        for (const char *p = format; *p != '\0' && r == 0;) {
                if (p[0] == '{' && p[1] == '{') {
                        const char *close = strstr(p + 2, "}}");
                        if (close == NULL) {
                                r = cli_fail("--format: \"{{\" without \"}}\"");
                                break;
                        }
                        r = ls_format_action(f, p + 2, (size_t)(close - p - 2), sb);
                        p = close + 2;
                } else if (p[0] == '\\' && (p[1] == 't' || p[1] == 'n')) {
                        fputc(p[1] == 't' ? '\t' : '\n', f);
                        p += 2;
                } else {
                        fputc(*p++, f);
                }
        }
        fclose(f);
        if (r == 0)
                puts(out ? out : "");
        return r;
}

/* "45s", "4m", "23h", "3d": a span at a glance, rounded down. */
static void ls_span(json_int_t seconds, char *buf, size_t len)
{
        if (seconds < 120)
                snprintf(buf, len, "%llds", (long long)seconds);
        else if (seconds < 2 * 3600)
                snprintf(buf, len, "%lldm", (long long)seconds / 60);
        else if (seconds < 2 * 86400)
                snprintf(buf, len, "%lldh", (long long)seconds / 3600);
        else
                snprintf(buf, len, "%lldd", (long long)seconds / 86400);
}

/* EXPIRES: what the idle reaper does next ("paused in 4m", "paused,
 * removed in 23h"), "-" while work runs or nothing is due. */
static void ls_expires_text(json_t *sb, char *buf, size_t len)
{
        json_t *expires = json_object_get(sb, "expires");
        const char *state = json_string_value(json_object_get(sb, "state"));
        bool paused = state != NULL && strcmp(state, "paused") == 0;
        const char *action = json_string_value(json_object_get(expires, "action"));
        if (action == NULL) {
                snprintf(buf, len, "%s", paused ? "paused, kept" : "-");
                return;
        }
        char span[16];
        ls_span(json_integer_value(json_object_get(expires, "in_seconds")), span, sizeof(span));
        snprintf(buf, len, "%s%s in %s", paused ? "paused, " : "",
                 strcmp(action, "pause") == 0 ? "paused" : "removed", span);
}

/* OWNER: the user's name, or the uid when it has none. */
static void ls_owner_text(json_t *sb, char *buf, size_t len)
{
        json_t *owner = json_object_get(sb, "owner");
        if (!json_is_integer(owner)) {
                snprintf(buf, len, "-");
                return;
        }
        if (cli_user_name((uid_t)json_integer_value(owner), buf, len) < 0)
                snprintf(buf, len, "%lld", (long long)json_integer_value(owner));
}

/* The entries of `list` that every filter matches. */
static json_t *ls_filtered(json_t *list, json_t *filters)
{
        json_t *shown = json_array();
        size_t i, k;
        json_t *sb, *filter;
        json_array_foreach(list, i, sb)
        {
                bool keep = true;
                json_array_foreach(filters, k, filter)
                {
                        keep = keep && ls_filter_matches(json_string_value(filter), sb);
                }
                if (keep)
                        json_array_append(shown, sb);
        }
        return shown;
}

/* ls -a: the sandboxes removed lately, when and why. */
static void ls_print_removed(json_t *removed)
{
        if (json_array_size(removed) == 0)
                return;
        printf("\n%-36s  %-10s  %-8s  %-16s  %s\n", "REMOVED", "OWNER", "AGO", "SESSION", "WHY");
        size_t i;
        json_t *r;
        json_array_foreach(removed, i, r)
        {
                char owner[64], ago[16];
                ls_owner_text(r, owner, sizeof(owner));
                ls_span(json_integer_value(json_object_get(r, "removed_seconds_ago")), ago, sizeof(ago));
                json_t *session = json_object_get(r, "session_id");
                printf("%-36s  %-10s  %-8s  %-16s  %s\n", json_string_value(json_object_get(r, "sandbox_id")),
                       owner, ago, json_is_string(session) ? json_string_value(session) : "-",
                       json_string_value(json_object_get(r, "reason")) ?: "-");
        }
}

int cmd_ls(const struct cli *cli, int argc, char **argv)
{
        enum { OPT_FORMAT = CLI_OPT_FIRST_FREE };
        static const struct option longopts[] = {
                { "all", no_argument, NULL, 'a' },
                { "quiet", no_argument, NULL, 'q' },
                { "filter", required_argument, NULL, 'f' },
                { "format", required_argument, NULL, OPT_FORMAT },
                { 0 },
        };
        bool all = false, quiet = false;
        const char *format = NULL;
        _cleanup_json_ json_t *filters = json_array();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "aqf:", longopts)) != -1) {
                switch (opt) {
                case 'a':
                        all = true;
                        break;
                case 'q':
                        quiet = true;
                        break;
                case 'f':
                        if (ls_check_filter(optarg) != 0)
                                return EXIT_NSBOX_FAILED;
                        json_array_append_new(filters, json_string(optarg));
                        break;
                case OPT_FORMAT:
                        format = optarg;
                        break;
                default:
                        return opt < -1 ? cli_opt_exit(opt) : cli_usage_error(cli);
                }
        }
        if (optind != argc)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_pack("{s:b}", "include_inactive", all);
        _cleanup_json_ json_t *result = cli_call_once(cli, "sandbox.list", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        /* Filters apply to every output, --json included. */
        _cleanup_json_ json_t *shown = ls_filtered(json_object_get(result, "sandboxes"), filters);
        _cleanup_json_ json_t *removed =
            all ? ls_filtered(json_object_get(result, "removed"), filters) : json_array();
        size_t i;
        json_t *sb;
        if (cli->json) {
                json_object_set(result, "sandboxes", shown);
                if (all)
                        json_object_set(result, "removed", removed);
                if (json_object_get(result, "count") != NULL)
                        json_object_set_new(result, "count",
                                            json_integer((json_int_t)json_array_size(shown)));
                cli_print_json(result);
                return 0;
        }
        if (format != NULL && strncmp(format, "table", 5) == 0)
                return cli_fail(
                    "--format: table is not supported; give the fields, e.g. \"{{.ID}}\\t{{.Status}}\"");
        if (!quiet && format == NULL)
                printf("%-36s  %-9s  %-10s  %-24s  %-24s  %-16s  %s\n", "SANDBOX ID", "STATE", "OWNER",
                       "CREATED", "EXPIRES", "SESSION", "LABELS");
        json_array_foreach(shown, i, sb)
        {
                const char *id = json_string_value(json_object_get(sb, "sandbox_id"));
                if (quiet) {
                        puts(id);
                        continue;
                }
                if (format != NULL) {
                        int r = ls_format_line(format, sb);
                        if (r != 0)
                                return r;
                        continue;
                }
                json_t *session = json_object_get(sb, "session_id");
                const char *state = json_string_value(json_object_get(sb, "state"));
                const char *created = json_string_value(json_object_get(sb, "created_at"));
                _cleanup_free_ char *labels = ls_labels_text(json_object_get(sb, "labels"));
                char owner[64], expires[64];
                ls_owner_text(sb, owner, sizeof(owner));
                ls_expires_text(sb, expires, sizeof(expires));
                printf("%-36s  %-9s  %-10s  %-24s  %-24s  %-16s  %s\n", id, state ? state : "-", owner,
                       created ? created : "-", expires,
                       json_is_string(session) ? json_string_value(session) : "-",
                       labels && labels[0] ? labels : "-");
        }
        if (!quiet && format == NULL)
                ls_print_removed(removed);
        return 0;
}

/* One call, the result printed as JSON: compact with --json, indented otherwise. */
static int print_call(const struct cli *cli, const char *method, json_t *params)
{
        _cleanup_json_ json_t *result = cli_call_once(cli, method, params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_free_ char *text = json_text(result, cli->json ? JSON_COMPACT : JSON_INDENT(2), NULL);
        if (text != NULL)
                puts(text);
        return 0;
}

int cmd_info(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (argc - optind != 1)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", argv[optind]);
        return print_call(cli, "sandbox.info", params);
}

int cmd_status(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (optind != argc)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_object();
        return print_call(cli, "server.info", params);
}

/* This nsbox's version, then nsboxd's (as docker version: the client's is
 * printed even when the daemon cannot be reached). */
int cmd_version(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (optind != argc)
                return cli_usage_error(cli);
        if (!cli->json) {
                printf("nsbox %s\n", NSBOX_VERSION);
                fflush(stdout);
        }
        _cleanup_json_ json_t *info = NULL, *params = json_object();
        struct client *c = cli_connect(cli);
        if (c != NULL) {
                info = cli_call(cli, c, "server.info", params);
                client_close(c);
        }
        const char *server = json_string_value(json_object_get(info, "version"));
        if (cli->json) {
                _cleanup_json_ json_t *both = json_pack("{s:{s:s}}", "client", "version", NSBOX_VERSION);
                if (server != NULL)
                        json_object_set_new(both, "server", json_pack("{s:s}", "version", server));
                cli_print_json(both);
        } else if (server != NULL) {
                printf("nsboxd %s\n", server);
        }
        return server != NULL ? 0 : EXIT_NSBOX_FAILED;
}

int cmd_rm(const struct cli *cli, int argc, char **argv)
{
        bool force;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, "force", 'f', &force, 1, -1, &code))
                return code;
        _cleanup_json_ json_t *extra = json_pack("{s:b}", "force", force);
        return cli_call_each(cli, "sandbox.remove", "sandbox_id", extra, argc - optind, argv + optind);
}

/* pause and resume: each ID in turn, printed as done (as docker pause). */
static int pause_or_resume(const struct cli *cli, const char *method, bool force, int argc, char **argv)
{
        _cleanup_json_ json_t *extra = force ? json_pack("{s:b}", "force", true) : NULL;
        return cli_call_each(cli, method, "sandbox_id", extra, argc - optind, argv + optind);
}

int cmd_pause(const struct cli *cli, int argc, char **argv)
{
        bool force;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, "force", 'f', &force, 1, -1, &code))
                return code;
        return pause_or_resume(cli, "sandbox.pause", force, argc, argv);
}

int cmd_resume(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (argc - optind < 1)
                return cli_usage_error(cli);
        return pause_or_resume(cli, "sandbox.resume", false, argc, argv);
}

int cmd_update(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = {
                { "network", required_argument, NULL, CLI_OPT_NETWORK },
                { "network-policy", required_argument, NULL, CLI_OPT_NETWORK_POLICY },
                { "secret", required_argument, NULL, CLI_OPT_SECRET },
                { "secret-file", required_argument, NULL, CLI_OPT_SECRET_FILE },
                { "secret-header", required_argument, NULL, CLI_OPT_SECRET_HEADER },
                { "no-secrets", no_argument, NULL, CLI_OPT_FIRST_FREE },
                { 0 },
        };
        _cleanup_json_ json_t *params = json_object();
        bool no_secrets = false;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                if (opt == CLI_OPT_FIRST_FREE) {
                        no_secrets = true;
                        continue;
                }
                int r = opt == CLI_OPT_NETWORK || opt == CLI_OPT_NETWORK_POLICY
                            ? cli_network_option(params, opt, optarg)
                            : cli_create_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (no_secrets && json_object_get(params, "secrets") != NULL)
                return cli_fail("give --no-secrets or secrets, not both");
        if (no_secrets)
                json_object_set_new(params, "secrets", json_null());
        /* Nothing to change is a mistake, not a no-op that looks like success. */
        if (argc - optind != 1 || json_object_size(params) == 0)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        return print_call(cli, "sandbox.update", params);
}

static int parse_port(const char *text, json_int_t *out)
{
        unsigned long long n;
        if (parse_count(text, &n) < 0 || n < 1 || n > 65535)
                return cli_fail("bad port \"%s\" (a TCP port from 1 to 65535)", text);
        *out = (json_int_t)n;
        return 0;
}

int cmd_port(const struct cli *cli, int argc, char **argv)
{
        bool unexpose;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, "remove", 0, &unexpose, 2, 2, &code))
                return code;
        json_int_t port = 0;
        if (parse_port(argv[optind + 1], &port) != 0)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:I}", "sandbox_id", argv[optind], "port", port);
        _cleanup_json_ json_t *result =
            cli_call_once(cli, unexpose ? "sandbox.unexpose" : "sandbox.expose", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        const char *url = json_string_value(json_object_get(result, "url"));
        if (!unexpose)
                puts(url != NULL ? url : "");
        return 0;
}
