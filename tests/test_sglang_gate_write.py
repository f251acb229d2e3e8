"""sglang_gate_write: what the gate's edit and the log need, on real filesystem faults.

replace_problem is what the gate module asks in check mode and in a real run
alike; write_log and remove_log turn every failure into a warning.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, tree_digest
from fs_faults import chattr, full_disk, readonly_mount

import sglang_gate_write as write

TEXT = '{"file": "/x.py"}\n'


def test_a_plain_file_and_directory_can_be_replaced(tmp_path):
    (tmp_path / "f.py").write_text("x = 1\n")
    assert write.replace_problem(tmp_path / "f.py") is None
    assert write.replace_problem(tmp_path / "new.py") is None


@pytest.mark.parametrize("fault", ["readonly_mount", "immutable_file", "immutable_dir", "append_only_file",
                                   "append_only_dir"])
def test_what_stops_a_rename_is_named(tmp_path, fault):
    directory = tmp_path / "d"
    directory.mkdir()
    path = directory / "f.py"
    path.write_text("x = 1\n")
    target, flag = {"immutable_file": (path, "i"), "immutable_dir": (directory, "i"),
                    "append_only_file": (path, "a"), "append_only_dir": (directory, "a")}.get(fault, (None, ""))
    manager = readonly_mount(directory) if fault == "readonly_mount" else chattr(target, flag)
    with manager:
        problem = write.replace_problem(path)
        # The ground truth: the rename lineinfile would make fails here too.
        with pytest.raises(OSError):
            (directory / "tmp").write_text("x = 2\n")
            os.replace(directory / "tmp", path)
    expected = {"readonly_mount": f"{directory} is on a read-only mount; remount it read-write",
                "immutable_file": f"{path} is immutable (lsattr shows 'i'); clear it with chattr -i {path}",
                "immutable_dir": f"{directory} is immutable (lsattr shows 'i')",
                "append_only_file": f"{path} is append-only (lsattr shows 'a'); clear it with chattr -a",
                "append_only_dir": f"{directory} is append-only (lsattr shows 'a')"}[fault]
    assert problem is not None and expected in problem, problem


PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import sglang_gate_write as w
print(w.replace_problem(Path(sys.argv[2])))
"""


@pytest.mark.parametrize("case", ["dir_not_writable", "file_read_only"])
def test_a_user_who_may_not_write_is_told(tmp_path, case):
    """As uid 65534 (nobody): a root-owned directory, and a read-only file in its own directory."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another uid")
    # pytest's tmp_path sits under a 0700 directory that uid 65534 cannot enter.
    top = Path(tempfile.mkdtemp(dir="/tmp", prefix="gate-uid-"))
    try:
        top.chmod(0o755)
        directory = top / "d"
        directory.mkdir(mode=0o755)
        path = directory / "f.py"
        path.write_text("x = 1\n")
        if case == "file_read_only":
            os.chown(directory, 65534, 65534)
            path.chmod(0o444)
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                               "-c", PROBE, str(REPO / "roles/sglang_autotune/module_utils"), str(path)],
                              capture_output=True, text=True, check=True)
        assert write.replace_problem(path) is None  # root may
    finally:
        shutil.rmtree(top)
    expected = (f"{directory} is not writable by uid 65534 (mode 0755, owner uid 0); run as its owner"
                if case == "dir_not_writable" else
                f"{path} is read-only for uid 65534 (mode 0444, owner uid 0); run as its owner "
                f"(become: true) or make it writable (chmod u+w {path})")
    assert expected in proc.stdout, proc.stdout


def make_fault(tmp_path: Path, fault: str):
    """(state_dir, state_file, context manager) for a log that cannot be written."""
    import contextlib

    state = tmp_path / "state"
    log = state / "gate.json"
    if fault == "state_dir_is_a_file":
        state.write_text("not a directory\n")
        return state, log, contextlib.nullcontext(), "sglang_autotune_state_dir=" + str(state) + " is not a directory"
    if fault == "state_dir_under_a_file":
        (tmp_path / "file").write_text("")
        state = tmp_path / "file" / "state"
        return state, state / "gate.json", contextlib.nullcontext(), "lies under " + str(tmp_path / "file")
    state.mkdir()
    if fault == "log_is_a_directory":
        log.mkdir()
        return state, log, contextlib.nullcontext(), f"{log} is not a regular file; remove it"
    if fault == "readonly_mount":
        return state, log, readonly_mount(state), f"{state} is on a read-only mount"
    if fault == "immutable_dir":
        return state, log, chattr(state, "i"), f"{state} is immutable"
    if fault == "disk_full":
        return state, log, full_disk(state), "No space left on device"
    raise AssertionError(fault)


LOG_FAULTS = ["state_dir_is_a_file", "state_dir_under_a_file", "log_is_a_directory", "readonly_mount",
              "immutable_dir", "disk_full"]


@pytest.mark.parametrize("fault", LOG_FAULTS)
@pytest.mark.parametrize("check", [True, False])
def test_a_log_that_cannot_be_written_is_a_warning(tmp_path, fault, check):
    state, log, manager, needle = make_fault(tmp_path, fault)
    with manager:
        before = tree_digest(tmp_path)
        changed, warning = write.write_log(state, log, TEXT, check=check)
        after = tree_digest(tmp_path)
    assert after == before
    if fault == "disk_full" and check:
        # Only the write itself finds a full disk: check mode says it would write.
        assert (changed, warning) == (True, "")
        return
    assert not changed
    assert warning.startswith(f"The log {log} was not written: ") and needle in warning, warning
    assert "It is only a log (pip's RECORD decides), so the edit stands and later runs work." in warning


def test_the_warning_says_when_the_log_decides(tmp_path):
    state, log, _, _ = make_fault(tmp_path, "state_dir_is_a_file")
    assert "this log is what a rollback reads, so fix this before rolling back" in write.write_log(
        state, log, TEXT, decides=True)[1]


def test_log_is_written_atomically_and_only_when_it_differs(tmp_path):
    state, log = tmp_path / "a" / "state", tmp_path / "a" / "state" / "gate.json"
    assert write.write_log(state, log, TEXT, check=True) == (True, "") and not state.exists()
    assert write.write_log(state, log, TEXT) == (True, "")
    assert log.read_text() == TEXT and oct(log.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in state.iterdir()) == ["gate.json"]  # no temporary left
    assert write.write_log(state, log, TEXT) == (False, "")
    assert write.remove_log(log, check=True) == (True, "") and log.exists()
    assert write.remove_log(log) == (True, "") and not log.exists()
    assert write.remove_log(log) == (False, "")


@pytest.mark.parametrize("fault", ["log_is_a_directory", "readonly_mount", "immutable_dir"])
def test_a_log_that_cannot_be_removed_is_a_warning(tmp_path, fault):
    state = tmp_path / "state"
    state.mkdir()
    log = state / "gate.json"
    if fault == "log_is_a_directory":
        log.mkdir()
    else:
        log.write_text(TEXT)
    manager = {"log_is_a_directory": None, "readonly_mount": readonly_mount, "immutable_dir": lambda p: chattr(p, "i")}[fault]
    import contextlib

    with manager(state) if manager else contextlib.nullcontext():
        before = tree_digest(tmp_path)
        changed, warning = write.remove_log(log)
        assert tree_digest(tmp_path) == before
    assert not changed and warning.startswith(f"The log {log} was not removed: "), warning
