"""The sglang_router_worker module's logic against a stand-in of smg 1.13.0's /workers routes.

The stand-in (labelled as one: the real smg runs in tests/test_fleet_roll.py) keeps a worker set
with smg's behaviour as read from the running smg: a DELETE lists the worker as "draining" for a
while before it goes, a POSTed worker is listed unhealthy until its first health check. The clock
is the test's, so the waits cost no time.
"""

from __future__ import annotations

import re
import socket

import pytest
from conftest import run_module

from ansible.module_utils.sglang_router_membership import MembershipError, base_url_problem, converge, http_client

URL = "http://169.254.77.11:30000"
OTHER = "http://169.254.77.12:30000"


class StandinSmg:
    """smg's worker set, one poll (GET) at a time."""

    def __init__(self, workers: list[dict], drain_polls: int = 3, health_polls: int = 2,
                 answers: dict[str, int] | None = None) -> None:
        self.workers = workers
        self.drain_polls, self.health_polls = drain_polls, health_polls
        self.answers = answers or {}
        self.requests: list[str] = []
        self.draining: dict[str, int] = {}   # id -> polls left
        self.unhealthy: dict[str, int] = {}
        self.clock = 0.0

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def now(self) -> float:
        return self.clock

    def __call__(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        self.requests.append(f"{method} {path}")
        if method in self.answers:
            return self.answers[method], None
        if method == "GET":
            for worker_id in list(self.draining):
                self.draining[worker_id] -= 1
                if self.draining[worker_id] < 0:
                    del self.draining[worker_id]
                    self.workers = [w for w in self.workers if w["id"] != worker_id]
            for worker_id in list(self.unhealthy):
                self.unhealthy[worker_id] -= 1
                if self.unhealthy[worker_id] < 0:
                    del self.unhealthy[worker_id]
                    next(w for w in self.workers if w["id"] == worker_id)["is_healthy"] = True
            return 200, {"workers": [dict(w) for w in self.workers]}
        if method == "DELETE":
            worker_id = path.rsplit("/", 1)[1]
            found = [w for w in self.workers if w["id"] == worker_id]
            if not found:
                return 404, None
            found[0]["status"] = "draining"
            self.draining[worker_id] = self.drain_polls
            return 202, None
        worker_id = f"w{len(self.requests)}"
        self.workers.append({"id": worker_id, "url": body["url"], "is_healthy": False})
        self.unhealthy[worker_id] = self.health_polls
        return 202, None

    def run(self, state: str, check: bool = False, timeout: float = 60) -> dict:
        return converge(self, URL, state, timeout, check, sleep=self.sleep, clock=self.now)


def healthy(url: str, worker_id: str) -> dict:
    return {"id": worker_id, "url": url, "is_healthy": True}


def writes(smg: StandinSmg) -> list[str]:
    return [request for request in smg.requests if not request.startswith("GET")]


def test_take_out_sends_one_delete_and_waits_out_the_drain():
    smg = StandinSmg([healthy(URL, "a"), healthy(OTHER, "b")])
    result = smg.run("absent")
    assert (result["changed"], result["before"], result["after"]) == (True, "listed", "absent")
    assert writes(smg) == ["DELETE /workers/a"]
    assert [w["url"] for w in result["workers"]] == [OTHER]
    assert smg.requests.count("GET /workers") >= 4   # polled through the drain, in one run


def test_put_back_posts_once_and_waits_until_healthy():
    smg = StandinSmg([healthy(OTHER, "b")])
    result = smg.run("present")
    assert (result["changed"], result["before"], result["after"]) == (True, "absent", "listed")
    assert writes(smg) == ["POST /workers"]
    assert [w["is_healthy"] for w in result["workers"] if w["url"] == URL] == [True]


@pytest.mark.parametrize(("state", "workers"), [("present", [healthy(URL, "a")]), ("absent", [healthy(OTHER, "b")])])
def test_nothing_to_do_sends_nothing(state, workers):
    smg = StandinSmg(workers)
    result = smg.run(state)
    assert result["changed"] is False and writes(smg) == [] and smg.requests == ["GET /workers"] * 2


def test_a_removal_left_draining_is_waited_for_and_never_deleted_again():
    """A controller killed right after its DELETE: the next take-out sends no second DELETE."""
    smg = StandinSmg([dict(healthy(URL, "a"), status="draining"), healthy(OTHER, "b")])
    smg.draining["a"] = 3
    result = smg.run("absent")
    assert writes(smg) == [] and result["changed"] is False
    assert [w["url"] for w in result["workers"]] == [OTHER]


def test_a_put_back_waits_for_a_pending_removal_first():
    """Put back while the old entry drains: the POST comes after it is gone, so the drain cannot
    take out the entry put back."""
    smg = StandinSmg([dict(healthy(URL, "a"), status="draining")])
    smg.draining["a"] = 2
    result = smg.run("present")
    assert writes(smg) == ["POST /workers"] and result["changed"] is True
    assert smg.requests.index("POST /workers") == 3   # after the third GET, the first without the old entry
    assert [w for w in result["workers"] if w["url"] == URL][0]["is_healthy"] is True


@pytest.mark.parametrize(("state", "workers"), [("present", []), ("absent", [healthy(URL, "a")])])
def test_check_mode_reads_and_sends_nothing(state, workers):
    smg = StandinSmg(workers)
    result = smg.run(state, check=True)
    assert result["changed"] is True and writes(smg) == [] and smg.requests == ["GET /workers"]


def test_a_replica_that_never_turns_healthy_fails_in_time_naming_it_and_the_listing():
    smg = StandinSmg([], health_polls=10_000)
    with pytest.raises(MembershipError) as raised:
        smg.run("present", timeout=5)
    assert f"did not list {URL} healthy in time (sglang_router_ready_timeout)" in str(raised.value)
    assert '"is_healthy": false' in str(raised.value)
    assert 5 <= smg.clock <= 6


@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_gateway_that_does_not_answer_is_named_not_a_drain(state):
    smg = StandinSmg([], answers={"GET": 0})
    with pytest.raises(MembershipError) as raised:
        smg.run(state, timeout=2)
    message = str(raised.value)
    assert "did not answer GET /workers with its worker list in time" in message and "no answer" in message
    assert "drains" not in message and "finish removing" not in message
    assert writes(smg) == []


@pytest.mark.parametrize(("status", "needle"), [(401, "HTTP 401 (a wrong or missing API key?)"), (503, "HTTP 503")])
def test_a_gateway_that_refuses_the_listing_is_named_with_its_status(status, needle):
    smg = StandinSmg([], answers={"GET": status})
    with pytest.raises(MembershipError, match=f"it last gave {re.escape(needle)}"):
        smg.run("present", timeout=1)
    assert writes(smg) == []


def test_no_listener_is_named_with_the_reason_from_the_socket():
    """A real loopback port that nobody listens on: the reason the connection failed reaches the message."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    status, why = http_client(f"http://127.0.0.1:{port}", "", timeout=2)("GET", "/workers", None)
    assert status == 0 and "refused" in str(why).lower()


@pytest.mark.parametrize(("url", "needle"), [
    ("127.0.0.1:30000", "http:// or https://"), ("http://127.0.0.1", "no port"), ("http://:30000", "no host"),
    ("ftp://127.0.0.1:30000", "does not start with http://"), ("http://127.0.0.1:30000/v1", "path"),
    ("http://127.0.0.1:99999", "does not parse"), ("http://127.0.0.1:0", "port is 0"),
    ("http://user:key@127.0.0.1:30000", "user or password"), ("http://127.0.0.1:30000\n", "control"),
    ("http://127.0.0.1:30000?x=1", "query"), (" http://127.0.0.1:30000", "whitespace")])
def test_a_url_that_is_not_a_base_url_is_named(url, needle):
    url = url.replace("\\n", "\n")
    assert needle in (base_url_problem(url) or "")


@pytest.mark.parametrize("url", ["http://127.0.0.1:30000", "https://gw.example:443/", "http://[::1]:30000",
                                 "http://169.254.77.11:30000"])
def test_a_base_url_passes(url):
    assert base_url_problem(url) is None


def test_the_module_refuses_a_gateway_without_a_scheme_before_sending_anything():
    """`ansible localhost -m sglang_router_worker` as the role calls it, with the gateway's address mistyped."""
    args = {"gateway": "127.0.0.1:30000", "url": URL, "state": "absent", "timeout": 1}
    result, rc = run_module("sglang_router_worker", args, ("sglang_router",))
    assert result["failed"] is True and rc != 0
    assert result["msg"] == ("gateway='127.0.0.1:30000' is not a base URL: expected http://HOST:PORT such as "
                             "http://127.0.0.1:30000, but it does not start with http:// or https://. "
                             "Nothing was sent to the gateway.")


def test_a_refused_delete_is_named_with_what_was_expected():
    smg = StandinSmg([healthy(URL, "a")], answers={"DELETE": 500})
    with pytest.raises(MembershipError, match=r"DELETE /workers/a \(http://169.254.77.11:30000\) answered 500; "
                                              r"expected 200, 202 or 404"):
        smg.run("absent")
