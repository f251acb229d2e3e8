"""The gate logic (sglang_gate, _record, _plan, _write), called directly, against real SGLang wheels from PyPI."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from conftest import COMMENTED, EXPECTED_STATE, UPSTREAM, VERSIONS, tree_digest

import ansible.module_utils.sglang_gate as gate
import ansible.module_utils.sglang_gate_plan as planner
import ansible.module_utils.sglang_gate_record as recorded
import ansible.module_utils.sglang_gate_write as logs

NO_LOG = Path("/nonexistent/sglang_autotune/log.json")


def drop_record(package: Path) -> None:
    """What an editable or source install looks like to the gate: no RECORD lists the file."""
    for record in package.parent.glob("sglang-*.dist-info/RECORD"):
        record.unlink()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ref_of(report: gate.GateReport, state_file: Path = NO_LOG) -> planner.Reference:
    """The reference, found the way both modules find it."""
    record = recorded.record_digest(report.package_dir, report.file, report.version)
    log, why = logs.read_log(state_file) if record is None else (None, "")
    return planner.reference(report, record, log, why, state_file)


def decide(package: Path, autotune: bool, state_file: Path = NO_LOG) -> tuple[gate.GateReport, planner.Decision]:
    report = gate.inspect_gate(package)
    return report, planner.decide(report, ref_of(report, state_file), autotune, Path(report.file).read_bytes())


def prove(package: Path, autotune: bool, state_file: Path = NO_LOG, check: bool = False) -> planner.Proof:
    report = gate.inspect_gate(package)
    return planner.prove(report, ref_of(report, state_file), autotune, Path(report.file).read_bytes(), check)


def apply_plan(report: gate.GateReport, plan: planner.Decision) -> None:
    """What lineinfile does with the decision (test code only): replace the last match, with backrefs."""
    path = Path(report.file)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    pattern = re.compile(plan.regexp)
    hits = [i for i, text in enumerate(lines) if pattern.search(text.rstrip("\n"))]
    index = hits[-1]
    lines[index] = pattern.search(lines[index].rstrip("\n")).expand(plan.line) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def converge(package: Path, autotune: bool, state_dir: Path) -> tuple[planner.Decision, planner.Proof | None]:
    """The role's three steps on one tree: decide (and log ahead), the edit, prove and keep the log."""
    report = gate.inspect_gate(package)
    state_file = logs.state_file_for(state_dir, report.file)
    decision = planner.decide(report, ref_of(report, state_file), autotune, Path(report.file).read_bytes())
    ahead = planner.log_ahead(report, decision)
    if ahead is not None:
        assert logs.write_log(state_dir, state_file, logs.log_text(ahead), True) == (True, "")
    if decision.action == "none":
        return decision, None
    apply_plan(report, decision)
    proof = prove(package, autotune, state_file)
    if proof.log is not None:
        assert logs.write_log(state_dir, state_file, logs.log_text(proof.log), proof.decides)[1] == ""
    else:
        assert logs.remove_log(state_file)[1] == ""
    return decision, proof


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
def test_enable_then_disable_restores_bytes(sglang_tree, version):
    package = sglang_tree(version)
    path = package / EXPECTED_STATE[version][1]
    report, on = decide(package, True)
    original_sha = report.sha256
    assert recorded.record_digest(report.package_dir, report.file, version)[1] == original_sha
    assert (on.action, on.shipped.state, on.shipped.reference.kind) == ("enable", "commented", "RECORD")
    apply_plan(report, on)

    proof = prove(package, True)
    assert (proof.outcome, proof.pending, proof.decides) == ("patched", False, False)
    assert (proof.log["original_sha256"], proof.log["patched_sha256"]) == (original_sha, sha(path))
    assert proof.log["original_line"] == report.line and f"hashes to {original_sha}" in proof.message
    patched, again = decide(package, True)
    assert patched.lineno == report.lineno
    assert patched.line == report.line.replace("# ", "", 1)
    # No log is read: RECORD and the file alone say "patched".
    assert again.action == "none" and "RECORD's bytes plus that one-line edit" in again.message

    _, back = decide(package, False)
    assert (back.action, back.line, back.shipped.line) == ("disable", report.line, report.line)
    apply_plan(patched, back)
    restored = prove(package, False)
    assert (restored.outcome, restored.log) == ("shipped", None)
    assert sha(path) == original_sha and f"its sha256 {original_sha} is what" in restored.message
    assert decide(package, False)[1].action == "none"


@pytest.mark.parametrize("version", UPSTREAM)
def test_upstream_enabled_is_never_edited(sglang_tree, version):
    package = sglang_tree(version)
    _, on = decide(package, True)
    _, off = decide(package, False)
    assert (on.action, on.upstream_enabled, on.server_args) == ("none", True, {})
    assert (off.action, off.upstream_enabled) == ("none", True)
    assert off.server_args == {"disable-flashinfer-autotune": True}
    assert "--disable-flashinfer-autotune" in off.message


# --- the proof: the file read back, never a prediction ---------------------------

def add_line(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"# changed after the edit\n")


def no_compile(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\nreturn 1\n")  # parses, but does not compile


def entry_tab(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b'            "flashinfer_cutlass",', b'\t"flashinfer_cutlass",'))


@pytest.mark.parametrize(("name", "after", "needles"), [
    ("not_edited", None, ['the "flashinfer_cutlass", entry is commented and the parsed gate does not list it, '
                          "expected it enabled"]),
    ("other_line", add_line, ["read back after the edit, the file is not its reference's bytes",
                              "neither as shipped nor as shipped plus the one-line edit"]),
    ("entry_line", entry_tab, ["read back after the edit", "on the entry line itself (now '\\t\"flashinfer_cutlass\",'"]),
    ("no_compile", no_compile, ["no longer compiles (line", "'return' outside function"]),
])
def test_the_proof_refuses_a_file_the_edit_did_not_make(sglang_tree, name, after, needles):
    package = sglang_tree("0.5.12")
    path = package / EXPECTED_STATE["0.5.12"][1]
    report, on = decide(package, True)
    if after is not None:
        apply_plan(report, on)
        after(path)
    before = tree_digest(package.parent)
    with pytest.raises(gate.GateError) as err:
        prove(package, True)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    assert tree_digest(package.parent) == before


def test_the_proof_in_check_mode_reads_nothing_back(sglang_tree):
    package = sglang_tree("0.5.12")
    before = tree_digest(package.parent)
    proof = prove(package, True, check=True)
    assert (proof.pending, proof.outcome) == (True, "patched")
    assert "Check mode: the edit is not made" in proof.message
    assert tree_digest(package.parent) == before


def test_without_record_the_log_is_written_before_the_edit_and_proves_it(sglang_tree, tmp_path):
    """An editable install: the log of the original is written first, so a kill between it and
    the edit, or after the edit, leaves a file and a log that the next run reads correctly."""
    package = sglang_tree("0.5.12")
    path = package / EXPECTED_STATE["0.5.12"][1]
    original = path.read_bytes()
    drop_record(package)
    state = tmp_path / "state"
    state_file = logs.state_file_for(state, gate.inspect_gate(package).file)
    report, on = decide(package, True, state_file)
    ahead = planner.log_ahead(report, on)
    assert ahead["original_sha256"] == sha(path) and ahead["patched_sha256"] == ""
    logs.write_log(state, state_file, logs.log_text(ahead), True)
    # Killed here: the log describes the unedited file, which is enabled next time.
    _, again = decide(package, True, state_file)
    assert (again.action, again.shipped.reference.kind) == ("enable", "log")
    assert planner.log_ahead(report, again) is None
    apply_plan(report, again)
    # Killed here: the log still proves the patch.
    proof = prove(package, True, state_file)
    assert (proof.outcome, proof.decides, proof.log["patched_sha256"]) == ("patched", True, sha(path))
    assert "No RECORD lists this file" in again.message
    logs.write_log(state, state_file, logs.log_text(proof.log), True)
    assert converge(package, False, state)[1].outcome == "shipped"
    assert path.read_bytes() == original and not state_file.exists()


@pytest.mark.parametrize("log", ["changed_file", "no_original_line", "not_json", "json_list", "directory"])
def test_without_record_a_log_that_does_not_explain_an_enabled_file_refuses(sglang_tree, tmp_path, log):
    package = sglang_tree("0.5.10")
    path = package / EXPECTED_STATE["0.5.10"][1]
    drop_record(package)
    state = tmp_path / "state"
    converge(package, True, state)
    state_file = next(state.glob("*.json"))
    if log == "changed_file":
        add_line(path)
    elif log == "no_original_line":
        state_file.write_text(f'{{"file": "{gate.inspect_gate(package).file}", "original_sha256": "{"0" * 64}"}}\n')
    elif log == "not_json":
        state_file.write_text("{not json")
    elif log == "json_list":
        state_file.write_text("[]\n")
    else:
        state_file.unlink()
        state_file.mkdir()
    before = tree_digest(package.parent, state)
    for autotune in (True, False):
        with pytest.raises(gate.GateError) as err:
            decide(package, autotune, state_file)
        assert "changed since this project patched it" in str(err.value), str(err.value)
        assert "Nothing was changed" in str(err.value) and "No RECORD lists this file" in str(err.value)
    assert tree_digest(package.parent, state) == before


def test_without_record_a_stale_log_of_a_commented_file_is_set_aside(sglang_tree, tmp_path):
    """Reinstalled from source since the log was written: the file is the reference again."""
    package = sglang_tree("0.5.12")
    drop_record(package)
    report = gate.inspect_gate(package)
    state_file = tmp_path / "log.json"
    state_file.write_text(f'{{"file": "{report.file}", "original_sha256": "{"f" * 64}", '
                          f'"original_line": "            # \\"flashinfer_cutlass\\","}}\n')
    _, on = decide(package, True, state_file)
    _, off = decide(package, False, state_file)
    assert (on.action, on.shipped.reference.kind, off.action) == ("enable", "file", "none")
    assert "describes other bytes" in on.shipped.reference.unusable
    assert planner.log_ahead(report, on) is not None  # rewritten before the edit
    assert "No RECORD lists this file" in on.message


def test_state_file_is_per_real_file(tmp_path):
    a = logs.state_file_for(tmp_path, "/opt/sglang/venvs/a/sglang/x.py")
    b = logs.state_file_for(tmp_path, "/opt/sglang/venvs/b/sglang/x.py")
    assert a != b and a.parent == b.parent == tmp_path
    # "/" -> "__" alone would make these two collide
    assert logs.state_file_for(tmp_path, "/a/b__c.py") != logs.state_file_for(tmp_path, "/a__b/c.py")


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
    assert gate.inspect_gate(package).state == "absent"
    with pytest.raises(gate.GateError) as err:
        decide(package, True)
    assert "SGLang 0.5.10" in str(err.value)
    assert 'has no "flashinfer_cutlass", entry' in str(err.value)
    assert "Searched:" in str(err.value) and "base_runner.py" in str(err.value)
    assert "differs from what" in str(err.value) and "RECORD" in str(err.value)
    assert "0.5.7 or later" not in str(err.value)
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
    with pytest.raises(gate.GateError, match="neither as shipped"):  # with RECORD: another change
        decide(package, True)
    drop_record(package)  # without RECORD the file is what there is: the regexp check refuses it
    with pytest.raises(gate.GateError, match="lineinfile would edit the wrong line"):
        decide(package, True)
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


def test_unreadable_log(tmp_path):
    bad = tmp_path / "log.json"
    bad.write_text("{not json")
    log, why = logs.read_log(bad)
    assert log is None and why.startswith(f"{bad} is not readable JSON")
    assert logs.read_log(tmp_path / "missing.json") == (None, "")


# --- RECORD decides: hand patches, other edits, and the inputs a sweep found ----

ENTRY_ACTIVE = '            "flashinfer_cutlass",\n'


def sed_patch(path: Path) -> None:
    """What the deployment this project automates did at first: sed, no record of ours."""
    path.write_bytes(path.read_bytes().replace(COMMENTED_ENTRY.encode(), ENTRY_ACTIVE.encode()))


@pytest.mark.parametrize("version", COMMENTED)
def test_hand_patched_file_rolls_back_to_record_bytes(sglang_tree, version):
    package = sglang_tree(version)
    path = package / EXPECTED_STATE[version][1]
    original = path.read_bytes()
    sed_patch(path)
    report, on = decide(package, True)
    assert report.state == "enabled" and on.shipped.reference.sha256 == sha256_of(original)
    assert (on.action, on.shipped.state, on.upstream_enabled) == ("none", "commented", False)
    _, off = decide(package, False)
    assert (off.action, off.line) == ("disable", COMMENTED_ENTRY.rstrip("\n"))
    apply_plan(report, off)
    assert prove(package, False).outcome == "shipped"
    assert path.read_bytes() == original


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_upstream_entry_commented_by_hand_is_restored(sglang_tree):
    package = sglang_tree("0.5.23")
    path = package / EXPECTED_STATE["0.5.23"][1]
    original = path.read_bytes()
    active = b'    "flashinfer_cutlass",\n'
    assert original.count(active) == 1
    path.write_bytes(original.replace(active, b'    # "flashinfer_cutlass",\n'))
    report = gate.inspect_gate(package)
    assert report.state == "commented"
    for autotune in (True, False):
        _, plan = decide(package, autotune)
        assert (plan.action, plan.shipped.state, plan.upstream_enabled) == ("enable", "enabled", True)
        assert plan.line == report.line.replace("# ", "", 1)
        assert plan.server_args == ({} if autotune else {"disable-flashinfer-autotune": True})
    apply_plan(report, plan)
    assert prove(package, False).outcome == "shipped"
    assert path.read_bytes() == original


def test_other_edit_is_refused_naming_file_and_line(sglang_tree):
    package = sglang_tree("0.5.12")
    path = package / EXPECTED_STATE["0.5.12"][1]
    sed_patch(path)
    path.write_bytes(path.read_bytes() + b"# local change\n")
    report = gate.inspect_gate(package)
    before = sha(path)
    for autotune in (True, False):
        with pytest.raises(gate.GateError) as err:
            decide(package, autotune)
        message = str(err.value)
        assert str(path) in message and "neither as shipped nor as shipped plus the one-line edit" in message
        assert f"on the entry line itself (now {report.line.strip()!r}" in message
        assert "RECORD holds only hashes, so where cannot be located" in message
        assert "Nothing was changed" in message and "pip install --force-reinstall --no-deps sglang==0.5.12" in message
    assert sha(path) == before


@pytest.mark.parametrize(
    "form",
    ['            # "flashinfer_cutlass",  # off for now\n',
     '            ## "flashinfer_cutlass",\n',
     "            # 'flashinfer_cutlass',\n",
     "            'flashinfer_cutlass',\n"],
)
def test_unrecognised_entry_form_is_quoted(sglang_tree, form):
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1], lambda s: s.replace(COMMENTED_ENTRY, form))
    lineno = path.read_text().splitlines().index(form.rstrip("\n")) + 1
    with pytest.raises(gate.GateError) as err:
        gate.inspect_gate(package)
    assert f"line {lineno} reads {form.strip()!r}" in str(err.value)
    assert "not a form this role edits" in str(err.value)
    assert "0.5.7 or later" not in str(err.value)


def test_entry_removed_from_upstream_release(sglang_tree):
    package = sglang_tree("0.5.23")
    path = package / EXPECTED_STATE["0.5.23"][1]
    path.write_bytes(path.read_bytes().replace(b'    "flashinfer_cutlass",\n', b""))
    with pytest.raises(gate.GateError) as err:
        decide(package, False)
    assert 'SGLang 0.5.23: the gate should_run_flashinfer_autotune()' in str(err.value)
    assert "the entry was removed or the file edited since SGLang was installed" in str(err.value)
    assert "0.5.7 or later" not in str(err.value)
    drop_record(package)
    with pytest.raises(gate.GateError, match="The entry is gone from this version's gate; there is no RECORD"):
        decide(package, False)


def test_absent_entry_as_shipped_on_0_5_6(sglang_tree):
    package = sglang_tree("0.5.6")
    report = gate.inspect_gate(package)
    assert recorded.record_digest(report.package_dir, report.file, "0.5.6")[1] == report.sha256
    with pytest.raises(gate.GateError, match="use SGLang 0.5.7 or later"):
        decide(package, True)


@pytest.mark.parametrize("whole", [True, False])
def test_crlf_is_refused(sglang_tree, whole):
    package = sglang_tree("0.5.10")
    path = package / EXPECTED_STATE["0.5.10"][1]
    data = path.read_bytes()
    if whole:
        path.write_bytes(data.replace(b"\n", b"\r\n"))
    else:
        path.write_bytes(data.replace(COMMENTED_ENTRY.encode(), COMMENTED_ENTRY.encode()[:-1] + b"\r\n"))
    with pytest.raises(gate.GateError) as err:
        gate.inspect_gate(package)
    assert "CRLF" in str(err.value)
    assert ("throughout the file" if whole else "on line(s) ") in str(err.value)


def test_bom_is_accepted_and_round_trips(sglang_tree):
    """A release that shipped a BOM (RECORD rewritten to say so): patched and restored byte for byte."""
    package = sglang_tree("0.5.10")
    rel = EXPECTED_STATE["0.5.10"][1]
    path = package / rel
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with_bom = path.read_bytes()
    set_record_hash(package, rel, with_bom)
    report, on = decide(package, True)
    apply_plan(report, on)
    assert prove(package, True).outcome == "patched" and path.read_bytes().startswith(b"\xef\xbb\xbf")
    patched, off = decide(package, False)
    apply_plan(patched, off)
    assert prove(package, False).outcome == "shipped"
    assert path.read_bytes() == with_bom


def set_record_hash(package: Path, rel: str, data: bytes) -> None:
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = next(package.parent.glob("sglang-*.dist-info/RECORD"))
    rows = []
    for row in record.read_text().splitlines():
        name = row.split(",", 1)[0]
        rows.append(f"{name},sha256={digest},{len(data)}" if name == f"sglang/{rel}" else row)
    record.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_gate_path_that_is_not_a_file(sglang_tree, kind):
    import os
    import stat as st

    package = sglang_tree("0.5.10")
    path = package / EXPECTED_STATE["0.5.10"][1]
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, st.S_IFCHR | 0o600, os.makedev(1, 3))
    else:
        path.mkdir()
    expected = {"fifo": "FIFO (named pipe)", "device": "character device", "directory": "directory"}[kind]
    with pytest.raises(gate.GateError, match=f"is a {re.escape(expected)}, expected a regular Python file"):
        gate.inspect_gate(package)


def test_python_problem(tmp_path):
    import sys

    assert gate.python_problem(sys.executable) is None
    text = tmp_path / "python"
    text.write_text("not an interpreter\n")
    assert "is not a Python 3 interpreter (running it failed" in gate.python_problem(str(text))
    assert "exited 0 with output ''" in gate.python_problem("/bin/true")
    assert "is not a Python 3 interpreter" in gate.python_problem(str(tmp_path))


def test_two_records_that_disagree(sglang_tree):
    package = sglang_tree("0.5.10")
    other = package.parent / "sglang-0.5.9.dist-info"
    other.mkdir()
    (other / "RECORD").write_text(f"sglang/{EXPECTED_STATE['0.5.10'][1]},sha256={'A' * 43},1\n")
    report = gate.inspect_gate(package)
    with pytest.raises(recorded.RecordError, match="2 RECORD rows list .* with different sha256"):
        recorded.record_digest(report.package_dir, report.file, report.version)


# --- issue 17: every input read one way, every failure named --------------------

ACCEPTED = [(True, True), (False, False), (1, True), (0, False), ("true", True), ("TRUE", True),
            ("Yes", True), ("on", True), ("1", True), ("false", False), ("No", False), ("OFF", False),
            ("0", False)]
# Each of these the argument spec reads one way and `| bool` another (or warns).
REFUSED = ["y", "Y", "t", "n", "f", " true", "true ", "false\n", "", "maybe", "truе", 1.0, 0.0, 2, -1, None,
           [], {"x": 1}]


@pytest.mark.parametrize(("value", "expected"), ACCEPTED)
def test_autotune_spellings_both_ansible_checks_read_alike(value, expected):
    assert planner.autotune_choice(value) is expected


@pytest.mark.parametrize("value", REFUSED)
def test_autotune_spellings_ansible_reads_two_ways_are_refused(value):
    with pytest.raises(ValueError) as err:
        planner.autotune_choice(value)
    message = str(err.value)
    assert message.startswith(f"sglang_autotune_enabled (from -e autotune=... unless set itself) is {value!r} "
                              f"({type(value).__name__}).")
    assert "Accepted: true or false as a YAML/JSON boolean, 0 or 1, or one of true, yes, on, 1, false, no, off, 0" in message
    assert "refused before any change" in message


def test_0_5_7_is_patched_like_0_5_8(sglang_tree):
    report, plan = decide(sglang_tree("0.5.7"), True)
    assert (report.state, plan.action, plan.shipped.state) == ("commented", "enable", "commented")


def gate_file(package: Path, version: str = "0.5.10") -> Path:
    return package / EXPECTED_STATE[version][1]


@pytest.mark.parametrize("where", ["entry_line", "first_byte", "docstring", "last_byte"])
def test_nul_byte_in_the_gate_file_is_named(sglang_tree, where):
    from conftest import tree_digest

    package = sglang_tree("0.5.10")
    path = gate_file(package)
    data = path.read_bytes()
    entry = COMMENTED_ENTRY.encode()
    data = {"entry_line": data.replace(entry, entry[:-2] + b"\x00,\n"), "first_byte": b"\x00" + data,
            "docstring": data.replace(b'"""Check if flashinfer autotune', b'"""Check\x00 if flashinfer autotune'),
            "last_byte": data + b"\x00"}[where]
    path.write_bytes(data)
    lineno = data[:data.index(b"\x00")].count(b"\n") + 1
    before = tree_digest(package.parent)
    with pytest.raises(gate.GateError) as err:
        gate.inspect_gate(package)
    assert f"{path} holds a NUL byte (\\x00) on line {lineno}" in str(err.value)
    assert tree_digest(package.parent) == before


@pytest.mark.parametrize("link", ["gate_to_a_copy", "gate_dangling", "model_executor_dir", "srt_dir"])
def test_a_symlink_on_the_way_to_the_gate_is_refused(sglang_tree, tmp_path, link):
    import shutil

    from conftest import tree_digest

    package = sglang_tree("0.5.10")
    path = gate_file(package)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = {"gate_to_a_copy": path, "gate_dangling": path, "model_executor_dir": path.parent,
              "srt_dir": package / "srt"}[link]
    target = elsewhere / linked.name
    shutil.move(linked, target)
    if link == "gate_dangling":
        target.unlink()
    linked.symlink_to(target)
    before = tree_digest(package.parent, elsewhere)
    with pytest.raises(gate.GateError) as err:
        gate.inspect_gate(package)
    message = str(err.value)
    assert message.startswith(f"{linked} is a symbolic link (to {target}, that is {target}): pip never installs one")
    assert f"an edit would change {target}" in message and "nothing was changed" in message
    assert f"cp --remove-destination {target} {linked}" in message
    assert tree_digest(package.parent, elsewhere) == before


def record_row_for(package: Path, rel: str, row: str) -> None:
    record = next(package.parent.glob("sglang-*.dist-info/RECORD"))
    rows = [row if line.startswith(f"sglang/{rel},") else line for line in record.read_text().splitlines()]
    record.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize(("digest", "why"), [
    ("sha256=AAAA", "its hash 'sha256=AAAA' is not sha256=<43 characters of urlsafe base64>"),
    ("sha256=" + "!" * 43, "is not sha256=<43 characters"),
    ("sha256=" + "A" * 44, "is not sha256=<43 characters"),
    ("sha256=", "its hash 'sha256=' is not sha256="),
    ("", "it has no hash"),
    ("sha512=" + "A" * 86, "its hash uses sha512, this role compares sha256 only"),
    ("md5=AAAA", "its hash uses md5"),
    ("0123456789abcdef", "is not sha256=<43 characters"),
])
def test_a_malformed_record_hash_is_corrupt_not_no_record(sglang_tree, digest, why):
    package = sglang_tree("0.5.10")
    rel = EXPECTED_STATE["0.5.10"][1]
    record_row_for(package, rel, f"sglang/{rel},{digest},123")
    report = gate.inspect_gate(package)
    with pytest.raises(recorded.RecordError) as err:
        recorded.record_digest(report.package_dir, report.file, report.version)
    message = str(err.value)
    assert f"lists 'sglang/{rel}', the gate file, but " in message and why in message, message
    assert "this RECORD is corrupt" in message and "sglang==0.5.10" in message


def test_a_record_row_without_a_hash_column_is_corrupt(sglang_tree):
    package = sglang_tree("0.5.10")
    rel = EXPECTED_STATE["0.5.10"][1]
    record_row_for(package, rel, f"sglang/{rel}")
    report = gate.inspect_gate(package)
    with pytest.raises(recorded.RecordError, match="but it has no hash: this RECORD is corrupt"):
        recorded.record_digest(report.package_dir, report.file, report.version)


@pytest.mark.parametrize("fault", ["nul", "directory", "over_csv_field_limit"])
def test_a_record_that_cannot_be_read_is_named(sglang_tree, fault):
    package = sglang_tree("0.5.10")
    record = next(package.parent.glob("sglang-*.dist-info/RECORD"))
    if fault == "nul":
        record.write_bytes(record.read_bytes() + b"x\x00y,,\n")
        needle = f"{record} holds a NUL byte: this RECORD is corrupt"
    elif fault == "directory":
        record.unlink()
        record.mkdir()
        needle = f"{record} is a directory, expected pip's RECORD file"
    else:
        record.write_text(record.read_text() + "a" * 200000 + ",,\n")  # past csv's field size limit
        needle = f"{record} is not CSV (field larger than field limit"
    report = gate.inspect_gate(package)
    before = tree_digest(package.parent)
    with pytest.raises(recorded.RecordError) as err:
        recorded.record_digest(report.package_dir, report.file, report.version)
    assert needle in str(err.value)
    assert tree_digest(package.parent) == before


@pytest.mark.parametrize(("char", "escaped"), [("\x1b", "\\x1b"), ("\t", "\\t"), ("\x0b", "\\x0b"),
                                               ("\u202e", "\\u202e"), ("\x7f", "\\x7f"), ("\u200b", "\\u200b")])
def test_control_characters_in_a_quoted_line_are_escaped(sglang_tree, char, escaped):
    package = sglang_tree("0.5.10")
    form = f'            # "flashinfer_cutlass",  # off{char}\n'
    path = mutate(package, EXPECTED_STATE["0.5.10"][1], lambda s: s.replace(COMMENTED_ENTRY, form))
    with pytest.raises(gate.GateError) as err:
        gate.inspect_gate(package)
    message = str(err.value)
    assert f"reads '# \"flashinfer_cutlass\",  # off{escaped}'" in message, message
    assert char not in message
    assert str(path) in message


@pytest.mark.parametrize(("name", "new"), [
    ("tab_indent", '\t\t\t# "flashinfer_cutlass",\n'),
    ("tab_after_hash", '            #\t"flashinfer_cutlass",\n'),
    ("tab_trailing", '            # "flashinfer_cutlass",\t\n'),
])
def test_a_tab_on_the_entry_line_with_record_is_refused_naming_the_line(sglang_tree, tmp_path, name, new):
    """With RECORD the bytes must be RECORD's: a TAB where SGLang has spaces is a difference."""
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1], lambda s: s.replace(COMMENTED_ENTRY, new))
    report = gate.inspect_gate(package)
    assert report.state == "commented"
    before = tree_digest(package.parent)
    with pytest.raises(gate.GateError) as err:
        decide(package, True)
    message = str(err.value)
    assert f"on the entry line itself (now {new.rstrip(chr(10)).strip(' ')!r}; a TAB or other whitespace" in message
    assert "\t" not in message and str(path) in message
    assert tree_digest(package.parent) == before
    drop_record(package)  # without RECORD the file is what there is: patched, and restored from the log
    original = path.read_bytes()
    assert converge(package, True, tmp_path / "state")[0].action == "enable"
    assert converge(package, False, tmp_path / "state")[1].outcome == "shipped"
    assert path.read_bytes() == original


@pytest.mark.parametrize("record", [True, False])
def test_a_bom_added_after_the_install(sglang_tree, tmp_path, record):
    """With RECORD a BOM RECORD does not name is a difference, refused; without RECORD it is kept."""
    package = sglang_tree("0.5.10")
    path = gate_file(package)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    if not record:
        drop_record(package)
    if record:
        with pytest.raises(gate.GateError, match="is neither as shipped nor as shipped plus the one-line edit"):
            decide(package, True)
        return
    original = path.read_bytes()
    _, proof = converge(package, True, tmp_path / "state")
    assert proof.outcome == "patched" and path.read_bytes().startswith(b"\xef\xbb\xbf")
    converge(package, False, tmp_path / "state")
    assert path.read_bytes() == original
