"""Filters: the unit's ExecStart= and the EnvironmentFile, escaped for systemd.

Thin adapter over the role's module_utils/sglang_unit.py (tested by pytest).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "module_utils"))
import sglang_unit  # noqa: E402  pylint: disable=wrong-import-position


def _call(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except sglang_unit.UnitError as exc:
        raise AnsibleFilterError(
            "refusing to render the unit: " + "; ".join(exc.problems)) from None


def systemd_exec_start(argv: list[str], program: str, env_flags: Any = None) -> str:
    return _call(sglang_unit.exec_start, program, list(argv), env_flags or [])


def systemd_env_lines(environment: dict[str, Any], name: str = "sglang_server_environment") -> list[str]:
    return _call(sglang_unit.env_lines, environment, name)


def server_problems(settings: dict[str, Any]) -> list[str]:
    return sglang_unit.server_problems(settings)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_systemd_exec_start": systemd_exec_start,
            "sglang_systemd_env_lines": systemd_env_lines,
            "sglang_server_problems": server_problems,
        }
