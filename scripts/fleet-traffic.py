#!/usr/bin/env python3
"""A bounded request loop through the fleet's gateway while a roll runs (scripts/dev.sh fleet-roll).

    fleet-traffic.py http://127.0.0.1:30000

Sends POST /v1/completions and /v1/chat/completions, one at a time each, until
SIGTERM; then prints how many were served and failed, and exits 1 if any failed.
The replicas are stand-ins: their completions say so.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import urllib.request

BODIES = {
    "/v1/completions": {"model": "glm-5", "prompt": "hi", "max_tokens": 4},
    "/v1/chat/completions": {"model": "glm-5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
}


def loop(base: str, route: str, stop: threading.Event, counts: dict[str, int], errors: list[str]) -> None:
    data = json.dumps(BODIES[route]).encode()
    while not stop.wait(0.05):
        request = urllib.request.Request(base + route, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                json.load(answer)["choices"][0]
            counts["served"] += 1
        except Exception as exc:  # noqa: BLE001 - every failure counts
            counts["failed"] += 1
            errors.append(f"{route}: {exc}")


def main(base: str) -> int:
    stop = threading.Event()
    counts = {"served": 0, "failed": 0}
    errors: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threads = [threading.Thread(target=loop, args=(base.rstrip("/"), route, stop, counts, errors))
               for route in BODIES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"traffic through {base}: {counts['served']} requests served, {counts['failed']} failed")
    for error in errors[:5]:
        print(f"  {error}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:30000"))
