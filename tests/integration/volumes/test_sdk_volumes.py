# SPDX-License-Identifier: Apache-2.0
"""The Python SDK's volumes and mounts: Sandbox.create_volume/list_volumes/
remove_volume and Sandbox.create(mounts=...), sync and async, against the real
nsboxd; Volume's files without a sandbox."""
import asyncio
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
from nsbox import BusyError, InvalidParamsError, NotFoundError, Sandbox, Volume  # noqa: E402
from nsbox.aio import AsyncSandbox, AsyncVolume  # noqa: E402

pytestmark = pytest.mark.hostroot("volumes are loop-mounted ext4 images, idmapped per sandbox")


def test_a_volume_through_the_sdk(daemon):
    v = Sandbox.create_volume("sdkvol", "32M", socket=daemon.socket)
    assert v["size_bytes"] == 32 << 20
    with Sandbox.create(socket=daemon.socket, mounts=[{"volume": "sdkvol", "path": "/data"}]) as sb:
        assert sb.commands.run("echo kept > /data/f && cat /data/f").stdout == "kept\n"
        with pytest.raises(BusyError):
            Sandbox.remove_volume("sdkvol", socket=daemon.socket)
    assert [x["name"] for x in Sandbox.list_volumes(socket=daemon.socket)] == ["sdkvol"]

    async def again():
        async with await AsyncSandbox.create(socket=daemon.socket,
                                             mounts=[{"volume": "sdkvol", "path": "/v", "read_only": True}]) as sb:
            return (await sb.commands.run("cat /v/f")).stdout
    assert asyncio.run(again()) == "kept\n"
    Sandbox.remove_volume("sdkvol", socket=daemon.socket)
    with pytest.raises(NotFoundError):
        Sandbox.remove_volume("sdkvol", socket=daemon.socket)
    assert asyncio.run(AsyncSandbox.list_volumes(socket=daemon.socket)) == []


def test_a_volumes_files_through_the_sdk_without_a_sandbox(daemon):
    Sandbox.create_volume("sdkfiles", "16M", socket=daemon.socket)
    try:
        with Volume("sdkfiles", socket=daemon.socket) as v:
            v.files.write("/notes/a.txt", "from Volume.files\n")
            v.files.write("/bin", b"\x00\xff")
            v.files.mkdir("/made/deep")
            v.files.symlink("/etc", "/etc-link")
            assert v.files.read("notes/a.txt") == "from Volume.files\n"
            assert v.files.read("/bin", binary=True) == b"\x00\xff"
            assert sorted(e.name for e in v.files.list()) == ["bin", "etc-link", "lost+found", "made", "notes"]
            assert v.files.stat("/notes/a.txt")["uid"] == 1000
            assert v.files.exists("/made/deep") and not v.files.exists("/nope")
            with pytest.raises(InvalidParamsError):
                v.files.read("/etc-link/hostname")  # a symlink is never followed
            v.files.rename("/notes/a.txt", "/a.txt")
            v.files.chmod("/a.txt", 0o600)
            v.files.remove("/made", recursive=True)
        with Sandbox.create(socket=daemon.socket, mounts=[{"volume": "sdkfiles", "path": "/data"}]) as sb:
            out = sb.commands.run("cat /data/a.txt; stat -c '%U %a' /data/a.txt; echo back > /data/b.txt").stdout
            assert out == "from Volume.files\nsandbox 600\n", out

        async def read_async():
            async with AsyncVolume("sdkfiles", socket=daemon.socket) as v:
                return await v.files.read("/b.txt"), await v.files.exists("/made")
        assert asyncio.run(read_async()) == ("back\n", False)
        with Volume("no-such-volume", socket=daemon.socket) as v:
            with pytest.raises(NotFoundError):
                v.files.exists("/a.txt")
    finally:
        Sandbox.remove_volume("sdkfiles", socket=daemon.socket)
