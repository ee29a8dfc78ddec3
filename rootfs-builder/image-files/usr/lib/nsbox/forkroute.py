# SPDX-License-Identifier: Apache-2.0
"""Which of the fork server's two templates serves a stateless call.

The light template has imported only what the server needs and a few small
modules of the standard library; the heavy one has the image's
python_preload (numpy, pandas, matplotlib...) too, and forking it costs a
call several times the CPU. A call goes to the light template only when
every import its code makes, and the code of the /workspace modules it
imports makes, names a module the light template has loaded already: it
then imports nothing anew, and the heavy one would not have run it faster.
Anything else (numpy, a module not loaded yet, site-packages, a file this
scan does not read) goes to the heavy template, as every call did before.

The scan never decides what a call does, only where it runs: the code runs
the same in either. An import it cannot see (exec, importlib,
__import__) runs in the light template, which imports then what the heavy
one had ahead: it works, only slower."""
import ast
import importlib.machinery
import os
import stat
import sys

# What one call's scan reads at most, in all: the server serves no other
# call meanwhile, and a call that needs the heavy template waits for it
# (a scan of 64 KiB of code takes milliseconds; larger code goes to the
# heavy template unread).
MAX_FILES = 32
MAX_BYTES = 64 << 10
# A module found in these forms is not read here.
OTHER_SUFFIXES = [s for s in importlib.machinery.all_suffixes() if s != ".py"]


class Heavy(Exception):
    """The call goes to the heavy template."""


def read_source(path, limit):
    """A regular file's bytes, at most limit; never waits on a FIFO or a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise Heavy() from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise Heavy()
        chunks = []
        size = 0
        while True:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise Heavy()
    finally:
        os.close(fd)


class Scan:
    """The imports of a script and of the modules of its directory (the
    first entry of the call's sys.path) that it imports, against LOADED:
    {name: the names in it} of each module the light template has loaded
    (it has loaded nothing that this process, the heavy template, has not;
    the heavy one's imports may have added names to those modules)."""

    def __init__(self, path0, loaded):
        self.path0 = path0
        self.loaded = loaded
        self.files = set()
        self.left = MAX_BYTES

    def file(self, path, package):
        """Scan a source file; package: the directory its relative imports
        start from (None for the script: they fail there anyway)."""
        if path in self.files:
            return
        if len(self.files) >= MAX_FILES:
            raise Heavy()
        self.files.add(path)
        source = read_source(path, self.left)
        self.left -= len(source)
        try:
            tree = ast.parse(source, path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise Heavy() from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.absolute(alias.name)
            elif isinstance(node, ast.ImportFrom):
                names = [alias.name for alias in node.names]
                if node.level == 0:
                    self.absolute(node.module, names)
                elif package is not None:
                    self.relative(package, node.level, node.module, names)

    def absolute(self, module, names=()):
        if module in self.loaded:
            self.loaded_names(module, names)
            return
        parts = module.split(".")
        if parts[0] in self.loaded or parts[0] in sys.modules:
            raise Heavy()  # a module of a loaded package, or one the heavy template has
        self.local_path(self.path0, parts, names)

    def relative(self, package, level, module, names):
        directory = package
        for _ in range(level - 1):
            directory = os.path.dirname(directory)
        self.local_path(directory, module.split(".") if module else [], names)

    def local_path(self, directory, parts, names):
        """Modules PARTS (a dotted path) from DIRECTORY, then NAMES of the
        package they lead to, those of them that are modules."""
        for i, part in enumerate(parts):
            directory = self.local(directory, part)
            if directory is None and i < len(parts) - 1:
                raise Heavy()
        for name in names:
            if directory is None:
                return
            if name == "*":
                raise Heavy()
            base = os.path.join(directory, name)
            if os.path.lexists(base) or any(os.path.lexists(base + s) for s in OTHER_SUFFIXES + [".py"]):
                self.local(directory, name)

    def local(self, directory, name):
        """Scan module NAME of DIRECTORY: the package's directory when it is
        one, else None. Heavy when it is not there as source."""
        base = os.path.join(directory, name)
        init = os.path.join(base, "__init__.py")
        if os.path.isfile(init):
            self.file(init, base)
            return base
        if any(os.path.lexists(base + s) for s in OTHER_SUFFIXES) or os.path.isdir(base):
            raise Heavy()
        if os.path.isfile(base + ".py"):
            self.file(base + ".py", directory)
            return None
        raise Heavy()

    def loaded_names(self, module, names):
        """from MODULE import NAMES, MODULE loaded: a name that is not in it
        yet may be a module of the package still to import."""
        space = self.loaded[module]
        for name in names:
            full = "%s.%s" % (module, name)
            if full in self.loaded:
                continue
            if full in sys.modules:
                raise Heavy()  # a module the heavy template has and the light one has not
            if name != "*" and name in space:
                continue
            if "__path__" in space or "__getattr__" in space:
                raise Heavy()


def needs_heavy(script, name, cwd, loaded):
    """Whether the call that runs SCRIPT (named NAME, run from the directory
    CWD) needs the heavy template; LOADED: the modules of the light one.
    Its first sys.path entry is the script's directory, or the cwd for a
    named script (run_stateless)."""
    try:
        path = os.path.normpath(os.path.join(cwd, script))
        path0 = os.path.dirname(path) if name in (None, script) else cwd
        Scan(path0, loaded).file(path, None)
        return False
    except Exception:  # Heavy, or anything this scan did not expect
        return True
