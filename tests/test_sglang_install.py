"""sglang_install owns the installs: real wheels into real virtualenvs on this machine, through Ansible."""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import REPO, sglang_wheel, tree_digest, wheel_cache

ROLE = REPO / "roles" / "sglang"


# Without the bytecode of SGLang's 2000 to 4700 files: compiling it (about 8 CPU-s an install of
# 0.5.12) is the installer's work, not what these tests are about. pip and uv both read pip's
# --no-compile, and uv takes the last of its flags (after the role's --compile-bytecode), so the
# role's argv is unchanged: test_sglang_venvs checks it, and Molecule and the fleet install with bytecode.
NO_BYTECODE = "--no-compile"


def request(version: str, installer: str = "uv") -> dict:
    return {"source": "pypi", "version": version, "git": "", "torch": "", "flashinfer": "",
            "heavy_dependencies": False,
            "indexes": {"nightly": "", "torch": "", "flashinfer": "", "flashinfer_nightly": ""},
            "extra_args": f"--no-index --find-links {wheel_cache()} {NO_BYTECODE}",
            "python": "/usr/bin/python3", "installer": installer}


def start_install(root: Path, check: bool = False, **args) -> subprocess.Popen:
    """One ad-hoc call of the module, as a task makes it, started."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LIBRARY=str(ROLE / "library"),
               ANSIBLE_MODULE_UTILS=str(ROLE / "module_utils"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    argv = ["ansible", "localhost", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
            "-m", "sglang_install", "-a", json.dumps({"root": str(root), **args}), *(["--check"] if check else [])]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result_of(run: subprocess.Popen) -> dict:
    out, _ = run.communicate(timeout=300)
    return json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def install(root: Path, check: bool = False, **args) -> dict:
    """One ad-hoc call of the module, as a task makes it; returns its result."""
    return result_of(start_install(root, check, **args))


def test_install_noop_upgrade_rollback_failure_and_a_killed_install(tmp_path):
    sglang_wheel("0.5.12")
    sglang_wheel("0.5.23")
    root = tmp_path / "opt-sglang"

    first = install(root, request=request("0.5.12"))
    assert first["decision"] == "install" and first["changed"], first
    name = first["current"]
    assert first["current_manifest"]["resolved"]["sglang"] == "0.5.12"
    assert os.readlink(root / "current") == str(root / "venvs" / name)

    again = install(root, request=request("0.5.12"))
    assert again["decision"] == "none" and not again["changed"]

    # Check mode says what it would do and changes nothing.
    before = tree_digest(root / "venvs", root / "current")
    dry = install(root, check=True, request=request("0.5.23"))
    assert dry["decision"] == "install" and dry["changed"] and dry["current"] != name
    assert tree_digest(root / "venvs", root / "current") == before

    upgraded = install(root, request=request("0.5.23"))
    assert upgraded["current_manifest"]["resolved"]["sglang"] == "0.5.23"
    assert upgraded["current_manifest"]["previous"] == name
    assert upgraded["diff"]["before"] == f"current -> {name}\n"

    back = install(root, request=request("0.5.23"), rollback=True)
    assert back["decision"] == "rollback" and back["current"] == name

    # A release that cannot be had: the unfinished virtualenv goes, current stays.
    failed = install(root, request=request("0.0.1"))
    assert failed.get("failed"), failed
    assert f"current still points at {name}" in failed["msg"]
    assert os.readlink(root / "current") == str(root / "venvs" / name)
    assert not [p for p in (root / "venvs").iterdir() if not (p / "sglang-manifest.json").exists()]

    # A run killed mid-install leaves a virtualenv without its manifest: never used, removed.
    leftover = root / "venvs" / "pypi-0.5.24-deadbeef"
    (leftover / "bin").mkdir(parents=True)
    pruned = install(root, request=request("0.5.12"))
    assert str(leftover) in pruned["pruned"] and not leftover.exists()
    assert pruned["current"] == name


def test_pip_installer_makes_its_own_virtualenv(tmp_path):
    sglang_wheel("0.5.12")
    result = install(tmp_path / "root", request=request("0.5.12", installer="pip"))
    assert result["changed"] and result["current_manifest"]["installer"] == "pip", result
    venv = tmp_path / "root" / "venvs" / result["current"]
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
                              "print(m.version('sglang'))"], capture_output=True, text=True).stdout.strip()
    assert version == "0.5.12"


class GatedWheels(http.server.SimpleHTTPRequestHandler):
    """The wheel cache as a find-links page; the gated wheel is held back until the gate opens."""

    gated = ""
    gate = threading.Event()
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        if self.gated and self.gated in self.path:
            self.asked.append(self.path)
            self.gate.wait(60)
        super().do_GET()

    def log_message(self, *_) -> None:
        pass


def holders(path: Path) -> set[int]:
    """The processes that have path open."""
    found = set()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(path):
                found.add(int(fd.parent.parent.name))
        except OSError:
            pass
    return found


def test_a_second_run_waits_for_a_killed_runs_installer_and_decides_from_what_it_left(tmp_path):
    """A run whose controller was killed mid-install leaves its installer running on the host. The
    next run must not take its unfinished virtualenv for a dead one (and remove it under the installer,
    which on failure removes the same path again): it waits for it, then finds the request installed."""
    sglang_wheel("0.5.12")
    sglang_wheel("0.5.23")
    root = tmp_path / "opt-sglang"
    handler = functools.partial(GatedWheels, directory=str(wheel_cache()))
    GatedWheels.gated, GatedWheels.asked = "sglang-0.5.23-", []
    GatedWheels.gate.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/"
        served = dict(request("0.5.12"), extra_args=f"--no-index --find-links {index} {NO_BYTECODE}")
        assert install(root, request=served)["decision"] == "install"
        wanted = dict(served, version="0.5.23")
        first = start_install(root, request=wanted)           # the killed run's installer, still going
        deadline = time.monotonic() + 120
        while not GatedWheels.asked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert GatedWheels.asked, "the first install never asked for its wheel"
        unfinished = [p for p in (root / "venvs").iterdir() if not (p / "sglang-manifest.json").exists()]
        assert len(unfinished) == 1
        second = start_install(root, request=wanted)          # the re-run
        # Until the second run waits on the lock, or (without one) asks for the wheel itself.
        while (len(holders(root / ".install.lock")) < 2 and len(GatedWheels.asked) < 2
               and second.poll() is None and time.monotonic() < deadline):
            time.sleep(0.05)
        GatedWheels.gate.set()
        one, two = result_of(first), result_of(second)
    finally:
        GatedWheels.gate.set()
        server.shutdown()
    assert one["decision"] == "install" and not one.get("failed"), one
    assert two["decision"] == "none" and not two.get("failed") and not two["changed"], two
    assert len(GatedWheels.asked) == 1
    assert two["current"] == one["current"] == unfinished[0].name
    assert (unfinished[0] / "sglang-manifest.json").is_file()


def test_a_lock_held_too_long_fails_naming_its_holder_and_changes_nothing(tmp_path):
    sglang_wheel("0.5.12")
    root = tmp_path / "opt-sglang"
    assert install(root, request=request("0.5.12"))["decision"] == "install"
    lock = root / ".install.lock"
    with lock.open("r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.seek(0)
        held.truncate()
        held.write("pid 4242 since 2026-12-01T00:00:00Z\n")
        held.flush()
        before = tree_digest(root / "venvs", root / "current")
        refused = install(root, request=request("0.5.23"), lock_timeout=1)
        assert tree_digest(root / "venvs", root / "current") == before
    assert refused.get("failed"), refused
    assert f"Another install holds {lock} (pid 4242 since 2026-12-01T00:00:00Z) after 1 s" in refused["msg"]
    assert "Nothing was changed" in refused["msg"]
