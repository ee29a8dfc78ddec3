"""nsbox stateless runner: python3 /usr/lib/nsbox/run.py SCRIPT REPORT

Runs SCRIPT as __main__, saves matplotlib figures left open (or shown) as
PNGs in /workspace, and writes a JSON report of produced files and images to
REPORT. stdout and stderr are the script's own."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nsbox_runtime  # noqa: E402


def main():
    script, report = sys.argv[1], sys.argv[2]
    del sys.path[0]
    os.environ.setdefault("MPLBACKEND", "Agg")
    before = nsbox_runtime.snapshot()
    figures = nsbox_runtime.FigureCapture()
    figures.install_import_hook()
    exit_code = 0
    sys.argv = [script]
    try:
        import runpy
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            exit_code = 0
        elif isinstance(e.code, int):
            exit_code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            exit_code = 1
    except BaseException as e:  # the user's exception: print it as python would
        sys.stderr.write(nsbox_runtime.user_traceback(e, script))
        exit_code = 1
    try:
        figures.save_open_figures()
    except Exception as e:
        print("nsbox: saving figures failed: %s" % e, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    after = nsbox_runtime.snapshot()
    result = {
        "files_produced": nsbox_runtime.produced(before, after, skip={script}),
        "images": figures.images,
    }
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(result, f)
    os._exit(exit_code)


main()
