"""lineinfile's `validate:` for the gate edit (sglang_gate_validate), run as lineinfile runs it, on
real SGLang wheels: the edit the role decides passes; a temporary file that is not the reference's
bytes with at most the entry line changed, in the decided state, compiling, is refused."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COMMENTED, EXPECTED_STATE
from test_sglang_gate import apply_plan, decide

import ansible.module_utils.sglang_gate_plan as planner
import ansible.module_utils.sglang_gate_validate as validator


def validate_cmd(report, decision, enabled: bool) -> str:
    """The command the module hands lineinfile, from the module's own function."""
    return planner.validate_command(sys.executable, report.lineno, decision, enabled)


def run_validate(command: str, tmpfile: Path) -> subprocess.CompletedProcess:
    """As lineinfile runs it: `validate % tmpfile`, split as a command line, no shell."""
    return subprocess.run(shlex.split(command % str(tmpfile)), capture_output=True, text=True, check=False)


def edited_copy(package: Path, report, decision, tmp_path: Path, change=None) -> Path:
    """The temporary file lineinfile would hand validate: the edit made on a copy, then `change`."""
    path = Path(report.file)
    original = path.read_bytes()
    apply_plan(report, decision)
    tmpfile = tmp_path / "lineinfile-tmp"
    tmpfile.write_bytes(change(path.read_bytes()) if change else path.read_bytes())
    path.write_bytes(original)
    return tmpfile


@pytest.mark.parametrize("version", COMMENTED)
def test_the_decided_edit_and_its_rollback_pass(sglang_tree, version, tmp_path):
    package = sglang_tree(version)
    report, on = decide(package, True)
    command = validate_cmd(report, on, True)
    assert "%" in validator.__loader__.get_source(validator.__name__)   # run below with each % doubled
    passed = run_validate(command, edited_copy(package, report, on, tmp_path))
    assert (passed.returncode, passed.stderr) == (0, "")
    apply_plan(report, on)
    patched, back = decide(package, False)
    shipped = Path(report.file).read_bytes()
    tmpfile = edited_copy(package, patched, back, tmp_path)
    assert run_validate(validate_cmd(patched, back, False), tmpfile).returncode == 0
    assert Path(report.file).read_bytes() == shipped   # the check wrote nothing


def other_line(data: bytes) -> bytes:
    return data.replace(b"import ", b"import  ", 1)


def no_compile(data: bytes) -> bytes:
    return data + b"\nreturn 1\n"


def entry_left_commented(data: bytes) -> bytes:
    return data.replace(b'            "flashinfer_cutlass",', b'            # "flashinfer_cutlass",', 1)


@pytest.mark.parametrize(("change", "needles"), [
    (other_line, ["with line", "put back as shipped its sha256 is", "another line differs"]),
    (no_compile, ["not Python that compiles", "'return' outside function"]),
    (entry_left_commented, ["is '# \"flashinfer_cutlass\",', not the flashinfer_cutlass entry enabled"]),
])
def test_an_edit_that_is_not_the_decided_one_is_refused(sglang_tree, tmp_path, change, needles):
    package = sglang_tree("0.5.12")
    report, on = decide(package, True)
    before = Path(report.file).read_bytes()
    refused = run_validate(validate_cmd(report, on, True), edited_copy(package, report, on, tmp_path, change))
    assert refused.returncode == 1
    assert "The edit of SGLang's autotune gate is refused before it replaces the file:" in refused.stderr
    for needle in needles:
        assert needle in refused.stderr, refused.stderr
    assert Path(report.file).read_bytes() == before


def test_a_rollback_that_is_not_the_shipped_bytes_is_refused(sglang_tree, tmp_path):
    package = sglang_tree("0.5.12")
    report, on = decide(package, True)
    apply_plan(report, on)
    patched, back = decide(package, False)
    refused = run_validate(validate_cmd(patched, back, False),
                           edited_copy(package, patched, back, tmp_path, other_line))
    assert refused.returncode == 1
    assert f"not the {back.shipped.reference.sha256} of the file as shipped" in refused.stderr
    assert EXPECTED_STATE["0.5.12"][0] == "commented"


def test_real_lineinfile_refuses_a_file_changed_after_the_decision(sglang_tree, tmp_path):
    """The role's own lineinfile task (read from its tasks), run by Ansible after the gate module's
    decision and a change of another line by someone else: the task fails with the check's reason,
    and the gate file is what that someone left, not lineinfile's temporary file."""
    import json

    import yaml
    from conftest import REPO, run_playbook

    import re

    package = sglang_tree("0.5.12")
    gate_file = package / EXPECTED_STATE["0.5.12"][1]
    left_by_someone = re.sub(rb"(?m)^import ", b"import  ", gate_file.read_bytes())
    role_tasks = yaml.safe_load((REPO / "roles" / "sglang_autotune" / "tasks" / "main.yml").read_text())
    edit = next(task for task in role_tasks if "ansible.builtin.lineinfile" in task)
    playbook = tmp_path / "race.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Decide (the role's module)", "register": "sglang_autotune_gate", "sglang_autotune_gate": {
            "package_dir": str(package), "autotune": True, "state_dir": str(tmp_path / "state")}},
        {"name": "Someone else changes another line of the file", "ansible.builtin.replace": {
            "path": "{{ sglang_autotune_gate.file }}", "regexp": "^import ", "replace": "import  "}},
        edit,
    ]}]))
    run = run_playbook(tmp_path / "runner", str(playbook), ["-e", f"ansible_python_interpreter={sys.executable}"],
                       envvars={"ANSIBLE_LIBRARY": str(REPO / "roles" / "sglang_autotune" / "library"),
                                "ANSIBLE_MODULE_UTILS": ":".join(str(REPO / "roles" / role / "module_utils")
                                                                 for role in ("sglang_autotune", "sglang_locate"))})
    assert run.status == "failed", run.stdout
    assert run.actions == ["sglang_autotune_gate", "ansible.builtin.replace", "ansible.builtin.lineinfile"]
    assert "The edit of SGLang's autotune gate is refused before it replaces the file" in run.stdout
    assert "another line differs" in run.stdout
    assert gate_file.read_bytes() == left_by_someone   # lineinfile's temporary file never replaced it
