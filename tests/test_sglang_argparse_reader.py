"""sglang_argparse_reader: SGLang's server flags read statically from real PyPI wheels.

Each release is unpacked once per module, and only what the reader reads (the
flag_sources fixture): no torch, nothing imported. Choice lists defined in
modules left out (parser registries, LoRA modules) resolve to "any value"
here, as documented.
"""

from __future__ import annotations

import pytest
from ansible.module_utils.sglang_argparse_reader import extract_flags
from ansible.module_utils.sglang_flag_table import FlagError
from conftest import tree_digest

VERSIONS = ["0.5.6", "0.5.8", "0.5.10", "0.5.12", "0.5.13", "0.5.14", "0.5.18", "0.5.23"]
# Every supported release, 0.5.6 to 0.5.23 (all cached wheels).
SUPPORTED = [f"0.5.{minor}" for minor in range(6, 24)]
ADD_ARGUMENT_ERA = ["0.5.6", "0.5.8", "0.5.10", "0.5.12", "0.5.13"]
DATACLASS_ERA = ["0.5.14", "0.5.18", "0.5.23"]
NSA_SPELLING = ["0.5.6", "0.5.8", "0.5.10", "0.5.12"]  # --nsa-*-backend is the flag
DSA_WITH_NSA_ALIAS = ["0.5.13", "0.5.14", "0.5.18"]  # --nsa-* a deprecated alias of --dsa-*

# Measured from the wheels (flags incl. --no-* of BooleanOptionalAction).
FLAG_COUNTS = {"0.5.6": 288, "0.5.7": 313, "0.5.8": 328, "0.5.9": 331, "0.5.10": 355,
               "0.5.11": 377, "0.5.12": 390, "0.5.13": 408, "0.5.14": 422, "0.5.15": 439,
               "0.5.16": 463, "0.5.17": 478, "0.5.18": 493, "0.5.19": 508, "0.5.20": 500,
               "0.5.21": 518, "0.5.22": 529, "0.5.23": 543}


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_supported_release_is_read(flags_of, version):
    flags = flags_of(version)
    assert flags.version == version
    assert len(flags) == FLAG_COUNTS[version]
    tp = flags["tp-size"]
    assert not tp.is_switch and tp.value_type == "int" and tp.choices is None
    assert "tensor-parallel-size" in tp.aliases
    assert "model" in flags["model-path"].aliases
    assert "flashinfer_cutlass" in flags["moe-runner-backend"].choices
    assert "modelopt_fp4" in flags["quantization"].choices
    for switch in ("disable-radix-cache", "trust-remote-code", "disable-cuda-graph"):
        assert flags[switch].is_switch, switch
    assert not flags["port"].is_switch and flags["port"].value_type == "int"
    assert "tp" not in flags.by_spelling()  # only argparse's prefix abbreviation
    # add_argument(..., required=True) up to 0.5.13; a field without a default from 0.5.14.
    assert [name for name, spec in flags.items() if spec.required] == ["model-path"]
    assert flags.config_flag() == "--config"  # the YAML file the API key is passed in


@pytest.mark.parametrize("version", ADD_ARGUMENT_ERA)
def test_add_argument_era_counts_every_call(flag_sources, flags_of, version):
    """One flag per parser.add_argument call, plus the --no-* twin of each
    BooleanOptionalAction (a rough count taken straight from the text)."""
    text = (flag_sources(version) / "srt" / "server_args.py").read_text(encoding="utf-8")
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
        assert "dsa-prefill-backend" not in flags and flags["nsa-prefill-backend"].usable
    for version in DSA_WITH_NSA_ALIAS:
        flags = flags_of(version)
        alias = flags["nsa-prefill-backend"]
        assert alias.deprecated and alias.replacement == "--dsa-prefill-backend"
        assert alias.dest == flags["dsa-prefill-backend"].dest == "dsa_prefill_backend"
    assert "nsa-prefill-backend" not in flags_of("0.5.23")
    assert "trtllm" not in flags_of("0.5.8")["nsa-prefill-backend"].choices
    assert "trtllm" in flags_of("0.5.10")["nsa-prefill-backend"].choices


def test_disable_cuda_graph_deprecated_from_0_5_14_and_never_gone(flags_of):
    assert not flags_of("0.5.13")["disable-cuda-graph"].deprecated
    for version in DATACLASS_ERA:
        assert flags_of(version)["disable-cuda-graph"].deprecated
        for phase in ("decode", "prefill"):
            assert f"cuda-graph-backend-{phase}" in flags_of(version)


@pytest.mark.parametrize(("version", "ignored", "removed"), [
    ("0.5.6", [], []),
    ("0.5.13", ["hybrid-kvcache-ratio", "collect-tokens-histogram", "prefill-round-robin-balance",
                "enable-piecewise-cuda-graph"], []),
    ("0.5.18", ["enable-expert-distribution-metrics", "prefill-round-robin-balance",
                "collect-tokens-histogram"], ["enable-expert-distribution-metrics"]),
    ("0.5.23", [], []),
])
def test_retired_flags_per_version(flags_of, version, ignored, removed):
    """DeprecatedAction that only warns: accepted, ignored; with error_message: refused."""
    flags = flags_of(version)
    assert [s.name for s in flags.values() if s.ignored] == ignored
    assert [s.name for s in flags.values() if s.removed] == removed


# --------------------------------------------------------------------------
# Not an SGLang package, or a layout the reader does not know
# --------------------------------------------------------------------------


def test_not_sglang_directory(tmp_path):
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("")
    before = tree_digest(tmp_path)
    with pytest.raises(FlagError) as info:
        extract_flags(tmp_path / "numpy")
    assert str(info.value).startswith(
        f"{tmp_path / 'numpy'} is not an SGLang package: expected __init__.py and "
        "srt/server_args.py in it, found ['__init__.py'].")
    with pytest.raises(FlagError, match="is not a directory"):
        extract_flags(tmp_path / "missing")
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize(("server_args", "message"), [
    ("class ServerArgs:\n    pass\n",
     "has no ServerArgs.add_cli_args: this SGLang layout is not supported"),
    ("class ServerArgs:\n    def add_cli_args(parser):\n        pass\n",
     "found 0 flags in "),
    ("class ServerArgs:\n    def add_cli_args(parser):\n"
     "        parser.add_argument('--model-path', required=True)\n",
     "but not --port: this SGLang layout is not understood by the flag checker; refusing to guess"),
    ("class ServerArgs:\n    def add_cli_args(parser):\n"
     "        add_cli_args_from_dataclass(parser, make_class())\n",
     "cannot find the dataclass make_class() passed to add_cli_args_from_dataclass"),
    ("class ServerArgs(:\n", "cannot parse "),
])
def test_unrecognised_layout_fails_clearly(tmp_path, server_args, message):
    package = tmp_path / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(server_args)
    before = tree_digest(tmp_path)
    with pytest.raises(FlagError) as info:
        extract_flags(package)
    assert message in str(info.value)
    assert tree_digest(tmp_path) == before
