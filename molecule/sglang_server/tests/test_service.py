"""The install, the manifest, the unit and the stand-in server running under it."""

from __future__ import annotations

import json

API_KEY = 'sk-molecule-$ecret%h"q'
SERVED_NAME = "glm-5 100% $HOME ${HOME} \"q\" 'x' a\\b ;"


def after_side_effect(host) -> bool:
    return host.file("/var/lib/sglang_molecule_side_effect").exists


def current_manifest(host) -> dict:
    return json.loads(host.file("/opt/sglang/current/sglang-manifest.json").content_string)


def journal(host, *match: str) -> str:
    return host.check_output("journalctl --no-pager -o cat " + " ".join(match))


def current_journal(host) -> str:
    invocation = host.check_output("systemctl show sglang.service --property=InvocationID --value")
    return journal(host, f"_SYSTEMD_INVOCATION_ID={invocation}")


def standin_argv(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if "stand-in argv: " in line]
    assert len(lines) == 1, text
    return json.loads(lines[0].split("stand-in argv: ", 1)[1])


def test_current_points_at_a_complete_012_install(host):
    link = host.file("/opt/sglang/current")
    assert link.is_symlink
    assert link.linked_to.startswith("/opt/sglang/venvs/pypi-0.5.12-")
    manifest = current_manifest(host)
    assert manifest["request"]["source"] == "pypi"
    assert manifest["resolved"]["sglang"] == "0.5.12"
    assert len(manifest["freeze_sha256"]) == 64
    assert set(manifest["pip_check"]) == {"ok", "output"}
    assert manifest["installed_at"].endswith("Z")
    # --no-deps in CI: pip check reports the missing dependencies, and that is recorded, not fatal.
    assert manifest["pip_check"]["ok"] is False


def test_kept_installs(host):
    names = sorted(host.check_output("ls /opt/sglang/venvs").split())
    if after_side_effect(host):
        assert [n.split("-")[1] for n in names] == ["0.5.12", "0.5.23"]
    else:
        assert len(names) == 1 and names[0].startswith("pypi-0.5.12-")


def test_autotune_gate_of_the_current_install(host):
    gate = "/opt/sglang/current/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py"
    lines = host.file(gate).content_string.splitlines()
    # Converge patches it; side_effect ends with the README's rollback (autotune=false).
    enabled = not after_side_effect(host)
    assert ('            "flashinfer_cutlass",' in lines) is enabled
    assert ('            # "flashinfer_cutlass",' in lines) is not enabled


def test_unit_carries_the_validated_flags(host):
    unit = host.file("/etc/systemd/system/sglang.service")
    assert unit.mode == 0o644
    text = unit.content_string
    assert "ExecStart=/opt/sglang/current/bin/python -m sglang.launch_server" in text
    flat = " ".join(text.replace("\\\n", " ").split())
    for flag in ('"--tp-size" "8"', '"--quantization" "modelopt_fp4"',
                 '"--moe-runner-backend" "flashinfer_cutlass"', '"--disable-cuda-graph"',
                 '"--nsa-prefill-backend" "trtllm"', '"--config" "/etc/sglang/sglang.secrets.yaml"'):
        assert flag in flat, flag
    assert "api-key" not in text and "SGLANG_SERVER_API_KEY" not in text
    # systemd escaping: % and $ doubled, quotes and backslashes C-escaped.
    assert r'"glm-5 100%% $$HOME $${HOME} \"q\" ' + "'x' a\\\\b ;\"" in flat
    assert "User=sglang" in text and "Group=sglang" in text
    assert "ExecStartPost" not in text
    assert "Restart=on-failure" in text and "StartLimitBurst=" in text
    assert "EnvironmentFile=/etc/sglang/sglang.env" in text
    assert "sk-molecule" not in text


def test_unit_verifies_and_runs(host):
    verify = host.run("systemd-analyze verify /etc/systemd/system/sglang.service")
    assert verify.rc == 0, verify.stderr
    assert "sglang.service" not in verify.stderr, verify.stderr
    service = host.service("sglang")
    assert service.is_enabled
    assert service.is_running


def test_environment_file_is_private_and_in_systemd_syntax(host):
    env = host.file("/etc/sglang/sglang.env")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    text = env.content_string
    assert 'HF_TOKEN="hf_molecule_not_a_secret"' in text
    assert 'NCCL_IB_DISABLE="1"' in text
    assert "SGLANG_SERVER_API_KEY" not in text and "sk-molecule" not in text  # in the key file


def test_api_key_file_is_the_service_users_and_private(host):
    key_file = host.file("/etc/sglang/sglang.secrets.yaml")
    assert (key_file.user, key_file.group, key_file.mode) == ("sglang", "sglang", 0o600)
    assert json.loads(key_file.content_string) == {"api-key": API_KEY}


def test_api_key_not_on_the_server_command_line(host):
    pid = host.check_output("systemctl show sglang.service --property=MainPID --value")
    assert int(pid) > 0
    cmdline = host.check_output("tr '\\0' '\\n' < /proc/%s/cmdline", pid).splitlines()
    assert cmdline[cmdline.index("--config") + 1] == "/etc/sglang/sglang.secrets.yaml"
    assert not any("sk-molecule" in word for word in cmdline) and "--api-key" not in cmdline


def test_server_got_every_argument_verbatim(host):
    argv = standin_argv(current_journal(host))
    assert argv[argv.index("--served-model-name") + 1] == SERVED_NAME
    assert argv[argv.index("--config") + 1] == "/etc/sglang/sglang.secrets.yaml"
    assert "--api-key" not in argv


def test_api_key_reaches_the_server(host):
    url = "http://127.0.0.1:30000/v1/models"
    probe = ("import sys, urllib.request as u\n"
             "r = u.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]} if sys.argv[2] else {})\n"
             "try:\n    print(u.urlopen(r).status)\nexcept Exception as e:\n    print(getattr(e, 'code', e))\n")
    with_key = host.run("python3 -c %s %s %s", probe, url, API_KEY)
    without = host.run("python3 -c %s %s %s", probe, url, "")
    assert with_key.stdout.strip() == "200", with_key
    assert without.stdout.strip() == "401", without


def test_one_start_per_deploy(host):
    starts = journal(host, "-u", "sglang.service").count("stand-in launch_server: SGLang")
    if not after_side_effect(host):
        # converge started it once; the idempotence run started nothing.
        assert starts == 1
    current = current_journal(host)
    assert "The server is fired up and ready to roll!" in current
    running = current.count("Running FlashInfer autotune")
    completed = current.count("FlashInfer autotune completed.")
    assert (running, completed) == ((0, 0) if after_side_effect(host) else (8, 8))


def test_service_user(host):
    """Made by the server's module (a system account the role did not find): no login, its home, in video."""
    user = host.user("sglang")
    assert user.exists and user.shell == "/usr/sbin/nologin" and user.home == "/var/lib/sglang"
    assert user.group == "sglang" and "video" in user.groups and user.uid < 1000
    assert host.file("/var/lib/sglang").user == "sglang"


def test_api_key_never_in_play_output_or_diff(host):
    """--check --diff with a rotated key: the env file would change, and neither key is shown."""
    if after_side_effect(host):
        return  # once is enough (about 30 s)
    import os
    import subprocess
    from pathlib import Path

    scenario = Path(__file__).resolve().parent.parent
    repo = scenario.parent.parent
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(repo / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(repo / "ansible.cfg"))
    rotated = "sk-rotated-never-shown"
    run = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(scenario / "check_diff.yml"),
         "--check", "--diff", "-v", "-e", f"sglang_server_api_key={rotated}"],
        env=env, capture_output=True, text=True, check=False)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Converge the server (settings, flags, files, restart)" in output
    assert "censored" in output  # no_log hid the env file's task, diff included
    for secret in (rotated, "sk-molecule", "hf_molecule_not_a_secret"):
        assert secret not in output
