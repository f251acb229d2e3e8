"""Ask an OpenAI-compatible server the prompt set: greedy, in parallel, bounded in time.

The key travels as an ``Authorization: Bearer`` header and is never part of a message. A server
that does not answer ``/v1/models`` within a few seconds fails at once, naming the URL.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

PROBE_SECONDS = 5.0


class ServerDown(Exception):
    """Nothing usable answers at the URL."""


def check_url(url: str) -> str:
    """The base URL, without a trailing slash; http or https with a host, nothing else."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"sglang_answers_url must be http(s)://HOST[:PORT][/PATH] of the server, got {url!r}")
    if any(ord(ch) < 32 or ch.isspace() for ch in url):
        raise ValueError("sglang_answers_url holds white space or a control character")
    return url.rstrip("/")


def _request(url: str, api_key: str, body: dict | None, timeout: float) -> dict:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) only, checked)
        return json.loads(response.read().decode("utf-8"))


def _reason(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        hint = " (the API key is wrong or missing: -e sglang_server_api_key=...)" if error.code == 401 else ""
        return f"HTTP {error.code}{hint}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return f"{type(error).__name__}: {error}"


def served_model(base: str, api_key: str) -> str:
    """The model id the server serves (its first in /v1/models); ServerDown when it does not answer."""
    try:
        listing = _request(f"{base}/v1/models", api_key, None, PROBE_SECONDS)
        return str(listing["data"][0]["id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as error:
        raise ServerDown(f"nothing usable answers at {base}/v1/models within {PROBE_SECONDS:.0f} s: "
                         f"{_reason(error)}. Is the server up at that URL?") from None


def _ask(base: str, api_key: str, model: str, prompt: dict, deadline: float) -> dict:
    timeout = deadline - time.monotonic()
    if timeout <= 0:
        return {"error": "not asked: the check's time ran out"}
    body = {"model": model, "prompt": prompt["prompt"], "max_tokens": prompt["max_tokens"],
            "temperature": 0, "top_p": 1, "n": 1, "stream": False}
    if prompt["kind"] != "long":
        body["stop"] = ["\n\n"] if prompt["kind"] != "code" else ["```"]
    try:
        reply = _request(f"{base}/v1/completions", api_key, body, timeout)
        return {"text": str(reply["choices"][0]["text"])}
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as error:
        return {"error": _reason(error)}


def ask_all(base: str, api_key: str, model: str, prompts: list[dict], concurrency: int,
            deadline_seconds: float) -> tuple[dict[str, dict], float]:
    """Every prompt's answer (or error) and the seconds it took; none outlives the deadline."""
    started = time.monotonic()
    deadline = started + deadline_seconds
    answers: dict[str, dict] = {}
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        pending = {pool.submit(_ask, base, api_key, model, p, deadline): p["id"] for p in prompts}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _ = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for future in done:
                answers[pending.pop(future)] = future.result()
        for pid in pending.values():
            answers[pid] = {"error": f"no answer within the check's {deadline_seconds:.0f} s"}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return answers, time.monotonic() - started
