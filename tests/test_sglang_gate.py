"""The gate logic (sglang_gate, sglang_gate_plan), called directly, against real SGLang wheels from PyPI."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from conftest import COMMENTED, EXPECTED_STATE, UPSTREAM, VERSIONS

import sglang_gate as gate
import sglang_gate_plan as planner


def drop_record(package: Path) -> None:
    """What an editable or source install looks like to the gate: no RECORD lists the file."""
    for record in package.parent.glob("sglang-*.dist-info/RECORD"):
        record.unlink()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def apply_plan(report: gate.GateReport, plan: planner.Plan) -> None:
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
    shipped = gate.shipped_digest(report)
    assert shipped is not None and shipped.sha256 == original_sha  # RECORD names these bytes
    plan = planner.plan_edit(report, shipped, None, autotune=True)
    assert (plan.action, plan.outcome, plan.shipped_sha256) == ("enable", "patched", original_sha)
    apply_plan(report, plan)

    patched = gate.inspect_gate(package)
    assert gate.verify_gate(patched, "enabled", plan.expect_sha256) == []
    assert patched.lineno == report.lineno
    assert patched.line == report.line.replace("# ", "", 1)
    # No record of ours is passed: RECORD and the file alone say "patched".
    again = planner.plan_edit(patched, shipped, None, autotune=True)
    assert (again.action, again.outcome, again.enabled_by_project) == ("none", "patched", True)

    back = planner.plan_edit(patched, shipped, None, autotune=False)
    assert (back.action, back.expect_sha256, back.shipped_line) == ("disable", original_sha, report.line)
    apply_plan(patched, back)
    restored = gate.inspect_gate(package)
    assert gate.verify_gate(restored, "commented", original_sha) == []
    assert planner.plan_edit(restored, shipped, None, autotune=False).action == "none"


@pytest.mark.parametrize("version", UPSTREAM)
def test_upstream_enabled_is_never_edited(sglang_tree, version):
    report = gate.inspect_gate(sglang_tree(version))
    shipped = gate.shipped_digest(report)
    assert shipped is not None and shipped.sha256 == report.sha256
    on = planner.plan_edit(report, shipped, None, autotune=True)
    off = planner.plan_edit(report, shipped, None, autotune=False)
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
    """Without RECORD (a source install) this project's record still guards the rollback."""
    package = sglang_tree("0.5.10")
    drop_record(package)
    report = gate.inspect_gate(package)
    assert gate.shipped_digest(report) is None
    apply_plan(report, planner.plan_edit(report, None, None, autotune=True))
    patched = gate.inspect_gate(package)
    record = {"file": patched.file, "original_sha256": report.sha256, "patched_sha256": "f" * 64}
    with pytest.raises(gate.GateError, match="changed since this project patched it"):
        planner.plan_edit(patched, None, record, autotune=False)


def test_stale_record_after_reinstall_without_record(sglang_tree):
    package = sglang_tree("0.5.12")
    drop_record(package)
    report = gate.inspect_gate(package)
    record = {"file": report.file, "patched_sha256": "f" * 64}
    on = planner.plan_edit(report, None, record, autotune=True)
    off = planner.plan_edit(report, None, record, autotune=False)
    assert on.record_stale and off.record_stale and off.log == "remove"
    assert "No RECORD lists this file" in on.message


def test_state_file_is_per_real_file(tmp_path):
    a = gate.state_file_for(tmp_path, "/opt/sglang/venvs/a/sglang/x.py")
    b = gate.state_file_for(tmp_path, "/opt/sglang/venvs/b/sglang/x.py")
    assert a != b and a.parent == b.parent == tmp_path
    # "/" -> "__" alone would make these two collide
    assert gate.state_file_for(tmp_path, "/a/b__c.py") != gate.state_file_for(tmp_path, "/a__b/c.py")


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
        planner.plan_edit(report, gate.shipped_digest(report), None, autotune=True)
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
    with pytest.raises(gate.GateError, match="lineinfile would edit the wrong line"):
        planner.plan_edit(report, None, None, autotune=True)
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
    report = gate.inspect_gate(package)
    shipped = gate.shipped_digest(report)
    assert report.state == "enabled" and shipped.sha256 == sha256_of(original)
    on = planner.plan_edit(report, shipped, None, autotune=True)
    assert (on.action, on.outcome, on.upstream_enabled) == ("none", "patched", False)
    off = planner.plan_edit(report, shipped, None, autotune=False)
    assert (off.action, off.line, off.expect_sha256) == ("disable", r"\1# \2", shipped.sha256)
    apply_plan(report, off)
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
        plan = planner.plan_edit(report, gate.shipped_digest(report), None, autotune=autotune)
        assert (plan.action, plan.outcome, plan.upstream_enabled) == ("enable", "shipped", True)
        assert plan.expect_sha256 == sha256_of(original)
        assert plan.server_args == ({} if autotune else {"disable-flashinfer-autotune": True})
    apply_plan(report, plan)
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
            planner.plan_edit(report, gate.shipped_digest(report), None, autotune=autotune)
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
    report = gate.inspect_gate(package)
    with pytest.raises(gate.GateError) as err:
        planner.plan_edit(report, gate.shipped_digest(report), None, autotune=False)
    assert 'SGLang 0.5.23: the gate should_run_flashinfer_autotune()' in str(err.value)
    assert "the entry was removed or the file edited since SGLang was installed" in str(err.value)
    assert "0.5.7 or later" not in str(err.value)
    drop_record(package)
    with pytest.raises(gate.GateError, match="The entry is gone from this version's gate; there is no RECORD"):
        planner.plan_edit(gate.inspect_gate(package), None, None, autotune=False)


def test_absent_entry_as_shipped_on_0_5_6(sglang_tree):
    report = gate.inspect_gate(sglang_tree("0.5.6"))
    shipped = gate.shipped_digest(report)
    assert shipped.sha256 == report.sha256
    with pytest.raises(gate.GateError, match="use SGLang 0.5.7 or later"):
        planner.plan_edit(report, shipped, None, autotune=True)


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
    report = gate.inspect_gate(package)
    on = planner.plan_edit(report, gate.shipped_digest(report), None, autotune=True)
    apply_plan(report, on)
    assert sha(path) == on.expect_sha256 and path.read_bytes().startswith(b"\xef\xbb\xbf")
    patched = gate.inspect_gate(package)
    apply_plan(patched, planner.plan_edit(patched, gate.shipped_digest(patched), None, autotune=False))
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
    with pytest.raises(gate.GateError, match="2 RECORD rows list .* with different sha256"):
        gate.shipped_digest(gate.inspect_gate(package))


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
    report = gate.inspect_gate(sglang_tree("0.5.7"))
    plan = planner.plan_edit(report, gate.shipped_digest(report), None, autotune=True)
    assert (report.state, plan.action, plan.outcome) == ("commented", "enable", "patched")


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
    with pytest.raises(gate.GateError) as err:
        gate.shipped_digest(report)
    message = str(err.value)
    assert f"lists 'sglang/{rel}', the gate file, but " in message and why in message, message
    assert "this RECORD is corrupt" in message and "sglang==0.5.10" in message


def test_a_record_row_without_a_hash_column_is_corrupt(sglang_tree):
    package = sglang_tree("0.5.10")
    rel = EXPECTED_STATE["0.5.10"][1]
    record_row_for(package, rel, f"sglang/{rel}")
    with pytest.raises(gate.GateError, match="but it has no hash: this RECORD is corrupt"):
        gate.shipped_digest(gate.inspect_gate(package))


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
    with pytest.raises(gate.GateError) as err:
        gate.shipped_digest(report)
    assert needle in str(err.value)


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
def test_a_tab_on_the_entry_line_with_record_is_refused_naming_the_line(sglang_tree, name, new):
    """With RECORD the bytes must be RECORD's: a TAB where SGLang has spaces is a difference."""
    package = sglang_tree("0.5.10")
    path = mutate(package, EXPECTED_STATE["0.5.10"][1], lambda s: s.replace(COMMENTED_ENTRY, new))
    report = gate.inspect_gate(package)
    assert report.state == "commented"
    with pytest.raises(gate.GateError) as err:
        planner.plan_edit(report, gate.shipped_digest(report), None, autotune=True)
    message = str(err.value)
    assert f"on the entry line itself (now {new.rstrip(chr(10)).strip(' ')!r}; a TAB or other whitespace" in message
    assert "\t" not in message and str(path) in message
    drop_record(package)  # without RECORD the file is what there is: patched
    assert planner.plan_edit(gate.inspect_gate(package), None, None, autotune=True).action == "enable"


@pytest.mark.parametrize("record", [True, False])
def test_a_bom_added_after_the_install(sglang_tree, record):
    """With RECORD a BOM RECORD does not name is a difference, refused; without RECORD it is kept."""
    package = sglang_tree("0.5.10")
    path = gate_file(package)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    if not record:
        drop_record(package)
    report = gate.inspect_gate(package)
    if record:
        with pytest.raises(gate.GateError, match="is neither as shipped nor as shipped plus the one-line edit"):
            planner.plan_edit(report, gate.shipped_digest(report), None, autotune=True)
        return
    plan = planner.plan_edit(report, None, None, autotune=True)
    apply_plan(report, plan)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf") and sha(path) == plan.expect_sha256
