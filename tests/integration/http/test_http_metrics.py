# SPDX-License-Identifier: Apache-2.0
"""GET /metrics of nsbox-http: its own counters (requests by path, method and
status class with their latency; connections its bounds cut) and nsboxd's
server.metrics for the token's owner, as one Prometheus text page."""
import os

import pytest

from conftest import Daemon
from test_http import TOKEN_A, TOKEN_B, Front


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    os.chmod(d.socket, 0o666)
    yield d
    assert d.stop() == 0, d.final_log[-4000:]


def scrape(front, token):
    status, resp, body = front.request("GET", "/metrics", token=token, raw=True)
    assert status == 200, (status, body)
    assert resp.getheader("Content-Type").startswith("text/plain; version=0.0.4")
    from prometheus_client.parser import text_string_to_metric_families
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples, body.decode()


def test_metrics_page_has_the_fronts_counters_and_the_owners_sandboxes_only(daemon):
    front = Front(daemon)
    try:
        a = front.rpc("sandbox.create", token=TOKEN_A)["sandbox_id"]
        b = front.rpc("sandbox.create", token=TOKEN_B)["sandbox_id"]
        assert front.request("GET", "/list/", token="not-a-token-at-all-xxxxxxxx")[0] == 401
        m, text = scrape(front, TOKEN_A)
        rpc_ok = [v for labels, v in m["nsbox_http_requests_total"]
                  if labels == {"path": "v1", "method": "POST", "status": "2xx"}]
        assert rpc_ok and rpc_ok[0] >= 2, m["nsbox_http_requests_total"]
        assert any(labels == {"path": "list", "method": "GET", "status": "4xx"} and v >= 1
                   for labels, v in m["nsbox_http_requests_total"])
        assert [v for labels, v in m["nsbox_http_request_duration_seconds_count"] if labels["path"] == "v1"][0] >= 2
        assert {labels["bound"] for labels, _ in m["nsbox_http_connections_cut_total"]} == {
            "per_address", "full", "evicted", "header_timeout"}
        # nsboxd's part, as the token's owner sees it: A's sandbox, not B's.
        assert [labels["sandbox_id"] for labels, _ in m["nsbox_sandbox_disk_limit_bytes"]] == [a]
        assert b not in text and "nsbox_requests_total" not in m
        # Without a token: refused like any other path.
        assert front.request("GET", "/metrics", token=None)[0] == 401
        for sid, token in ((a, TOKEN_A), (b, TOKEN_B)):
            front.rpc("sandbox.remove", sandbox_id=sid, force=True, token=token)
    finally:
        assert front.stop() == 0
