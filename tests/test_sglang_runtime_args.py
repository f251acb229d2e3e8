"""SGLang's own parser as a second opinion (roles/sglang_server/module_utils/sglang_runtime_args.py).

No real case exists here: SGLang's parser needs torch to import, and CI has
none. The agreement logic is tested with fake answers, and the runtime check
script runs for real against a fake `sglang` package whose ServerArgs builds an
argparse parser the way SGLang's does (add_cli_args).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "roles" / "sglang_server" / "module_utils"))
import sglang_runtime_args as rt  # noqa: E402

OK = rt.RuntimeAnswer(available=True, ok=True)
REJECTS = rt.RuntimeAnswer(available=True, ok=False, error="argument --quantization: invalid choice: 'nvfp5'")
ABSENT = rt.RuntimeAnswer(available=False, reason="ModuleNotFoundError: No module named 'torch'")
ARGV = ["--tp-size", "8"]


def test_parser_absent_static_decides():
    verdict = rt.decide(ARGV, None, False, ABSENT, ARGV)
    assert verdict.argv == ARGV and not verdict.problems
    assert "No module named 'torch'" in verdict.notes[0]
    assert rt.decide(None, "bad flag", False, ABSENT, ARGV).problems == ["bad flag"]


def test_both_accept():
    verdict = rt.decide(ARGV, None, False, OK, ARGV)
    assert verdict.argv == ARGV and verdict.notes == ["SGLang's own parser agrees with the static reader"]


def test_both_reject_keeps_the_static_message():
    verdict = rt.decide(None, "--quantization nvfp5 is not a valid choice", False, REJECTS, ARGV)
    assert verdict.argv is None
    assert "--quantization nvfp5 is not a valid choice" in verdict.problems[0]
    assert "SGLang's own parser agrees: argument --quantization" in verdict.problems[0]


def test_static_accepts_runtime_rejects_names_both():
    (problem,) = rt.decide(ARGV, None, False, REJECTS, ARGV).problems
    assert "the static reader accepts '--tp-size 8'" in problem
    assert "SGLang's own parser rejects it: argument --quantization" in problem


def test_static_rejects_runtime_accepts_names_both():
    (problem,) = rt.decide(None, "--new-flag is not a flag", False, OK, ["--new-flag", "1"]).problems
    assert "SGLang's own parser accepts '--new-flag 1'" in problem
    assert "the static reader rejects it: --new-flag is not a flag" in problem


def test_unreadable_layout_runtime_decides_with_a_warning():
    verdict = rt.decide(None, "layout not supported", True, OK, ["--tp-size", "8"])
    assert verdict.argv == ["--tp-size", "8"] and not verdict.problems
    assert verdict.notes[0].startswith("WARNING: the static reader cannot read")
    rejected = rt.decide(None, "layout not supported", True, REJECTS, ARGV)
    assert rejected.argv is None and "SGLang's own parser rejects the flags" in rejected.problems[0]


def test_naive_argv():
    assert rt.naive_argv({"a": True, "b": False, "c": None, "d": 3, "e": ["x", "y"]}) == \
        ["--a", "--d", "3", "--e", "x", "y"]


@pytest.mark.parametrize(("stdout", "available"), [("", False), ("not json", False),
                                                    ('{"available": true, "ok": true}', True)])
def test_parse_answer(stdout, available):
    assert rt.parse_answer(0, stdout, "Traceback").available is available


FAKE_SERVER_ARGS = '''
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--quantization", choices=["fp8", "modelopt_fp4"])
        parser.add_argument("--disable-cuda-graph", action="store_true")
'''


@pytest.fixture
def fake_sglang(tmp_path):
    root = tmp_path / "site"
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    return root


def run_check(site: Path, argv: list[str]) -> rt.RuntimeAnswer:
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n"
                           + rt.RUNTIME_CHECK, json.dumps(argv)], capture_output=True, text=True, check=False)
    return rt.parse_answer(done.returncode, done.stdout, done.stderr)


def test_runtime_check_accepts_and_rejects_with_argparse(fake_sglang):
    assert run_check(fake_sglang, ["--tp-size", "8", "--quantization", "modelopt_fp4"]).ok
    bad = run_check(fake_sglang, ["--quantization", "nvfp5"])
    assert bad.available and not bad.ok and "invalid choice: 'nvfp5'" in bad.error
    unknown = run_check(fake_sglang, ["--moe-runer-backend", "x"])
    assert "unrecognized arguments: --moe-runer-backend x" in unknown.error


def test_runtime_check_without_sglang_is_not_available(tmp_path):
    answer = run_check(tmp_path, ["--tp-size", "8"])
    assert not answer.available and "No module named 'sglang'" in answer.reason
