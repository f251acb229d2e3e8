"""SGLang's own server argument parser, asked about one argv by the SGLang virtualenv's interpreter.

The sglang_server and sglang_flags modules run this file's source as ``<venv python> -c SOURCE
ARGV_JSON``. It builds the parser SGLang builds (``ServerArgs.add_cli_args``;
no GPU needed), with the two rules the static reader also applies: flags
spelled in full (``allow_abbrev=False``; SGLang's own launcher would take
``--tp`` for ``--tp-size``) and one spelling per option (two aliases of one
flag would silently let the last one win). It prints one JSON line:

* ``{"available": false, "reason": ...}``: SGLang cannot be imported here
  (no torch: the demo, ``--no-deps`` installs), so the static reader decides;
* ``{"available": true, "ok": true}`` or ``{..., "ok": false, "error": ...}``.

Standard library only; it must not import anything of Ansible's. It reads the
target's SGLang tree and writes nothing there: no ``__pycache__`` (the module
also runs it with ``-B``; the line below covers any other caller).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

sys.dont_write_bytecode = True  # importing sglang must leave its tree as it was (check mode too)


class Refused(Exception):
    """What argparse would print before exiting."""


class StrictParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise Refused(message)


def build_parser() -> StrictParser:
    from sglang.srt.server_args import ServerArgs  # imports torch: why this runs in the venv

    parser = StrictParser(prog="sglang.launch_server", allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    return parser


def one_spelling_problem(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """Two words of argv that set the same option ('' where none do)."""
    seen: dict[str, str] = {}
    for word in argv:
        # argparse has no public map from an option string to its action
        action = parser._option_string_actions.get(word.split("=", 1)[0])  # pylint: disable=protected-access
        if action is None:
            continue
        option = word.split("=", 1)[0]
        if action.dest in seen and seen[action.dest] != option:
            return f"{seen[action.dest]} and {option} both set {action.dest}; give one of them"
        seen[action.dest] = option
    return ""


def answer(argv: list[str]) -> dict[str, Any]:
    try:
        parser = build_parser()
    except Exception as exc:  # pylint: disable=broad-except  # no torch, or no add_cli_args
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        parser.parse_args(argv)
    except (Refused, ValueError, SystemExit) as exc:  # 0.5.6's DeprecatedAction raises ValueError
        return {"available": True, "ok": False, "error": str(exc)[:2000]}
    problem = one_spelling_problem(parser, argv)
    return {"available": True, "ok": not problem, "error": problem}


def main() -> None:
    print(json.dumps(answer(json.loads(sys.argv[1]))))


if __name__ == "__main__":
    main()
