"""sglang_install owns the installs: real wheels into real virtualenvs on this machine, through Ansible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, sglang_wheel, tree_digest, wheel_cache

ROLE = REPO / "roles" / "sglang"


def request(version: str, installer: str = "uv") -> dict:
    return {"source": "pypi", "version": version, "git": "", "torch": "", "flashinfer": "",
            "heavy_dependencies": False,
            "indexes": {"nightly": "", "torch": "", "flashinfer": "", "flashinfer_nightly": ""},
            "extra_args": f"--no-index --find-links {wheel_cache()}", "python": "/usr/bin/python3",
            "installer": installer}


def install(root: Path, check: bool = False, **args) -> dict:
    """One ad-hoc call of the module, as a task makes it; returns its result."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LIBRARY=str(ROLE / "library"),
               ANSIBLE_MODULE_UTILS=str(ROLE / "module_utils"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    argv = ["ansible", "localhost", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
            "-m", "sglang_install", "-a", json.dumps({"root": str(root), **args}), *(["--check"] if check else [])]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300).stdout
    return json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_install_noop_upgrade_rollback_failure_and_a_killed_install(tmp_path):
    sglang_wheel("0.5.12")
    sglang_wheel("0.5.23")
    root = tmp_path / "opt-sglang"

    first = install(root, request=request("0.5.12"))
    assert first["decision"] == "install" and first["changed"], first
    name = first["current"]
    assert first["current_manifest"]["resolved"]["sglang"] == "0.5.12"
    assert os.readlink(root / "current") == str(root / "venvs" / name)

    again = install(root, request=request("0.5.12"))
    assert again["decision"] == "none" and not again["changed"]

    # Check mode says what it would do and changes nothing.
    before = tree_digest(root / "venvs", root / "current")
    dry = install(root, check=True, request=request("0.5.23"))
    assert dry["decision"] == "install" and dry["changed"] and dry["current"] != name
    assert tree_digest(root / "venvs", root / "current") == before

    upgraded = install(root, request=request("0.5.23"))
    assert upgraded["current_manifest"]["resolved"]["sglang"] == "0.5.23"
    assert upgraded["current_manifest"]["previous"] == name
    assert upgraded["diff"]["before"] == f"current -> {name}\n"

    back = install(root, request=request("0.5.23"), rollback=True)
    assert back["decision"] == "rollback" and back["current"] == name

    # A release that cannot be had: the unfinished virtualenv goes, current stays.
    failed = install(root, request=request("0.0.1"))
    assert failed.get("failed"), failed
    assert f"current still points at {name}" in failed["msg"]
    assert os.readlink(root / "current") == str(root / "venvs" / name)
    assert not [p for p in (root / "venvs").iterdir() if not (p / "sglang-manifest.json").exists()]

    # A run killed mid-install leaves a virtualenv without its manifest: never used, removed.
    leftover = root / "venvs" / "pypi-0.5.24-deadbeef"
    (leftover / "bin").mkdir(parents=True)
    pruned = install(root, request=request("0.5.12"))
    assert str(leftover) in pruned["pruned"] and not leftover.exists()
    assert pruned["current"] == name


def test_pip_installer_makes_its_own_virtualenv(tmp_path):
    sglang_wheel("0.5.12")
    result = install(tmp_path / "root", request=request("0.5.12", installer="pip"))
    assert result["changed"] and result["current_manifest"]["installer"] == "pip", result
    venv = tmp_path / "root" / "venvs" / result["current"]
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
                              "print(m.version('sglang'))"], capture_output=True, text=True).stdout.strip()
    assert version == "0.5.12"
