# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by nsbox's stateless runner, its fork server and the
stateful driver, inside the sandbox: running a stateless script, matplotlib
figure capture and /workspace change tracking."""
import json
import os
import sys
import weakref

WORKSPACE = "/workspace"
MAX_TRACKED_FILES = 20000
# Figures the code left open (or showed) without saving them are saved
# here, never in /workspace: the reply carries them (base64), and the
# directory keeps only the newest FIGURES_KEPT, so it does not grow.
FIGURE_DIR = "/tmp/nsbox-figures"
FIGURES_KEPT = 64


def snapshot(root=WORKSPACE):
    """{relative path: (size, mtime_ns)} of the regular files under root
    (not through symlinks). One lstat per file: the directory listing says
    what each entry is."""
    seen = {}
    pending = [(root, "")]
    while pending:
        path, rel = pending.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            name = rel + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith(".nsbox"):
                        pending.append((entry.path, name + "/"))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            seen[name] = (st.st_size, st.st_mtime_ns)
            if len(seen) >= MAX_TRACKED_FILES:
                return seen
    return seen


def produced(before, after, skip=()):
    """Files created or changed between two snapshots: {absolute path: size}."""
    out = {}
    for rel, (size, mtime) in sorted(after.items()):
        path = os.path.join(WORKSPACE, rel)
        if path in skip:
            continue
        if before.get(rel) != (size, mtime):
            out[path] = size
    return out


class FigureCapture:
    """Saves every open matplotlib figure the code did not save itself as a
    PNG in FIGURE_DIR when the code calls plt.show() and when it ends,
    without importing matplotlib unless the code does."""

    def __init__(self):
        self.images = []
        self.on_image = None  # called with each path saved (a streamed stateful call)
        self._patched = False
        # The figures the code saved (Figure.savefig, plt.savefig): one
        # plot is one image, so these are never saved again.
        self.saved = weakref.WeakSet()

    def reset(self):
        """A new call (the stateful driver's next cell)."""
        self.images = []
        self.saved = weakref.WeakSet()

    def _claim_path(self):
        """A new figure_N.png in FIGURE_DIR, created empty (O_EXCL: stateless
        calls side by side never share one)."""
        os.makedirs(FIGURE_DIR, mode=0o700, exist_ok=True)
        n = 1
        while True:
            path = os.path.join(FIGURE_DIR, "figure_%d.png" % n)
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
                return path
            except FileExistsError:
                n += 1

    def _prune(self):
        """Keep the newest FIGURES_KEPT files of FIGURE_DIR (this call's among them)."""
        try:
            entries = [e for e in os.scandir(FIGURE_DIR) if e.is_file(follow_symlinks=False)]
            entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns, reverse=True)
        except OSError:
            return
        for entry in entries[FIGURES_KEPT:]:
            if entry.path not in self.images:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass

    def save_open_figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        nums = plt.get_fignums()
        if not nums:
            return  # pyplot imported ahead (the fork server), no figure: nothing to close
        for num in nums:
            fig = plt.figure(num)
            if fig in self.saved:
                continue
            try:
                path = self._claim_path()
            except OSError as e:
                print("nsbox: could not save figure %s: %s" % (num, e), file=sys.stderr)
                continue
            try:
                # zlib level 1 rather than 6: a 640x480 line plot saves in 29.9 ms instead of
                # 34.7 (best of 10, the image's python under chroot) for a PNG 23% larger.
                fig.savefig(path, format="png", pil_kwargs={"compress_level": 1})
            except Exception as e:  # a broken figure must not hide the run's result
                print("nsbox: could not save figure %s: %s" % (num, e), file=sys.stderr)
                try:
                    os.unlink(path)
                except OSError:
                    pass
                continue
            self.images.append(path)
            if self.on_image is not None:
                self.on_image(path)
        plt.close("all")
        if self.images:
            self._prune()

    def _track_savefig(self):
        """Note each figure the code saves, by identity."""
        figure = sys.modules.get("matplotlib.figure")
        if figure is None:
            return
        original = figure.Figure.savefig
        capture = self

        def savefig(fig, *args, **kwargs):
            capture.saved.add(fig)
            return original(fig, *args, **kwargs)

        figure.Figure.savefig = savefig

    def patch_show(self):
        """Make plt.show() save the figures (Agg cannot display them)."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or self._patched:
            return
        capture = self

        def show(*args, **kwargs):
            capture.save_open_figures()

        plt.show = show
        self._track_savefig()
        self._patched = True

    def install_import_hook(self):
        capture = self

        class Finder:
            def find_spec(self, name, path=None, target=None):
                if name != "matplotlib.pyplot":
                    return None
                sys.meta_path.remove(self)
                try:
                    import importlib.util
                    spec = importlib.util.find_spec(name)
                finally:
                    sys.meta_path.insert(0, self)
                if spec is None or spec.loader is None:
                    return spec
                loader = spec.loader
                original = loader.exec_module

                def exec_module(module):
                    original(module)
                    sys.modules[name] = module
                    capture.patch_show()

                loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, Finder())


def user_traceback(exc, filename):
    """The traceback of exc from the first frame of the user's code on."""
    import traceback
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb if tb is not None else exc.__traceback__))


def exit_code_of(e):
    """The exit code a SystemExit gives a process, as python3 reports it
    (a message is printed on stderr, code 1)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def runner_args(args):
    """(script, report, name, script arguments) from the runner's command
    line: SCRIPT REPORT [NAME [ARG...]]."""
    if len(args) < 2:
        raise SystemExit("usage: run.py SCRIPT REPORT [NAME [ARG...]]")
    return args[0], args[1], (args[2] if len(args) > 2 else None), list(args[3:])


def run_code_as_main(script, name):
    """Run the file SCRIPT as python runs a script: a fresh __main__ module
    whose code is named NAME (tracebacks and sys.argv[0] say NAME; its
    lines are found without the file being at that path)."""
    import builtins
    import linecache
    import types
    with open(script, "rb") as f:
        source = f.read()
    code = compile(source, name, "exec", dont_inherit=True)
    if name != script:
        text = source.decode("utf-8", "replace")
        # mtime None: linecache.checkcache keeps the entry.
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins
    main.__cached__ = None
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def capture_figures():
    """The figure capture of a call: made at its start, or ahead of it by the
    fork server's process for the next call (nothing in it depends on the
    call, and the call's client waits for what is done once it has come)."""
    figures = FigureCapture()
    figures.install_import_hook()
    # Imported before the call (by the fork server): the hook never fires.
    figures.patch_show()
    return figures


def run_stateless(script, report, name=None, args=(), figures=None):
    """Run SCRIPT as __main__ (named NAME, default SCRIPT, with ARGS as its
    arguments), save the matplotlib figures left open (or shown) and not
    saved by the code as PNGs in FIGURE_DIR, write the JSON report of produced files and images to
    REPORT, and return the exit code. The same code serves run.py (a fresh
    interpreter) and a child of the fork server (an interpreter that has the
    image's heavy modules imported already, and figures captured ahead)."""
    name = name or script
    os.environ.setdefault("MPLBACKEND", "Agg")
    before = snapshot()
    if figures is None:
        figures = capture_figures()
    exit_code = 0
    sys.argv = [name] + list(args)
    # As `python3 SCRIPT` would: the script's directory first on the path
    # (a named script is written elsewhere: its directory is the cwd).
    sys.path[0] = os.path.dirname(os.path.abspath(script)) if name == script else os.getcwd()
    try:
        run_code_as_main(script, name)
    except SystemExit as e:
        exit_code = exit_code_of(e)
    except BaseException as e:  # the user's exception: print it as python would
        sys.stderr.write(user_traceback(e, name))
        exit_code = 1
    try:
        figures.save_open_figures()
    except Exception as e:
        print("nsbox: saving figures failed: %s" % e, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    after = snapshot()
    result = {
        "files_produced": produced(before, after, skip={script}),
        "images": figures.images,
    }
    data = json.dumps(result).encode()
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    return exit_code
