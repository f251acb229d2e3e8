"""playbooks/sglang.yml refuses a bad install request before it changes anything.

The play runs against this machine as a member of sglang_containers; each case
must fail in the role's first step, so that no package, user or directory is
touched (the install root must not appear).
"""

from __future__ import annotations

import json

import pytest
from pathlib import Path

from conftest import run_playbook, tree_digest

INVENTORY = "[sglang_containers]\nlocalhost ansible_connection=local\n"


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["-e", "sglang_source=git", "-e", "sglang_git_url="],
         ["Invalid SGLang install request", "source=git", "a git URL and ref for source git"]),
        (["-e", "sglang_source=pypi", "-e", '{"sglang_version": "0.5.23; rm -rf /"}'],
         ['sglang_version="0.5.23; rm -rf /" is not a version', "no spaces, newline or operators"]),
        (["-e", "sglang_upgrade=true", "-e", "sglang_rollback=true"],
         ["Invalid SGLang install request", "upgrade=true, rollback=true", "upgrade and rollback not together"]),
        (["-e", "sglang_source=conda"],
         ["sglang_source", "conda", "pypi, nightly, git"]),
    ],
)
def test_bad_request_changes_nothing(tmp_path, extra, needles):
    root = tmp_path / "opt-sglang"
    private = tmp_path / "runner"
    private.mkdir()
    run = run_playbook(private, "sglang.yml", ["-e", f"sglang_root={root}", *extra], inventory=INVENTORY)
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert not root.exists()
    assert "TASK [sglang_autotune" not in run.stdout  # the play stopped in the first role


def _tasks_run(stdout: str) -> list[str]:
    return [line.split("[", 1)[1].split("]", 1)[0] for line in stdout.splitlines() if line.startswith("TASK [")]


def _only_checks_ran(stdout: str) -> bool:
    """The play stopped in the role's argument check and validate.yml: nothing else ran."""
    return all(task.startswith(("sglang : Check", "sglang : Validat")) for task in _tasks_run(stdout))


INSTALL_TASK = "sglang : Ensure SGLang is installed for this request, the previous install kept"


def _refused_by_the_install_module_first(stdout: str) -> bool:
    """After the checks, the install module ran and refused before making anything: it comes before the
    service user, the CUDA packages and the root's directories, which it makes itself."""
    tasks = [task for task in _tasks_run(stdout) if task != "sglang : Describe the request"]  # a set_fact
    return tasks[-1] == INSTALL_TASK and _only_checks_ran("\n".join(f"TASK [{task}]" for task in tasks[:-1]))


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["-e", "sglang_source=pypi", "-e", '{"sglang_version": "0.5.23\\n"}'],
         ['sglang_version="0.5.23\\n" is not a version', "no spaces, newline or operators"]),
        (["-e", "sglang_rollback_to=../../etc"],
         ['sglang_rollback_to="../../etc" is not the name of a kept install', "without '/', '..'"]),
        (["-e", "sglang_rollback_to=pypi-0.5.12/x"],
         ['sglang_rollback_to="pypi-0.5.12/x" is not the name of a kept install']),
        (["-e", "sglang_rollback_to=.."],
         ['sglang_rollback_to=".." is not the name of a kept install']),
        (["-e", '{"sglang_pip_extra_args": "--no-index; touch /tmp/pwned"}'],
         ['sglang_pip_extra_args="--no-index; touch /tmp/pwned" contains shell syntax', "never to a shell"]),
        (["-e", '{"sglang_pip_extra_args": "--cert $(cat /etc/shadow)"}'],
         ["contains shell syntax"]),
        (["-e", '{"sglang_pip_extra_args": "--no-index\\n--pre"}'],
         ["contains shell syntax", "a line break"]),
    ],
)
def test_bad_value_is_refused_naming_the_variable(tmp_path, extra, needles):
    root = tmp_path / "opt-sglang"
    private = tmp_path / "runner"
    private.mkdir()
    run = run_playbook(private, "sglang.yml", ["-e", f"sglang_root={root}", *extra], inventory=INVENTORY)
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    for needle in needles:
        assert needle in message, message
    assert not root.exists()
    assert _only_checks_ran(run.stdout), _tasks_run(run.stdout)


@pytest.mark.parametrize("root", ["/", "/etc", "/usr/", "//usr//local", "/var/lib", "/opt/sglang/..", "relative/sglang"])
def test_system_directory_as_root_is_refused(tmp_path, root):
    private = tmp_path / "runner"
    private.mkdir()
    run = run_playbook(private, "sglang.yml", ["-e", f"sglang_root={root}"], inventory=INVENTORY)
    assert run.status == "failed", run.stdout
    assert run.changed == 0
    message = " ".join(run.failures)
    assert f"sglang_root={json.dumps(root)} cannot hold SGLang's installs" in message, message
    assert "not a system directory" in message
    # The play stopped in the role's first checks: nothing was installed, created or pruned.
    assert _only_checks_ran(run.stdout), _tasks_run(run.stdout)


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
    assert _refused_by_the_install_module_first(run.stdout), _tasks_run(run.stdout)
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
