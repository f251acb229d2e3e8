"""playbooks/autotune.yml on the inputs and faults of issue 17, through ansible-runner.

One inventory host per case (see test_playbook_autotune.run_hosts), real SGLang
trees, real faults (a read-only mount, chattr, a full tmpfs). A refusal must
name what it refuses, change nothing (tree and state directory digests), and
read the same in --check and a real run; a log that cannot be written is a
warning; a printed rollback command works when pasted into a shell.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import EXPECTED_STATE, REPO, tree_digest, unpack_sglang, wheel_member
from fs_faults import chattr, full_disk, readonly_mount
from test_playbook_autotune import COMMENTED_ENTRY, run_hosts, set_record_hash

import ansible.module_utils.sglang_gate_write as logs

VERSION = "0.5.12"
REL = EXPECTED_STATE[VERSION][1]
SHIPPED = hashlib.sha256(wheel_member(VERSION, "sglang/" + REL)).hexdigest()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(tmp_path: Path, name: str, record: bool = True) -> tuple[Path, Path, Path]:
    """(package, gate file, state dir) of a fresh 0.5.12 tree."""
    package = unpack_sglang(VERSION, tmp_path / name)
    if not record:
        next(package.parent.glob("sglang-*.dist-info/RECORD")).unlink()
    return package, package / REL, tmp_path / f"{name}.state"


def hostvars(package: Path, state: Path, **more) -> dict:
    return {"sglang_package_dir": str(package), "sglang_autotune_state_dir": str(state), **more}


# --- item 1: one reading of `autotune` -------------------------------------------

REFUSED_SPELLINGS = {"y": "y", "t": "t", "space_true": " true", "T": "T", "n": "n", "f": "f", "true_nl": "true\n",
                     "float": 1.0}
ACCEPTED_SPELLINGS = {"yes": ("yes", True), "ON": ("ON", True), "one": ("1", True), "int_1": (1, True),
                      "No": ("No", False), "off": ("off", False), "zero": ("0", False), "bool_false": (False, False)}


def test_autotune_spellings_from_a_patched_file(tmp_path):
    """From a patched file: a refused spelling never rolls back; an accepted one does what it says."""
    hosts, gates = {}, {}
    for name in [*REFUSED_SPELLINGS, *ACCEPTED_SPELLINGS, "own_variable_y"]:
        package, gate_file, state = tree(tmp_path, name)
        hosts[name] = hostvars(package, state)
        gates[name] = gate_file
    run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true")
    patched = {name: sha(path) for name, path in gates.items()}
    assert all(digest != SHIPPED for digest in patched.values())
    for name, value in REFUSED_SPELLINGS.items():
        hosts[name]["autotune"] = value
    for name, (value, _) in ACCEPTED_SPELLINGS.items():
        hosts[name]["autotune"] = value
    hosts["own_variable_y"]["sglang_autotune_enabled"] = "y"
    refused = [n for n in hosts if n not in ACCEPTED_SPELLINGS]
    roots = [p for n in refused for p in (gates[n].parents[3], tmp_path / f"{n}.state")]

    before = tree_digest(*roots)
    dry = run_hosts(tmp_path / "runner", hosts, check=True)
    assert tree_digest(*roots) == before
    real = run_hosts(tmp_path / "runner", hosts)
    assert tree_digest(*roots) == before
    for name in refused:
        value = "y" if name == "own_variable_y" else REFUSED_SPELLINGS[name]
        for result in (dry[name], real[name]):
            assert result.failed and result.changed == 0, (name, result)
            assert f"sglang_autotune_enabled (from -e autotune=... unless set itself) is {value!r}" in result.msg
            assert "refused before any change" in result.msg
        assert dry[name].msg == real[name].msg
        assert sha(gates[name]) == patched[name], name  # never rolled back
    for name, (_, want) in ACCEPTED_SPELLINGS.items():
        assert not real[name].failed, (name, real[name])
        assert real[name].facts["sglang_autotune_result"]["enabled"] is want, name
        assert (sha(gates[name]) == SHIPPED) is (not want), name
        assert dry[name].changed == real[name].changed, name


def test_autotune_y_on_the_command_line_does_not_roll_back(tmp_path):
    """The issue's reproduction: `-e autotune=y` after a patch, through the operator's command line."""
    package, gate_file, state = tree(tmp_path, "cli")
    hosts = {"cli": hostvars(package, state)}
    run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true")
    patched = sha(gate_file)
    for extra, spelling in (("autotune=y", "y"), ("autotune=t", "t"), ('{"autotune": " true"}', " true"),
                            ("autotune=F", "F")):
        before = tree_digest(package.parent, state)
        for check in (True, False):
            result = run_hosts(tmp_path / "runner", hosts, "-e", extra, check=check)["cli"]
            assert result.failed and f"is {spelling!r} (str)" in result.msg, result
        assert tree_digest(package.parent, state) == before and sha(gate_file) == patched


# --- items 7, 8, 10: refused alike in --check and a real run ---------------------

def nul_in_gate(package: Path) -> None:
    path = package / REL
    path.write_bytes(path.read_bytes().replace(COMMENTED_ENTRY.encode(), b'            # "flashinfer_cutlass",\x00\n'))


def record_hash(digest: str):
    def change(package: Path) -> None:
        record = next(package.parent.glob("sglang-*.dist-info/RECORD"))
        record.write_text("\n".join(f"sglang/{REL},{digest},1" if row.startswith(f"sglang/{REL},") else row
                                    for row in record.read_text().splitlines()) + "\n")
    return change


def symlinked_gate(package: Path) -> None:
    path = package / REL
    real = package.parent / "elsewhere.py"
    path.rename(real)
    path.symlink_to(real)


def tab_entry(package: Path) -> None:
    path = package / REL
    path.write_bytes(path.read_bytes().replace(COMMENTED_ENTRY.encode(), b'\t\t\t# "flashinfer_cutlass",\n'))


def record_nul(package: Path) -> None:
    record = next(package.parent.glob("sglang-*.dist-info/RECORD"))
    record.write_bytes(record.read_bytes() + b"\x00\n")


REFUSALS = {
    # name: (change to the tree, fault around both runs, needles)
    "nul_in_gate": (nul_in_gate, None, ["holds a NUL byte (\\x00) on line", "refusing to read or edit it"]),
    "record_hash_short": (record_hash("sha256=AAAA"), None, ["the gate file, but its hash 'sha256=AAAA'",
                                                             "this RECORD is corrupt"]),
    "record_hash_empty": (record_hash(""), None, ["the gate file, but it has no hash", "this RECORD is corrupt"]),
    "record_hash_sha512": (record_hash("sha512=" + "A" * 86), None, ["its hash uses sha512"]),
    "record_nul": (record_nul, None, ["holds a NUL byte: this RECORD is corrupt"]),
    "symlinked_gate": (symlinked_gate, None, ["is a symbolic link (to ", "pip never installs one",
                                              "cp --remove-destination"]),
    "tab_entry": (tab_entry, None, ["on the entry line itself (now '\\t\\t\\t# \"flashinfer_cutlass\",'",
                                    "a TAB or other whitespace"]),
    "readonly_mount": (None, lambda p: readonly_mount((p / REL).parent),
                       ["cannot be edited (enable the \"flashinfer_cutlass\", entry)", "is on a read-only mount",
                        "remount it read-write", "--check fails the same way"]),
    "immutable_gate": (None, lambda p: chattr(p / REL, "i"),
                       ["is immutable (lsattr shows 'i'); clear it with chattr -i", "Nothing was changed"]),
    "immutable_dir": (None, lambda p: chattr((p / REL).parent, "i"), ["is immutable (lsattr shows 'i')"]),
}


def test_gate_faults_refused_alike_in_check_mode_and_real_run(tmp_path):
    hosts, roots, packages = {}, [], {}
    for name, (change, _, _) in REFUSALS.items():
        package, _, state = tree(tmp_path, name)
        state.mkdir()
        (state / "unrelated.json").write_text("{}\n")
        if change:
            change(package)
        hosts[name], packages[name] = hostvars(package, state), package
        roots += [package.parent, state]
    # Without RECORD the log decides a later rollback: an unwritable log refuses the patch.
    package, _, state = tree(tmp_path, "no_record_log_unwritable", record=False)
    state.write_text("a file where the log directory should be\n")
    hosts["no_record_log_unwritable"] = hostvars(package, state)
    roots += [package.parent, state]
    needles = {name: spec[2] for name, spec in REFUSALS.items()}
    needles["no_record_log_unwritable"] = ["no RECORD lists", "so this role's log is what a later rollback reads",
                                           f"sglang_autotune_state_dir={state} is not a directory"]

    with contextlib.ExitStack() as faults:
        for name, (_, fault, _) in REFUSALS.items():
            if fault:
                faults.enter_context(fault(packages[name]))
        before = tree_digest(*roots)
        dry = run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true", check=True)
        assert tree_digest(*roots) == before
        real = run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true")
        assert tree_digest(*roots) == before
    for name in hosts:
        for result in (dry[name], real[name]):
            assert result.failed and result.changed == 0, (name, result)
            for needle in needles[name]:
                assert needle in result.msg, (name, result.msg)
            assert "Module failed" not in result.msg and "Traceback" not in result.msg
        assert dry[name].msg == real[name].msg, name
    assert str(packages["symlinked_gate"].parent / "elsewhere.py") in real["symlinked_gate"].msg


# --- item 5: a log that cannot be written is a warning -----------------------------

LOG_FAULTS = ["state_dir_is_a_file", "state_dir_under_a_file", "log_is_a_directory", "readonly_mount",
              "immutable_dir", "disk_full"]


def test_a_log_that_cannot_be_written_never_fails_a_patch_or_rollback(tmp_path):
    hosts, cases = {}, {}
    for fault in LOG_FAULTS:
        package, gate_file, state = tree(tmp_path, fault)
        log = logs.state_file_for(state, gate_file.resolve())
        manager = contextlib.nullcontext()
        if fault == "state_dir_is_a_file":
            state.write_text("not a directory\n")
        elif fault == "state_dir_under_a_file":
            (tmp_path / "a_file").write_text("")
            state = tmp_path / "a_file" / "state"
            log = logs.state_file_for(state, gate_file.resolve())
        else:
            state.mkdir()
            if fault == "log_is_a_directory":
                log.mkdir()
            manager = {"readonly_mount": readonly_mount, "immutable_dir": lambda p: chattr(p, "i"),
                       "disk_full": full_disk}.get(fault, lambda p: contextlib.nullcontext())(state)
        hosts[fault] = hostvars(package, state)
        cases[fault] = (gate_file, state, log, manager)

    with contextlib.ExitStack() as faults:
        for _, _, _, manager in cases.values():
            faults.enter_context(manager)
        logs_before = tree_digest(*[state for _, state, _, _ in cases.values()])
        dry = run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true", check=True)
        assert all(sha(gate_file) == SHIPPED for gate_file, _, _, _ in cases.values())
        runs = [run_hosts(tmp_path / "runner", hosts, "-e", f"autotune={autotune}")
                for autotune in ("true", "false", "true", "false")]
        assert tree_digest(*[state for _, state, _, _ in cases.values()]) == logs_before
    for fault, (gate_file, state, log, _) in cases.items():
        # (result, what the run tried to do with the log): patches write it, rollbacks remove it.
        for result, step in ((dry[fault], "written"), *((run[fault], ("written", "removed")[i % 2])
                                                         for i, run in enumerate(runs))):
            assert not result.failed and result.changed >= 1, (fault, result)
            line = next(m for m in result.messages if m.startswith("Log: "))
            if (fault == "disk_full" and result is dry[fault]) or (step == "removed" and fault != "log_is_a_directory"):
                # Only the write itself finds a disk full; a log never written has nothing to remove.
                assert line == f"Log: {log}", (fault, line)
                continue
            assert line.startswith(f"Log: The log {log} was not {step}: "), (fault, line)
            assert "It is only a log (pip's RECORD decides), so the edit stands and later runs work." in line
        assert sha(gate_file) == SHIPPED, fault  # the last run rolled back to RECORD's bytes
        assert runs[0][fault].facts["sglang_autotune_result"]["state"] == "enabled"
        assert runs[2][fault].facts["sglang_autotune_result"]["state"] == "enabled"  # later runs still work


# --- item 6: every printed command works when pasted -------------------------------

ODD_DIRS = {"space": "with space", "single_quote": "it's", "double_quote": 'say "hi"', "dollar": "cost $5 `id` $NO_SUCH_VAR ~",
            "tab": "tab\there", "backslash": "back\\slash"}


def test_printed_rollback_commands_work_in_a_shell(tmp_path):
    hosts, gates = {}, {}
    for name, odd in ODD_DIRS.items():
        package = unpack_sglang(VERSION, tmp_path / odd / "site")
        gates[name] = package / REL
        hosts[name] = hostvars(package, tmp_path / odd / "state dir")
    on = run_hosts(tmp_path / "runner", hosts, "-e", "autotune=true")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for name, odd in ODD_DIRS.items():
        assert not on[name].failed and sha(gates[name]) != SHIPPED, (name, on[name])
        command = next(m for m in on[name].messages if m.startswith("Roll back: ")).removeprefix("Roll back: ")
        assert f"-l {name} playbooks/autotune.yml -e " in command
        assert "-e '{\"sglang_package_dir\": " in command, command  # JSON: k=v would split at whitespace
        proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert proc.returncode == 0, (name, command, proc.stdout[-3000:], proc.stderr[-3000:])
        assert sha(gates[name]) == SHIPPED, (name, command)
        assert not list((tmp_path / odd / "state dir").glob("*.json")), name


def test_a_package_dir_that_ansible_would_expand_is_refused_by_its_own_name(tmp_path):
    """lineinfile's path is of type path: `$HOME` in a directory's name would be expanded there, so the
    edit is refused before any change, naming the path as given and what it would become."""
    package, gate_file, state = tree(tmp_path, "cost $HOME dir")
    hosts = {"home": hostvars(package, state)}
    before = tree_digest(tmp_path)
    for check in (True, False):
        run = run_hosts(tmp_path.parent / f"{tmp_path.name}-runner", hosts, "-e", "autotune=true", check=check)
        assert run["home"].failed, run["home"]
        msg = " ".join(run["home"].msg.split())
        assert str(gate_file) in msg, msg
        assert f"would open {str(gate_file).replace('$HOME', os.environ['HOME'])} instead" in msg, msg
        assert "Nothing was changed" in msg, msg
        assert tree_digest(tmp_path) == before


def test_sglang_yml_prints_the_same_rollback_command_on_its_own_line():
    """playbooks/sglang.yml prints the role's command as a line of its own, so it pastes whole."""
    play = yaml.safe_load((REPO / "playbooks" / "sglang.yml").read_text())[0]
    lines = play["post_tasks"][0]["ansible.builtin.debug"]["msg"]
    assert "File-only rollback (the server is not touched): {{ sglang_autotune_rollback_command }}" in lines
    assert sum("{{ sglang_autotune_rollback_command }}" in line for line in lines) == 1
