"""playbooks/sglang.yml refuses a bad install request before it changes anything.

The play runs against this machine as a member of sglang_containers; each case
must fail in the role's first step, so that no package, user or directory is
touched (the install root must not appear).
"""

from __future__ import annotations

import pytest
from conftest import run_playbook

INVENTORY = "[sglang_containers]\nlocalhost ansible_connection=local\n"


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["-e", "sglang_source=git", "-e", "sglang_git_url="],
         ["Invalid SGLang install request", "source=git", "a git URL and ref for source git"]),
        (["-e", "sglang_source=pypi", "-e", '{"sglang_version": "0.5.23; rm -rf /"}'],
         ["Invalid SGLang install request", '"0.5.23; rm -rf /"', "versions like 0.5.23"]),
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
