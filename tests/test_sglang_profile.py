"""sglang_profile: the tuned profile resolved against real releases' flag tables.

The tables come from the static reader on real PyPI wheels (the flags_of
fixture); every problem of a profile is listed at once.
"""

from __future__ import annotations

import pytest
from ansible.module_utils.sglang_flag_table import FlagError
from ansible.module_utils.sglang_profile import resolve_profile

NSA_SPELLING = ["0.5.6", "0.5.8", "0.5.10", "0.5.12"]  # --nsa-*-backend is the flag
DSA_WITH_NSA_ALIAS = ["0.5.13", "0.5.14", "0.5.18"]  # --nsa-* a deprecated alias of --dsa-*
DATACLASS_ERA = ["0.5.14", "0.5.18", "0.5.23"]
# NSA_CHOICES has no "trtllm" before 0.5.10, so the default profile cannot run there.
PROFILE_VALID = ["0.5.10", "0.5.12", "0.5.13", "0.5.14", "0.5.18", "0.5.23"]
PROFILE_INVALID = ["0.5.6", "0.5.8"]

DEFAULT_PROFILE = {
    "model-path": "/models/GLM-5-NVFP4", "served-model-name": "glm-5", "tp-size": 8,
    "quantization": "modelopt_fp4", "moe-runner-backend": "flashinfer_cutlass",
    "max-running-requests": 1024, "disable-cuda-graph": True, "disable-radix-cache": True,
    "nsa-prefill-backend": "trtllm", "nsa-decode-backend": "trtllm", "trust-remote-code": True,
    "host": "127.0.0.1", "port": 30000,
}


def rejected(flags, profile, require=False) -> FlagError:
    with pytest.raises(FlagError) as info:
        resolve_profile(flags, profile, require=require)
    return info.value



# --------------------------------------------------------------------------
# The default profile
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", PROFILE_VALID)
def test_default_profile_resolves(flags_of, version):
    result = resolve_profile(flags_of(version), DEFAULT_PROFILE)
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
    result = resolve_profile(flags_of(version), {"dsa-prefill-backend": "trtllm",
                                                    "dsa-decode-backend": "fa3"})
    assert result.argv == ["--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "fa3"]
    assert result.notes == [
        f"--dsa-prefill-backend is spelled --nsa-prefill-backend in SGLang {version}",
        f"--dsa-decode-backend is spelled --nsa-decode-backend in SGLang {version}",
    ]


def test_nsa_spelling_becomes_dsa_on_0_5_23(flags_of):
    result = resolve_profile(flags_of("0.5.23"), {"nsa-prefill-backend": "flashmla_kv"})
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
    result = resolve_profile(flags_of("0.5.6"), {"tensor-parallel-size": 4, "model": "/m"})
    assert result.argv == ["--tp-size", "4", "--model-path", "/m"]
    assert result.notes[0] == ("--tensor-parallel-size is an alias of --tp-size in SGLang 0.5.6; "
                               "using --tp-size")


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
    result = resolve_profile(flags_of("0.5.6"), {
        "cuda-graph-bs": [1, 2, 4], "disable-radix-cache": False, "tp-size": None,
        "not-a-flag-but-off": False})
    assert result.argv == ["--cuda-graph-bs", "1", "2", "4"]


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
    error = rejected(flags_of(version), profile, require=True)
    assert error.problems == [f"--model-path is required by SGLang {version} and {why}; set it "
                              "(for --model-path: sglang_server_model_path)"]
    profile.pop("model-path", None)
    profile.pop("model", None)
    assert resolve_profile(flags_of(version), profile).argv  # only with require=True


def test_required_flag_given_by_its_alias(flags_of):
    result = resolve_profile(flags_of("0.5.23"), {"model": "/m"}, require=True)
    assert result.argv == ["--model-path", "/m"]


@pytest.mark.parametrize("name", ["api-key ", " tp-size", "tp-size\u00a0", "tp-size\t"])
def test_names_taken_as_given(flags_of, name):
    error = rejected(flags_of("0.5.23"), {name: "x"})
    assert error.problems[0].startswith(f"--{name} is not a flag of SGLang 0.5.23")


@pytest.mark.parametrize(("profile", "argv"), [
    ({"tp-size": "8"}, ["--tp-size", "8"]),  # a string of digits for an int flag
    ({"--tp-size": 8}, ["--tp-size", "8"]),  # leading dashes dropped
    ({"chat-template": "-weird"}, ["--chat-template=-weird"]),  # not taken for a flag
    ({"cuda-graph-bs-decode": [1, 2]}, ["--cuda-graph-bs-decode", "1", "2"]),
    ({"mem-fraction-static": 0.8}, ["--mem-fraction-static", "0.8"]),
])
def test_values_as_argv(flags_of, profile, argv):
    assert resolve_profile(flags_of("0.5.23"), profile).argv == argv


def test_choices_computed_at_run_time_are_noted(flags_of):
    flags = flags_of("0.5.23")
    unknown = next(s for s in flags.values() if s.choices is None and s.choices_expr
                   and not s.is_switch and not s.multiple)
    result = resolve_profile(flags, {unknown.name: "anything"})
    assert result.argv == [f"--{unknown.name}", "anything"]
    assert result.notes == [f"--{unknown.name}: its choices ({unknown.choices_expr}) are computed "
                            "at run time; the value was not checked"]
