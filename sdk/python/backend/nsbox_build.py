# SPDX-License-Identifier: Apache-2.0
"""The SDK's PEP 517 build backend, stdlib only: `pip install --no-index
sdk/python` works in a plain `python3 -m venv`, where setuptools (the usual
backend) is not installed and cannot be fetched. It packs nsbox/*.py into a
pure-Python wheel (and an sdist); the name, version and summary come from
pyproject.toml's [project] table."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "nsbox"
# Fixed member times, so that the same sources make the same archive.
EPOCH = (1980, 1, 1, 0, 0, 0)


def _project():
    """The [project] table's `key = "string"` lines."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if table is None:
        raise RuntimeError("pyproject.toml has no [project] table")
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"\s*$', table.group(1), re.M))


def _metadata(project):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
            % (project["name"], project["version"], project.get("description", ""),
               project.get("requires-python", ">=3")))


def _sources():
    """(path in the archive, path on disk) of the package's modules."""
    src = os.path.join(ROOT, PACKAGE)
    return [(PACKAGE + "/" + name, os.path.join(src, name))
            for name in sorted(os.listdir(src)) if name.endswith(".py")]


def _wheel(wheel_directory, files):
    """Write a py3-none-any wheel holding files ({archive path: bytes}): its name."""
    project = _project()
    dist = "%s-%s" % (project["name"].replace("-", "_"), project["version"])
    info = dist + ".dist-info/"
    files = dict(files)
    files[info + "METADATA"] = _metadata(project).encode()
    files[info + "WHEEL"] = b"Wheel-Version: 1.0\nGenerator: nsbox_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d\n" % (path, digest, len(data)))
    record.append(info + "RECORD,,\n")
    files[info + "RECORD"] = "".join(record).encode()
    name = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            member = zipfile.ZipInfo(path, EPOCH)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(member, data)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {arc: _read(disk) for arc, disk in _sources()})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts this source tree on sys.path (pip install -e)."""
    return _wheel(wheel_directory, {"__editable__.%s.pth" % PACKAGE: (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = "%s-%s" % (project["name"], project["version"])
    members = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
               ("backend/nsbox_build.py", os.path.abspath(__file__))] + _sources()
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for arc, data in [(a, _read(d)) for a, d in members] + [("PKG-INFO", _metadata(project).encode())]:
            member = tarfile.TarInfo(base + "/" + arc)
            member.size, member.mode, member.mtime = len(data), 0o644, 315532800
            tf.addfile(member, io.BytesIO(data))
    return name
