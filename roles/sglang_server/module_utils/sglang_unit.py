"""What reaches the systemd unit and its EnvironmentFile, escaped by systemd's rules.

systemd is not a shell. In ExecStart= it splits words on whitespace, honours
double and single quotes and C escapes (``\\"``, ``\\\\``), expands specifiers
(``%n``, ``%h``: a literal ``%`` is ``%%``) and environment variables (``$X``,
``${X}``: a literal ``$`` is ``$$``), and ends a command at a lone ``;``. A
newline ends the directive. EnvironmentFile= lines are ``KEY=VALUE`` with
shell-like quoting: inside double quotes a backslash escapes ``"``, ``\\``,
`````` ` `````` and ``$``.

Every value is checked here before any template renders it: control
characters are refused naming the variable they came from, so nothing a user
sets can inject a directive or produce a unit that systemd rejects.

Standard library only; the role's filter plugin is the thin adapter.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Iterable, Mapping, Optional

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A user or group name systemd accepts in User=/Group= (its "relaxed" rules
# still refuse whitespace and control characters; we keep to the portable set).
ACCOUNT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,30}[$]?$")
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?$")
# Flags that carry a secret: they belong in the 0600 environment file.
SECRET_FLAG_RE = re.compile(r"(^|-)(api-key|key|token|secret|password|passwd)($|-)")
SECRET_HINT = ("set the secret through sglang_server_api_key (Ansible Vault): it goes only to the "
               "0600 environment file and reaches the server as ${SGLANG_SERVER_API_KEY}")


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


def exec_start(program: str, argv: list[str], env_flags: Optional[list[list[str]]] = None) -> str:
    """The ExecStart= value: the program, then each flag with its values on a continued line.

    ``env_flags`` are (flag, VARIABLE) pairs whose value systemd takes from the
    environment file at start (``--api-key ${SGLANG_SERVER_API_KEY}``), so the
    secret never appears in the unit.
    """
    problems = []
    if not program.startswith("/") or re.search(r"[\s\"'\\%$]", program) or CONTROL_RE.search(program):
        problems.append(f"the server's Python must be an absolute path without spaces, quotes, "
                        f"'%' or '$', got {program!r}")
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


def _as_int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip(), 10)
    except ValueError:
        return None


def server_problems(settings: Mapping[str, Any]) -> list[str]:
    """Every problem with the server's settings, before anything is rendered.

    ``settings`` maps variable names to values: the ones checked by name are
    sglang_server_port, _tp_size, _host, _user, _group, _unit_name and the
    merged flags (sglang_server_flags: no secret-like flag); every value is
    checked for control characters.
    """
    problems = control_problems(settings)
    port = settings.get("sglang_server_port")
    if port is not None and not (_as_int(port) is not None and 1 <= _as_int(port) <= 65535):
        problems.append(f"sglang_server_port must be a port number 1-65535, got {port!r}")
    tp_size = settings.get("sglang_server_tp_size")
    if tp_size is not None and not (_as_int(tp_size) is not None and _as_int(tp_size) >= 1):
        problems.append(f"sglang_server_tp_size must be an integer >= 1, got {tp_size!r}")
    host = settings.get("sglang_server_host")
    if host is not None and not host_ok(str(host)):
        problems.append(f"sglang_server_host must be one IP address or host name, got {host!r} "
                        "(e.g. 127.0.0.1, 0.0.0.0, ::1)")
    for name in ("sglang_server_user", "sglang_server_group"):
        value = settings.get(name)
        if value is not None and not ACCOUNT_RE.match(str(value)):
            problems.append(f"{name} must be a plain user or group name (letters, digits, "
                            f"'_', '.', '-'), got {value!r}")
    unit = settings.get("sglang_server_unit_name")
    if unit is not None and not UNIT_NAME_RE.match(str(unit)):
        problems.append(f"sglang_server_unit_name must be a unit name without '.service', got "
                        f"{unit!r}")
    flags = settings.get("sglang_server_flags") or {}
    for flag in flags:
        if SECRET_FLAG_RE.search(str(flag).lstrip("-")) and flags[flag] not in (None, False):
            problems.append(f"--{str(flag).lstrip('-')} (from sglang_server_extra_flags or "
                            "sglang_server_profile) carries a secret that would land in the unit "
                            f"file and the play output: {SECRET_HINT}")
    return list(dict.fromkeys(problems))


def host_ok(host: str) -> bool:
    """One address or DNS name: no spaces, no scheme, no port, no list."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return bool(re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                             r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?", host))
