"""The gateway's flags checked against the installed smg's own argparse (plain, typed, tested).

The spec is read from the installed package by running its parser builder
(``RouterArgs.add_cli_args``) in the gateway's virtualenv (SPEC_SCRIPT); this
file decides on it without importing smg, so pytest can call it on a spec.
"""

from __future__ import annotations

import difflib
from typing import Any

from ansible.module_utils.flag_key import split_key

# Run with the gateway venv's python: prints the installed smg's version and
# every option of `smg launch` (its parser, built by smg itself); with argv on
# stdin it also lets smg's own parse_router_args judge the final command line.
SPEC_SCRIPT = r"""
import argparse, contextlib, io, json, sys
from importlib.metadata import version
from smg.router_args import RouterArgs
from smg.launch_router import parse_router_args
parser = argparse.ArgumentParser(add_help=False)
RouterArgs.add_cli_args(parser)
options = {}
for action in parser._actions:
    for name in action.option_strings:
        options[name] = {
            "switch": action.nargs == 0,
            "multiple": action.nargs in ("*", "+") or isinstance(action.nargs, int) and action.nargs > 1,
            "choices": [str(c) for c in action.choices] if action.choices else None,
        }
argv = json.loads(sys.stdin.read() or "[]")
error = ""
if argv:
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            parse_router_args(argv)
    except SystemExit:
        error = captured.getvalue().strip().splitlines()[-1:] or ["smg refused the command line"]
        error = error[0]
    except Exception as exc:  # smg's own checks in from_cli_args
        error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"version": version("smg"), "options": options, "error": error}))
"""


def hidden_parts(flags: dict[Any, Any]) -> set[str]:
    """What follows the separator of each key that has one (split_key; for no_log): a secret may be there."""
    return {hidden for hidden in (split_key(str(name))[1] for name in flags) if len(hidden) >= 3}


def _render(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(item) for item in value]
    return [str(value)]


def check_flags(spec: dict[str, Any], flags: dict[str, Any], env_flags: dict[str, str]) -> tuple[list[str], list[str]]:
    """(argv, problems): every flag checked against smg's options, all problems at once.

    flags: name without dashes -> value; true is a bare switch, false/None leaves it out,
    a list gives several values. env_flags: name -> environment variable that systemd
    puts there (the API key), checked like the others but never rendered here.
    """
    options: dict[str, Any] = spec["options"]
    argv: list[str] = []
    problems: list[str] = []
    for name, value in list(flags.items()) + [(n, "${%s}" % v) for n, v in env_flags.items()]:
        shown, hidden = split_key(str(name))
        if hidden:
            problems.append(f"the key {'--' + shown.lstrip('-') + '...'!r} is not a flag name: it has {shown[-1]!r} "
                            "(what follows it is not shown); a flag name has letters, digits, '-' and '_' only. "
                            "Give a value as the key's value, e.g. {'policy': 'round_robin'}, and the API key "
                            "through sglang_router_api_key")
            continue
        option = "--" + str(name).lstrip("-")
        found = options.get(option)
        if found is None:
            close = difflib.get_close_matches(option, list(options), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            problems.append(f"{option} is not a flag of smg {spec['version']} (smg launch --help lists them){hint}")
            continue
        if value is False or value is None:
            continue
        if found["switch"]:
            if value is not True:
                problems.append(f"{option} is a switch in smg {spec['version']}: give true, not {value!r}")
                continue
            argv.append(option)
            continue
        if value is True:
            problems.append(f"{option} needs a value in smg {spec['version']}, found a bare switch (true)")
            continue
        values = _render(value)
        if len(values) > 1 and not found["multiple"]:
            problems.append(f"{option} takes one value in smg {spec['version']}, found {len(values)}: {values}")
            continue
        if found["choices"] and name not in env_flags:
            bad = [v for v in values if v not in found["choices"]]
            if bad:
                problems.append(f"{option} {bad[0]!r} is not one of smg {spec['version']}'s choices: "
                                f"{', '.join(found['choices'])}")
                continue
        argv.append(option)
        argv.extend(values)
    return argv, problems
