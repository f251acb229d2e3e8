"""The sglang_flags module, through ansible-playbook, as the role runs it.

On a real release (0.5.23, unpacked: SGLang cannot be imported, so the
static reader decides, as in the demo), and on a small `sglang` package both
readers can read, where SGLang's own parser runs and leads. In --check: the
parser is read-only, so check mode asks it as a real run does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, tree_digest
from test_sglang_runtime_args import FAKE_SERVER_ARGS

DEFAULT_PROFILE = {
    "model-path": "/models/GLM-5-NVFP4", "served-model-name": "glm-5", "tp-size": 8,
    "quantization": "modelopt_fp4", "moe-runner-backend": "flashinfer_cutlass",
    "max-running-requests": 1024, "disable-cuda-graph": True, "disable-radix-cache": True,
    "nsa-prefill-backend": "trtllm", "nsa-decode-backend": "trtllm", "trust-remote-code": True,
    "host": "127.0.0.1", "port": 30000,
}


def interpreter(tmp_path: Path, name: str, site: Path) -> Path:
    """A "virtualenv interpreter" that finds the sglang package under site."""
    python = tmp_path / name
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return python


def play(tmp_path: Path, tasks: list[dict]) -> list[dict]:
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        dict(task, ignore_errors=True) for task in tasks]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_LIBRARY=str(REPO / "roles/sglang_server/library"),
               ANSIBLE_MODULE_UTILS=":".join(str(REPO / "roles" / r / "module_utils") for r in ("sglang_server", "sglang_locate", "systemd_files")),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "--check", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        env=env, capture_output=True, text=True, check=False)
    return [task["hosts"]["localhost"] for task in json.loads(run.stdout)["plays"][0]["tasks"]]


def test_real_release_static_reader_decides(tmp_path, flag_sources):
    package = flag_sources("0.5.23")
    python = interpreter(tmp_path, "python", package.parent)
    before = tree_digest(package.parent)
    ok, not_asked, failed = play(tmp_path, [
        {"sglang_flags": {"python": str(python), "flags": DEFAULT_PROFILE,
                          "env_flags": {"api-key": "SGLANG_SERVER_API_KEY"}}},
        {"sglang_flags": {"package_dir": str(package), "flags": DEFAULT_PROFILE}},
        {"sglang_flags": {"package_dir": str(package), "flags": {"tp": 8}}},
    ])
    assert ok["changed"] is False and ok["version"] == "0.5.23" and ok["flag_count"] == 543
    assert ok["package_dir"] == str(package)
    assert ok["command_line"].startswith("--model-path /models/GLM-5-NVFP4 --served-model-name")
    assert "--dsa-prefill-backend trtllm" in ok["command_line"]
    assert ok["env_flags"] == [["--api-key", "SGLANG_SERVER_API_KEY"]] and ok["config_flag"] == "--config"
    # The probe ran (its source read back from the AnsiballZ payload) and could not import SGLang.
    assert ok["runtime_parser"] == "not available"
    assert "SGLang's own parser cannot run here (ModuleNotFoundError: " in ok["notes"][-1]
    assert not_asked["runtime_parser"] == "not asked" and not_asked["argv"] == ok["argv"]
    assert failed["failed"] is True and failed["changed"] is False
    assert "argparse would take it as an abbreviation of --tp-size" in failed["msg"]
    assert failed["problems"] == failed["msg"].split("\n  - ")[1:]
    assert tree_digest(package.parent) == before


def test_sglang_parser_leads(tmp_path):
    site = tmp_path / "site"
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "version.py").write_text('__version__ = "0.5.99"\n')
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    python = str(interpreter(tmp_path, "python", site))
    before = tree_digest(site)
    agrees, decided, refused, off = play(tmp_path, [
        {"sglang_flags": {"python": python, "flags": {"model-path": "/m", "tp-size": 8}}},
        {"sglang_flags": {"python": python, "flags": {"model-path": "/m", "plugin-level": 3}}},
        {"sglang_flags": {"python": python, "flags": {"model-path": "/m", "attention-backend": "x"}}},
        {"sglang_flags": {"python": python, "runtime_check": False,
                          "flags": {"model-path": "/m", "attention-backend": "x"}}},
    ])
    assert agrees["runtime_parser"] == "agrees" and agrees["argv"] == ["--model-path", "/m", "--tp-size", "8"]
    assert decided["runtime_parser"] == "decided" and not decided.get("failed")
    assert decided["argv"] == ["--model-path", "/m", "--plugin-level", "3"]
    (warning,) = decided["warnings"]
    assert warning.startswith("SGLang 0.5.99's own argument parser and the static reader of its "
                              "source disagree on '--model-path /m --plugin-level 3'")
    assert refused["failed"] is True and refused["changed"] is False
    (problem,) = refused["problems"]
    assert "SGLang's parser refuses them (argument --attention-backend: invalid choice: 'x'" in problem
    assert off["runtime_parser"] == "not asked" and off["argv"][-2:] == ["--attention-backend", "x"]
    assert tree_digest(site) == before
