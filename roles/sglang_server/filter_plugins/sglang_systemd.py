"""Filters: the server's settings checked once, and the unit's files escaped for systemd.

Thin adapter over the role's module_utils/sglang_settings.py and sglang_unit.py
(tested by pytest).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "module_utils"))
import sglang_settings  # noqa: E402  pylint: disable=wrong-import-position
import sglang_unit  # noqa: E402  pylint: disable=wrong-import-position


def _call(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except sglang_unit.UnitError as exc:
        raise AnsibleFilterError(
            "refusing to render the unit: " + "; ".join(exc.problems)) from None
    except sglang_settings.SettingsError as exc:
        raise AnsibleFilterError(
            "refusing the server settings: " + "; ".join(exc.problems)) from None


def systemd_exec_start(argv: list[str], program: str, env_flags: Any = None) -> str:
    return _call(sglang_unit.exec_start, program, list(argv), env_flags or [])


def systemd_env_lines(environment: dict[str, Any], name: str = "sglang_server_environment") -> list[str]:
    return _call(sglang_unit.env_lines, environment, name)


def config_file_text(value: str, flag: str) -> str:
    return _call(sglang_unit.config_file_text, flag, value)


def server_problems(settings: dict[str, Any]) -> list[str]:
    return sglang_settings.server_problems(settings)


def server_effective(settings: dict[str, Any]) -> dict[str, Any]:
    return _call(sglang_settings.effective, settings)


def server_command(validated: dict[str, Any], api_key_set: bool, unit_name: str) -> dict[str, Any]:
    return sglang_settings.server_command(
        list(validated.get("argv") or []), list(validated.get("env_flags") or []),
        str(validated.get("config_flag") or ""), bool(api_key_set), unit_name)


def secret_env_names(environment: Any) -> list[str]:
    return sglang_settings.secret_env_names(environment)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_systemd_exec_start": systemd_exec_start,
            "sglang_systemd_env_lines": systemd_env_lines,
            "sglang_config_file_text": config_file_text,
            "sglang_server_problems": server_problems,
            "sglang_server_effective": server_effective,
            "sglang_server_command": server_command,
            "sglang_secret_env_names": secret_env_names,
        }
