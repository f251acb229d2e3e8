"""A secret with Jinja syntax reaches the files verbatim through the documented ways (Vault, `!unsafe`).

Ansible evaluates every trusted value as a template: a key given with `-e` or in a plain vars file
that holds `{{ 7*7 }}` becomes `49`. The README says to give secrets from Ansible Vault or marked
`!unsafe`; the role's tasks then pass them on as they are (a bare `{{ variable }}`, never templated
again). The role's own converging task (tasks/server.yml) runs here in check mode with --diff against
an unpacked SGLang 0.5.23, with its service step left out (no systemd here): the key file's diff gives
only its size, which tells whether the key arrived verbatim; nothing is written on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.sglang_unit import config_file_text
from conftest import REPO, tree_digest
from test_playbook_validate import unpack_flag_sources

ROLE = REPO / "roles" / "sglang_server"
KEY = "sk-SECRETPART-{{ 7*7 }}-{% SECRETTAIL1234 %}-end"
FRAGMENTS = ("SECRETPART", "SECRETTAIL1234")


def server_task() -> dict:
    """The role's converging task as it is, less its service step (no systemd here)."""
    (task,) = yaml.safe_load((ROLE / "tasks" / "server.yml").read_text())
    task["sglang_server"]["service"] = False
    return task


def play_file(tmp_path: Path) -> Path:
    package = unpack_flag_sources("0.5.23", tmp_path / "tree")
    # Extra vars, as the role's defaults are given here: they win over the defaults.
    (tmp_path / "server-vars.json").write_text(json.dumps({
        "sglang_server_want": "deployed", "sglang_server_package_dir": str(package),
        "sglang_server_model_check": False, "sglang_server_autotune_cache_dir": str(tmp_path / "cache")}))
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [server_task()]}]))
    return play


def playbook(tmp_path: Path, play: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LIBRARY=str(ROLE / "library"),
               ANSIBLE_MODULE_UTILS=f"{ROLE / 'module_utils'}:{REPO / 'roles/systemd_files/module_utils'}:"
                                    f"{REPO / 'roles/sglang_locate/module_utils'}")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
         "-e", f"@{ROLE / 'defaults' / 'main.yml'}", "-e", f"@{ROLE / 'vars' / 'main.yml'}",
         *(["-e", f"@{tmp_path / 'server-vars.json'}"] if (tmp_path / "server-vars.json").exists() else []),
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", "sglang_server_python=/usr/bin/python3", "-e", "sglang_server_user=root",
         "-e", "sglang_server_group=root", *extra, "--check", "--diff"],
        env=env, capture_output=True, text=True, check=False, cwd=tmp_path)


def vault_file(tmp_path: Path) -> tuple[Path, Path]:
    password = tmp_path / "vault-password"
    password.write_text("h2-sgl-test-password\n")
    encrypted = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file",
         str(password), "--name", "sglang_server_api_key", KEY], capture_output=True, text=True, check=True).stdout
    secrets = tmp_path / "vault.yml"
    secrets.write_text(encrypted)
    return secrets, password


@pytest.mark.parametrize("way", ["unsafe", "vault"])
def test_a_key_with_jinja_syntax_reaches_the_key_file_verbatim(tmp_path, way):
    play = play_file(tmp_path)
    if way == "unsafe":
        secrets = tmp_path / "secrets.yml"
        secrets.write_text(f"sglang_server_api_key: !unsafe '{KEY}'\n")
        extra = ["-e", f"@{secrets}"]
    else:
        secrets, password = vault_file(tmp_path)
        extra = ["-e", f"@{secrets}", "--vault-password-file", str(password)]
    before = tree_digest(Path("/etc/sglang"))  # check mode: nothing written there
    run = playbook(tmp_path, play, *extra)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"(secret: {len(config_file_text('api-key', KEY))} bytes, not shown)" in run.stdout, run.stdout
    for fragment in FRAGMENTS:
        assert fragment not in run.stdout + run.stderr
    assert tree_digest(Path("/etc/sglang")) == before


def test_a_key_given_with_e_is_evaluated_as_the_readme_says(tmp_path):
    """What the README warns of: `-e` makes `{{ 7*7 }}` 49 (Ansible's doing, not the role's)."""
    play = play_file(tmp_path)
    run = playbook(tmp_path, play, "-e", json.dumps({"sglang_server_api_key": "sk-SECRETPART-{{ 7*7 }}-end"}))
    assert run.returncode == 0, run.stdout + run.stderr
    evaluated = config_file_text("api-key", "sk-SECRETPART-49-end")
    assert f"(secret: {len(evaluated)} bytes, not shown)" in run.stdout
    assert "SECRETPART" not in run.stdout


def test_a_key_with_a_jinja_tag_given_with_e_fails_as_the_readme_says(tmp_path):
    """The README's warning: Ansible's own error display prints a `-e` value it cannot evaluate,
    no_log or not; nothing is written. When Ansible stops doing so, this fails and the README changes."""
    play = play_file(tmp_path)
    before = tree_digest(Path("/etc/sglang"))
    run = playbook(tmp_path, play, "-e", json.dumps({"sglang_server_api_key": "sk-SECRETPART-{% x %}-end"}))
    assert run.returncode != 0
    assert "Syntax error in template" in run.stdout + run.stderr
    assert "SECRETPART" in run.stdout + run.stderr
    assert tree_digest(Path("/etc/sglang")) == before


def test_validate_takes_an_unsafe_key_verbatim(tmp_path):
    """The settings check reads the same key: a `{%` that was evaluated would fail the run there."""
    package = unpack_flag_sources("0.5.23", tmp_path / "tree")
    secrets = tmp_path / "secrets.yml"
    secrets.write_text(f"sglang_server_api_key: !unsafe '{KEY}'\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          str(REPO / "playbooks" / "validate.yml"), "-e", f"sglang_package_dir={package}",
                          "-e", f"@{secrets}", "-e", f"ansible_python_interpreter={sys.executable}",
                          "-e", "sglang_server_model_check=false", "-v"],
                         env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "The API key is in /etc/sglang/sglang.secrets.yaml" in " ".join(run.stdout.split())
    for fragment in FRAGMENTS:
        assert fragment not in run.stdout + run.stderr
