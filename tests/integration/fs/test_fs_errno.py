# SPDX-License-Identifier: Apache-2.0
"""fs.* errors carry a machine-readable errno in data."""
import pytest

from nsbox_client import RpcError


# --- fs errors carry data.errno ------------------------------------------------

def test_fs_remove_of_a_non_empty_directory_says_errno_enotempty_in_data(daemon, sandbox):
    daemon.call("fs.write", sandbox_id=sandbox, path="full/a.txt", content="x")
    with pytest.raises(RpcError) as e:
        daemon.call("fs.remove", sandbox_id=sandbox, path="full")
    assert e.value.kind == "invalid_params" and e.value.error["data"]["errno"] == "ENOTEMPTY", e.value.error
    with pytest.raises(RpcError) as e:
        daemon.call("fs.stat", sandbox_id=sandbox, path="full/missing")
    assert e.value.kind == "not_found" and e.value.error["data"]["errno"] == "ENOENT", e.value.error
    daemon.call("fs.remove", sandbox_id=sandbox, path="full", recursive=True)
