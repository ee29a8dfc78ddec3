# SPDX-License-Identifier: Apache-2.0
"""nsbox stateless runner: python3 /usr/lib/nsbox/run.py SCRIPT REPORT [NAME [ARG...]]

Runs SCRIPT as __main__ (named NAME in sys.argv[0] and tracebacks, with
ARGs as its arguments), saves matplotlib figures left open (or shown) and
not saved by the code as PNGs in /tmp/nsbox-figures, and writes a JSON report of produced files and images to
REPORT (nsbox_runtime.run_stateless). stdout and stderr are the script's own.
The fork server (forkserver.py) runs the same function in its children."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nsbox_runtime  # noqa: E402


def main():
    args = sys.argv[1:]
    del sys.path[0]
    os._exit(nsbox_runtime.run_stateless(*nsbox_runtime.runner_args(args)))


main()
