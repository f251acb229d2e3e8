"""Kill the controller at many points of a patch and a rollback, then re-run.

`kill -9` of ansible-playbook (the process group leader: the controller only,
as an operator's Ctrl-\\ or an OOM kill would) while its worker may be in the
middle of a task. Ansible's worker finishes the task in flight, so the edit can
land with the log never written. After every kill the gate file must be either
the bytes pip's RECORD names or the patched bytes, and a re-run with the same
`autotune` must converge. Some rounds start from the states the issue found
fatal: no log of ours (deleted), a corrupt log, a file patched by hand with sed.

Bounded for CI: KILLS kills (default 20) at delays spread from shortly before
the edit lands to shortly after the log is written, measured on this machine first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import EXPECTED_STATE, REPO, unpack_sglang

KILLS = int(os.environ.get("AUTOTUNE_KILLS", "20"))
CONVERGE_EVERY = 5
VERSION = "0.5.12"
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def start(package: Path, state: Path, autotune: bool) -> subprocess.Popen:
    cmd = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(REPO / "playbooks" / "autotune.yml"),
           "-e", f"sglang_package_dir={package}", "-e", f"sglang_autotune_state_dir={state}",
           "-e", f"autotune={str(autotune).lower()}", "-e", f"ansible_python_interpreter={sys.executable}"]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    # Its own session: the controller leads a process group that holds its workers.
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def group_alive(pgid: int) -> bool:
    """Any live (not zombie) process left in the group: a worker finishing its task."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def kill_controller(run: subprocess.Popen, delay: float) -> bool:
    """kill -9 the controller after `delay` s; wait for its workers. False if it had finished."""
    try:
        run.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        os.kill(run.pid, signal.SIGKILL)  # the leader only, never the group
        run.wait()
    deadline = time.monotonic() + 30
    while group_alive(run.pid):
        assert time.monotonic() < deadline, "a worker outlived its controller by 30 s"
        time.sleep(0.02)
    return True


def complete(package: Path, state: Path, autotune: bool) -> None:
    run = start(package, state, autotune)
    assert run.wait(timeout=120) == 0


def test_kill_the_controller_anywhere_then_rerun(tmp_path):
    package = unpack_sglang(VERSION, tmp_path / "tree")
    gate = package / EXPECTED_STATE[VERSION][1]
    state = tmp_path / "state"
    shipped = gate.read_bytes()

    # Calibrate on this machine: when the edit lands, when the log is written.
    began = time.monotonic()
    run = start(package, state, True)
    edit_at = log_at = None
    while run.poll() is None:
        if edit_at is None and gate.read_bytes() != shipped:
            edit_at = time.monotonic() - began
        if log_at is None and list(state.glob("*.json")):
            log_at = time.monotonic() - began
        time.sleep(0.01)
    full = time.monotonic() - began
    assert run.returncode == 0 and edit_at is not None and log_at is not None
    patched = gate.read_bytes()
    assert patched != shipped
    want = {True: patched, False: shipped}

    first, last = 0.7 * edit_at, min(full, log_at + 0.3)
    tally = {"killed": 0, "finished": 0, "left_patched": 0, "left_shipped": 0, "mid_run_changed": 0}
    started = time.monotonic()
    for i in range(KILLS):
        # Start from the states the issue found fatal, now and then.
        if i % 6 == 1:
            shutil.rmtree(state, ignore_errors=True)          # no log of ours at all
        elif i % 6 == 3 and state.exists():
            for log in state.glob("*.json"):
                log.write_text("[]\n")                        # a log that says nothing
        elif i % 6 == 5 and gate.read_bytes() == shipped:
            gate.write_bytes(shipped.replace(b'# "flashinfer_cutlass",', b'"flashinfer_cutlass",', 1))  # sed
        before = gate.read_bytes()
        autotune = before == shipped  # give every killed run an edit to make
        delay = first + (last - first) * ((i * 0.6180339887) % 1.0)
        if kill_controller(start(package, state, autotune), delay):
            tally["killed"] += 1
        else:
            tally["finished"] += 1
        after = gate.read_bytes()
        assert after in (shipped, patched), f"kill {i} at {delay:.2f}s left other bytes"
        tally["left_patched" if after == patched else "left_shipped"] += 1
        tally["mid_run_changed"] += after != before
        if i % CONVERGE_EVERY == CONVERGE_EVERY - 1:
            complete(package, state, autotune)
            assert gate.read_bytes() == want[autotune], f"re-run after kill {i} did not converge"

    for autotune in (True, False):
        complete(package, state, autotune)
        assert gate.read_bytes() == want[autotune]
    assert sha(gate.read_bytes()) == sha(shipped)
    elapsed = time.monotonic() - started
    print(f"\nkill test: {KILLS} runs, {tally}, calibration: edit at {edit_at:.2f}s, log at "
          f"{log_at:.2f}s, end at {full:.2f}s; {elapsed:.1f}s")
    # Most runs must really be killed (a loaded machine may let a few finish first).
    assert tally["killed"] >= KILLS // 2
