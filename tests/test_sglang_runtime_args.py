"""SGLang's own parser leads where it can run; the static reader stands in where it cannot.

SGLang's real parser needs torch to import, and CI has none. So the rule is
tested three ways: with given answers (every row of it); with the static
reader on real releases and a recording stand-in for the parser; and end to
end on a small `sglang` package that both readers can read, with the probe
run exactly as the module runs it (`python -c <its source> ARGV_JSON`), in
which the two readers really disagree: choices and flags SGLang only knows
at run time.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils import sglang_parser_probe
from ansible.module_utils.sglang_flag_table import FlagError
from ansible.module_utils.sglang_profile import Resolution
from ansible.module_utils.sglang_runtime_args import (
    RuntimeAnswer,
    check_flags,
    decide,
    naive_argv,
    parse_answer,
)
from conftest import tree_digest

OK = RuntimeAnswer(available=True, ok=True)
REFUSES = RuntimeAnswer(available=True, ok=False, error="argument --quantization: invalid choice: 'nvfp5'")
ABSENT = RuntimeAnswer(available=False, reason="ModuleNotFoundError: No module named 'torch'")
ARGV = ["--tp-size", "8"]
ACCEPTED = Resolution(argv=ARGV, notes=["a note"], version="0.5.23")
REFUSED = FlagError("SGLang 0.5.23 rejects the flag profile (1 problem):\n  - --tp is not a flag",
                    ["--tp is not a flag"])


# --------------------------------------------------------------------------
# The rule, row by row
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("runtime", "notes", "who"), [
    (None, ["a note"], "not asked"),
    (ABSENT, ["a note", "SGLang's own parser cannot run here (ModuleNotFoundError: No module "
                        "named 'torch'); the static reader decided"], "not available"),
    (OK, ["a note"], "agrees"),
])
def test_static_answer_stands_where_the_parser_agrees_or_cannot_run(runtime, notes, who):
    verdict = decide(ACCEPTED, runtime, ARGV, "0.5.23")
    assert (verdict.argv, verdict.notes, verdict.warning, verdict.runtime_parser) == (ARGV, notes, "", who)


@pytest.mark.parametrize("runtime", [None, ABSENT, REFUSES])
def test_static_refusal_stands_where_the_parser_agrees_or_cannot_run(runtime):
    with pytest.raises(FlagError) as info:
        decide(REFUSED, runtime, ["--tp", "8"], "0.5.23")
    assert info.value is REFUSED  # every problem, with the closest names; not argparse's first


def test_parser_refuses_what_the_static_reader_accepts_one_message():
    with pytest.raises(FlagError) as info:
        decide(ACCEPTED, REFUSES, ARGV, "0.5.23")
    assert info.value.problems == [str(info.value)]
    assert str(info.value) == (
        "SGLang 0.5.23's own argument parser and the static reader of its source disagree on "
        "'--tp-size 8': SGLang's parser refuses them (argument --quantization: invalid choice: "
        "'nvfp5'), the static reader accepts them. SGLang's parser decides: fix the flags. "
        "playbooks/validate.yml and check mode where SGLang cannot be imported use the static "
        "reader alone, so they pass these flags.")


def test_parser_accepts_what_the_static_reader_refuses_one_warning():
    verdict = decide(REFUSED, OK, ["--tp", "8"], "0.5.23")
    assert verdict.argv == ["--tp", "8"] and verdict.runtime_parser == "decided"
    assert verdict.notes == [verdict.warning]
    assert verdict.warning == (
        "SGLang 0.5.23's own argument parser and the static reader of its source disagree on "
        "'--tp 8': SGLang's parser accepts them, the static reader refuses them (--tp is not a "
        "flag). SGLang's parser decides: the flags are used as given. playbooks/validate.yml and "
        "check mode where SGLang cannot be imported use the static reader alone, so they refuse "
        "these flags.")


def test_naive_argv():
    assert naive_argv({"a": True, "b": False, "c": None, "d": 3, "e": ["x", "y"], "f": "-1",
                       "g": "-x"}) == ["--a", "--d", "3", "--e", "x", "y", "--f", "-1", "--g=-x"]


@pytest.mark.parametrize(("stdout", "answer"), [
    ("", RuntimeAnswer(False, reason="rc 1: Traceback")),
    ("not json", RuntimeAnswer(False, reason="rc 1: Traceback")),
    ("[1]", RuntimeAnswer(False, reason="rc 1: unexpected output '[1]'")),
    ('log line\n{"available": true, "ok": true}', OK),
    ('{"available": true, "ok": false, "error": "bad"}', RuntimeAnswer(True, False, "bad")),
    ('{"available": false, "reason": "no torch"}', RuntimeAnswer(False, reason="no torch")),
])
def test_parse_answer(stdout, answer):
    assert parse_answer(1, stdout, "Traceback") == answer


# --------------------------------------------------------------------------
# check_flags on real releases, the parser's answers given
# --------------------------------------------------------------------------


class Asker:
    def __init__(self, answer: RuntimeAnswer) -> None:
        self.answer = answer
        self.asked: list[list[str]] = []

    def __call__(self, argv: list[str]) -> RuntimeAnswer:
        self.asked.append(argv)
        return self.answer


PROFILE = {"model-path": "/m", "tp-size": 8, "nsa-prefill-backend": "trtllm"}


def test_check_flags_asks_the_parser_about_the_static_argv(flag_sources):
    asker = Asker(OK)
    checked = check_flags(str(flag_sources("0.5.23")), PROFILE, {"api-key": "SGLANG_SERVER_API_KEY"}, asker)
    argv = ["--model-path", "/m", "--tp-size", "8", "--dsa-prefill-backend", "trtllm"]
    assert checked.argv == argv and checked.runtime_parser == "agrees" and not checked.warning
    assert asker.asked == [argv + ["--api-key", "from-environment"]]  # never the key itself
    assert checked.env_flags == [["--api-key", "SGLANG_SERVER_API_KEY"]]
    assert (checked.version, checked.config_flag, checked.flag_count) == ("0.5.23", "--config", 543)


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23"])
def test_check_flags_without_the_parser(flag_sources, version):
    checked = check_flags(str(flag_sources(version)), PROFILE, {}, None)
    assert checked.runtime_parser == "not asked"
    assert checked.argv[-2] == ("--nsa-prefill-backend" if version == "0.5.12" else "--dsa-prefill-backend")


def test_check_flags_asks_about_the_flags_as_given_where_the_static_reader_refuses(flag_sources):
    asker = Asker(OK)
    checked = check_flags(str(flag_sources("0.5.23")), {"model-path": "/m", "tp": 8}, {}, asker)
    assert asker.asked == [["--model-path", "/m", "--tp", "8"]]
    assert checked.argv == ["--model-path", "/m", "--tp", "8"] and checked.runtime_parser == "decided"
    assert "the static reader refuses them (--tp is not a flag of SGLang 0.5.23; argparse" in checked.warning


def test_check_flags_bad_env_flag(flag_sources):
    with pytest.raises(FlagError) as info:
        check_flags(str(flag_sources("0.5.23")), PROFILE, {"api-kee": "X"}, Asker(REFUSES))
    assert info.value.problems == ["--api-kee is not a flag of SGLang 0.5.23; did you mean --api-key, --admin-api-key?"]


# --------------------------------------------------------------------------
# Both readers on one package: the probe run as the module runs it
# --------------------------------------------------------------------------

FAKE_SERVER_ARGS = '''
import argparse


def _backends():
    return ["triton", "fa3"]


def _plugin_flags():
    return ["plugin-level"]


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
        parser.add_argument("--quantization", choices=["fp8", "modelopt_fp4"])
        parser.add_argument("--disable-radix-cache", action="store_true")
        parser.add_argument("--attention-backend", choices=_backends())
        parser.add_argument("--config")
        for name in _plugin_flags():
            parser.add_argument(f"--{name}")
'''


@pytest.fixture
def fake_sglang(tmp_path):
    package = tmp_path / "site" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "version.py").write_text('__version__ = "0.5.99"\n')
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    return package


def probe(site: Path):
    """The module's asker: the probe's source run by an interpreter that imports `site`'s sglang."""
    def ask(argv: list[str]) -> RuntimeAnswer:
        done = subprocess.run([sys.executable, "-c", inspect.getsource(sglang_parser_probe),
                               json.dumps(argv)], capture_output=True, text=True, check=False,
                              env=dict(os.environ, PYTHONPATH=str(site)))
        return parse_answer(done.returncode, done.stdout, done.stderr)
    return ask


def test_both_readers_agree(fake_sglang):
    checked = check_flags(str(fake_sglang), {"model": "/m", "tp-size": 8, "quantization": "fp8",
                                             "disable-radix-cache": True}, {}, probe(fake_sglang.parent))
    assert checked.runtime_parser == "agrees" and checked.version == "0.5.99"
    assert checked.argv == ["--model-path", "/m", "--tp-size", "8", "--quantization", "fp8",
                            "--disable-radix-cache"]


@pytest.mark.parametrize(("profile", "problem"), [
    ({"model-path": "/m", "tp": 8}, "--tp is not a flag of SGLang 0.5.99; argparse would take it as "
                                    "an abbreviation of --tp-size, but the profile must spell flags in full"),
    ({"model-path": "/m", "tp-size": 8, "tensor-parallel-size": 4},
     "--tp-size is given twice (as --tp-size and --tensor-parallel-size)"),
    ({"model-path": "/m", "quantization": "nvfp5"},
     "--quantization: invalid choice 'nvfp5'; valid choices: fp8, modelopt_fp4"),
    ({"model-path": None, "tp-size": 8},
     "--model-path is required by SGLang 0.5.99 and the profile drops it (model-path: None); "
     "set it (for --model-path: sglang_server_model_path)"),
])
def test_both_readers_refuse_and_the_static_message_stands(fake_sglang, profile, problem):
    before = tree_digest(fake_sglang.parent)
    with pytest.raises(FlagError) as info:
        check_flags(str(fake_sglang), profile, {}, probe(fake_sglang.parent))
    assert info.value.problems == [problem]
    assert tree_digest(fake_sglang.parent) == before


def test_choices_known_only_at_run_time_the_parser_refuses(fake_sglang):
    before = tree_digest(fake_sglang.parent)
    with pytest.raises(FlagError) as info:
        check_flags(str(fake_sglang), {"model-path": "/m", "attention-backend": "flashinfer"}, {},
                    probe(fake_sglang.parent))
    (message,) = info.value.problems
    assert "disagree on '--model-path /m --attention-backend flashinfer'" in message
    assert ("SGLang's parser refuses them (argument --attention-backend: invalid choice: "
            "'flashinfer' (choose from ") in message
    assert "the static reader accepts them. SGLang's parser decides: fix the flags." in message
    assert tree_digest(fake_sglang.parent) == before


def test_flag_known_only_at_run_time_the_parser_accepts(fake_sglang):
    checked = check_flags(str(fake_sglang), {"model-path": "/m", "plugin-level": "3"}, {},
                          probe(fake_sglang.parent))
    assert checked.argv == ["--model-path", "/m", "--plugin-level", "3"]
    assert checked.runtime_parser == "decided"
    assert "the static reader refuses them (--plugin-level is not a flag of SGLang 0.5.99" in checked.warning


def test_probe_without_sglang_is_not_available(tmp_path):
    answer = probe(tmp_path)(["--tp-size", "8"])
    assert not answer.available and "No module named 'sglang'" in answer.reason


@pytest.mark.parametrize(("argv", "error"), [
    (["--model-path", "/m", "--tp", "8"], "unrecognized arguments: --tp 8"),
    (["--model-path", "/m", "--model", "/n"], "--model-path and --model both set model_path"),
    (["--model-path", "/m", "--port", "x"], "argument --port: invalid int value: 'x'"),
    (["--port", "1"], "the following arguments are required: --model-path"),
])
def test_probe_refusals(fake_sglang, argv, error):
    answer = probe(fake_sglang.parent)(argv)
    assert answer.available and not answer.ok
    assert error in answer.error
