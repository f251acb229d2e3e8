"""The benchmark command per SGLang release, read from the real wheels (sglang_bench_command)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, sglang_wheel

from ansible.module_utils.sglang_bench_levels import (  # noqa: E402
    BenchError, USED_FLAGS, find_benchmark, inspect_benchmark, level_commands, prompts_for, read_flags,
)


def unpack_benchmark(version: str, dest: Path) -> Path:
    """The package marker, the benchmark sources and METADATA of a real wheel."""
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        for name in wheel.namelist():
            if (name in ("sglang/__init__.py", "sglang/bench_serving.py", "sglang/version.py")
                    or name.startswith("sglang/benchmark/") or name == f"sglang-{version}.dist-info/METADATA"):
                wheel.extract(name, dest)
    return dest / "sglang"


@pytest.mark.parametrize(
    ("version", "module", "source"),
    [
        ("0.5.8", "sglang.bench_serving", "bench_serving.py"),
        # 0.5.12 already has a sglang/benchmark/ package (datasets), but no serving.py yet.
        ("0.5.12", "sglang.bench_serving", "bench_serving.py"),
        ("0.5.23", "sglang.benchmark.serving", "benchmark/serving.py"),
    ],
)
def test_module_per_release(tmp_path, version, module, source):
    package = unpack_benchmark(version, tmp_path)
    assert find_benchmark(package) == (module, package / source)
    benchmark = inspect_benchmark(package)
    assert "random-ids" in benchmark.flags["--dataset-name"]
    assert set(USED_FLAGS) <= set(benchmark.flags)


def test_0_5_23_old_module_is_only_a_shim(tmp_path):
    package = unpack_benchmark("0.5.23", tmp_path)
    assert read_flags(package / "bench_serving.py") == {}
    assert "sglang.benchmark.serving" in (package / "bench_serving.py").read_text()


@pytest.mark.parametrize(("version", "module"), [("0.5.8", "sglang.bench_serving"),
                                                 ("0.5.23", "sglang.benchmark.serving")])
def test_commands_for_older_and_newer_release(tmp_path, version, module):
    benchmark = inspect_benchmark(unpack_benchmark(version, tmp_path))
    commands = level_commands(benchmark, "/opt/sglang/current/bin/python", "127.0.0.1", 30000,
                              "/models/GLM-5-NVFP4", "glm-5", [64, 256, 512, 1024], 1024, 1024,
                              "/var/tmp/sglang-bench/run/results.jsonl")
    assert [(c.concurrency, c.num_prompts) for c in commands] == [(64, 128), (256, 512), (512, 1024), (1024, 2048)]
    assert commands[1].argv == [
        "/opt/sglang/current/bin/python", "-m", module,
        "--backend", "sglang", "--host", "127.0.0.1", "--port", "30000",
        "--model", "/models/GLM-5-NVFP4", "--served-model-name", "glm-5",
        "--dataset-name", "random-ids", "--random-input-len", "1024", "--random-output-len", "1024",
        "--random-range-ratio", "1.0", "--num-prompts", "512", "--max-concurrency", "256",
        "--output-file", "/var/tmp/sglang-bench/run/results.jsonl", "--disable-tqdm",
    ]
    # Every flag in the command is one this release's benchmark defines.
    flags = {arg for arg in commands[1].argv if arg.startswith("--")}
    assert flags <= set(benchmark.flags)


def test_prompts_scale_with_concurrency():
    assert prompts_for(64, 2, 0) == 128
    assert prompts_for(64, 1, 0) == 128  # never under 2x
    assert prompts_for(64, 4, 0) == 256
    assert prompts_for(8, 2, 100) == 100
    with pytest.raises(BenchError, match="concurrency 0"):
        prompts_for(0, 2, 0)


def test_a_benchmark_without_random_ids_is_refused(tmp_path):
    package = unpack_benchmark("0.5.12", tmp_path)
    source = package / "bench_serving.py"
    source.write_text(source.read_text().replace('"random-ids",', ""))
    with pytest.raises(BenchError, match="--dataset-name has no 'random-ids' choice"):
        inspect_benchmark(package)


def test_a_missing_flag_is_named(tmp_path):
    package = unpack_benchmark("0.5.8", tmp_path)
    source = package / "bench_serving.py"
    source.write_text(source.read_text().replace('"--served-model-name"', '"--served-name"'))
    with pytest.raises(BenchError, match="does not accept --served-model-name"):
        inspect_benchmark(package)


def test_not_sglang(tmp_path):
    with pytest.raises(BenchError, match="no serving benchmark in"):
        find_benchmark(tmp_path)


def test_bad_levels(tmp_path):
    benchmark = inspect_benchmark(unpack_benchmark("0.5.12", tmp_path))
    args = ("python", "h", 1, "m", "n")
    with pytest.raises(BenchError, match="no concurrencies"):
        level_commands(benchmark, *args, [], 1, 1, "f")
    with pytest.raises(BenchError, match="repeat a level"):
        level_commands(benchmark, *args, [64, 64], 1, 1, "f")
    with pytest.raises(BenchError, match="input length 0"):
        level_commands(benchmark, *args, [64], 0, 1, "f")
