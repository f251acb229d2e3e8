"""The sglang_flags module's parser path against a real release: SGLang 0.5.20 on CPU torch.

SGLang 0.5.20 pins torch 2.13.0, whose CPU build for Python 3.11 this machine has, so its own
ServerArgs parser can run here. The virtualenv (tests/sglang-0.5.20-parser.txt, --no-deps after
torch) is built once into the cache beside the wheels and kept; torchvision is the one stand-in
(tests/standin/torchvision: PyPI's does not import beside CPU torch, and the parser needs only
the name). Building it took 77 s here (torch from this disk, the rest from PyPI, 2.3 GB); with
it kept, the test takes about 25 s (SGLang's imports, 7 s a parser call), one play for both.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, wheel_cache
from test_sglang_flags import DEFAULT_PROFILE, play

REQUIREMENTS = REPO / "tests" / "sglang-0.5.20-parser.txt"
STANDIN = REPO / "tests" / "standin"


def parser_venv() -> Path:
    """The cached virtualenv, rebuilt when the requirements change."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    venv = wheel_cache().parent / f"parser-venv-0.5.20-{digest}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        # --no-compile: Python writes the bytecode of what it imports, on first import; pip's default
        # compiles all of torch, triton and transformers, most of which the parser never imports.
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
        # From this machine's disk (the CPU build); a range or a bare name would fetch CUDA's.
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, "--no-deps", "-r", str(REQUIREMENTS)], check=True)
        (venv / ".complete").write_text(digest + "\n")
    return python


@pytest.fixture(scope="module")
def real_python(tmp_path_factory) -> Path:
    python = parser_venv()
    wrapper = tmp_path_factory.mktemp("parser") / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={STANDIN} exec {python} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_real_parser_agrees_with_the_profile_and_refuses_a_bad_choice(tmp_path, real_python):
    profile = dict(DEFAULT_PROFILE, **{"tp-size": 1})
    agrees, refused = play(tmp_path, [
        {"sglang_flags": {"python": str(real_python), "flags": profile}},
        {"sglang_flags": {"python": str(real_python), "flags": dict(profile, **{"moe-runner-backend": "x"})}},
    ])
    assert agrees["version"] == "0.5.20"
    assert agrees["runtime_parser"] == "agrees", agrees
    assert "--dsa-prefill-backend" in agrees["argv"] and "--nsa-prefill-backend" not in agrees["argv"]
    assert refused["failed"] is True and refused["changed"] is False
    (problem,) = refused["problems"]
    # The static reader of 0.5.20's source knows the choices and refuses first, as it should.
    assert problem.startswith("--moe-runner-backend: invalid choice 'x'; valid choices: auto, ")
