/* Room in the host's per-user kernel pools for the sandboxes' share. */
#pragma once

/* Every sandbox's user namespace is owned by host root, so at the host's
 * level what sandboxes take of the inotify pools is charged to root, next
 * to root's own services. Raise the host's per-user limits (sysctl
 * fs.inotify.*) where they leave less than the kernel's defaults for root
 * itself plus max_sandboxes times a sandbox's cap (runtime/setup.h); never
 * lower them. Logs what it changed. */
void host_pools_reserve(unsigned max_sandboxes);
