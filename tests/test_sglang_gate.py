"""The gate logic, called directly, against real SGLang wheels from PyPI."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import COMMENTED, EXPECTED_STATE, UPSTREAM, VERSIONS

import sglang_gate as gate


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def apply_plan(report: gate.GateReport, plan: gate.Plan) -> None:
    """What lineinfile does with the plan: replace the last match, with backrefs."""
    import re

    path = Path(report.file)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    pattern = re.compile(plan.regexp)
    hits = [i for i, text in enumerate(lines) if pattern.search(text.rstrip("\n"))]
    index = hits[-1]
    lines[index] = pattern.search(lines[index].rstrip("\n")).expand(plan.line) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


@pytest.mark.parametrize("version", VERSIONS)
def test_state_matches_reference(sglang_tree, version):
    state, rel = EXPECTED_STATE[version]
    report = gate.inspect_gate(sglang_tree(version))
    assert report.version == version
    assert report.state == state
    assert report.file.endswith("sglang/" + rel)
    assert report.searched == [str(Path(report.package_dir) / f) for f in gate.GATE_FILES]
    assert report.ast_listed is (state == "enabled")
    if state != "absent":
        assert report.line.strip().lstrip("# ") == '"flashinfer_cutlass",'
        assert report.gate_lines[0] < report.lineno <= report.gate_lines[1]


@pytest.mark.parametrize("version", COMMENTED)
def test_plan_enable_then_disable_restores_bytes(sglang_tree, version):
    package = sglang_tree(version)
    report = gate.inspect_gate(package)
    original_sha = report.sha256
    plan = gate.plan_edit(report, None, autotune=True)
    assert plan.action == "enable"
    apply_plan(report, plan)

    patched = gate.inspect_gate(package)
    assert gate.verify_gate(patched, "enabled") == []
    assert patched.lineno == report.lineno
    assert patched.line == report.line.replace("# ", "", 1)
    record = {"file": patched.file, "original_line": report.line,
              "original_sha256": original_sha, "patched_sha256": patched.sha256}
    assert gate.plan_edit(patched, record, autotune=True).action == "none"

    back = gate.plan_edit(patched, record, autotune=False)
    assert back.action == "disable"
    apply_plan(patched, back)
    restored = gate.inspect_gate(package)
    assert gate.verify_gate(restored, "commented", original_sha) == []


@pytest.mark.parametrize("version", UPSTREAM)
def test_upstream_enabled_is_never_edited(sglang_tree, version):
    report = gate.inspect_gate(sglang_tree(version))
    on = gate.plan_edit(report, None, autotune=True)
    off = gate.plan_edit(report, None, autotune=False)
    assert (on.action, on.upstream_enabled, on.server_args) == ("none", True, {})
    assert (off.action, off.upstream_enabled) == ("none", True)
    assert off.server_args == {"disable-flashinfer-autotune": True}
    assert "--disable-flashinfer-autotune" in off.message


def test_verify_reports_every_problem(sglang_tree):
    report = gate.inspect_gate(sglang_tree("0.5.10"))
    problems = gate.verify_gate(report, "enabled", "0" * 64)
    assert any("expected the" in p and "found it commented" in p for p in problems)
    assert any("does not list" in p for p in problems)
    assert any("expected " + "0" * 64 in p for p in problems)


def test_record_of_a_changed_file_refuses_rollback(sglang_tree):
    package = sglang_tree("0.5.10")
    report = gate.inspect_gate(package)
    apply_plan(report, gate.plan_edit(report, None, autotune=True))
    patched = gate.inspect_gate(package)
    record = {"file": patched.file, "original_sha256": report.sha256, "patched_sha256": "f" * 64}
    with pytest.raises(gate.GateError, match="changed since this project patched it"):
        gate.plan_edit(patched, record, autotune=False)


def test_stale_record_after_reinstall(sglang_tree):
    report = gate.inspect_gate(sglang_tree("0.5.12"))
    record = {"file": report.file, "patched_sha256": "f" * 64}
    assert gate.plan_edit(report, record, autotune=True).record_stale
    assert gate.plan_edit(report, record, autotune=False).record_stale


def test_state_file_is_per_real_file(tmp_path):
    a = gate.state_file_for(tmp_path, "/opt/sglang/venvs/a/sglang/x.py")
    b = gate.state_file_for(tmp_path, "/opt/sglang/venvs/b/sglang/x.py")
    assert a != b and a.parent == b.parent == tmp_path


def test_version_falls_back_to_version_file(sglang_tree):
    package = sglang_tree("0.5.10")
    for dist_info in package.parent.glob("sglang-*.dist-info"):
        (dist_info / "METADATA").unlink()
    assert gate.sglang_version(package) == "0.5.10"


# --- bad inputs: each fails with a message that says what and where -----------


def mutate(package: Path, rel: str, edit) -> Path:
    path = package / rel
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    return path


COMMENTED_ENTRY = '            # "flashinfer_cutlass",\n'


def test_anchor_deleted(sglang_tree):
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1], lambda s: s.replace(COMMENTED_ENTRY, ""))
    before = sha(path)
    report = gate.inspect_gate(package)
    assert report.state == "absent"
    with pytest.raises(gate.GateError) as err:
        gate.plan_edit(report, None, autotune=True)
    assert "SGLang 0.5.10" in str(err.value)
    assert 'has no "flashinfer_cutlass", entry' in str(err.value)
    assert "Searched:" in str(err.value) and "base_runner.py" in str(err.value)
    assert sha(path) == before


def test_commented_entry_twice_in_gate(sglang_tree):
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1],
                  lambda s: s.replace(COMMENTED_ENTRY, COMMENTED_ENTRY * 2))
    before = sha(path)
    with pytest.raises(gate.GateError, match=r"expected one \"flashinfer_cutlass\", entry in the gate, found 2"):
        gate.inspect_gate(package)
    assert sha(path) == before


def test_commented_entry_only_outside_gate(sglang_tree):
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1],
                  lambda s: s.replace(COMMENTED_ENTRY, "") + "\n_MOVED = [\n" + COMMENTED_ENTRY + "]\n")
    before = sha(path)
    with pytest.raises(gate.GateError, match="no \"flashinfer_cutlass\", entry inside the gate, but one outside it"):
        gate.inspect_gate(package)
    assert sha(path) == before


def test_second_match_outside_gate_blocks_the_edit(sglang_tree):
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1],
                  lambda s: s + "\n_OTHER = [\n" + COMMENTED_ENTRY + "]\n")
    report = gate.inspect_gate(package)
    assert report.state == "commented" and report.outside_gate
    with pytest.raises(gate.GateError, match="lineinfile would edit the wrong line"):
        gate.plan_edit(report, None, autotune=True)
    assert sha(path) == report.sha256


def test_todo_comment_never_counts(sglang_tree):
    report = gate.inspect_gate(sglang_tree("0.5.12"))
    source = Path(report.file).read_text(encoding="utf-8").splitlines()
    todo = [n for n, line in enumerate(source, 1) if "TODO: flashinfer_cutlass" in line]
    assert todo and report.lineno not in todo


def test_not_an_sglang_directory(tmp_path):
    (tmp_path / "somepkg").mkdir()
    (tmp_path / "somepkg" / "__init__.py").write_text("")
    with pytest.raises(gate.GateError, match="is not an SGLang package: expected __init__.py and srt/"):
        gate.inspect_gate(tmp_path / "somepkg")
    with pytest.raises(gate.GateError, match="is not a directory"):
        gate.inspect_gate(tmp_path / "missing")


def test_no_gate_function(sglang_tree):
    package = sglang_tree("0.5.10")
    mutate(package, EXPECTED_STATE["0.5.10"][1],
           lambda s: s.replace("def _should_run_flashinfer_autotune", "def _renamed_gate"))
    with pytest.raises(gate.GateError, match=r"found 0 \(none\)\. Searched: .*model_runner.py"):
        gate.inspect_gate(package)


def test_two_gate_functions(sglang_tree):
    package = sglang_tree("0.5.14")
    extra = package / "srt/model_executor/runner/flashinfer_autotune.py"
    extra.write_text("def should_run_flashinfer_autotune():\n    return False\n", encoding="utf-8")
    with pytest.raises(gate.GateError, match="found 2"):
        gate.inspect_gate(package)


def test_not_python(sglang_tree):
    package = sglang_tree("0.5.10")
    path = package / EXPECTED_STATE["0.5.10"][1]
    path.write_bytes(b"\x00\xff binary, not python")
    with pytest.raises(gate.GateError, match="cannot read .* as UTF-8 text"):
        gate.inspect_gate(package)
    path.write_text("def broken(:\n", encoding="utf-8")
    with pytest.raises(gate.GateError, match="is not valid Python"):
        gate.inspect_gate(package)


def test_unreadable_record(tmp_path):
    bad = tmp_path / "record.json"
    bad.write_text("{not json")
    with pytest.raises(gate.GateError, match="is not readable JSON"):
        gate.read_record(bad)
