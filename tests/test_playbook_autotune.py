"""playbooks/autotune.yml end to end through ansible-runner, on real SGLang trees.

Each run is the operator's command: `-i localhost, -c local playbooks/autotune.yml
-e sglang_package_dir=DIR -e autotune=...`. The ground truth for "original" is
the file's bytes inside the wheel downloaded from PyPI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import (
    COMMENTED,
    EXPECTED_STATE,
    REPO,
    UPSTREAM,
    Run,
    run_cases,
    run_playbook,
    tree_digest,
    unpack_sglang,
    wheel_member,
)


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
                            "Searched:", "use SGLang 0.5.7 or later")


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


# --- many cases in one run: one inventory host per case, all on this machine -----
#
# Each host is a local-connection alias with its own SGLang tree and state dir,
# so one ansible-playbook run checks a whole matrix (forks=10) and CI stays short.


@dataclass
class HostRun:
    failed: bool = False
    msg: str = ""
    changed: int = 0
    messages: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    ran: list = field(default_factory=list)  # the modules of the tasks that ran (ok or changed), in order


def run_hosts(private: Path, hosts: dict[str, dict], *extra: str, check: bool = False) -> dict[str, HostRun]:
    """playbooks/autotune.yml with one inventory host per case (conftest.run_cases), read per host."""
    runs = run_cases(private, "autotune.yml",
                     {name: {"ansible_python_interpreter": sys.executable, **hostvars} for name, hostvars in hosts.items()},
                     [*extra, *(["--check", "--diff"] if check else [])])
    return {name: host_run(run) for name, run in runs.items()}


def host_run(run: Run) -> HostRun:
    """What the autotune tests read of one host's run: the last failure, the summary's lines, the modules run."""
    summaries = [res["msg"] for _, res in run.results if isinstance(res.get("msg"), list)]
    return HostRun(failed=run.status == "failed", msg=run.failures[-1] if run.failures else "", changed=run.changed,
                   messages=[str(line) for line in summaries[-1]] if summaries else [], facts=run.facts,
                   ran=[action for action, _ in run.results])


def record_sha256(package: Path, rel: str) -> str:
    """What pip's RECORD says the file was, decoded (independent of the wheel's bytes)."""
    import base64

    for row in next(package.parent.glob("sglang-*.dist-info/RECORD")).read_text().splitlines():
        name, digest, _ = row.rsplit(",", 2)
        if name == f"sglang/{rel}":
            b64 = digest.split("=", 1)[1]
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    raise AssertionError(f"sglang/{rel} not in RECORD")


ACTIVE = '            "flashinfer_cutlass",\n'

# Triggers that used to leave `autotune=false` exiting 0 with the file still patched.
LOG_TRIGGERS = {
    "log_deleted": lambda log: shutil.rmtree(log.parent),
    "log_is_directory": lambda log: (log.unlink(), log.mkdir()),
    "log_is_json_list": lambda log: log.write_text("[]\n"),
    "log_original_line_edited": lambda log: log.write_text(log.read_text().replace(
        '# \\"flashinfer_cutlass\\",', '# \\"flashinfer_cutlass\\",  # edited')),
    "log_names_other_file": lambda log: log.write_text(json.dumps({"file": "/elsewhere.py", "patched_sha256": "0" * 64})),
}


def upstream_entry(version: str, text: str) -> str:
    for line in text.splitlines(keepends=True):
        if line.strip() == '"flashinfer_cutlass",':
            return line
    raise AssertionError(f"no active entry in {version}")


def test_every_release_and_trigger_then_autotune_false_gives_record_bytes(tmp_path):
    """Every release the tests use, in one inventory: patch, then the triggers
    that used to leave `autotune=false` exiting 0 with the file patched; `autotune=false`
    must give the bytes RECORD names (and the wheel holds), and a second run changes nothing."""
    cases: dict[str, dict] = {}
    for version in COMMENTED:
        triggers = (["none", "sed", "other_state_dir", "no_record", *LOG_TRIGGERS] if version == "0.5.12"
                    else ["none", "sed"])
        cases.update({f"v{version}-{t}": {"version": version, "trigger": t} for t in triggers})
    for version in UPSTREAM:  # each gate layout once with an entry commented by hand
        triggers = ("none", "sed_commented") if version in ("0.5.13", "0.5.14", "0.5.23") else ("none",)
        cases.update({f"v{version}-{t}": {"version": version, "trigger": t} for t in triggers})
    for name, case in cases.items():
        package = unpack_sglang(case["version"], tmp_path / name)
        rel = EXPECTED_STATE[case["version"]][1]
        case.update(package=package, gate=package / rel, state=tmp_path / f"{name}.state",
                    record=record_sha256(package, rel), original=shipped(case["version"]))
        assert case["gate"].read_bytes() == case["original"] and sha(case["original"]) == case["record"]
        if case["trigger"] == "no_record":  # an editable or source install: the fallback
            next(package.parent.glob("sglang-*.dist-info/RECORD")).unlink()
        if case["trigger"] == "sed":  # patched by hand before this project ever ran
            case["gate"].write_text(case["gate"].read_text().replace('# "flashinfer_cutlass",', '"flashinfer_cutlass",'))
    hostvars = {n: {"sglang_package_dir": str(c["package"]), "sglang_autotune_state_dir": str(c["state"])}
                for n, c in cases.items()}
    private = tmp_path / "runner"

    on = run_hosts(private, hostvars, "-e", "autotune=true")
    for name, case in cases.items():
        data, upstream = case["gate"].read_bytes(), case["version"] in UPSTREAM
        assert not on[name].failed, (name, on[name])
        assert on[name].facts["sglang_autotune_result"]["server_args"] == {}, name
        assert on[name].facts["sglang_autotune_result"]["enabled"] is True, name
        if upstream:
            assert data == case["original"] and on[name].changed == 0, name
            assert "enabled upstream" in " ".join(on[name].messages), name
            continue
        assert on[name].changed >= 1 and on[name].facts["sglang_autotune_result"]["state"] == "enabled", name
        assert data != case["original"] and len(data) == len(case["original"]) - 2  # exactly "# " removed
        assert b'\n            "flashinfer_cutlass",\n' in data
        log = json.loads(next(case["state"].glob("*.json")).read_text())
        assert (log["original_sha256"], log["patched_sha256"], log["version"]) == (
            case["record"], sha(data), case["version"]), name

    for name, case in cases.items():
        text = case["gate"].read_text()
        if case["trigger"] == "sed_commented":
            line = upstream_entry(case["version"], text)
            case["gate"].write_text(text.replace(line, line.replace('"', '# "', 1)))
        elif case["trigger"] == "other_state_dir":
            hostvars[name]["sglang_autotune_state_dir"] = str(tmp_path / f"{name}.other")
        elif case["trigger"] in LOG_TRIGGERS:
            log = next(case["state"].glob("*.json"))
            before = log.read_bytes()
            LOG_TRIGGERS[case["trigger"]](log)
            assert not log.is_file() or log.read_bytes() != before, name

    back = run_hosts(private, hostvars, "-e", "autotune=false")
    again = run_hosts(private, hostvars, "-e", "autotune=false")
    for name, case in cases.items():
        upstream = case["version"] in UPSTREAM
        assert not back[name].failed, (name, back[name])
        assert sha(case["gate"].read_bytes()) == case["record"], name
        assert case["gate"].read_bytes() == case["original"], name
        assert (again[name].failed, again[name].changed) == (False, 0), (name, again[name])
        assert back[name].changed >= (0 if upstream and case["trigger"] == "none" else 1), (name, back[name])
        assert back[name].facts["sglang_autotune_result"]["enabled"] is False, name
        assert back[name].facts["sglang_autotune_result"]["server_args"] == (
            {"disable-flashinfer-autotune": True} if upstream else {}), name
        if not upstream and case["trigger"] not in ("log_is_directory", "other_state_dir"):
            assert not list(case["state"].glob("*.json")), name
    assert (f"Log: The log {next(cases['v0.5.12-log_is_directory']['state'].iterdir())} was not removed: it is a "
            "directory; remove it by hand. It is only a log") in " ".join(back["v0.5.12-log_is_directory"].messages)
    for result in (on["v0.5.12-no_record"], back["v0.5.12-no_record"]):
        assert "No RECORD lists this file, an editable or source install" in " ".join(result.messages)
    summary = " ".join(" ".join(back["v0.5.8-sed"].messages).split())
    assert (f"Roll back: ansible-playbook -i {private / 'inventory' / 'hosts.json'} -c local -l v0.5.8-sed "
            f"playbooks/autotune.yml -e sglang_package_dir={cases['v0.5.8-sed']['package']} "
            f"-e sglang_autotune_state_dir={cases['v0.5.8-sed']['state']} -e autotune=false") in summary, summary


def test_bad_inputs_refused_alike_in_check_mode_and_real_run(tmp_path, sglang_tree):
    """Each case fails before any change with its message, and --check --diff says the same."""
    rel = EXPECTED_STATE["0.5.10"][1]
    entry = COMMENTED_ENTRY

    def edit(replace):
        return lambda path: path.write_bytes(replace(path.read_bytes()))

    def replace_by(make):
        def change(path: Path) -> None:
            path.unlink()
            make(path)
        return change

    cases = {
        "crlf_whole_file": ("0.5.10", edit(lambda b: b.replace(b"\n", b"\r\n")), ["CRLF", "throughout the file"]),
        "crlf_entry_line": ("0.5.10", edit(lambda b: b.replace(entry.encode(), entry.encode()[:-1] + b"\r\n")),
                            ["CRLF", "on line(s) "]),
        "trailing_comment": ("0.5.10", edit(lambda b: b.replace(entry.encode(), entry.encode()[:-1] + b"  # later\n")),
                             ["reads '# \"flashinfer_cutlass\",  # later'", "not a form this role edits"]),
        "double_hash": ("0.5.10", edit(lambda b: b.replace(b'# "flash', b'## "flash')),
                        ["reads '## \"flashinfer_cutlass\",'", "not a form this role edits"]),
        "single_quotes": ("0.5.10", edit(lambda b: b.replace(b'# "flashinfer_cutlass",', b"# 'flashinfer_cutlass',")),
                          ["reads \"# 'flashinfer_cutlass',\"", "not a form this role edits"]),
        "removed_upstream": ("0.5.23", edit(lambda b: b.replace(b'    "flashinfer_cutlass",\n', b"")),
                             ["SGLang 0.5.23", "has no \"flashinfer_cutlass\", entry", "removed or the file edited"]),
        "fifo": ("0.5.10", replace_by(os.mkfifo), ["is a FIFO (named pipe), expected a regular Python file"]),
        "device": ("0.5.10", replace_by(lambda p: os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))),
                   ["is a character device, expected a regular Python file"]),
        "directory": ("0.5.10", replace_by(Path.mkdir), ["is a directory, expected a regular Python file"]),
        "relative_package_dir": ("0.5.10", None, ["sglang_package_dir='relative/sglang' is a relative path",
                                                  "Give an absolute path"]),
        "not_python": ("0.5.10", None, ["is not a Python 3 interpreter", "Set sglang_autotune_python"]),
    }
    hosts, roots = {}, []
    for name, (version, change, _) in cases.items():
        package = unpack_sglang(version, tmp_path / name)
        state = tmp_path / f"{name}.state"
        state.mkdir()
        (state / "unrelated.json").write_text("{}\n")
        roots += [package.parent, state]
        if change:
            change(package / EXPECTED_STATE[version][1])
        hosts[name] = {"sglang_package_dir": str(package), "sglang_autotune_state_dir": str(state)}
    hosts["relative_package_dir"]["sglang_package_dir"] = "relative/sglang"
    not_python = tmp_path / "not_python" / "python"
    not_python.write_text("#!/bin/sh\necho hello\n")
    not_python.chmod(0o755)
    del hosts["not_python"]["sglang_package_dir"]
    hosts["not_python"]["sglang_autotune_python"] = str(not_python)
    # A valid Python file that starts with a UTF-8 BOM is accepted (and patched): a
    # release that shipped one, so RECORD is rewritten to name those bytes.
    bom = unpack_sglang("0.5.10", tmp_path / "bom")
    (bom / rel).write_bytes(b"\xef\xbb\xbf" + (bom / rel).read_bytes())
    set_record_hash(bom, rel, (bom / rel).read_bytes())
    hosts["bom"] = {"sglang_package_dir": str(bom), "sglang_autotune_state_dir": str(tmp_path / "bom.state")}

    before = tree_digest(*roots)
    dry = run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true", check=True)
    assert tree_digest(*roots) == before
    real = run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true")
    assert tree_digest(*roots) == before
    for name, (_, _, needles) in cases.items():
        for result in (dry[name], real[name]):
            assert result.failed and result.changed == 0, (name, result)
            for needle in needles:
                assert needle in result.msg, (name, result.msg)
        assert dry[name].msg == real[name].msg, name
    assert not dry["bom"].failed and not real["bom"].failed, (dry["bom"], real["bom"])
    assert dry["bom"].changed >= 1 and real["bom"].changed >= 1
    assert (bom / rel).read_bytes().startswith(b"\xef\xbb\xbf")
    assert b'\n            "flashinfer_cutlass",\n' in (bom / rel).read_bytes()


def set_record_hash(package: Path, rel: str, data: bytes) -> None:
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = next(package.parent.glob("sglang-*.dist-info/RECORD"))
    rows = [f"sglang/{rel},sha256={digest},{len(data)}" if row.startswith(f"sglang/{rel},") else row
            for row in record.read_text().splitlines()]
    record.write_text("\n".join(rows) + "\n")


# --- the role's shape: decide, edit, prove ------------------------------------------

ROLE = REPO / "roles" / "sglang_autotune"
# Action plugins that run on the controller and send nothing to the target.
ON_CONTROLLER = {"ansible.builtin.validate_argument_spec", "ansible.builtin.set_fact", "ansible.builtin.debug"}


def test_the_role_is_one_decision_one_edit_one_proof():
    """The edit is lineinfile's; the YAML hands the modules after the decision only the edit's
    path, regexp, line and validate command, the package directory and the published choice."""
    import yaml

    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    keys = {"name", "register", "when", "vars"}
    modules = [next(k for k in task if k not in keys) for task in tasks]
    # The gate module publishes the one result itself (ansible_facts): no set_fact relays the choice.
    assert modules == ["sglang_autotune_gate", "ansible.builtin.lineinfile", "sglang_autotune_proof",
                       "ansible.builtin.debug"]
    assert sorted(p.name for p in (ROLE / "tasks").iterdir()) == ["main.yml"]
    assert tasks[1]["ansible.builtin.lineinfile"] == {
        "path": "{{ sglang_autotune_gate.file }}", "regexp": "{{ sglang_autotune_gate.regexp }}",
        "line": "{{ sglang_autotune_gate.edit_line }}", "backrefs": True,
        # The temporary file is proven before it replaces the original (sglang_gate_validate).
        "validate": "{{ sglang_autotune_gate.validate }}"}
    assert tasks[2]["sglang_autotune_proof"] == {
        "package_dir": "{{ sglang_autotune_gate.package_dir }}", "state_dir": "{{ sglang_autotune_state_dir }}",
        "enabled": "{{ sglang_autotune_gate.enabled }}"}
    assert tasks[2]["when"] == "sglang_autotune_edit is not skipped"
    # No Python copy of what lineinfile writes: nothing predicts the edited bytes' sha256.
    for path in [*ROLE.glob("library/*.py"), *ROLE.glob("module_utils/*.py")]:
        text = path.read_text()
        assert "expect_sha256" not in text and ".expand(" not in text, path
        assert len(text.splitlines()) <= 400, (path, "over 400 lines: split it by job")


def test_a_no_op_sends_one_task_to_the_target_and_a_patch_three(tmp_path):
    hosts = {}
    for version in ("0.5.12", "0.5.23"):
        package = unpack_sglang(version, tmp_path / version)
        hosts[f"v{version}"] = {"sglang_package_dir": str(package), "sglang_autotune_state_dir": str(tmp_path / f"{version}.state")}
    private = tmp_path / "runner"
    first = run_hosts(private, hosts, "-e", "autotune=true")
    again = run_hosts(private, hosts, "-e", "autotune=true")
    back = run_hosts(private, hosts, "-e", "autotune=false")
    on_target = {name: [[m for m in run[name].ran if m not in ON_CONTROLLER] for run in (first, again, back)]
                 for name in hosts}
    patch = ["sglang_autotune_gate", "ansible.builtin.lineinfile", "sglang_autotune_proof"]
    assert on_target["v0.5.12"] == [patch, ["sglang_autotune_gate"], patch], on_target
    assert on_target["v0.5.23"] == [["sglang_autotune_gate"]] * 3, on_target
    assert (again["v0.5.12"].changed, again["v0.5.23"].changed, back["v0.5.23"].changed) == (0, 0, 0)
