"""The install layout, the manifest and the unit in the container."""

from __future__ import annotations

import json

import pytest


def after_side_effect(host) -> bool:
    return host.file("/var/lib/sglang_molecule_side_effect").exists


def current_manifest(host) -> dict:
    return json.loads(host.file("/opt/sglang/current/sglang-manifest.json").content_string)


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


def test_autotune_patch_applied_to_the_current_install(host):
    gate = "/opt/sglang/current/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py"
    lines = host.file(gate).content_string.splitlines()
    assert '            "flashinfer_cutlass",' in lines
    assert '            # "flashinfer_cutlass",' not in lines


def test_unit_carries_the_validated_flags(host):
    unit = host.file("/etc/systemd/system/sglang.service")
    assert unit.mode == 0o644
    text = unit.content_string
    assert "ExecStart=/opt/sglang/current/bin/python -m sglang.launch_server" in text
    for flag in ("--tp-size 8", "--quantization modelopt_fp4", "--moe-runner-backend flashinfer_cutlass",
                 "--max-running-requests 1024", "--disable-cuda-graph", "--disable-radix-cache",
                 "--nsa-prefill-backend trtllm", "--nsa-decode-backend trtllm"):
        assert flag in " ".join(text.replace("\\\n", " ").split()), flag
    assert "User=sglang" in text
    assert "LimitMEMLOCK=infinity" in text and "LimitNOFILE=" in text
    assert "TimeoutStartSec=5400" in text
    assert "Restart=on-failure" in text and "StartLimitBurst=" in text
    assert "EnvironmentFile=/etc/sglang/sglang.env" in text


def test_unit_verifies_and_is_enabled_but_stopped(host):
    verify = host.run("systemd-analyze verify /etc/systemd/system/sglang.service")
    assert verify.rc == 0, verify.stderr
    assert "sglang.service" not in verify.stderr, verify.stderr
    service = host.service("sglang")
    assert service.is_enabled
    assert not service.is_running


def test_environment_file_is_private(host):
    env = host.file("/etc/sglang/sglang.env")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    assert "HF_TOKEN=hf_molecule_not_a_secret" in env.content_string
    assert "NCCL_IB_DISABLE=1" in env.content_string


def test_service_user(host):
    user = host.user("sglang")
    assert user.exists and user.shell == "/usr/sbin/nologin"


@pytest.mark.parametrize("path", ["/usr/local/libexec/sglang-wait-ready"])
def test_readiness_probe_installed(host, path):
    probe = host.file(path)
    assert probe.mode == 0o755
    host.run_expect([0], f"/usr/bin/python3 -m py_compile {path}")
