"""What an SGLang virtualenv holds: versions, its interpreter, SGLang's pins, freeze and check.

`report_versions` runs inside the virtualenv's own Python (its source is sent with `-c`), so
that what is read is what that interpreter imports. The rest is plain parsing.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from typing import Any

PACKAGES = ("sglang", "sglang-kernel", "sgl-kernel", "torch", "flashinfer-python", "flashinfer-cubin",
            "flashinfer-jit-cache")
# SGLang's own pins worth recording next to what was installed.
PINNED = {"torch", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sglang-kernel", "sgl-kernel"}
_UV_CHATTER = re.compile(r"^(Using Python .* environment at|Checked \d+ packages? in|Found \d+ incompatibilit)")


def report_versions(names: list[str]) -> None:
    """Run in the virtualenv: print the installed versions, Python's version and SGLang's pins as JSON."""
    import importlib.metadata as metadata
    import json as json_
    import sys

    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    try:
        requires = metadata.requires("sglang") or []
    except metadata.PackageNotFoundError:
        requires = []
    pins = [line for line in requires if "extra ==" not in line]
    print(json_.dumps({"packages": found, "python": sys.version.split()[0], "pins": pins}))


def versions_program() -> str:
    return inspect.getsource(report_versions) + "\nimport sys\nreport_versions(sys.argv[1:])\n"


def inspect_argv(venv: str, uv: str = "") -> dict[str, list[str]]:
    """The commands that read a virtualenv: its versions, freeze, check and the installer's version."""
    python = f"{venv}/bin/python"
    if uv:
        return {
            "versions": [python, "-c", versions_program(), *PACKAGES],
            "freeze": [uv, "pip", "freeze", "--python", python],
            "check": [uv, "pip", "check", "--python", python],
            "version": [uv, "--version"],
        }
    return {
        "versions": [python, "-c", versions_program(), *PACKAGES],
        "freeze": [python, "-m", "pip", "freeze", "--all"],
        "check": [python, "-m", "pip", "check"],
        "version": [python, "-m", "pip", "--version"],
    }


def tool_version(text: str) -> str:
    """The version in `uv --version` ("uv 0.13.9 (...)") or `pip --version` ("pip 23.0.1 from ...")."""
    match = re.match(r"\s*\S+\s+([0-9][^\s]*)", text)
    return match.group(1) if match else ""


def check_problems(output: str) -> str:
    """The problem lines of `pip check` / `uv pip check`, without uv's progress lines."""
    return "\n".join(line for line in output.strip().splitlines() if not _UV_CHATTER.match(line))


def _distribution(requirement: str) -> str:
    return re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def parse_inspection(outputs: dict[str, tuple[int, str, str]]) -> dict[str, Any]:
    """The manifest's record of an install, from the outputs of `inspect_argv`'s commands."""
    data = json.loads(outputs["versions"][1])
    check_rc, check_out, check_err = outputs["check"]
    return {
        "installer_version": tool_version(outputs["version"][1]),
        "resolved": data["packages"],
        "python": data["python"],
        "sglang_requires": [pin for pin in data["pins"] if _distribution(pin) in PINNED],
        "freeze_sha256": hashlib.sha256(outputs["freeze"][1].encode()).hexdigest(),
        "pip_check": {"ok": check_rc == 0, "output": check_problems(check_out + check_err)},
    }
