# SPDX-License-Identifier: Apache-2.0
"""nsbox-http with two E2B API keys (owners UID_A and UID_B) for the E2B tests."""
import hashlib
import os
import shutil
import tempfile

import pytest

from test_http import Front

KEY_A = "e2b_" + hashlib.sha256(b"nsbox e2b key a").hexdigest()[:40]
KEY_B = "e2b_" + hashlib.sha256(b"nsbox e2b key b").hexdigest()[:40]
UID_A, UID_B = 41011, 41012


@pytest.fixture(scope="module")
def front(daemon):
    os.chmod(daemon.socket, 0o666)  # for auth.act_as's uids; in production: membership of group nsbox
    keys = tempfile.mkdtemp(prefix="nsbox-e2b-keys-")
    path = os.path.join(keys, "tokens")
    with open(path, "w") as f:
        f.write("%d %s\n%d %s\n" % (UID_A, KEY_A, UID_B, KEY_B))
    os.chmod(path, 0o600)
    f = Front(daemon, "--tokens", path, tokens=False)
    yield f
    rc = f.stop()
    shutil.rmtree(keys, ignore_errors=True)
    assert rc == 0, f.read_log()[-4000:]
