# SPDX-License-Identifier: Apache-2.0
"""The Python SDK's volumes and mounts: Sandbox.create_volume/list_volumes/
remove_volume and Sandbox.create(mounts=...), sync and async, against the real
nsboxd."""
import asyncio
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
from nsbox import BusyError, NotFoundError, Sandbox  # noqa: E402
from nsbox.aio import AsyncSandbox  # noqa: E402

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
