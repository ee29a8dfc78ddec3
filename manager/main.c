/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd: the privileged manager. */
#include "daemon.h"

int main(int argc, char **argv)
{
        return nsboxd_main(argc, argv);
}
