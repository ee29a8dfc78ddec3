# SPDX-License-Identifier: Apache-2.0
"""An nsboxd in a user namespace (rootless or nested) has no loop devices,
no ext4 mounts and no idmapped clones of host directories: volume.create and
sandbox.create with mounts (and volume.fs.*) are refused as unavailable, saying why, never an
internal error half-way through a create."""
import os

import pytest

import rootless_launch
from conftest import Daemon
from nsbox_client import RpcError

# serial: the rootless launcher adds a user and an /etc/subuid range
pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(os.geteuid() != 0, reason="makes user namespaces and a user: needs root")]


@pytest.fixture(scope="module", autouse=True)
def rootless_user():
    yield
    rootless_launch.remove_rootless_user()


@pytest.fixture(scope="module", params=["rootless", "nested"])
def daemon(request, rootless_user):  # torn down before the user is removed
    d = Daemon(extra_args=("--warm-pool", "0"), launcher=request.param)
    yield d
    rc = d.stop()
    assert rc == 0, "nsboxd did not stop cleanly (rc=%s):\n%s" % (rc, d.final_log[-6000:])


@pytest.mark.parametrize("method, params", [
    ("volume.create", {"name": "v", "size": "16M"}),
    ("sandbox.create", {"mounts": [{"volume": "v", "path": "/data"}]}),
    ("sandbox.create", {"mounts": [{"host_path": "/tmp", "path": "/data"}]}),
    ("volume.fs.list", {"volume": "v"}),
    ("volume.fs.write", {"volume": "v", "path": "/f", "content": "x"}),
])
def test_mounts_are_unavailable_in_a_user_namespace(daemon, method, params):
    with pytest.raises(RpcError) as e:
        daemon.call(method, **params)
    assert e.value.kind == "unavailable" and "need nsboxd running as host root" in str(e.value), e.value.error
    assert daemon.call("sandbox.list")["sandboxes"] == []
