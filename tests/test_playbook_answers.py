"""playbooks/answers.yml against the stand-in server on loopback (molecule/sglang_server/standin).

The stand-in runs from a real SGLang 0.5.18 tree (its gate lists flashinfer_cutlass, so autotune
runs and picks the tactics STANDIN_ETC/autotune.json names); it answers the shipped prompts with
their expected answers and fluent long text whose tail differs between calls, as a batching
engine's does.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, run_playbook, unpack_sglang

STANDIN = REPO / "molecule/sglang_server/standin"
PROMPTS = REPO / "roles/sglang_answers/files/prompts.json"
KEY = "sk-answers-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, root: Path, tactic: dict, api_key: str = "") -> None:
        self.root = root
        etc = root / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROMPTS, etc / "prompts.json")
        (etc / "autotune.json").write_text(json.dumps(tactic), encoding="utf-8")
        package = root / "sglang"
        if not package.is_dir():
            unpack_sglang("0.5.18", root)
        shutil.copy(STANDIN / "launch_server.py", package / "launch_server.py")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, str(package / "launch_server.py"), "--host", "127.0.0.1",
                "--port", str(self.port), "--moe-runner-backend", "flashinfer_cutlass"]
        if api_key:
            argv += ["--api-key", api_key]
        env = {**os.environ, "STANDIN_ETC": str(etc), "SGLANG_CACHE_DIR": str(root / "cache"),
               "PYTHONPATH": str(STANDIN), "STANDIN_REQUEST_SECONDS": "0.01"}
        self.log = (root / "server.log").open("w")
        self.process = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError((root / "server.log").read_text())

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


@pytest.fixture
def server(tmp_path):
    started: list[Server] = []

    def start(tactic: dict | None = None, api_key: str = "") -> Server:
        made = Server(tmp_path / f"server-{len(started)}", tactic or {"tactic": "good"}, api_key)
        started.append(made)
        return made

    yield start
    for made in started:
        made.stop()


def flat(text: str) -> str:
    """Output with the YAML callback's line folding undone."""
    return " ".join(text.split())


def answers(tmp_path: Path, url: str, *extra: str, api_key: str = KEY):
    (tmp_path / "runner").mkdir(exist_ok=True)
    return run_playbook(tmp_path / "runner", "answers.yml",
                        ["-e", f"sglang_answers_url={url}", "-e", f"sglang_server_api_key={api_key}", *extra])


def test_a_healthy_server_passes_records_a_reference_and_passes_against_it_again(server, tmp_path):
    healthy = server(api_key=KEY)
    reference = tmp_path / "refs" / "glm-5.json"
    first = answers(tmp_path, healthy.url, "-e", f"sglang_answers_record={reference}")
    assert first.rc == 0, first.stdout
    assert "All 96 answers are sound, no reference to compare with." in flat(first.stdout)
    recorded = json.loads(reference.read_text())
    assert len(recorded["answers"]) == 96 and recorded["model"] == "stand-in"
    assert recorded["concurrency"] == 32   # compared at that concurrency, whatever the later check asks
    assert (reference.parent.stat().st_mode & 0o777) == 0o755  # made by the role
    # Recorded into a directory that exists (~/ref.json: a home): its mode and owner stay.
    home = tmp_path / "alice"
    home.mkdir()
    os.chmod(home, 0o700)
    os.chown(home, 1234, 1234)
    at_four = answers(tmp_path, healthy.url, "-e", f"sglang_answers_reference={reference}",
                      "-e", "sglang_answers_concurrency=4", "-e", f"sglang_answers_record={home / 'ref.json'}", "-v")
    assert at_four.rc == 0 and "concurrency: 32" in at_four.stdout
    assert (home / "ref.json").is_file()
    assert (home.stat().st_mode & 0o777, home.stat().st_uid, home.stat().st_gid) == (0o700, 1234, 1234)
    # The tails of the long answers differ from call to call, and a few leave early (near-ties):
    # the second check compares with the first and must still pass.
    for _ in range(2):
        again = answers(tmp_path, healthy.url, "-e", f"sglang_answers_reference={reference}")
        assert again.rc == 0, again.stdout
        assert "drifted from the reference (at most 20% may)" in flat(again.stdout)
    assert KEY not in first.stdout + again.stdout


def test_a_corrupting_tactic_fails_naming_the_class_count_and_prompts(server, tmp_path):
    corrupt = server({"tactic": "corrupt", "rate": 0.1}, api_key=KEY)
    before = sorted(tmp_path.iterdir())
    run = answers(tmp_path, corrupt.url, "-e", f"sglang_answers_record={tmp_path / 'never.json'}")
    assert run.rc != 0
    message = run.failures[-1]
    assert "answers failed: degenerate_run" in message and "E.g. " in message
    assert message.count("(degenerate_run): '!!!!") == 3
    assert not (tmp_path / "never.json").exists()
    assert sorted(p for p in tmp_path.iterdir() if p.name != "runner") == [p for p in before if p.name != "runner"]
    assert KEY not in run.stdout


def test_a_five_percent_corruption_is_caught(server, tmp_path):
    corrupt = server({"tactic": "corrupt", "rate": 0.05})
    run = answers(tmp_path, corrupt.url, api_key="")
    assert run.rc != 0
    assert "degenerate_run" in run.failures[-1]


def test_fluent_but_different_answers_fail_against_the_reference(server, tmp_path):
    reference = tmp_path / "ref.json"
    good = server()
    assert answers(tmp_path, good.url, "-e", f"sglang_answers_record={reference}", api_key="").rc == 0
    drifting = server({"tactic": "drift"})
    run = answers(tmp_path, drifting.url, "-e", f"sglang_answers_reference={reference}", api_key="")
    assert run.rc != 0
    assert "72 of 96 answers failed: drift 72." in run.failures[-1]
    # Without the reference the same server passes: only the reference shows fluent but different answers.
    assert answers(tmp_path, drifting.url, api_key="").rc == 0


def test_a_server_that_is_down_fails_fast_naming_the_url(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    run = answers(tmp_path, url)
    assert run.rc != 0
    assert f"nothing usable answers at {url}/v1/models within 5 s" in run.failures[-1]
    assert time.monotonic() - started < 60
    assert KEY not in run.stdout


def test_a_wrong_key_is_named_as_such_and_never_printed(server, tmp_path):
    keyed = server(api_key=KEY)
    run = answers(tmp_path, keyed.url, api_key="sk-wrong-key-42")
    assert run.rc != 0
    assert "HTTP 401 (the API key is wrong or missing" in run.failures[-1]
    assert "sk-wrong-key-42" not in run.stdout


def test_a_missing_reference_is_refused_before_asking(tmp_path):
    run = answers(tmp_path, "http://127.0.0.1:9", "-e", f"sglang_answers_reference={tmp_path / 'nope.json'}")
    assert run.rc != 0
    assert "which is missing on the controller" in run.failures[-1]
    assert "sglang_answers_record=" in run.failures[-1]
