"""systemd's escaping: what reaches a unit's ExecStart= and its EnvironmentFile unchanged.

systemd is not a shell. In ExecStart= it splits words on whitespace, honours
double and single quotes and C escapes (``\\"``, ``\\\\``), expands specifiers
(``%n``, ``%h``: a literal ``%`` is ``%%``) and environment variables (``$X``,
``${X}``: a literal ``$`` is ``$$``), and ends a command at a lone ``;``. A
newline ends the directive. EnvironmentFile= lines are ``KEY=VALUE`` with
shell-like quoting: inside double quotes a backslash escapes ``"``, ``\\``,
`````` ` `````` and ``$``.

Every value is checked before a file is written: control characters are
refused naming the variable they came from, so nothing a user sets can inject
a directive or produce a unit that systemd rejects. Shared by the server's and
the gateway's unit modules (sglang_server, sglang_router_unit).
"""

from __future__ import annotations

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


def env_value(value: Any) -> str:
    """A value in EnvironmentFile= syntax: double-quoted, ``\\ " ` $`` escaped."""
    text = "" if value is None else str(value)
    text = re.sub(r'([\\"`$])', r"\\\1", text)
    return f'"{text}"'


def env_lines(environment: Mapping[str, Any], name: str = "sglang_server_environment") -> list[str]:
    """``KEY="value"`` lines for an EnvironmentFile, sorted; refuses bad names and values."""
    if not isinstance(environment, Mapping):
        raise UnitError([f"{name} must be a mapping of variable name -> value (e.g. {{HF_HOME: /data/hf}}), "
                         f"got a {type(environment).__name__}"])
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
