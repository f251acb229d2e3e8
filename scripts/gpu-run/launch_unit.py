"""Start the server exactly as a unit file's ExecStart= says, and watch its log (GPU run only).

    python launch_unit.py UNIT LOG [--ready URL] [--stop-on REGEX]... [--timeout S] [--keep]

Reads ExecStart= from the unit the sglang_server role renders (playbooks/validate.yml
-e sglang_server_unit_out=UNIT), undoes systemd's quoting (double quotes with C escapes,
%% and $$), and runs that argv in a new session with stdout and stderr in LOG, which stands
in for the journal. It waits until URL answers 200 (the role's readiness path), or a line of
the log matches a --stop-on pattern, or the server exits, or S seconds pass, and prints one
JSON line saying which. The server is stopped afterwards unless --keep (then its pid is in
LOG.pid). No systemd on the lent GPU machine: this is the one thing standing in for it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def exec_start(unit_text: str) -> str:
    joined = re.sub(r"\\\n\s*", " ", unit_text)
    for line in joined.splitlines():
        if line.startswith("ExecStart="):
            return line[len("ExecStart="):]
    raise SystemExit("no ExecStart= in the unit")


def split_words(value: str) -> list[str]:
    """systemd's word splitting for what exec_arg writes: quoted words and bare words."""
    words, i = [], 0
    while i < len(value):
        if value[i].isspace():
            i += 1
            continue
        word = []
        if value[i] == '"':
            i += 1
            while value[i] != '"':
                if value[i] == "\\":
                    i += 1
                word.append(value[i])
                i += 1
            i += 1
        else:
            while i < len(value) and not value[i].isspace():
                word.append(value[i])
                i += 1
        words.append("".join(word).replace("%%", "%").replace("$$", "$"))
    return words


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback)
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return -1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("unit")
    parser.add_argument("log")
    parser.add_argument("--ready", default="")
    parser.add_argument("--stop-on", action="append", default=[])
    parser.add_argument("--linger", type=float, default=3.0, help="seconds to keep logging after a stop pattern")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    argv = split_words(exec_start(Path(args.unit).read_text()))
    started = time.time()
    with open(args.log, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    Path(args.log + ".pid").write_text(f"{proc.pid}\n")
    patterns = [re.compile(p) for p in args.stop_on]
    result = {"argv": argv, "pid": proc.pid, "why": "timeout", "seconds": 0.0, "last_status": None}
    while time.time() - started < args.timeout:
        if proc.poll() is not None:
            result.update(why="exited", rc=proc.returncode)
            break
        text = Path(args.log).read_text(errors="replace")
        hit = next((p.pattern for p in patterns if p.search(text)), None)
        if hit:
            time.sleep(args.linger)
            result.update(why="pattern", pattern=hit)
            break
        if args.ready:
            result["last_status"] = status(args.ready)
            if result["last_status"] == 200:
                result["why"] = "ready"
                break
        time.sleep(1.0)
    result["seconds"] = round(time.time() - started, 1)
    if not args.keep and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for _ in range(30):  # the scheduler and detokenizer children hold the GPU until they go
            try:
                os.killpg(proc.pid, signal.SIGKILL if _ > 10 else 0)
            except ProcessLookupError:
                break
            time.sleep(1.0)
        result["stopped"] = True
    print(json.dumps(result))
    sys.exit(0)


if __name__ == "__main__":
    main()
