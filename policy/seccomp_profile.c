/* SPDX-License-Identifier: Apache-2.0 */
/* Seccomp profile compiler: OCI/Docker JSON → libseccomp → classic BPF.
 *
 * The semantics follow what Docker's own default profile expects from runc, so
 * that profile loads unchanged: `archMap` picks the native architecture and its
 * sub-architectures, `includes`/`excludes` are evaluated against the sandbox
 * (no capabilities at all, the native architecture, the running kernel), and
 * syscall names this libseccomp does not know are skipped. */
#include "seccomp_profile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <linux/seccomp.h>

#include <seccomp.h>

#include "cleanup.h"
#include "json_cleanup.h"

/* The kernel clamps SECCOMP_RET_ERRNO data to MAX_ERRNO (include/linux/err.h). */
#define SECCOMP_MAX_ERRNO 4095
#define SECCOMP_MAX_ARGS  6

struct kernel_version {
        unsigned long major, minor, patch;
};

struct profile_compiler {
        scmp_filter_ctx ctx;
        uint32_t native_arch;
        uint32_t default_action;
        struct kernel_version kernel;
};

static void seccomp_releasep(scmp_filter_ctx *ctx)
{
        if (*ctx != NULL)
                seccomp_release(*ctx);
}

#define _cleanup_seccomp_ _cleanup_(seccomp_releasep)

/* ---- small JSON helpers -------------------------------------------------- */

/* An optional array member; absent and null both mean "not given", since the
 * Go encoders that write these profiles emit null for empty slices (Docker's
 * own profile has "subArchitectures": null). */
static int get_optional_array(json_t *obj, const char *key, const char *where, json_t **out,
                              nsbox_error_t **err)
{
        json_t *value = json_object_get(obj, key);

        *out = NULL;
        if (value == NULL || json_is_null(value))
                return 0;
        if (!json_is_array(value))
                return nsbox_invalid(err, "%s%s: must be an array", where, key);
        *out = value;
        return 0;
}

static int get_optional_string(json_t *obj, const char *key, const char *where, const char **out,
                               nsbox_error_t **err)
{
        json_t *value = json_object_get(obj, key);

        *out = NULL;
        if (value == NULL || json_is_null(value))
                return 0;
        if (!json_is_string(value))
                return nsbox_invalid(err, "%s%s: must be a string", where, key);
        *out = json_string_value(value);
        return 0;
}

/* Unsigned 64-bit fields (argument values). jansson stores integers as signed
 * 64-bit, so values above INT64_MAX already fail at parse time. */
static int get_u64(json_t *obj, const char *key, const char *where, bool required, uint64_t *out,
                   nsbox_error_t **err)
{
        json_t *value = json_object_get(obj, key);

        if (value == NULL || json_is_null(value)) {
                if (required)
                        return nsbox_invalid(err, "%s%s: missing", where, key);
                *out = 0;
                return 0;
        }
        if (!json_is_integer(value) || json_integer_value(value) < 0)
                return nsbox_invalid(err, "%s%s: must be a non-negative integer", where, key);
        *out = (uint64_t)json_integer_value(value);
        return 0;
}

static int check_string_array(json_t *array, const char *where, const char *key, nsbox_error_t **err)
{
        size_t i;
        json_t *item;

        json_array_foreach(array, i, item)
        {
                if (!json_is_string(item))
                        return nsbox_invalid(err, "%s%s[%zu]: must be a string", where, key, i);
        }
        return 0;
}

/* ---- kernel versions ----------------------------------------------------- */

/* "5.8" or "5.8.1"; with strict false, trailing text is allowed, as in the
 * uname release "6.1.0-18-amd64". */
static bool parse_kernel_version(const char *text, bool strict, struct kernel_version *out)
{
        unsigned long parts[3] = { 0, 0, 0 };
        const char *p = text;
        size_t n = 0;

        while (n < ARRAY_SIZE(parts)) {
                char *end;

                if (!isdigit((unsigned char)*p))
                        return false;
                errno = 0;
                parts[n++] = strtoul(p, &end, 10);
                if (errno != 0)
                        return false;
                p = end;
                if (*p != '.' || !isdigit((unsigned char)p[1]))
                        break;
                p++;
        }
        if (n < 2 || (strict && *p != '\0'))
                return false;
        out->major = parts[0];
        out->minor = parts[1];
        out->patch = parts[2];
        return true;
}

static int kernel_version_compare(const struct kernel_version *a, const struct kernel_version *b)
{
        if (a->major != b->major)
                return a->major < b->major ? -1 : 1;
        if (a->minor != b->minor)
                return a->minor < b->minor ? -1 : 1;
        if (a->patch != b->patch)
                return a->patch < b->patch ? -1 : 1;
        return 0;
}

static int running_kernel_version(struct kernel_version *out, nsbox_error_t **err)
{
        struct utsname uts;

        if (uname(&uts) < 0)
                return nsbox_error(err, errno, "uname");
        if (!parse_kernel_version(uts.release, false, out))
                return nsbox_invalid(err, "cannot parse the kernel release \"%s\"", uts.release);
        return 0;
}

/* ---- architectures ------------------------------------------------------- */

/* Profiles name architectures three ways: "SCMP_ARCH_X86_64" (OCI), Go's
 * GOARCH ("amd64", in Docker's includes.arches) and libseccomp's own
 * ("x86_64", "x32"). Returns the libseccomp token, or 0 when unknown. */
static uint32_t arch_resolve(const char *name)
{
        static const struct {
                const char *alias;
                const char *libseccomp_name;
        } go_arches[] = {
                { "amd64", "x86_64" },
                { "386", "x86" },
                { "arm64", "aarch64" },
                { "mipsle", "mipsel" },
                { "mips64le", "mipsel64" },
                { "mips64p32", "mips64n32" },
                { "mips64p32le", "mipsel64n32" },
        };
        char lowered[32];
        size_t i;

        if (strncmp(name, "SCMP_ARCH_", strlen("SCMP_ARCH_")) == 0) {
                const char *rest = name + strlen("SCMP_ARCH_");

                if (strlen(rest) >= sizeof(lowered))
                        return 0;
                for (i = 0; rest[i] != '\0'; i++)
                        lowered[i] = (char)tolower((unsigned char)rest[i]);
                lowered[i] = '\0';
                name = lowered;
        }
        for (i = 0; i < ARRAY_SIZE(go_arches); i++) {
                if (strcmp(name, go_arches[i].alias) == 0) {
                        name = go_arches[i].libseccomp_name;
                        break;
                }
        }
        return seccomp_arch_resolve_name(name);
}

/* Unknown names are skipped, and so are architectures that cannot share a
 * filter with the native one (-EDOM: other endianness or word size): the
 * kernel of this host never reports them, and every architecture left out of
 * the filter gets the bad-arch action, which kills. */
static int arch_add(struct profile_compiler *pc, const char *name, const char *where, nsbox_error_t **err)
{
        uint32_t token = arch_resolve(name);
        int r;

        if (token == 0)
                return 0;
        r = seccomp_arch_add(pc->ctx, token);
        if (r < 0 && r != -EEXIST && r != -EDOM)
                return nsbox_error(err, -r, "%s: add architecture \"%s\"", where, name);
        return 0;
}

static int add_architectures(struct profile_compiler *pc, json_t *root, nsbox_error_t **err)
{
        json_t *architectures, *arch_map, *item;
        char where[96];
        size_t i;
        int r;

        r = get_optional_array(root, "architectures", "", &architectures, err);
        if (r < 0)
                return r;
        if (architectures != NULL) {
                r = check_string_array(architectures, "", "architectures", err);
                if (r < 0)
                        return r;
                json_array_foreach(architectures, i, item)
                {
                        snprintf(where, sizeof(where), "architectures[%zu]", i);
                        r = arch_add(pc, json_string_value(item), where, err);
                        if (r < 0)
                                return r;
                }
        }

        /* archMap lists, per native architecture, the compat ABIs a process
         * may also use; only the entry for our own architecture counts. */
        r = get_optional_array(root, "archMap", "", &arch_map, err);
        if (r < 0 || arch_map == NULL)
                return r;
        json_array_foreach(arch_map, i, item)
        {
                const char *architecture;
                json_t *sub_arches, *sub;
                size_t j;

                snprintf(where, sizeof(where), "archMap[%zu].", i);
                if (!json_is_object(item))
                        return nsbox_invalid(err, "archMap[%zu]: must be an object", i);
                r = get_optional_string(item, "architecture", where, &architecture, err);
                if (r < 0)
                        return r;
                if (architecture == NULL)
                        return nsbox_invalid(err, "%sarchitecture: missing", where);
                r = get_optional_array(item, "subArchitectures", where, &sub_arches, err);
                if (r < 0)
                        return r;
                if (sub_arches != NULL) {
                        r = check_string_array(sub_arches, where, "subArchitectures", err);
                        if (r < 0)
                                return r;
                }
                if (arch_resolve(architecture) != pc->native_arch)
                        continue;
                json_array_foreach(sub_arches, j, sub)
                {
                        snprintf(where, sizeof(where), "archMap[%zu].subArchitectures[%zu]", i, j);
                        r = arch_add(pc, json_string_value(sub), where, err);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* ---- actions ------------------------------------------------------------- */

enum action_data { ACTION_DATA_NONE, ACTION_DATA_ERRNO, ACTION_DATA_TRACE };

static const struct {
        const char *name;
        uint32_t action;
        enum action_data data;
} seccomp_actions[] = {
        { "SCMP_ACT_ALLOW", SCMP_ACT_ALLOW, ACTION_DATA_NONE },
        { "SCMP_ACT_ERRNO", SCMP_ACT_ERRNO(0), ACTION_DATA_ERRNO },
        { "SCMP_ACT_KILL", SCMP_ACT_KILL, ACTION_DATA_NONE },
        { "SCMP_ACT_KILL_THREAD", SCMP_ACT_KILL_THREAD, ACTION_DATA_NONE },
        { "SCMP_ACT_KILL_PROCESS", SCMP_ACT_KILL_PROCESS, ACTION_DATA_NONE },
        { "SCMP_ACT_TRAP", SCMP_ACT_TRAP, ACTION_DATA_NONE },
        { "SCMP_ACT_TRACE", SCMP_ACT_TRACE(0), ACTION_DATA_TRACE },
        { "SCMP_ACT_LOG", SCMP_ACT_LOG, ACTION_DATA_NONE },
};

/* `action` plus its `errnoRet` (or `defaultAction` plus `defaultErrnoRet`).
 * As in runc, ERRNO and TRACE default to EPERM and the number is ignored for
 * the other actions. */
static int parse_action(json_t *obj, const char *action_key, const char *errno_key, const char *where,
                        uint32_t *out, nsbox_error_t **err)
{
        const char *name;
        json_t *errno_value;
        uint64_t data = EPERM;
        size_t i;
        int r;

        r = get_optional_string(obj, action_key, where, &name, err);
        if (r < 0)
                return r;
        if (name == NULL)
                return nsbox_invalid(err, "%s%s: missing", where, action_key);

        errno_value = json_object_get(obj, errno_key);
        if (errno_value != NULL && !json_is_null(errno_value)) {
                r = get_u64(obj, errno_key, where, true, &data, err);
                if (r < 0)
                        return r;
                if (data > 0xffff)
                        return nsbox_invalid(err, "%s%s: %" PRIu64 " is out of range", where, errno_key,
                                             data);
        }

        /* A seccomp agent would have to run outside the sandbox and answer
         * every notification; nsbox has none, so such a filter would hang. */
        if (strcmp(name, "SCMP_ACT_NOTIFY") == 0)
                return nsbox_error(err, EINVAL,
                                   "%s%s: SCMP_ACT_NOTIFY is not supported (nsbox runs no seccomp agent)",
                                   where, action_key);

        for (i = 0; i < ARRAY_SIZE(seccomp_actions); i++) {
                if (strcmp(name, seccomp_actions[i].name) != 0)
                        continue;
                switch (seccomp_actions[i].data) {
                case ACTION_DATA_ERRNO:
                        if (data > SECCOMP_MAX_ERRNO)
                                return nsbox_invalid(err, "%s%s: errno %" PRIu64 " is above %d", where,
                                                     errno_key, data, SECCOMP_MAX_ERRNO);
                        *out = SCMP_ACT_ERRNO((uint32_t)data);
                        return 0;
                case ACTION_DATA_TRACE:
                        *out = SCMP_ACT_TRACE((uint32_t)data);
                        return 0;
                case ACTION_DATA_NONE:
                        *out = seccomp_actions[i].action;
                        return 0;
                }
        }
        return nsbox_invalid(err, "%s%s: unknown action \"%s\"", where, action_key, name);
}

/* ---- includes / excludes ------------------------------------------------- */

/* One `includes` or `excludes` object. *matches says whether the sandbox has
 * any of the listed capabilities / is one of the listed architectures / runs
 * at least the listed kernel; each condition present is reported separately
 * since includes needs all of them and excludes any. */
struct filter_match {
        bool has_caps, has_arches, has_min_kernel;
        bool arch_matches, kernel_matches;
};

static int evaluate_filter(const struct profile_compiler *pc, json_t *entry, const char *key,
                           const char *where, struct filter_match *match, nsbox_error_t **err)
{
        json_t *filter = json_object_get(entry, key);
        json_t *caps, *arches, *item;
        const char *min_kernel;
        char field[80];
        size_t i;
        int r;

        memset(match, 0, sizeof(*match));
        if (filter == NULL || json_is_null(filter))
                return 0;
        if (!json_is_object(filter))
                return nsbox_invalid(err, "%s%s: must be an object", where, key);
        snprintf(field, sizeof(field), "%s%s.", where, key);

        r = get_optional_array(filter, "caps", field, &caps, err);
        if (r < 0)
                return r;
        if (caps != NULL) {
                r = check_string_array(caps, field, "caps", err);
                if (r < 0)
                        return r;
                match->has_caps = json_array_size(caps) > 0;
        }

        r = get_optional_array(filter, "arches", field, &arches, err);
        if (r < 0)
                return r;
        if (arches != NULL) {
                r = check_string_array(arches, field, "arches", err);
                if (r < 0)
                        return r;
                match->has_arches = json_array_size(arches) > 0;
                json_array_foreach(arches, i, item)
                {
                        if (arch_resolve(json_string_value(item)) == pc->native_arch)
                                match->arch_matches = true;
                }
        }

        r = get_optional_string(filter, "minKernel", field, &min_kernel, err);
        if (r < 0)
                return r;
        if (min_kernel != NULL) {
                struct kernel_version wanted;

                if (!parse_kernel_version(min_kernel, true, &wanted))
                        return nsbox_invalid(err, "%sminKernel: invalid kernel version \"%s\"", field,
                                             min_kernel);
                match->has_min_kernel = true;
                match->kernel_matches = kernel_version_compare(&pc->kernel, &wanted) >= 0;
        }
        return 0;
}

static int syscall_entry_applies(const struct profile_compiler *pc, json_t *entry, const char *where,
                                 bool *applies, nsbox_error_t **err)
{
        struct filter_match includes, excludes;
        int r;

        r = evaluate_filter(pc, entry, "includes", where, &includes, err);
        if (r < 0)
                return r;
        r = evaluate_filter(pc, entry, "excludes", where, &excludes, err);
        if (r < 0)
                return r;

        /* Sandboxes hold no capabilities: an entry that needs one never
         * applies, and one that is excluded for holders always does. */
        *applies = !includes.has_caps && (!includes.has_arches || includes.arch_matches) &&
                   (!includes.has_min_kernel || includes.kernel_matches) &&
                   !(excludes.has_arches && excludes.arch_matches) &&
                   !(excludes.has_min_kernel && excludes.kernel_matches);
        return 0;
}

/* ---- syscall entries ----------------------------------------------------- */

static const struct {
        const char *name;
        enum scmp_compare op;
} seccomp_comparisons[] = {
        { "SCMP_CMP_NE", SCMP_CMP_NE },
        { "SCMP_CMP_LT", SCMP_CMP_LT },
        { "SCMP_CMP_LE", SCMP_CMP_LE },
        { "SCMP_CMP_EQ", SCMP_CMP_EQ },
        { "SCMP_CMP_GE", SCMP_CMP_GE },
        { "SCMP_CMP_GT", SCMP_CMP_GT },
        { "SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ },
};

/* {index, value, valueTwo, op}. For MASKED_EQ `value` is the mask and
 * `valueTwo` the expected result, which is also libseccomp's order. */
static int parse_arg(json_t *arg, const char *label, const char *field, struct scmp_arg_cmp *cmp,
                     nsbox_error_t **err)
{
        uint64_t index, value, value_two;
        const char *op;
        size_t i;
        int r;

        if (!json_is_object(arg))
                return nsbox_invalid(err, "%s: must be an object", label);

        r = get_u64(arg, "index", field, true, &index, err);
        if (r < 0)
                return r;
        if (index >= SECCOMP_MAX_ARGS)
                return nsbox_invalid(err, "%sindex: %" PRIu64 " is not an argument index (0-5)", field,
                                     index);
        r = get_u64(arg, "value", field, false, &value, err);
        if (r < 0)
                return r;
        r = get_u64(arg, "valueTwo", field, false, &value_two, err);
        if (r < 0)
                return r;
        r = get_optional_string(arg, "op", field, &op, err);
        if (r < 0)
                return r;
        if (op == NULL)
                return nsbox_invalid(err, "%sop: missing", field);

        for (i = 0; i < ARRAY_SIZE(seccomp_comparisons); i++) {
                if (strcmp(op, seccomp_comparisons[i].name) == 0) {
                        *cmp = (struct scmp_arg_cmp){
                                .arg = (unsigned int)index,
                                .op = seccomp_comparisons[i].op,
                                .datum_a = value,
                                .datum_b = value_two,
                        };
                        return 0;
                }
        }
        return nsbox_invalid(err, "%sop: unknown operator \"%s\"", field, op);
}

static int parse_args(json_t *entry, const char *where, struct scmp_arg_cmp **out, size_t *count, bool *split,
                      nsbox_error_t **err)
{
        _cleanup_free_ struct scmp_arg_cmp *cmps = NULL;
        unsigned int per_index[SECCOMP_MAX_ARGS] = { 0 };
        json_t *args, *arg;
        char label[96], field[96];
        size_t i;
        int r;

        *out = NULL;
        *count = 0;
        *split = false;
        r = get_optional_array(entry, "args", where, &args, err);
        if (r < 0 || args == NULL || json_array_size(args) == 0)
                return r;

        cmps = calloc(json_array_size(args), sizeof(*cmps));
        if (cmps == NULL)
                return nsbox_error(err, ENOMEM, "%sargs", where);
        json_array_foreach(args, i, arg)
        {
                snprintf(label, sizeof(label), "%sargs[%zu]", where, i);
                snprintf(field, sizeof(field), "%sargs[%zu].", where, i);
                r = parse_arg(arg, label, field, &cmps[i], err);
                if (r < 0)
                        return r;
                if (++per_index[cmps[i].arg] > 1)
                        *split = true;
        }
        *count = json_array_size(args);
        *out = steal_pointer(&cmps);
        return 0;
}

/* Whatever a profile says, Docker's included: io_setup reserves events from
 * fs.aio-nr, one count for the whole host (aio-max-nr, 65536 by default),
 * and a sandbox that takes it all fails every io_setup on the host. ENOSYS,
 * as on a kernel without AIO, so libaio users and glibc fall back to
 * threads. io_uring is a second syscall interface that no filter sees into
 * (its operations open, read and connect past every rule of the profile).
 * Forced here rather than by a second filter in the init: one program per
 * sandbox, and the rule is in it whichever process loads it. */
static const struct {
        const char *name;
        int errnum;
} forced_denials[] = {
        { "io_setup", ENOSYS },
        { "io_uring_setup", EPERM },
};

static bool is_forced(const char *name)
{
        for (size_t i = 0; i < ARRAY_SIZE(forced_denials); i++) {
                if (strcmp(name, forced_denials[i].name) == 0)
                        return true;
        }
        return false;
}

static int add_forced_denials(struct profile_compiler *pc, nsbox_error_t **err)
{
        for (size_t i = 0; i < ARRAY_SIZE(forced_denials); i++) {
                int nr = seccomp_syscall_resolve_name(forced_denials[i].name);
                uint32_t action = SCMP_ACT_ERRNO(forced_denials[i].errnum);
                if (nr == __NR_SCMP_ERROR || action == pc->default_action)
                        continue;
                int r = seccomp_rule_add(pc->ctx, action, nr, 0);
                if (r < 0)
                        return nsbox_error(err, -r, "deny \"%s\" in every profile", forced_denials[i].name);
        }
        return 0;
}

/* libseccomp refuses two comparisons on the same argument in one rule, yet
 * Docker-era profiles use that to mean "any of these values". Like runc, give
 * each comparison its own rule then, which ORs them. */
static int add_rules(struct profile_compiler *pc, const char *name, uint32_t action,
                     const struct scmp_arg_cmp *cmps, size_t count, bool split, const char *where,
                     nsbox_error_t **err)
{
        int nr = seccomp_syscall_resolve_name(name);
        size_t i;
        int r;

        /* Docker's profile lists syscalls of every architecture and kernel;
         * names this libseccomp cannot resolve do not exist here. */
        if (nr == __NR_SCMP_ERROR || is_forced(name))
                return 0;

        if (!split) {
                r = seccomp_rule_add_array(pc->ctx, action, nr, (unsigned int)count, cmps);
                if (r < 0)
                        return nsbox_error(err, -r, "%s: add rule for \"%s\"", where, name);
                return 0;
        }
        for (i = 0; i < count; i++) {
                r = seccomp_rule_add_array(pc->ctx, action, nr, 1, &cmps[i]);
                if (r < 0)
                        return nsbox_error(err, -r, "%s: add rule for \"%s\" (args[%zu])", where, name, i);
        }
        return 0;
}

static int add_syscall_entry(struct profile_compiler *pc, json_t *entry, size_t index, nsbox_error_t **err)
{
        _cleanup_free_ struct scmp_arg_cmp *cmps = NULL;
        json_t *names, *item;
        const char *legacy_name;
        char where[48], field[48];
        size_t count, i;
        uint32_t action;
        bool applies, split;
        int r;

        snprintf(where, sizeof(where), "syscalls[%zu]", index);
        snprintf(field, sizeof(field), "syscalls[%zu].", index);
        if (!json_is_object(entry))
                return nsbox_invalid(err, "%s: must be an object", where);

        /* Validate the whole entry before deciding whether it applies, so a
         * broken profile fails on every host, not only where it matters. */
        r = get_optional_array(entry, "names", field, &names, err);
        if (r < 0)
                return r;
        if (names != NULL) {
                r = check_string_array(names, field, "names", err);
                if (r < 0)
                        return r;
        }
        r = get_optional_string(entry, "name", field, &legacy_name, err);
        if (r < 0)
                return r;
        if (names != NULL && legacy_name != NULL)
                return nsbox_invalid(err, "%s: use either \"names\" or \"name\", not both", where);
        if (names == NULL && legacy_name == NULL)
                return nsbox_invalid(err, "%snames: missing", field);
        r = parse_action(entry, "action", "errnoRet", field, &action, err);
        if (r < 0)
                return r;
        r = parse_args(entry, field, &cmps, &count, &split, err);
        if (r < 0)
                return r;
        r = syscall_entry_applies(pc, entry, field, &applies, err);
        if (r < 0 || !applies)
                return r;

        /* libseccomp refuses rules that repeat the default action; they would
         * change nothing anyway. */
        if (action == pc->default_action)
                return 0;

        if (legacy_name != NULL)
                return add_rules(pc, legacy_name, action, cmps, count, split, where, err);
        json_array_foreach(names, i, item)
        {
                r = add_rules(pc, json_string_value(item), action, cmps, count, split, where, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- BPF export ---------------------------------------------------------- */

/* libseccomp 2.5 exports only to an fd; a memfd keeps it in memory. */
static int export_program(scmp_filter_ctx ctx, struct seccomp_program *out, nsbox_error_t **err)
{
        _cleanup_close_ int fd = -1;
        _cleanup_free_ struct sock_filter *filter = NULL;
        struct stat st;
        size_t size, done = 0;
        int r;

        fd = memfd_create("nsbox-seccomp-bpf", MFD_CLOEXEC);
        if (fd < 0)
                return nsbox_error(err, errno, "memfd_create");
        r = seccomp_export_bpf(ctx, fd);
        if (r < 0)
                return nsbox_error(err, -r, "export the BPF program");
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "fstat the exported BPF program");

        size = (size_t)st.st_size;
        if (size == 0 || size % sizeof(struct sock_filter) != 0)
                return nsbox_error(err, EIO, "exported BPF program has an odd size (%zu bytes)", size);
        if (size / sizeof(struct sock_filter) > BPF_MAXINSNS)
                return nsbox_error(err, E2BIG,
                                   "BPF program has %zu instructions, the kernel takes at most %d",
                                   size / sizeof(struct sock_filter), BPF_MAXINSNS);

        filter = malloc(size);
        if (filter == NULL)
                return nsbox_error(err, ENOMEM, "BPF program");
        while (done < size) {
                ssize_t n = pread(fd, (char *)filter + done, size - done, (off_t)done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return nsbox_error(err, errno, "read the exported BPF program");
                if (n == 0)
                        return nsbox_error(err, EIO, "exported BPF program shrank while reading it");
                done += (size_t)n;
        }

        out->filter = steal_pointer(&filter);
        out->len = (unsigned short)(size / sizeof(struct sock_filter));
        return 0;
}

/* ---- profile ------------------------------------------------------------- */

static int compile_profile(json_t *root, struct seccomp_program *out, nsbox_error_t **err)
{
        _cleanup_seccomp_ scmp_filter_ctx ctx = NULL;
        struct profile_compiler pc = { 0 };
        json_t *syscalls, *entry;
        size_t i;
        int r;

        if (!json_is_object(root))
                return nsbox_invalid(err, "the profile must be a JSON object");

        r = parse_action(root, "defaultAction", "defaultErrnoRet", "", &pc.default_action, err);
        if (r < 0)
                return r;
        r = running_kernel_version(&pc.kernel, err);
        if (r < 0)
                return r;
        pc.native_arch = seccomp_arch_native();

        ctx = seccomp_init(pc.default_action);
        if (ctx == NULL)
                return nsbox_invalid(err, "defaultAction: libseccomp refuses action 0x%x", pc.default_action);
        pc.ctx = ctx;

        /* A syscall made through another ABI (int $0x80, x32) is numbered
         * differently and would dodge every rule: kill the whole process, not
         * just the thread, so it cannot carry on half-dead. */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (r < 0)
                return nsbox_error(err, -r, "set the bad-architecture action");
        /* The runtime sets no_new_privs itself, before loading, and loading
         * happens from our own code, not libseccomp's. */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
        if (r < 0)
                return nsbox_error(err, -r, "clear the no_new_privs attribute");

        /* A binary tree of syscall numbers instead of a linear list: each
         * syscall walks ~log2(n) comparisons, and the kernel's per-filter
         * action cache, which emulates the filter for every syscall number
         * of every architecture when the filter is attached, gets as much
         * cheaper (a third of a millisecond per exec with the list). */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
        if (r < 0)
                return nsbox_error(err, -r, "ask libseccomp for a binary tree filter");

        r = add_architectures(&pc, root, err);
        if (r < 0)
                return r;

        r = add_forced_denials(&pc, err);
        if (r < 0)
                return r;
        r = get_optional_array(root, "syscalls", "", &syscalls, err);
        if (r < 0)
                return r;
        json_array_foreach(syscalls, i, entry)
        {
                r = add_syscall_entry(&pc, entry, i, err);
                if (r < 0)
                        return r;
        }

        return export_program(ctx, out, err);
}

int seccomp_profile_compile_string(const char *name, const char *json_text, struct seccomp_program *out,
                                   nsbox_error_t **err)
{
        _cleanup_json_ json_t *root = NULL;
        json_error_t json_err;
        int r;

        out->filter = NULL;
        out->len = 0;

        root = json_loads(json_text, JSON_REJECT_DUPLICATES, &json_err);
        if (root == NULL)
                return nsbox_invalid(err, "seccomp profile %s: invalid JSON at line %d column %d: %s", name,
                                     json_err.line, json_err.column, json_err.text);
        r = compile_profile(root, out, err);
        if (r < 0)
                nsbox_error_wrap(err, "seccomp profile %s", name);
        return r;
}

int seccomp_profile_compile_file(const char *path, struct seccomp_program *out, nsbox_error_t **err)
{
        _cleanup_close_ int fd = -1;
        _cleanup_json_ json_t *root = NULL;
        json_error_t json_err;
        struct stat st;
        int r;

        out->filter = NULL;
        out->len = 0;

        /* O_NONBLOCK so that a FIFO planted at the path cannot stall the
         * daemon in open(); anything but a regular file is refused below. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return nsbox_error(err, errno, "seccomp profile %s: open", path);
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "seccomp profile %s: fstat", path);
        if (!S_ISREG(st.st_mode))
                return nsbox_invalid(err, "seccomp profile %s: not a regular file", path);

        root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &json_err);
        if (root == NULL)
                return nsbox_invalid(err, "seccomp profile %s: invalid JSON at line %d column %d: %s", path,
                                     json_err.line, json_err.column, json_err.text);
        r = compile_profile(root, out, err);
        if (r < 0)
                nsbox_error_wrap(err, "seccomp profile %s", path);
        return r;
}

void seccomp_program_free(struct seccomp_program *prog)
{
        if (prog == NULL)
                return;
        free(prog->filter);
        prog->filter = NULL;
        prog->len = 0;
}

int seccomp_program_load(const struct seccomp_program *prog)
{
        struct sock_fprog fprog;

        if (prog == NULL || prog->filter == NULL || prog->len == 0)
                return -EINVAL;
        fprog.len = prog->len;
        fprog.filter = prog->filter;

        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) == 0)
                return 0;
        /* seccomp(2) is 3.17+, and an outer filter may hide it; the prctl
         * form installs the same filter. */
        if (errno != ENOSYS)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0)
                return 0;
        return -errno;
}
