"""playbooks/autotune.yml end to end through ansible-runner, on real SGLang trees.

Each run is the operator's command: `-i localhost, -c local playbooks/autotune.yml
-e sglang_package_dir=DIR -e autotune=...`. The ground truth for "original" is
the file's bytes inside the wheel downloaded from PyPI.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import COMMENTED, EXPECTED_STATE, UPSTREAM, Run, run_playbook, wheel_member


def play(private: Path, package: Path | None, *extra: str, check: bool = False) -> Run:
    cmdline = ["-e", f"sglang_autotune_state_dir={private / 'state'}", *extra]
    if package is not None:
        cmdline += ["-e", f"sglang_package_dir={package}"]
    if check:
        cmdline += ["--check", "--diff"]
    return run_playbook(private, "autotune.yml", cmdline)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def workspace(tmp_path: Path, sglang_tree):
    def make(version: str) -> tuple[Path, Path, Path]:
        package = sglang_tree(version)
        private = tmp_path / "runner"
        private.mkdir(exist_ok=True)
        return package, package / EXPECTED_STATE[version][1], private

    return make


def shipped(version: str) -> bytes:
    return wheel_member(version, "sglang/" + EXPECTED_STATE[version][1])


@pytest.mark.parametrize("version", COMMENTED)
def test_patch_rerun_rollback_rerun(workspace, version):
    package, gate_file, private = workspace(version)
    original = shipped(version)
    assert gate_file.read_bytes() == original

    first = play(private, package, "-e", "autotune=true")
    assert first.status == "successful", first.stdout
    assert first.changed >= 1
    patched = gate_file.read_bytes()
    assert patched != original
    assert b'\n            "flashinfer_cutlass",\n' in patched
    assert len(patched) == len(original) - 2  # exactly "# " removed
    record = json.loads(next((private / "state").glob("*.json")).read_text())
    assert record["original_sha256"] == sha(original)
    assert record["patched_sha256"] == sha(patched)
    assert record["version"] == version
    assert first.facts["sglang_autotune_result"]["state"] == "enabled"
    assert first.facts["sglang_autotune_server_args"] == {}

    again = play(private, package, "-e", "autotune=true")
    assert (again.status, again.changed) == ("successful", 0), again.stdout
    assert gate_file.read_bytes() == patched

    back = play(private, package, "-e", "autotune=false")
    assert back.status == "successful", back.stdout
    assert back.changed >= 1
    assert gate_file.read_bytes() == original
    assert not list((private / "state").glob("*.json"))

    back_again = play(private, package, "-e", "autotune=false")
    assert (back_again.status, back_again.changed) == ("successful", 0), back_again.stdout
    assert gate_file.read_bytes() == original


@pytest.mark.parametrize("version", UPSTREAM)
def test_upstream_enabled_left_as_shipped(workspace, version):
    package, gate_file, private = workspace(version)
    original = shipped(version)

    on = play(private, package, "-e", "autotune=true")
    assert (on.status, on.changed) == ("successful", 0), on.stdout
    assert on.facts["sglang_autotune_server_args"] == {}
    assert "enabled upstream" in on.stdout

    off = play(private, package, "-e", "autotune=false")
    assert (off.status, off.changed) == ("successful", 0), off.stdout
    assert off.facts["sglang_autotune_server_args"] == {"disable-flashinfer-autotune": True}
    assert "--disable-flashinfer-autotune" in off.stdout
    assert gate_file.read_bytes() == original


def test_check_mode_shows_the_line_and_changes_nothing(workspace):
    package, gate_file, private = workspace("0.5.12")
    original = gate_file.read_bytes()
    run = play(private, package, "-e", "autotune=true", check=True)
    assert run.status == "successful", run.stdout
    assert run.changed >= 1
    assert '-            # "flashinfer_cutlass",' in run.stdout
    assert '+            "flashinfer_cutlass",' in run.stdout
    assert gate_file.read_bytes() == original
    assert not (private / "state").exists()


def test_reinstall_is_patched_again(workspace):
    package, gate_file, private = workspace("0.5.10")
    original = gate_file.read_bytes()
    assert play(private, package, "-e", "autotune=true").changed >= 1
    gate_file.write_bytes(original)  # what a reinstall of SGLang does to the file
    again = play(private, package, "-e", "autotune=true")
    assert again.status == "successful" and again.changed >= 1
    assert gate_file.read_bytes() != original
    assert play(private, package, "-e", "autotune=false").status == "successful"
    assert gate_file.read_bytes() == original


# --- bad inputs: the message, and nothing changed ------------------------------

COMMENTED_ENTRY = '            # "flashinfer_cutlass",\n'


def assert_failed_unchanged(run: Run, gate_file: Path, before: bytes, private: Path, *needles: str):
    assert run.status == "failed" and run.failed == 1, run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert gate_file.read_bytes() == before
    assert not list((private / "state").glob("*.json")) if (private / "state").exists() else True


@pytest.mark.parametrize("autotune", ["true", "false"])
def test_absent_entry_fails_on_0_5_6(workspace, autotune):
    package, gate_file, private = workspace("0.5.6")
    before = gate_file.read_bytes()
    run = play(private, package, "-e", f"autotune={autotune}")
    assert_failed_unchanged(run, gate_file, before, private, "SGLang 0.5.6", "has no \"flashinfer_cutlass\", entry",
                            "Searched:", "use SGLang 0.5.8 or later")


@pytest.mark.parametrize(
    ("name", "edit", "needles"),
    [
        ("anchor deleted", lambda s: s.replace(COMMENTED_ENTRY, ""),
         ("SGLang 0.5.10", "has no \"flashinfer_cutlass\", entry", "Searched:")),
        ("commented twice in the gate", lambda s: s.replace(COMMENTED_ENTRY, COMMENTED_ENTRY * 2),
         ("SGLang 0.5.10", "found 2", "Refusing to guess")),
        ("only outside the gate",
         lambda s: s.replace(COMMENTED_ENTRY, "") + "\n_MOVED = [\n" + COMMENTED_ENTRY + "]\n",
         ("SGLang 0.5.10", "but one outside it", "The anchor moved")),
    ],
)
def test_bad_gate_fails_before_any_change(workspace, name, edit, needles):
    package, gate_file, private = workspace("0.5.10")
    gate_file.write_text(edit(gate_file.read_text(encoding="utf-8")), encoding="utf-8")
    before = gate_file.read_bytes()
    run = play(private, package, "-e", "autotune=true")
    assert_failed_unchanged(run, gate_file, before, private, *needles)


def test_non_boolean_autotune_is_refused(workspace):
    package, gate_file, private = workspace("0.5.10")
    before = gate_file.read_bytes()
    run = play(private, package, "-e", "autotune=maybe")
    assert_failed_unchanged(run, gate_file, before, private, "sglang_autotune_enabled",
                            "'maybe' is not a valid boolean", "Valid booleans include")


def test_directory_that_is_not_sglang(tmp_path):
    private = tmp_path / "runner"
    private.mkdir()
    other = tmp_path / "numpy"
    other.mkdir()
    (other / "__init__.py").write_text("")
    run = play(private, other, "-e", "autotune=true")
    assert run.status == "failed", run.stdout
    assert "is not an SGLang package" in " ".join(run.failures)
    assert sorted(p.name for p in other.iterdir()) == ["__init__.py"]
    assert (other / "__init__.py").read_text() == ""


def test_missing_virtualenv_is_explained(tmp_path):
    private = tmp_path / "runner"
    private.mkdir()
    run = play(private, None, "-e", f"sglang_autotune_python={tmp_path}/venv/bin/python")
    assert run.status == "failed", run.stdout
    assert f"no Python at {tmp_path}/venv/bin/python" in " ".join(run.failures)
