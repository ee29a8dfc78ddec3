# SPDX-License-Identifier: Apache-2.0
"""The SDK installs as its docs say, offline, into a plain venv (no
setuptools there, no PyPI to fetch it from)."""
import os
import shutil
import subprocess
import sys
import tempfile

from conftest import REPO

# As README.md and docs/python-sdk.md write it, run from the repository's root.
INSTALL = "python3 -m venv venv && venv/bin/pip install --no-index sdk/python"
USE = ("import nsbox, nsbox.aio, sys\n"
       "assert nsbox.__file__.startswith(sys.prefix), nsbox.__file__\n"
       "with nsbox.Sandbox.create(socket=sys.argv[1]) as sb: print(sb.commands.run('echo hi').stdout, end='')")


def plain_env(tmp):
    """The Debian python3 first on PATH, no PYTHONPATH or pip settings, and
    no proxy that could reach an index."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV")) and "proxy" not in k.lower()}
    env.update(PATH="/usr/bin:/bin", HOME=tmp, PIP_CONFIG_FILE=os.devnull)
    return env


def test_the_documented_install_works_offline_in_a_plain_venv(daemon):
    with tempfile.TemporaryDirectory() as tmp:
        # A copy of the tree the command needs, so that nothing is written into the repository.
        shutil.copytree(os.path.join(REPO, "sdk", "python"), os.path.join(tmp, "sdk", "python"),
                        ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
        env = plain_env(tmp)
        p = subprocess.run(["sh", "-c", INSTALL], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        p = subprocess.run([os.path.join(tmp, "venv", "bin", "python"), "-c", USE, daemon.socket], cwd=tmp,
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout == "hi\n", p.stderr
        p = subprocess.run([os.path.join(tmp, "venv", "bin", "pip"), "install", "--no-index", "-e", "sdk/python"],
                           cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    for doc in ("README.md", os.path.join("docs", "python-sdk.md")):
        with open(os.path.join(REPO, doc)) as f:
            assert INSTALL in f.read(), "%s does not say %r" % (doc, INSTALL)


def test_the_wheel_holds_the_package_and_a_record_pip_checks():
    sys.path.insert(0, os.path.join(REPO, "sdk", "python", "backend"))
    try:
        import nsbox_build
    finally:
        sys.path.pop(0)
    import zipfile
    with tempfile.TemporaryDirectory() as tmp:
        name = nsbox_build.build_wheel(tmp)
        assert name.startswith("nsbox-") and name.endswith("-py3-none-any.whl")
        info = name[:-len("-py3-none-any.whl")] + ".dist-info/"
        with zipfile.ZipFile(os.path.join(tmp, name)) as zf:
            names = set(zf.namelist())
            record = zf.read(info + "RECORD").decode()
        sources = os.listdir(os.path.join(REPO, "sdk", "python", "nsbox"))
        modules = {"nsbox/" + f for f in sources if f.endswith(".py")}
        assert modules <= names and "nsbox/aio.py" in names and info + "METADATA" in names
        assert {line.split(",")[0] for line in record.splitlines()} == names
