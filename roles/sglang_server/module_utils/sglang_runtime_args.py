"""SGLang's own argument parser as a second opinion, and how it agrees with the static reader.

Where the target's virtualenv has SGLang with its dependencies, the module runs
RUNTIME_CHECK with that interpreter: it builds SGLang's server parser
(ServerArgs.add_cli_args, no GPU needed) and parses the effective argv. The
static reader (sglang_flags) stays the only check in check mode, in
playbooks/validate.yml and in CI, where SGLang cannot be imported.

Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

# Run as `python -c RUNTIME_CHECK ARGV_JSON`; prints one JSON object.
RUNTIME_CHECK = r"""
import argparse, json, sys
def say(**kw):
    print(json.dumps(kw)); sys.exit(0)
try:
    from sglang.srt.server_args import ServerArgs
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)
    parser = Parser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
except Exception as exc:  # ImportError without torch, or a layout without add_cli_args
    say(available=False, reason=f"{type(exc).__name__}: {exc}"[:500])
try:
    parser.parse_args(json.loads(sys.argv[1]))
except (ValueError, SystemExit) as exc:
    say(available=True, ok=False, error=str(exc)[:2000])
say(available=True, ok=True)
"""


@dataclass
class RuntimeAnswer:
    """What SGLang's own parser said (available=False: it could not be built here)."""

    available: bool
    ok: bool = False
    error: str = ""
    reason: str = ""


def parse_answer(rc: int, stdout: str, stderr: str) -> RuntimeAnswer:
    """The runtime check's output; anything unexpected means the parser was not available."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return RuntimeAnswer(available=False, reason=f"rc {rc}: {(stderr or stdout).strip()[-500:]}")
    return RuntimeAnswer(available=bool(data.get("available")), ok=bool(data.get("ok")),
                         error=str(data.get("error", "")), reason=str(data.get("reason", "")))


def naive_argv(flags: dict[str, Any]) -> list[str]:
    """The profile as argv without the static reader's knowledge (for when it cannot read SGLang)."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        argv.append(f"--{name}")
        if value is True:
            continue
        argv += [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
    return argv


@dataclass
class Verdict:
    """The decision: which argv to use, notes, and the problems that fail the deploy."""

    argv: Optional[list[str]]
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def decide(static_argv: Optional[list[str]], static_error: Optional[str], layout_unreadable: bool,
           runtime: RuntimeAnswer, fallback_argv: list[str]) -> Verdict:
    """Combine the static reader and SGLang's parser.

    - parser not available: the static answer stands (as in check mode and CI);
    - both accept, or both reject: agreed (the static message is the clearer one);
    - they disagree: fail naming both answers;
    - the static reader cannot read this layout: SGLang's parser decides, with a warning.
    """
    if not runtime.available:
        note = f"SGLang's own parser is not available here ({runtime.reason}); the static reader decided"
        if static_error is not None:
            return Verdict(None, [note], [static_error])
        return Verdict(static_argv, [note])
    if layout_unreadable:
        if runtime.ok:
            return Verdict(fallback_argv, [
                f"WARNING: the static reader cannot read this SGLang's flag layout ({static_error}); "
                "SGLang's own parser accepted the flags as given, so they are used unchecked by "
                "the static reader"])
        return Verdict(None, [], [f"SGLang's own parser rejects the flags: {runtime.error} (the static "
                                  f"reader cannot read this layout: {static_error})"])
    if static_error is None and runtime.ok:
        return Verdict(static_argv, ["SGLang's own parser agrees with the static reader"])
    if static_error is not None and not runtime.ok:
        return Verdict(None, [], [f"{static_error}\n(SGLang's own parser agrees: {runtime.error})"])
    if static_error is None:
        return Verdict(None, [], [f"the two checks disagree: the static reader accepts "
                                  f"{' '.join(static_argv or [])!r}, SGLang's own parser rejects it: "
                                  f"{runtime.error}"])
    return Verdict(None, [], [f"the two checks disagree: SGLang's own parser accepts "
                              f"{' '.join(fallback_argv)!r}, the static reader rejects it: {static_error}"])
