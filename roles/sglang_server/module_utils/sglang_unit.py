"""The SGLang server's unit, environment file and API key file, as text.

Every word and value goes through systemd's escaping (the systemd_files role's
systemd_text.py); the sglang_server module writes what :func:`unit_text`,
:func:`env_file_text` and :func:`config_file_text` return.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from ansible.module_utils.systemd_text import (
    ENV_NAME_RE,
    UnitError,
    control_problems,
    env_lines,
    exec_arg,
    program_problem,
)


def exec_start(program: str, argv: list[str], env_flags: Optional[list[list[str]]] = None) -> str:
    """The ExecStart= value: the program, then each flag with its values on a continued line.

    ``env_flags`` are (flag, VARIABLE) pairs whose value systemd takes from the
    environment file at start (``--api-key ${SGLANG_SERVER_API_KEY}``), so the
    secret never appears in the unit.
    """
    problem = program_problem(program)
    problems = [problem] if problem else []
    for flag, variable in env_flags or []:
        if not ENV_NAME_RE.match(variable) or not flag.startswith("--"):
            problems.append(f"cannot pass {flag!r} from the environment variable {variable!r}")
    if problems:
        raise UnitError(problems)
    lines = [f"{program} -m sglang.launch_server"]
    for arg in argv:  # one flag and its values per line
        if arg.startswith("--") or len(lines) == 1:
            lines.append(exec_arg(arg))
        else:
            lines[-1] += " " + exec_arg(arg)
    lines += [f"{exec_arg(flag)} ${{{variable}}}" for flag, variable in env_flags or []]
    return " \\\n    ".join(lines)


def config_file_text(flag: str, value: str) -> str:
    """The YAML file SGLang reads with --config: one ``flag: value`` mapping, in JSON syntax
    (JSON is YAML). Non-ASCII is written as is, not as \\u escapes (YAML would not join a
    surrogate pair); printable characters only, so YAML reads back exactly ``value``."""
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        raise UnitError([f"the value for --{flag} holds U+{ord(bad):04X}, which YAML would not "
                         "read back unchanged"])
    return json.dumps({flag: value}, ensure_ascii=False) + "\n"


HEADER = "# Written by the sglang_server role (Ansible); local changes are overwritten on the next run."


def unit_text(name: str, version: str, user: str, group: str, program: str,
              argv: list[str], env_flags: Optional[list[list[str]]] = None) -> str:
    """The whole ``NAME.service`` file: ``program -m sglang.launch_server argv``, run as ``user``."""
    problems = control_problems({"sglang_server_user": user, "sglang_server_group": group,
                                 "sglang_server_unit_name": name, "version": version})
    if problems:
        raise UnitError(problems)
    exec_line = exec_start(program, argv, env_flags)
    return "\n".join([
        HEADER,
        f"# SGLang {version}; flags checked against its source by the sglang_server module.",
        "# Arguments are quoted for systemd (not a shell): %% is a literal %, $$ a literal $.",
        "[Unit]",
        "Description=SGLang server",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=3h",
        "StartLimitBurst=3",
        "",
        "[Service]",
        "# Readiness is waited for by the role (sglang_server_ready_timeout), not by systemd.",
        "Type=simple",
        f"User={user}",
        f"Group={group}",
        f"EnvironmentFile=/etc/sglang/{name}.env",
        f"WorkingDirectory=/var/lib/{user}",
        f"Environment=HOME=/var/lib/{user}",
        f"ExecStart={exec_line}",
        "TimeoutStopSec=120",
        "Restart=on-failure",
        "RestartSec=30",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        f"StateDirectory={user}",
        "CacheDirectory=sglang",
        "# Hardening that CUDA tolerates: no device or memory-execution restrictions.",
        "NoNewPrivileges=true",
        "ProtectSystem=full",
        "ProtectHome=true",
        "PrivateTmp=true",
        "ProtectKernelTunables=true",
        "ProtectControlGroups=true",
        "RestrictSUIDSGID=true",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def env_file_text(name: str, environment: Mapping[str, Any],
                  label: str = "sglang_server_environment") -> str:
    """The whole EnvironmentFile: a header, then sorted ``KEY="value"`` lines."""
    lines = env_lines(environment, label)
    return "\n".join([
        HEADER,
        f"# Read by {name}.service (systemd EnvironmentFile syntax); mode 0600 because it may hold secrets.",
        *lines, ""])
