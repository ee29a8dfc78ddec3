#include "network.h"

#include <errno.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>

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
