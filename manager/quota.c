/* SPDX-License-Identifier: Apache-2.0 */
/* The per-uid count of client calls in flight that exec.c and python.c share. */
#include "quota.h"

#include <stdlib.h>

#include "daemon.h"

/* One entry per uid with calls in progress: a handful, searched in a line. */
static struct uid_calls {
        uid_t uid;
        unsigned n;
} * calls_by_uid;
static size_t n_call_uids;

void quota_calls_add(uid_t uid, int delta)
{
        for (size_t i = 0; i < n_call_uids; i++) {
                if (calls_by_uid[i].uid != uid)
                        continue;
                calls_by_uid[i].n += delta;
                if (calls_by_uid[i].n == 0)
                        calls_by_uid[i] = calls_by_uid[--n_call_uids];
                return;
        }
        if (delta <= 0)
                return;
        struct uid_calls *grown = realloc(calls_by_uid, (n_call_uids + 1) * sizeof(*grown));
        if (grown == NULL)
                return; /* uncounted: the quota errs on the generous side */
        calls_by_uid = grown;
        calls_by_uid[n_call_uids++] = (struct uid_calls){ uid, (unsigned)delta };
}

unsigned quota_calls_of(uid_t uid)
{
        for (size_t i = 0; i < n_call_uids; i++) {
                if (calls_by_uid[i].uid == uid)
                        return calls_by_uid[i].n;
        }
        return 0;
}

bool quota_refuse_call(struct rpc_request *req)
{
        if (req->uid == 0 || quota_calls_of(req->uid) < nsboxd.config.max_execs_per_uid)
                return false;
        rpc_reply_fail(
            req, "limit_reached",
            "uid %u has %u execs and python.run calls running, the most allowed (max_execs_per_uid)",
            (unsigned)req->uid, nsboxd.config.max_execs_per_uid);
        return true;
}
