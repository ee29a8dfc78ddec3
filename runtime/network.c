/* SPDX-License-Identifier: Apache-2.0 */
/* Links, addresses and routes of a network namespace through libnl-3. */
#include "network.h"

#include <errno.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>

#include "cleanup.h"

static inline void nl_socket_freep(struct nl_sock **s)
{
        if (*s != NULL)
                nl_socket_free(*s);
}

static inline void rtnl_link_putp(struct rtnl_link **l)
{
        if (*l != NULL)
                rtnl_link_put(*l);
}

int network_loopback_up(nsbox_error_t **err)
{
        _cleanup_(nl_socket_freep) struct nl_sock *sock = nl_socket_alloc();
        _cleanup_(rtnl_link_putp) struct rtnl_link *link = NULL;
        _cleanup_(rtnl_link_putp) struct rtnl_link *change = rtnl_link_alloc();
        int r;

        if (sock == NULL || change == NULL)
                return nsbox_error(err, ENOMEM, "allocate netlink objects");
        if ((r = nl_connect(sock, NETLINK_ROUTE)) < 0)
                return nsbox_error(err, 0, "connect rtnetlink: %s", nl_geterror(r));
        if ((r = rtnl_link_get_kernel(sock, 0, "lo", &link)) < 0)
                return nsbox_error(err, 0, "look up lo: %s", nl_geterror(r));
        rtnl_link_set_flags(change, IFF_UP);
        if ((r = rtnl_link_change(sock, link, change, 0)) < 0)
                return nsbox_error(err, 0, "bring lo up: %s", nl_geterror(r));
        return 0;
}

static int route_socket(struct nl_sock **out, nsbox_error_t **err)
{
        struct nl_sock *sock = nl_socket_alloc();
        if (sock == NULL)
                return nsbox_error(err, ENOMEM, "allocate a netlink socket");
        int r = nl_connect(sock, NETLINK_ROUTE);
        if (r < 0) {
                nl_socket_free(sock);
                return nsbox_error(err, 0, "connect rtnetlink: %s", nl_geterror(r));
        }
        *out = sock;
        return 0;
}

int network_veth_add(const char *name, const char *peer_name, int peer_netns_fd, nsbox_error_t **err)
{
        _cleanup_(nl_socket_freep) struct nl_sock *sock = NULL;
        _cleanup_(rtnl_link_putp) struct rtnl_link *link = rtnl_link_veth_alloc();
        int r;
        if (link == NULL)
                return nsbox_error(err, ENOMEM, "allocate a veth");
        if ((r = route_socket(&sock, err)) < 0)
                return r;
        _cleanup_(rtnl_link_putp) struct rtnl_link *peer = rtnl_link_veth_get_peer(link);
        rtnl_link_set_name(link, name);
        rtnl_link_set_name(peer, peer_name);
        rtnl_link_set_ns_fd(peer, peer_netns_fd);
        if ((r = rtnl_link_add(sock, link, NLM_F_CREATE | NLM_F_EXCL)) < 0)
                return nsbox_error(err, 0, "create veth %s: %s", name, nl_geterror(r));
        return 0;
}

int network_link_delete(const char *name, nsbox_error_t **err)
{
        _cleanup_(nl_socket_freep) struct nl_sock *sock = NULL;
        _cleanup_(rtnl_link_putp) struct rtnl_link *link = rtnl_link_alloc();
        int r;
        if (link == NULL)
                return nsbox_error(err, ENOMEM, "allocate a link");
        if ((r = route_socket(&sock, err)) < 0)
                return r;
        rtnl_link_set_name(link, name);
        if ((r = rtnl_link_delete(sock, link)) < 0 && r != -NLE_OBJ_NOTFOUND && r != -NLE_NODEV)
                return nsbox_error(err, 0, "delete link %s: %s", name, nl_geterror(r));
        return 0;
}

static inline void nl_addr_putp(struct nl_addr **a)
{
        if (*a != NULL)
                nl_addr_put(*a);
}

static inline void rtnl_addr_putp(struct rtnl_addr **a)
{
        if (*a != NULL)
                rtnl_addr_put(*a);
}

static inline void rtnl_route_putp(struct rtnl_route **r)
{
        if (*r != NULL)
                rtnl_route_put(*r);
}

int network_link_configure(const char *name, struct in_addr address, int prefix,
                           const struct in_addr *gateway, nsbox_error_t **err)
{
        _cleanup_(nl_socket_freep) struct nl_sock *sock = NULL;
        _cleanup_(rtnl_link_putp) struct rtnl_link *link = NULL;
        _cleanup_(rtnl_link_putp) struct rtnl_link *change = rtnl_link_alloc();
        _cleanup_(rtnl_addr_putp) struct rtnl_addr *addr = rtnl_addr_alloc();
        _cleanup_(nl_addr_putp) struct nl_addr *local = nl_addr_build(AF_INET, &address, sizeof(address));
        int r;
        if (change == NULL || addr == NULL || local == NULL)
                return nsbox_error(err, ENOMEM, "allocate netlink objects");
        if ((r = route_socket(&sock, err)) < 0)
                return r;
        if ((r = rtnl_link_get_kernel(sock, 0, name, &link)) < 0)
                return nsbox_error(err, 0, "look up %s: %s", name, nl_geterror(r));
        int ifindex = rtnl_link_get_ifindex(link);
        nl_addr_set_prefixlen(local, prefix);
        rtnl_addr_set_ifindex(addr, ifindex);
        if ((r = rtnl_addr_set_local(addr, local)) < 0 || (r = rtnl_addr_add(sock, addr, 0)) < 0)
                return nsbox_error(err, 0, "address %s: %s", name, nl_geterror(r));
        rtnl_link_set_flags(change, IFF_UP);
        if ((r = rtnl_link_change(sock, link, change, 0)) < 0)
                return nsbox_error(err, 0, "bring %s up: %s", name, nl_geterror(r));
        if (gateway == NULL)
                return 0;
        _cleanup_(rtnl_route_putp) struct rtnl_route *route = rtnl_route_alloc();
        _cleanup_(nl_addr_putp) struct nl_addr *any = nl_addr_build(AF_INET, &(struct in_addr){ 0 }, 4);
        struct nl_addr *via = nl_addr_build(AF_INET, gateway, sizeof(*gateway));
        struct rtnl_nexthop *hop = rtnl_route_nh_alloc();
        if (route == NULL || any == NULL || via == NULL || hop == NULL) {
                if (via != NULL)
                        nl_addr_put(via);
                if (hop != NULL)
                        rtnl_route_nh_free(hop);
                return nsbox_error(err, ENOMEM, "allocate a route");
        }
        nl_addr_set_prefixlen(any, 0);
        rtnl_route_set_family(route, AF_INET);
        rtnl_route_set_dst(route, any);
        rtnl_route_nh_set_gateway(hop, via);
        nl_addr_put(via);
        rtnl_route_nh_set_ifindex(hop, ifindex);
        rtnl_route_add_nexthop(route, hop); /* the route owns it now */
        if ((r = rtnl_route_add(sock, route, NLM_F_CREATE)) < 0)
                return nsbox_error(err, 0, "default route via %s: %s", name, nl_geterror(r));
        return 0;
}
