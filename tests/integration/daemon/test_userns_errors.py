# SPDX-License-Identifier: Apache-2.0
"""nsboxd without host root (the nested launcher) says clearly what it may
not read."""
import os
import shutil

import pytest

from conftest import REPO, Daemon

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes a user namespace: needs root")


def test_a_seccomp_dir_nsboxd_may_not_enter_is_reported_as_such_not_as_missing(tmp_path):
    # tmp_path is host root's and 0700: nsboxd as root of a user namespace
    # may not look in it. Before, that read "not found ... No such file".
    profiles = tmp_path / "seccomp"
    profiles.mkdir()
    shutil.copy(os.path.join(REPO, "seccomp-profiles", "default.json"), profiles / "default.json")
    with pytest.raises(RuntimeError) as e:
        Daemon(extra_args=["--seccomp-dir", str(profiles), "--warm-pool", "0"], launcher="nested")
    log = str(e.value)
    assert "not found" not in log and "Permission denied" in log, log[-2000:]
    assert str(profiles / "default.json") in log, log[-2000:]
