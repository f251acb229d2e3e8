"""sglang_flags: SGLang's server flags read statically from real PyPI wheels.

Each release is unpacked once per module, and only what the checker reads:
the package markers, srt/server_args.py, srt/arg_groups/, the CUDA graph
Backend constants and the dist-info METADATA (no torch, nothing imported).
Choice lists defined in modules left out (parser registries, LoRA modules)
resolve to "any value" here, as documented.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, sglang_wheel

sys.path.insert(0, str(REPO / "roles" / "sglang_server" / "module_utils"))

import sglang_flags as sf  # noqa: E402

VERSIONS = ["0.5.6", "0.5.8", "0.5.10", "0.5.12", "0.5.13", "0.5.14", "0.5.18", "0.5.23"]
ADD_ARGUMENT_ERA = ["0.5.6", "0.5.8", "0.5.10", "0.5.12", "0.5.13"]
DATACLASS_ERA = ["0.5.14", "0.5.18", "0.5.23"]
NSA_SPELLING = ["0.5.6", "0.5.8", "0.5.10", "0.5.12"]  # --nsa-*-backend is the flag
DSA_WITH_NSA_ALIAS = ["0.5.13", "0.5.14", "0.5.18"]  # --nsa-* a deprecated alias of --dsa-*
# NSA_CHOICES has no "trtllm" before 0.5.10, so the default profile cannot run there.
PROFILE_VALID = ["0.5.10", "0.5.12", "0.5.13", "0.5.14", "0.5.18", "0.5.23"]
PROFILE_INVALID = ["0.5.6", "0.5.8"]

# Measured from the wheels (flags incl. --no-* of BooleanOptionalAction):
# 288, 328, 355, 390, 408, 422, 493, 543. The bounds leave a little slack.
MIN_FLAGS = {"0.5.6": 280, "0.5.8": 320, "0.5.10": 345, "0.5.12": 380, "0.5.13": 400,
             "0.5.14": 410, "0.5.18": 480, "0.5.23": 530}

DEFAULT_PROFILE = {
    "model-path": "/models/GLM-5-NVFP4", "served-model-name": "glm-5", "tp-size": 8,
    "quantization": "modelopt_fp4", "moe-runner-backend": "flashinfer_cutlass",
    "max-running-requests": 1024, "disable-cuda-graph": True, "disable-radix-cache": True,
    "nsa-prefill-backend": "trtllm", "nsa-decode-backend": "trtllm", "trust-remote-code": True,
    "host": "127.0.0.1", "port": 30000,
}

WANTED = {"sglang/__init__.py", "sglang/version.py", "sglang/_version.py",
          "sglang/srt/__init__.py", "sglang/srt/server_args.py",
          "sglang/srt/model_executor/cuda_graph_config.py"}  # Backend.ALL (0.5.14+)
WANTED_PREFIXES = ("sglang/srt/arg_groups/",)


@pytest.fixture(scope="module")
def sglang_dir(tmp_path_factory):
    """Factory: version -> unpacked sglang package dir (once per module)."""
    made: dict[str, Path] = {}

    def make(version: str) -> Path:
        if version not in made:
            dest = tmp_path_factory.mktemp(f"sglang-{version}")
            with zipfile.ZipFile(sglang_wheel(version)) as wheel:
                for name in wheel.namelist():
                    if (name in WANTED
                            or name.startswith(WANTED_PREFIXES) and name.endswith(".py")
                            or name == f"sglang-{version}.dist-info/METADATA"):
                        wheel.extract(name, dest)
            made[version] = dest / "sglang"
        return made[version]

    return make


@pytest.fixture(scope="module")
def flags_of(sglang_dir):
    """Factory: version -> extract_flags() of that release (once per module)."""
    cache: dict[str, sf.FlagTable] = {}

    def get(version: str) -> sf.FlagTable:
        if version not in cache:
            cache[version] = sf.extract_flags(sglang_dir(version))
        return cache[version]

    return get


def rejected(flags, profile) -> sf.FlagError:
    with pytest.raises(sf.FlagError) as info:
        sf.resolve_profile(flags, profile)
    return info.value


# --------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_known_flags_per_version(flags_of, version):
    flags = flags_of(version)
    assert flags.version == version
    assert len(flags) >= MIN_FLAGS[version]

    tp = flags["tp-size"]
    assert not tp.is_switch and tp.value_type == "int" and tp.choices is None
    assert "tensor-parallel-size" in tp.aliases
    assert "model" in flags["model-path"].aliases
    assert "flashinfer_cutlass" in flags["moe-runner-backend"].choices
    assert "modelopt_fp4" in flags["quantization"].choices
    for switch in ("disable-radix-cache", "trust-remote-code", "disable-cuda-graph"):
        assert flags[switch].is_switch, switch
    assert not flags["port"].is_switch and flags["port"].value_type == "int"
    assert "tp" not in sf._index(flags)  # only argparse's prefix abbreviation


@pytest.mark.parametrize("version", ADD_ARGUMENT_ERA)
def test_add_argument_era_counts_every_call(sglang_dir, flags_of, version):
    """One flag per parser.add_argument call, plus the --no-* twin of each
    BooleanOptionalAction (a rough count taken straight from the text)."""
    text = (sglang_dir(version) / "srt" / "server_args.py").read_text(encoding="utf-8")
    flags = flags_of(version)
    assert len([s for s in flags.values() if not s.negates]) == text.count("parser.add_argument(")
    assert len([s for s in flags.values() if s.negates]) == text.count("BooleanOptionalAction")


@pytest.mark.parametrize("version", DATACLASS_ERA)
def test_dataclass_era_fields_become_flags(flags_of, version):
    flags = flags_of(version)
    # bool field -> store_true switch; Literal/choices -> choices; List[int] -> nargs "+"
    assert flags["disable-radix-cache"].source.startswith(
        "sglang/srt/arg_groups/fields/" if version == "0.5.23" else "sglang/srt/server_args.py")
    assert flags["cuda-graph-bs-decode"].nargs == "+"
    assert flags["cuda-graph-bs-decode"].value_type == "int"
    backends = ["full", "breakable", "disabled"] if version == "0.5.23" else \
        ["full", "breakable", "tc_piecewise", "disabled"]
    assert flags["cuda-graph-backend-decode"].choices == backends  # Arg(choices=Backend.ALL)
    literal = flags["speculative-ngram-match-type"]  # A[Literal["BFS", "PROB"], "..."]
    assert literal.choices == ["BFS", "PROB"] and literal.choices_expr.startswith("Literal")
    # no_cli fields are not flags: disable_cuda_graph is reachable only through
    # the hand-written deprecated --disable-cuda-graph
    spec = flags["disable-cuda-graph"]
    assert spec.deprecated and spec.is_switch
    assert spec.replacement == "--cuda-graph-backend-{decode,prefill}=disabled"
    assert spec.source.startswith("sglang/srt/server_args.py")
    assert "lora-strict-loading" in flags and flags["no-lora-strict-loading"].negates == \
        "lora-strict-loading"  # Arg(action=argparse.BooleanOptionalAction)


def test_nsa_dsa_flags_per_version(flags_of):
    for version in NSA_SPELLING:
        flags = flags_of(version)
        assert "dsa-prefill-backend" not in flags and not flags["nsa-prefill-backend"].deprecated
    for version in DSA_WITH_NSA_ALIAS:
        flags = flags_of(version)
        alias = flags["nsa-prefill-backend"]
        assert alias.deprecated and alias.replacement == "--dsa-prefill-backend"
        assert alias.dest == flags["dsa-prefill-backend"].dest == "dsa_prefill_backend"
    assert "nsa-prefill-backend" not in flags_of("0.5.23")
    assert "trtllm" not in flags_of("0.5.8")["nsa-prefill-backend"].choices
    assert "trtllm" in flags_of("0.5.10")["nsa-prefill-backend"].choices


def test_disable_cuda_graph_deprecated_from_0_5_14(flags_of):
    assert not flags_of("0.5.13")["disable-cuda-graph"].deprecated
    for version in DATACLASS_ERA:
        assert flags_of(version)["disable-cuda-graph"].deprecated
        for phase in ("decode", "prefill"):
            assert f"cuda-graph-backend-{phase}" in flags_of(version)


# --------------------------------------------------------------------------
# The default profile
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", PROFILE_VALID)
def test_default_profile_resolves(flags_of, version):
    result = sf.resolve_profile(flags_of(version), DEFAULT_PROFILE)
    backend = "nsa" if version in NSA_SPELLING else "dsa"
    assert result.version == version
    assert result.argv == [
        "--model-path", "/models/GLM-5-NVFP4", "--served-model-name", "glm-5",
        "--tp-size", "8", "--quantization", "modelopt_fp4",
        "--moe-runner-backend", "flashinfer_cutlass", "--max-running-requests", "1024",
        "--disable-cuda-graph", "--disable-radix-cache",
        f"--{backend}-prefill-backend", "trtllm", f"--{backend}-decode-backend", "trtllm",
        "--trust-remote-code", "--host", "127.0.0.1", "--port", "30000",
    ]
    notes = "\n".join(result.notes)
    if version in DSA_WITH_NSA_ALIAS:
        assert ("--nsa-prefill-backend is a deprecated alias of --dsa-prefill-backend in "
                f"SGLang {version}; using --dsa-prefill-backend") in notes
    if version == "0.5.23":
        assert "--nsa-decode-backend is spelled --dsa-decode-backend in SGLang 0.5.23" in notes
    if version in DATACLASS_ERA:
        assert (f"--disable-cuda-graph is deprecated in SGLang {version} (still accepted, warns "
                "at start); SGLang suggests --cuda-graph-backend-{decode,prefill}=disabled") in notes
    if version in NSA_SPELLING:
        assert result.notes == []


@pytest.mark.parametrize("version", PROFILE_INVALID)
def test_default_profile_needs_trtllm_nsa_backend(flags_of, version):
    error = rejected(flags_of(version), DEFAULT_PROFILE)
    valid = "flashmla_sparse, flashmla_kv, flashmla_auto, fa3, tilelang, aiter"
    assert error.problems == [
        f"--nsa-prefill-backend: invalid choice 'trtllm'; valid choices: {valid}",
        f"--nsa-decode-backend: invalid choice 'trtllm'; valid choices: {valid}",
    ]
    assert str(error).startswith(f"SGLang {version} rejects the flag profile (2 problems):")


# --------------------------------------------------------------------------
# Renames
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.10", "0.5.12"])
def test_dsa_spelling_becomes_nsa_on_old_releases(flags_of, version):
    result = sf.resolve_profile(flags_of(version), {"dsa-prefill-backend": "trtllm",
                                                    "dsa-decode-backend": "fa3"})
    assert result.argv == ["--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "fa3"]
    assert result.notes == [
        f"--dsa-prefill-backend is spelled --nsa-prefill-backend in SGLang {version}",
        f"--dsa-decode-backend is spelled --nsa-decode-backend in SGLang {version}",
    ]


def test_nsa_spelling_becomes_dsa_on_0_5_23(flags_of):
    result = sf.resolve_profile(flags_of("0.5.23"), {"nsa-prefill-backend": "flashmla_kv"})
    assert result.argv == ["--dsa-prefill-backend", "flashmla_kv"]
    assert result.notes == ["--nsa-prefill-backend is spelled --dsa-prefill-backend in SGLang 0.5.23"]


def test_renamed_flag_value_checked_against_new_choices(flags_of):
    error = rejected(flags_of("0.5.8"), {"dsa-decode-backend": "trtllm"})
    assert error.problems == [
        "--nsa-decode-backend: invalid choice 'trtllm'; valid choices: flashmla_sparse, "
        "flashmla_kv, flashmla_auto, fa3, tilelang, aiter"]


def test_both_spellings_given_twice(flags_of):
    error = rejected(flags_of("0.5.14"), {"dsa-prefill-backend": "fa3",
                                          "nsa-prefill-backend": "trtllm"})
    assert error.problems == [
        "--dsa-prefill-backend is given twice (as --dsa-prefill-backend and --nsa-prefill-backend)"]


def test_alias_emitted_in_canonical_spelling(flags_of):
    result = sf.resolve_profile(flags_of("0.5.6"), {"tensor-parallel-size": 4, "model": "/m"})
    assert result.argv == ["--tp-size", "4", "--model-path", "/m"]
    assert result.notes[0] == ("--tensor-parallel-size is an alias of --tp-size in SGLang 0.5.6; "
                               "using --tp-size")


def test_deprecated_switch_replaced_only_when_gone(flags_of):
    flags = sf.FlagTable(flags_of("0.5.23"), version="0.5.23")
    del flags["disable-cuda-graph"]  # a future release that drops the deprecated switch
    result = sf.resolve_profile(flags, {"disable-cuda-graph": True})
    assert result.argv == ["--cuda-graph-backend-decode", "disabled",
                           "--cuda-graph-backend-prefill", "disabled"]
    assert result.notes == [
        "--disable-cuda-graph is not accepted by SGLang 0.5.23; using its replacement "
        "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled"]


def test_removed_flag_rejected_with_sglang_message(flags_of):
    error = rejected(flags_of("0.5.18"), {"enable-expert-distribution-metrics": True})
    assert error.problems == [
        "--enable-expert-distribution-metrics is no longer accepted by SGLang 0.5.18: "
        "--enable-expert-distribution-metrics is no longer supported. Use "
        "--expert-balancedness-report-mode with one of: off, server_log, prometheus, both."]


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


def test_misspelled_flag_names_closest(flags_of):
    error = rejected(flags_of("0.5.23"), {"moe-runer-backend": "flashinfer_cutlass"})
    assert error.problems == [
        "--moe-runer-backend is not a flag of SGLang 0.5.23; did you mean "
        "--moe-runner-backend, --tokenizer-backend, --moe-a2a-backend?"]


def test_prefix_abbreviation_rejected(flags_of):
    error = rejected(flags_of("0.5.14"), {"tp": 8})
    assert error.problems == [
        "--tp is not a flag of SGLang 0.5.14; argparse would take it as an abbreviation of "
        "--tp-size, but the profile must spell flags in full"]


@pytest.mark.parametrize("version", ["0.5.6", "0.5.23"])
def test_bad_choice_lists_valid_ones(flags_of, version):
    flags = flags_of(version)
    error = rejected(flags, {"moe-runner-backend": "flashinfer_cutless"})
    valid = ", ".join(flags["moe-runner-backend"].choices)
    assert error.problems == [
        "--moe-runner-backend: invalid choice 'flashinfer_cutless' (did you mean "
        "flashinfer_cutlass, flashinfer_cutedsl, flashinfer_trtllm?); valid choices: "
        f"{valid}"]
    assert "auto, deep_gemm, triton" in valid


def test_value_given_to_switch(flags_of):
    error = rejected(flags_of("0.5.13"), {"disable-radix-cache": "yes"})
    assert error.problems == [
        "--disable-radix-cache is a switch and takes no value, got 'yes' (a string: pass a "
        "YAML boolean, not a quoted one); use true to pass it, false to leave it out"]


def test_missing_value(flags_of):
    error = rejected(flags_of("0.5.23"), {"tp-size": True, "quantization": True})
    choices = ", ".join(flags_of("0.5.23")["quantization"].choices)
    assert error.problems == [
        "--tp-size needs a value; the profile gives it as a bare switch (true)",
        f"--quantization needs a value (one of: {choices}); the profile gives it as a bare "
        "switch (true)"]


def test_wrong_type_and_list_to_single_value_flag(flags_of):
    error = rejected(flags_of("0.5.18"), {"tp-size": "eight", "host": ["a", "b"]})
    assert error.problems == [
        "--tp-size takes an int value, got 'eight'",
        "--host takes one value, got a list of 2: ['a', 'b']"]


def test_several_problems_in_one_message(flags_of):
    profile = dict(DEFAULT_PROFILE, **{
        "moe-runer-backend": "flashinfer_cutlass", "quantization": "modelopt_fp5",
        "disable-radix-cache": 1, "port": True})
    error = rejected(flags_of("0.5.23"), profile)
    message = str(error)
    assert message.startswith("SGLang 0.5.23 rejects the flag profile (4 problems):\n")
    assert len(error.problems) == 4
    for part in ("--quantization: invalid choice 'modelopt_fp5' (did you mean modelopt_fp8, "
                 "modelopt_fp4, modelopt?); valid choices: awq, fp8, ",
                 "--disable-radix-cache is a switch and takes no value, got 1",
                 "--port needs a value; the profile gives it as a bare switch (true)",
                 "--moe-runer-backend is not a flag of SGLang 0.5.23; did you mean "
                 "--moe-runner-backend"):
        assert f"\n  - {part}" in message, part


def test_lists_false_and_none(flags_of):
    result = sf.resolve_profile(flags_of("0.5.6"), {
        "cuda-graph-bs": [1, 2, 4], "disable-radix-cache": False, "tp-size": None,
        "not-a-flag-but-off": False})
    assert result.argv == ["--cuda-graph-bs", "1", "2", "4"]


def test_not_sglang_directory(tmp_path):
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("")
    with pytest.raises(sf.FlagError) as info:
        sf.extract_flags(tmp_path / "numpy")
    assert str(info.value).startswith(
        f"{tmp_path / 'numpy'} is not an SGLang package: expected __init__.py and "
        "srt/server_args.py in it, found ['__init__.py'].")
    with pytest.raises(sf.FlagError, match="is not a directory"):
        sf.extract_flags(tmp_path / "missing")


def test_unrecognised_layout_fails_clearly(tmp_path):
    package = tmp_path / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text("class ServerArgs:\n    pass\n")
    with pytest.raises(sf.FlagError) as info:
        sf.extract_flags(package)
    assert "has no ServerArgs.add_cli_args: this SGLang layout is not supported" in str(info.value)


# --------------------------------------------------------------------------
# Required flags, --config, names taken as given (issue 17, items 2 and 11)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_required_flags_and_config_per_version(flags_of, version):
    flags = flags_of(version)
    # add_argument(..., required=True) up to 0.5.13; a field without a default from 0.5.14.
    assert [name for name, spec in flags.items() if spec.required] == ["model-path"]
    assert not flags["config"].is_switch  # the YAML file the API key is passed in


@pytest.mark.parametrize("version", ["0.5.6", "0.5.13", "0.5.14", "0.5.23"])
@pytest.mark.parametrize(("change", "why"), [
    ({"model-path": None}, "the profile drops it (model-path: None)"),
    ({"model-path": False}, "the profile drops it (model-path: False)"),
    ({"model-path": None, "model": False}, "the profile drops it (model-path: None)"),
    ({"drop": True}, "the profile leaves it out"),
])
def test_required_flag_cannot_be_dropped(flags_of, version, change, why):
    profile = {k: v for k, v in {**DEFAULT_PROFILE, "nsa-prefill-backend": None,
                                 "nsa-decode-backend": None, **change}.items() if k != "drop"}
    if "drop" in change:
        del profile["model-path"]
    error = rejected_required(flags_of(version), profile)
    assert error.problems == [f"--model-path is required by SGLang {version} and {why}; set it "
                              "(for --model-path: sglang_server_model_path)"]
    profile.pop("model-path", None)
    profile.pop("model", None)
    assert sf.resolve_profile(flags_of(version), profile).argv  # only with require=True


def test_required_flag_given_by_its_alias(flags_of):
    result = sf.resolve_profile(flags_of("0.5.23"), {"model": "/m"}, require=True)
    assert result.argv == ["--model-path", "/m"]


@pytest.mark.parametrize("name", ["api-key ", " tp-size", "tp-size\u00a0", "tp-size\t"])
def test_names_taken_as_given(flags_of, name):
    error = rejected(flags_of("0.5.23"), {name: "x"})
    assert error.problems[0].startswith(f"--{name} is not a flag of SGLang 0.5.23")


def rejected_required(flags, profile) -> sf.FlagError:
    with pytest.raises(sf.FlagError) as info:
        sf.resolve_profile(flags, profile, require=True)
    return info.value


# --------------------------------------------------------------------------
# The Ansible module, once, through ansible-playbook
# --------------------------------------------------------------------------


def test_ansible_module(tmp_path, sglang_dir):
    package = sglang_dir("0.5.23")
    python = tmp_path / "python"  # the "virtualenv interpreter": finds the unpacked tree
    python.write_text(f"#!/bin/sh\nPYTHONPATH={package.parent} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False, "tasks": [
            {"sglang_flags": {"python": str(python), "flags": DEFAULT_PROFILE}},
            {"sglang_flags": {"package_dir": str(package), "flags": {"tp": 8}},
             "ignore_errors": True},
        ]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_LIBRARY=str(REPO / "roles/sglang_server/library"),
               ANSIBLE_MODULE_UTILS=f"{REPO / 'roles/sglang_server/module_utils'}:{REPO / 'module_utils'}",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "--check", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        env=env, capture_output=True, text=True, check=False)
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    ok, failed = (task["hosts"]["localhost"] for task in tasks)
    assert ok["changed"] is False and ok["version"] == "0.5.23" and ok["flag_count"] >= 530
    assert ok["package_dir"] == str(package)
    assert ok["command_line"].startswith("--model-path /models/GLM-5-NVFP4 --served-model-name")
    assert "--dsa-prefill-backend trtllm" in ok["command_line"]
    assert failed["failed"] is True and failed["changed"] is False
    assert "argparse would take it as an abbreviation of --tp-size" in failed["msg"]
