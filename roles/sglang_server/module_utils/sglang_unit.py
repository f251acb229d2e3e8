"""What reaches the systemd unit and its EnvironmentFile, escaped by systemd's rules.

systemd is not a shell. In ExecStart= it splits words on whitespace, honours
double and single quotes and C escapes (``\\"``, ``\\\\``), expands specifiers
(``%n``, ``%h``: a literal ``%`` is ``%%``) and environment variables (``$X``,
``${X}``: a literal ``$`` is ``$$``), and ends a command at a lone ``;``. A
newline ends the directive. EnvironmentFile= lines are ``KEY=VALUE`` with
shell-like quoting: inside double quotes a backslash escapes ``"``, ``\\``,
`````` ` `````` and ``$``.

Every value is checked here before a file is written: control characters
are refused naming the variable they came from, so nothing a user sets can
inject a directive or produce a unit that systemd rejects. The
sglang_server_unit module writes what :func:`unit_text`, :func:`env_file_text`
and :func:`config_file_text` return.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Optional

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The interpreter in ExecStart=: a plain absolute path, each part of the portable set.
PROGRAM_RE = re.compile(r"(/(?!\.\.?(/|$))[A-Za-z0-9._+,:=@-]+)+")


class UnitError(ValueError):
    """A value cannot go into the unit or the environment file; the message says why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def control_problem(name: str, value: Any) -> Optional[str]:
    """A message when ``value`` (as text) holds a control character, else None."""
    text = "" if value is None else str(value)
    match = CONTROL_RE.search(text)
    if match is None:
        return None
    char = match.group(0)
    return (f"{name} contains the control character {char!r} at position {match.start()}: "
            "systemd would end the line there (a YAML '|' block adds a newline at the end); "
            "remove it, e.g. use '>-' or a quoted string")


def walk_values(name: str, value: Any) -> Iterable[tuple[str, Any]]:
    """(path, leaf) for every leaf of nested dicts and lists, keys included."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield f"{name} key {key!r}", key
            yield from walk_values(f"{name}[{key!r}]", item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from walk_values(f"{name}[{index}]", item)
    else:
        yield name, value


def control_problems(values: Mapping[str, Any]) -> list[str]:
    """Control characters in any of the named values (nested ones too)."""
    problems = []
    for name, value in values.items():
        for path, leaf in walk_values(name, value):
            problem = control_problem(path, leaf)
            if problem:
                problems.append(problem)
    return problems


def exec_arg(arg: str) -> str:
    """One ExecStart= word that systemd hands to the program unchanged.

    Always double-quoted: backslash and double quote are C-escaped, ``%`` is
    doubled (specifiers) and ``$`` is doubled (variable expansion). A quoted
    ``";"`` is a word, not the command separator.
    """
    problem = control_problem("argument", arg)
    if problem:
        raise UnitError([problem])
    text = (arg.replace("\\", "\\\\").replace('"', '\\"')
            .replace("%", "%%").replace("$", "$$"))
    return f'"{text}"'


def program_problem(program: Any, name: str = "the server's Python") -> Optional[str]:
    """A message unless ``program`` is a plain absolute path systemd runs as written."""
    if isinstance(program, str) and PROGRAM_RE.fullmatch(program):
        return None
    return (f"{name} must be an absolute path of letters, digits and '._+,:=@-' (no spaces, "
            f"quotes, '%', '$', '.' or '..' parts, no trailing '/'), got {program!r}")


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


def env_value(value: Any) -> str:
    """A value in EnvironmentFile= syntax: double-quoted, ``\\ " ` $`` escaped."""
    text = "" if value is None else str(value)
    text = re.sub(r'([\\"`$])', r"\\\1", text)
    return f'"{text}"'


def env_lines(environment: Mapping[str, Any], name: str = "sglang_server_environment") -> list[str]:
    """``KEY="value"`` lines for an EnvironmentFile, sorted; refuses bad names and values."""
    problems = []
    lines = []
    for key in sorted(environment, key=str):
        value = environment[key]
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            problems.append(f"{name}: {key!r} is not an environment variable name "
                            "(letters, digits and '_', not starting with a digit)")
            continue
        if isinstance(value, (dict, list)):
            problems.append(f"{name}[{key!r}] must be a string or a number, got a "
                            f"{type(value).__name__}")
            continue
        problem = control_problem(f"{name}[{key!r}]", value)
        if problem:
            problems.append(problem)
            continue
        if isinstance(value, bool):
            value = "1" if value else "0"
        lines.append(f"{key}={env_value(value)}")
    if problems:
        raise UnitError(problems)
    return lines


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
        f"# SGLang {version}; flags checked against its source by the sglang_flags module.",
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
