"""The gateway's unit and environment file, as text (systemd's escaping from systemd_text.py)."""

from __future__ import annotations

import re
from typing import Mapping

from ansible.module_utils.systemd_text import UnitError, control_problems, env_lines, exec_arg, program_problem
from ansible.module_utils.systemd_unit_name import unit_name_problem

# The one name the API key goes by: in the environment file, and as ${SGLANG_ROUTER_API_KEY} in the argv.
KEY_VARIABLE = "SGLANG_ROUTER_API_KEY"
HEADER = "# Written by the sglang_router role (Ansible); local changes are overwritten on the next run."
# A word systemd fills from the environment file at start (--api-key ${SGLANG_ROUTER_API_KEY}).
ENV_WORD_RE = re.compile(r"\$\{[A-Z_][A-Z0-9_]*\}")


def exec_start(program: str, argv: list[str]) -> str:
    """ExecStart's value: every word double-quoted, % and $ escaped; ``${VAR}`` words kept for systemd."""
    problem = program_problem(program, "the gateway's smg")
    if problem:
        raise UnitError([problem])
    return " ".join([program] + [w if ENV_WORD_RE.fullmatch(w) else exec_arg(w) for w in argv])


def unit_text(name: str, version: str, user: str, program: str, argv: list[str]) -> str:
    """The whole ``NAME.service``: ``smg launch argv`` as ``user``."""
    problems = control_problems({"sglang_router_user": user, "version": version})
    problems += [p for p in [unit_name_problem(name, "sglang_router_unit_name", "sglang-router")] if p]
    if problems:
        raise UnitError(problems)
    return "\n".join([
        HEADER,
        f"# smg {version}; flags checked against its own parser by the smg_flags module.",
        "# Arguments are quoted for systemd (not a shell): %% is a literal %, $$ a literal $.",
        "[Unit]",
        "Description=SGLang model gateway (smg)",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        f"Group={user}",
        f"EnvironmentFile=/etc/sglang/{name}.env",
        f"ExecStart={exec_start(program, ['launch', *argv])}",
        "Restart=on-failure",
        "RestartSec=5",
        "NoNewPrivileges=true",
        "ProtectSystem=full",
        "ProtectHome=true",
        "PrivateTmp=true",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def env_file_text(name: str, environment: Mapping[str, str]) -> str:
    """The EnvironmentFile (0600: it holds the API key)."""
    return "\n".join([HEADER, f"# Read by {name}.service; mode 0600 because it holds the API key.",
                      *env_lines(environment, "the gateway's environment"), ""])
