"""playbooks/sglang.yml refuses a bad install request before it changes anything.

The play runs against this machine as a member of sglang_containers; each case
must fail in the role's first step, so that no package, user or directory is
touched (the install root must not appear). The refusals of bad values run in one
ansible-playbook process, each case an inventory host of its own (conftest.run_cases).
"""

from __future__ import annotations

import json

import pytest
from pathlib import Path

from conftest import as_host_vars, run_cases, run_playbook, tree_digest

INVENTORY = "[sglang_containers]\nlocalhost ansible_connection=local\n"


REQUESTS = [
        (["-e", "sglang_source=git", "-e", "sglang_git_url="],
         ["Invalid SGLang install request", "source=git", "a git URL and ref for source git"]),
        (["-e", "sglang_source=pypi", "-e", '{"sglang_version": "0.5.23; rm -rf /"}'],
         ['sglang_version="0.5.23; rm -rf /" is not a version', "no spaces, newline or operators"]),
        (["-e", "sglang_upgrade=true", "-e", "sglang_rollback=true"],
         ["Invalid SGLang install request", "upgrade=true, rollback=true", "upgrade and rollback not together"]),
        (["-e", "sglang_source=conda"],
         ["sglang_source", "conda", "pypi, nightly, git"]),
]


def _only_checks_ran(tasks: list[str]) -> bool:
    """The play stopped in the role's argument check and validate.yml: nothing else ran."""
    return bool(tasks) and all(task.startswith(("sglang : Check", "sglang : Validat")) for task in tasks)


INSTALL_TASK = "sglang : Ensure SGLang is installed for this request, the previous install kept"


def _refused_by_the_install_module_first(tasks: list[str]) -> bool:
    """After the checks, the install module ran and refused before making anything: it comes before the
    service user, the CUDA packages and the root's directories, which it makes itself."""
    tasks = [task for task in tasks if task != "sglang : Describe the request"]  # a set_fact
    return tasks[-1] == INSTALL_TASK and _only_checks_ran(tasks[:-1])


VALUES = [
        (["-e", "sglang_source=pypi", "-e", '{"sglang_version": "0.5.23\\n"}'],
         ['sglang_version="0.5.23\\n" is not a version', "no spaces, newline or operators"]),
        (["-e", "sglang_rollback_to=../../etc"],
         ['sglang_rollback_to="../../etc" is not the name of a kept install', "without '/', '..'"]),
        (["-e", "sglang_rollback_to=pypi-0.5.12/x"],
         ['sglang_rollback_to="pypi-0.5.12/x" is not the name of a kept install']),
        (["-e", "sglang_rollback_to=.."],
         ['sglang_rollback_to=".." is not the name of a kept install']),
        (["-e", '{"sglang_rollback_to": "pypi-0.5.12\\\\x"}'],
         ['sglang_rollback_to="pypi-0.5.12\\\\x" is not the name of a kept install']),
        (["-e", '{"sglang_rollback_to": "pypi-0.5.12\\tx"}'],
         ['sglang_rollback_to="pypi-0.5.12\\tx" is not the name of a kept install']),
        (["-e", '{"sglang_pip_extra_args": "--no-index; touch /tmp/pwned"}'],
         ['sglang_pip_extra_args="--no-index; touch /tmp/pwned" contains shell syntax', "never to a shell"]),
        (["-e", '{"sglang_pip_extra_args": "--cert $(cat /etc/shadow)"}'],
         ["contains shell syntax"]),
        (["-e", '{"sglang_pip_extra_args": "--no-index\\n--pre"}'],
         ["contains shell syntax", "a line break"]),
]
ROOTS = ["/", "/etc", "/usr/", "//usr//local", "/var/lib", "/opt/sglang/..", "relative/sglang"]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every case above in one run of sglang.yml: each a sglang_containers member of its own (a
    local-connection alias of this machine), its -e arguments host variables, its own sglang_root."""
    tmp = tmp_path_factory.mktemp("install-input")
    cases = {f"{kind}{index}": {"sglang_root": str(tmp / f"{kind}{index}" / "opt-sglang"), **as_host_vars(extra)}
             for kind, given in (("request", REQUESTS), ("value", VALUES)) for index, (extra, _) in enumerate(given)}
    cases.update({f"root{index}": {"sglang_root": root} for index, root in enumerate(ROOTS)})
    return tmp, run_cases(tmp / "runner", "sglang.yml", cases, [], group="sglang_containers")


def _refused(refusals, name: str, needles: list[str]):
    tmp, runs = refusals
    run = runs[name]
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert not (tmp / name).exists()
    return run


@pytest.mark.parametrize(("index", "needles"), [(i, needles) for i, (_, needles) in enumerate(REQUESTS)])
def test_bad_request_changes_nothing(refusals, index, needles):
    run = _refused(refusals, f"request{index}", needles)
    assert not [task for task in run.tasks if task.startswith("sglang_autotune")]  # the play stopped in the first role


@pytest.mark.parametrize(("index", "needles"), [(i, needles) for i, (_, needles) in enumerate(VALUES)])
def test_bad_value_is_refused_naming_the_variable(refusals, index, needles):
    run = _refused(refusals, f"value{index}", needles)
    assert _only_checks_ran(run.tasks), run.tasks


@pytest.mark.parametrize(("index", "root"), list(enumerate(ROOTS)), ids=ROOTS)
def test_system_directory_as_root_is_refused(refusals, index, root):
    run = _refused(refusals, f"root{index}", [f"sglang_root={json.dumps(root)} cannot hold SGLang's installs",
                                              "not a system directory"])
    # The play stopped in the role's first checks: nothing was installed, created or pruned.
    assert _only_checks_ran(run.tasks), run.tasks


@pytest.mark.parametrize("check", [False, True])
def test_a_root_through_a_symlink_to_a_system_directory_is_refused_on_the_target(tmp_path, check):
    link = tmp_path / "sgl-link"
    link.symlink_to("/usr/local")
    private = tmp_path / "runner"
    private.mkdir()
    before = tree_digest(Path("/usr/local"))
    run = run_playbook(private, "sglang.yml", ["-e", f"sglang_root={link}", *(["--check"] if check else [])],
                       inventory=INVENTORY)
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    assert f"sglang_root={link} (which resolves to /usr/local here) is a system directory" in message, message
    assert _refused_by_the_install_module_first(run.tasks), run.tasks
    assert tree_digest(Path("/usr/local")) == before


def test_check_mode_summary_claims_no_installer_for_an_install_not_made(tmp_path):
    root = tmp_path / "opt-sglang"
    private = tmp_path / "runner"
    private.mkdir()
    run = run_playbook(private, "sglang.yml", ["-e", f"sglang_root={root}", "-e", "sglang_install_cuda_toolkit=false",
                                               "--check"], inventory=INVENTORY)
    assert "installer: none yet: check mode, install would use uv" in run.stdout, run.stdout
    assert "installer: pip" not in run.stdout
    assert not root.exists()
