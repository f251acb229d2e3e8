"""The model directory checked before every start (the sglang_server module's model check, validate.yml)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ansible.module_utils.sglang_model_files import is_hub_id, model_dir_problems, safetensors_size
from conftest import run_playbook, tree_digest
from hub_standin import make_model
from test_playbook_validate import unpack_flag_sources


def test_a_whole_model_passes_and_each_defect_is_named(tmp_path):
    model = make_model(tmp_path / "m")
    assert model_dir_problems(str(model)) == []
    shard = model / "model-00002-of-00003.safetensors"
    assert safetensors_size(str(shard)) == shard.stat().st_size

    with open(shard, "r+b") as handle:  # a truncated copy
        handle.truncate(shard.stat().st_size - 100)
    (model / "config.json").unlink()
    (model / "model-00003-of-00003.safetensors").unlink()
    problems = model_dir_problems(str(model))
    assert "config.json is missing" in problems
    assert any("model-00002-of-00003.safetensors is" in p and "expected" in p for p in problems), problems
    assert ("model-00003-of-00003.safetensors (listed in model.safetensors.index.json) is missing") in problems
    assert model_dir_problems(str(tmp_path / "absent")) == [f"{tmp_path / 'absent'} is not a directory"]


def test_the_store_manifest_size_wins_over_the_header(tmp_path):
    model = make_model(tmp_path / "m")
    shard = "model-00001-of-00003.safetensors"
    size = (model / shard).stat().st_size
    (model / ".sglang-model.json").write_text(json.dumps({"files": {shard: {"size": size + 1}}}))
    assert model_dir_problems(str(model)) == [f"{shard} is {size} bytes, expected {size + 1}"]


def test_a_hub_id_is_left_to_sglang(tmp_path):
    assert is_hub_id("nvidia/GLM-5-NVFP4")
    assert not is_hub_id("/models/GLM-5-NVFP4")


def validate(tmp_path: Path, model: Path):
    package = unpack_flag_sources("0.5.23", tmp_path / "tree")
    private = tmp_path / "runner"
    private.mkdir(exist_ok=True)
    return run_playbook(private, "validate.yml", ["-e", f"sglang_package_dir={package}",
                                                  "-e", f"sglang_server_model_path={model}"])


def test_validate_refuses_an_index_listing_a_missing_shard_and_changes_nothing(tmp_path):
    model = make_model(tmp_path / "m")
    good = validate(tmp_path / "good", model)
    assert good.rc == 0, good.stdout[-2000:]

    (model / "model-00002-of-00003.safetensors").unlink()
    before = tree_digest(model)
    bad = validate(tmp_path / "bad", model)
    assert bad.rc != 0
    message = " ".join(bad.failures)
    assert "model-00002-of-00003.safetensors (listed in model.safetensors.index.json) is missing" in message
    assert "The server was not (re)started" in message
    assert tree_digest(model) == before
    shutil.rmtree(model)
    gone = validate(tmp_path / "gone", model)
    assert f"{model} is not a directory" in " ".join(gone.failures)
