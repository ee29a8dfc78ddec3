#include "network.h"

#include <errno.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>

int network_loopback_up(nsbox_error_t **err)
{
        struct nl_sock *sock = nl_socket_alloc();
        struct rtnl_link *link = NULL, *change = NULL;
        int r = 0;

        if (sock == NULL)
                return nsbox_error(err, ENOMEM, "allocate netlink socket");
        if ((r = nl_connect(sock, NETLINK_ROUTE)) < 0) {
                r = nsbox_error(err, 0, "connect rtnetlink: %s", nl_geterror(r));
                goto out;
        }
        if ((r = rtnl_link_get_kernel(sock, 0, "lo", &link)) < 0) {
                r = nsbox_error(err, 0, "look up lo: %s", nl_geterror(r));
                goto out;
        }
        change = rtnl_link_alloc();
        if (change == NULL) {
                r = nsbox_error(err, ENOMEM, "allocate link change");
                goto out;
        }
        rtnl_link_set_flags(change, IFF_UP);
        if ((r = rtnl_link_change(sock, link, change, 0)) < 0)
                r = nsbox_error(err, 0, "bring lo up: %s", nl_geterror(r));
out:
        if (change)
                rtnl_link_put(change);
        if (link)
                rtnl_link_put(link);
        nl_socket_free(sock);
        return r;
}
