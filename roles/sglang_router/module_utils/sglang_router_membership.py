"""One replica's membership in the smg gateway's worker set: read, changed and waited for in-process.

smg 1.13.0's routes: GET /workers ({"workers": [{"id", "url", "is_healthy", "status"?}]}), POST
/workers {"url"} and DELETE /workers/{id}. A removed worker is drained for 5 s (listed with
status "draining") and then removed by URL: a second DELETE meanwhile drops it at once, yet the
first removal still fires and takes out a worker put back in between. So either way starts once
no removal of this URL is pending. The waits poll the gateway from here, so one module run does
what four tasks with `until` did, one module run per poll.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

# (method, path, JSON body or None) -> (HTTP status, decoded JSON or None); status 0: no answer,
# the payload then the reason in words when known.
Http = Callable[[str, str, "dict | None"], "tuple[int, object]"]

POLL_SECONDS = 0.5


class MembershipError(Exception):
    """What went wrong, in words for the operator."""


def base_url_problem(url: str) -> str | None:
    """Why ``url`` is not a base URL http(s)://HOST:PORT (the gateway's or a replica's), or None."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "it holds whitespace or a control character"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"it does not parse ({error})"
    if parts.scheme not in ("http", "https"):
        return "it does not start with http:// or https://"
    if not parts.hostname:
        return "it names no host"
    if parts.username is not None or parts.password is not None:
        return "it holds a user or password (the API key goes in api_key)"
    if port is None:
        return "it names no port"
    if port == 0:
        return "its port is 0"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "it has a path, query or fragment after the port"
    return None


def http_client(gateway: str, api_key: str, timeout: float = 10.0) -> Http:
    """Calls to the gateway at `gateway` (http://host:port), with the key as a bearer token when set."""

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        request = urllib.request.Request(gateway.rstrip("/") + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        except urllib.error.URLError as error:
            return 0, str(error.reason)
        except OSError as error:
            return 0, str(error)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    return call


def entries(workers: list[dict], url: str) -> list[dict]:
    return [worker for worker in workers if worker.get("url") == url]


def draining(workers: list[dict], url: str) -> bool:
    return any(worker.get("status") == "draining" for worker in entries(workers, url))


def settled(workers: list[dict], url: str, state: str) -> bool:
    """present: listed once and healthy; absent: not listed at all."""
    mine = entries(workers, url)
    if state == "present":
        return len([worker for worker in mine if worker.get("is_healthy")]) == 1
    return not mine


def list_workers(http: Http) -> tuple[list[dict] | None, str]:
    """The gateway's workers, or None and what it gave instead when it does not answer GET /workers with its list."""
    status, payload = http("GET", "/workers", None)
    if status == 0:
        return None, f"no answer ({payload})" if isinstance(payload, str) and payload else "no answer"
    if status != 200:
        return None, f"HTTP {status}" + (" (a wrong or missing API key?)" if status in (401, 403) else "")
    if not isinstance(payload, dict) or not isinstance(payload.get("workers", []), list):
        return None, "an answer without a worker list"
    return [worker for worker in payload.get("workers") or [] if isinstance(worker, dict)], ""


def wait_for(http: Http, done: Callable[[list[dict]], bool], deadline: float, what: str,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> list[dict]:
    """Poll GET /workers until done(workers); fail naming `what` and the last listing at the deadline."""
    while True:
        workers, why = list_workers(http)
        if workers is not None and done(workers):
            return workers
        if clock() >= deadline:
            if workers is None:
                # Nothing about the worker set is known: say so, not what it was waited for.
                raise MembershipError(f"The gateway did not answer GET /workers with its worker list in time "
                                      f"(sglang_router_ready_timeout); it last gave {why}. Check that smg runs "
                                      "and answers at the gateway's address, with the API key it was given.")
            raise MembershipError(f"The gateway did not {what} in time (sglang_router_ready_timeout); "
                                  f"GET /workers last gave: {json.dumps(workers)}")
        sleep(POLL_SECONDS)


def converge(http: Http, url: str, state: str, timeout: float, check: bool,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict:
    """Make `url` a member of the gateway (present) or not (absent), and wait until the gateway says so.

    Returns changed, before and after ("listed" or "absent"), and the last listing. In check mode
    it reads (and waits out a pending removal, as the real run does) but sends nothing.
    """
    deadline = clock() + timeout
    workers = wait_for(http, lambda listed: not draining(listed, url), deadline,
                       f"finish removing {url} (a removal still drains there)", sleep, clock)
    mine = entries(workers, url)
    before = "listed" if mine else "absent"
    changed = (state == "absent") == bool(mine)
    if changed and not check:
        if state == "absent":
            for worker in mine:
                status, _ = http("DELETE", f"/workers/{worker.get('id')}", None)
                if status not in (200, 202, 404):
                    raise MembershipError(f"DELETE /workers/{worker.get('id')} ({url}) answered {status or 'nothing'}; "
                                          "expected 200, 202 or 404")
        else:
            status, _ = http("POST", "/workers", {"url": url})
            if status not in (200, 201, 202):
                raise MembershipError(f"POST /workers {{url: {url}}} answered {status or 'nothing'}; "
                                      "expected 200, 201 or 202")
    if not check:
        what = f"list {url} healthy" if state == "present" else f"stop listing {url}"
        workers = wait_for(http, lambda listed: settled(listed, url, state), deadline, what, sleep, clock)
    return {"changed": changed, "before": before, "after": "listed" if state == "present" else "absent",
            "workers": workers}
