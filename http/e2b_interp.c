/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's code interpreter (e2b_interp.h) on python.run. */
#include "e2b_interp.h"

#include "e2b_wire.h"

enum MHD_Result http_e2b_interpreter(struct http_request *r, const char *sandbox_id)
{
        (void)sandbox_id;
        return e2b_reply_rest_error(r, 501, "the code interpreter is not implemented yet");
}
