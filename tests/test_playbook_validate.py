"""playbooks/validate.yml: the check an operator runs before switching nightlies.

`ansible-playbook -i localhost, -c local playbooks/validate.yml -e sglang_package_dir=DIR`
against real SGLang trees: it prints the effective command line, each flag
spelled as that version wants, and fails clearly on invalid flags.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from conftest import run_playbook, sglang_wheel


def unpack_flag_sources(version: str, dest: Path) -> Path:
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        for name in wheel.namelist():
            if name in ("sglang/__init__.py", "sglang/version.py", "sglang/_version.py") or (
                name.startswith(("sglang/srt/server_args", "sglang/srt/arg_groups/",
                                 "sglang/srt/model_executor/cuda_graph_config"))
                and name.endswith(".py")
            ) or name == f"sglang-{version}.dist-info/METADATA":
                wheel.extract(name, dest)
    return dest / "sglang"


def validate(tmp_path: Path, version: str, *extra: str):
    package = unpack_flag_sources(version, tmp_path / "tree")
    private = tmp_path / "runner"
    private.mkdir()
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "tree").rglob("*"))
    run = run_playbook(private, "validate.yml", ["-e", f"sglang_package_dir={package}", *extra])
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "tree").rglob("*")) == before
    return run


@pytest.mark.parametrize(
    ("version", "spelling"),
    [("0.5.12", "--nsa-prefill-backend trtllm --nsa-decode-backend trtllm"),
     ("0.5.13", "--dsa-prefill-backend trtllm --dsa-decode-backend trtllm"),
     ("0.5.23", "--dsa-prefill-backend trtllm --dsa-decode-backend trtllm")],
)
def test_default_profile_spelled_for_the_version(tmp_path, version, spelling):
    run = validate(tmp_path, version)
    assert run.status == "successful", run.stdout
    assert run.changed == 0
    assert f"SGLang {version}: python -m sglang.launch_server --model-path /models/GLM-5-NVFP4" in run.stdout
    flat = " ".join(run.stdout.split())
    assert spelling in flat
    for flag in ("--tp-size 8", "--quantization modelopt_fp4", "--moe-runner-backend flashinfer_cutlass",
                 "--max-running-requests 1024", "--disable-cuda-graph", "--disable-radix-cache"):
        assert flag in flat


def test_overrides_and_drops(tmp_path):
    extra = json.dumps({"sglang_server_extra_flags": {"disable-radix-cache": False, "attention-backend": "triton"}})
    run = validate(tmp_path, "0.5.23", "-e", extra)
    assert run.status == "successful", run.stdout
    flat = " ".join(run.stdout.split())
    assert "--attention-backend triton" in flat
    assert "--disable-radix-cache" not in flat


def test_release_without_trtllm_nsa_backend_is_refused(tmp_path):
    run = validate(tmp_path, "0.5.8")
    assert run.status == "failed"
    message = " ".join(run.failures)
    assert "nsa-prefill-backend" in message and "trtllm" in message
    assert "flashmla_sparse" in message  # the valid choices are listed


def test_bad_flags_all_reported(tmp_path):
    extra = json.dumps({"sglang_server_extra_flags": {"moe-runer-backend": "flashinfer_cutlass",
                                                      "quantization": "nvfp5"}})
    run = validate(tmp_path, "0.5.23", "-e", extra)
    assert run.status == "failed"
    message = " ".join(run.failures)
    assert "moe-runer-backend" in message and "moe-runner-backend" in message
    assert "nvfp5" in message and "modelopt_fp4" in message


def test_unit_out_written_for_review_without_the_secret(tmp_path):
    out = tmp_path / "review" / "sglang.service"
    out.parent.mkdir()
    extra = json.dumps({"sglang_server_unit_out": str(out), "sglang_server_api_key": "sk-never-shown",
                        "sglang_server_served_model_name": "glm 100% $HOME"})
    run = validate(tmp_path, "0.5.23", "-e", extra, "--diff", "-v")
    assert run.status == "successful", run.stdout
    text = out.read_text()
    assert '"--served-model-name" "glm 100%% $$HOME"' in text
    assert '"--api-key" ${SGLANG_SERVER_API_KEY}' in text
    assert '"--dsa-prefill-backend" "trtllm"' in text
    assert "sk-never-shown" not in text and "sk-never-shown" not in run.stdout
    assert "--api-key ${SGLANG_SERVER_API_KEY}" in run.stdout


@pytest.mark.parametrize(("extra", "message"), [
    ({"sglang_server_port": 70000}, "sglang_server_port must be a port number 1-65535, got 70000"),
    ({"sglang_server_tp_size": 0}, "sglang_server_tp_size must be an integer >= 1, got 0"),
    ({"sglang_server_host": "0.0.0.0 ::"}, "sglang_server_host must be one IP address or host name"),
    ({"sglang_server_served_model_name": "glm-5\n"}, "contains the control character '\\n'"),
    ({"sglang_server_environment": {"X": "a\nExecStartPre=/bin/sh"}},
     "sglang_server_environment['X'] contains the control character"),
    ({"sglang_server_extra_flags": {"api-key": "sk-in-a-flag"}}, "through sglang_server_api_key (Ansible Vault)"),
])
def test_bad_settings_refused_before_anything_is_written(tmp_path, extra, message):
    out = tmp_path / "sglang.service"
    run = validate(tmp_path, "0.5.12", "-e", json.dumps({**extra, "sglang_server_unit_out": str(out)}))
    assert run.status == "failed"
    assert message in " ".join(run.failures), run.failures
    assert not out.exists()
    assert "sk-in-a-flag" not in " ".join(run.failures)
