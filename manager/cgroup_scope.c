/* SPDX-License-Identifier: Apache-2.0 */
/* The transient systemd scope of the sandboxes' cgroups (live restore under
 * systemd), as container runtimes with a systemd cgroup driver make theirs.
 *
 * Started in its service's cgroup, nsboxd could not lay the sandboxes'
 * cgroups out there and still let systemd start the next nsboxd: the kernel
 * refuses a process in a cgroup whose controllers are handed to children.
 * The sandboxes therefore live outside the unit, in one scope systemd makes
 * on nsboxd's request (org.freedesktop.systemd1.Manager.StartTransientUnit),
 * delegated to nsboxd. One scope for all the sandboxes, not one each: a
 * create pays no D-Bus round trip and no wait for systemd's job, and the
 * layout under it is the one nsboxd makes in any delegated cgroup. A scope
 * is stopped once empty, so a holder process (no sandbox's) keeps it. */
#include "cgroup_scope.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "cleanup.h"
#include "detach.h"

bool cgroup_scope_under_systemd(void)
{
        return (getenv("INVOCATION_ID") != NULL || getenv("NOTIFY_SOCKET") != NULL) && sd_booted() > 0;
}

int cgroup_scope_holder(pid_t *out, nsbox_error_t **err)
{
        pid_t h = fork_detached();
        if (h < 0)
                return nsbox_error(err, (int)-h, "scope holder: fork");
        if (h == 0) {
                prctl(PR_SET_NAME, "nsbox-scope");
                for (;;)
                        pause();
        }
        *out = h;
        return 0;
}

/* systemd's private socket (root, no D-Bus daemon needed), else the system bus. */
static int bus_open(sd_bus **out)
{
        sd_bus *bus = NULL;
        int r = sd_bus_new(&bus);
        if (r < 0)
                return r;
        if ((r = sd_bus_set_address(bus, "unix:path=/run/systemd/private")) >= 0 &&
            (r = sd_bus_start(bus)) >= 0) {
                *out = bus;
                return 0;
        }
        sd_bus_unref(bus);
        return sd_bus_open_system(out);
}

int cgroup_scope_start(const char *unit, const char *slice, pid_t pid, nsbox_error_t **err)
{
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        int r = bus_open(&bus);
        if (r < 0)
                return nsbox_error(err, -r, "connect to systemd over D-Bus");
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        r = sd_bus_message_new_method_call(bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                           "org.freedesktop.systemd1.Manager", "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", unit, "fail");
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sv)", 5, "Description", "s", "nsbox sandboxes (live restore)",
                                          "Slice", "s", slice, "Delegate", "b", 1, "CollectMode", "s",
                                          "inactive-or-failed", "PIDs", "au", 1, (uint32_t)pid);
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sa(sv))", 0);
        if (r < 0)
                return nsbox_error(err, -r, "StartTransientUnit %s: build the call", unit);
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        r = sd_bus_call(bus, m, 0, &e, &reply);
        if (r < 0 && sd_bus_error_has_name(&e, "org.freedesktop.systemd1.UnitExists"))
                return -EEXIST;
        if (r < 0)
                return nsbox_error(err, -r, "systemd's StartTransientUnit %s: %s", unit,
                                   e.message != NULL ? e.message : "failed");
        return 0;
}
