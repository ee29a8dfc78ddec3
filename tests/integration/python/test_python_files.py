# SPDX-License-Identifier: Apache-2.0
"""python.run's files: bytes (base64) as well as text, and a bad file value
named in the error."""
import base64
import hashlib

import pytest

from nsbox_client import RpcError


BINARY = bytes(range(256)) * 3 + b"\xff\xfe\x00\x80 not utf-8 \xc3\x28"


# --- python.run files: bytes as well as text ---------------------------------

def test_python_run_writes_a_binary_file_given_as_base64_byte_exact(daemon, sandbox):
    code = ("import hashlib\nd = open('bin/data.bin', 'rb').read()\n"
            "print(len(d), hashlib.sha256(d).hexdigest())\nprint(open('/workspace/t.txt').read())")
    r = daemon.call("python.run", sandbox_id=sandbox, code=code, files={
        "bin/data.bin": {"content": base64.b64encode(BINARY).decode(), "encoding": "base64"},
        "/workspace/t.txt": {"content": "text é", "encoding": "utf-8"}})
    assert r["status"] == "ok", r
    assert r["stdout"] == "%d %s\ntext é\n" % (len(BINARY), hashlib.sha256(BINARY).hexdigest())


def test_python_run_text_files_as_plain_strings_still_work(daemon, sandbox):
    r = daemon.call("python.run", sandbox_id=sandbox, code="print(open('a.txt').read())",
                    files={"a.txt": "plain text"})
    assert r["status"] == "ok" and r["stdout"] == "plain text\n", r


@pytest.mark.parametrize("value, said", [
    ({"content": "***not base64***", "encoding": "base64"}, "not valid base64"),
    ({"content": "eA=", "encoding": "base64"}, "not valid base64"),
    ({"content": "eA==", "encoding": "hex"}, "must be a string or {content"),
    ({"content": 5, "encoding": "base64"}, "must be a string or {content"),
    ({"encoding": "base64"}, "must be a string or {content"),
    ({"content": "eA==", "mode": 0o755}, "must be a string or {content"),
    (7, "must be a string or {content"),
])
def test_python_run_bad_file_value_is_invalid_params_naming_the_file(daemon, sandbox, value, said):
    with pytest.raises(RpcError) as e:
        daemon.call("python.run", sandbox_id=sandbox, code="print(1)", files={"dir/bad.bin": value})
    assert e.value.kind == "invalid_params", e.value.error
    assert 'files["dir/bad.bin"]' in str(e.value) and said in str(e.value), str(e.value)
