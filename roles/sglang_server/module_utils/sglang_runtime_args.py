"""Which answer stands: SGLang's own parser where it can run, the static reader where it cannot.

The rule, whole:

* SGLang's parser could not run (not asked: check of a bare tree with
  package_dir, runtime_check=false; or not importable: no torch, the demo,
  ``--no-deps``): the static reader's answer stands.
* It ran and agrees with the static reader: the static answer stands (its
  argv is the one the parser accepted; its problems list every fault at once,
  with the closest names and the valid choices).
* It ran and disagrees: SGLang's parser leads, and the disagreement is one
  message naming both answers: the failure where the parser refuses, a
  warning where it accepts what the static reader refused (the flags are then
  used as given).

Standard library only.
"""

from __future__ import annotations

import inspect
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ansible.module_utils import sglang_parser_probe
from ansible.module_utils.sglang_argparse_reader import extract_flags
from ansible.module_utils.sglang_flag_table import FlagError, FlagTable
from ansible.module_utils.sglang_locate import sglang_version
from ansible.module_utils.sglang_profile import Resolution, flag_words, resolve_profile

# Where systemd supplies the value from the environment file, the parser is given this instead.
PLACEHOLDER = "from-environment"


@dataclass
class RuntimeAnswer:
    """What SGLang's own parser said (available=False: it could not be built here)."""

    available: bool
    ok: bool = False
    error: str = ""
    reason: str = ""


def parse_answer(rc: int, stdout: str, stderr: str) -> RuntimeAnswer:
    """sglang_parser_probe's output; anything unexpected means the parser was not available."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return RuntimeAnswer(available=False, reason=f"rc {rc}: {(stderr or stdout).strip()[-500:]}")
    if not isinstance(data, dict):
        return RuntimeAnswer(available=False, reason=f"rc {rc}: unexpected output {stdout[-200:]!r}")
    return RuntimeAnswer(available=bool(data.get("available")), ok=bool(data.get("ok")),
                         error=str(data.get("error", "")), reason=str(data.get("reason", "")))


def parser_asker(run: Callable[[list[str]], tuple[int, str, str]], python: str) -> Callable[[list[str]], RuntimeAnswer]:
    """SGLang's own parser, asked through ``python`` (the virtualenv's; read-only, so in check mode too)."""
    probe = inspect.getsource(sglang_parser_probe)

    def ask(argv: list[str]) -> RuntimeAnswer:
        rc, out, err = run([python, "-B", "-c", probe, json.dumps(argv)])
        return parse_answer(rc, out, err)

    return ask


def naive_argv(flags: dict[str, Any]) -> list[str]:
    """The profile as argv, names as given: what SGLang's parser is asked where the static reader refused."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{name}")
        else:
            argv += flag_words(name, [str(v) for v in value] if isinstance(value, (list, tuple))
                               else [str(value)])
    return argv


@dataclass
class Verdict:
    """The argv to use, its notes, a warning where the two readers disagree, and who decided."""

    argv: list[str]
    notes: list[str] = field(default_factory=list)
    warning: str = ""
    runtime_parser: str = "not asked"


def decide(static: Union[Resolution, FlagError], runtime: Optional[RuntimeAnswer],
           argv: list[str], version: str) -> Verdict:
    """Apply the rule; raise FlagError where the flags cannot be used.

    ``argv`` is what SGLang's parser was asked: the static argv where the
    static reader accepted, else naive_argv.
    """
    if runtime is None or not runtime.available:
        if isinstance(static, FlagError):
            raise static
        notes = list(static.notes)
        if runtime is not None:
            notes.append(f"SGLang's own parser cannot run here ({runtime.reason}); the static "
                         "reader decided")
        return Verdict(static.argv, notes, runtime_parser="not asked" if runtime is None
                       else "not available")
    if runtime.ok == isinstance(static, Resolution):
        if isinstance(static, FlagError):
            raise static
        return Verdict(static.argv, list(static.notes), runtime_parser="agrees")
    parser_says = ("SGLang's parser accepts them" if runtime.ok
                   else f"SGLang's parser refuses them ({runtime.error})")
    static_says = (f"the static reader refuses them ({'; '.join(static.problems)})"
                   if isinstance(static, FlagError) else "the static reader accepts them")
    message = (f"SGLang {version}'s own argument parser and the static reader of its source "
               f"disagree on {shlex.join(argv)!r}: {parser_says}, {static_says}. SGLang's parser "
               "decides: " + ("the flags are used as given" if runtime.ok else "fix the flags")
               + ". playbooks/validate.yml and check mode where SGLang cannot be imported use the "
               "static reader alone, so they " + ("refuse" if runtime.ok else "pass")
               + " these flags.")
    if not runtime.ok:
        raise FlagError(message)
    return Verdict(argv, [message], warning=message, runtime_parser="decided")


@dataclass
class Checked:
    """The flags checked against one installed SGLang: what the module returns."""

    argv: list[str]
    notes: list[str]
    warning: str
    env_flags: list[list[str]]
    config_flag: str
    version: str
    flag_count: int
    runtime_parser: str


def check_flags(package_dir: str, flags: dict[str, Any], env_flags: dict[str, str],
                ask_parser: Optional[Callable[[list[str]], RuntimeAnswer]]) -> Checked:
    """Read the flag table, resolve the profile, ask SGLang's parser where it can run, decide.

    ``env_flags``: flag -> environment variable; their spelling is checked, their
    value never passes through here. Raises FlagError listing every problem.
    """
    table: Optional[FlagTable] = None
    static: Union[Resolution, FlagError]
    try:
        table = extract_flags(package_dir)
        static = resolve_profile(table, flags, require=True)
    except FlagError as exc:
        static = exc
    spelled: list[list[str]] = []
    for name, variable in env_flags.items():
        flag = f"--{name}"
        if table is not None:
            try:  # the placeholder only proves the spelling; systemd supplies the value
                flag = resolve_profile(table, {name: PLACEHOLDER}).argv[0].split("=")[0]
            except FlagError as exc:
                static = static if isinstance(static, FlagError) else exc
        spelled.append([flag, variable])
    argv = static.argv if isinstance(static, Resolution) else naive_argv(flags)
    asked = argv + [word for flag, _ in spelled for word in (flag, PLACEHOLDER)]
    version = table.version if table is not None else sglang_version(Path(package_dir))
    verdict = decide(static, ask_parser(asked) if ask_parser else None, argv, version)
    return Checked(
        argv=verdict.argv, notes=verdict.notes, warning=verdict.warning, env_flags=spelled,
        config_flag=table.config_flag() if table is not None else "", version=version,
        flag_count=len(table) if table is not None else 0, runtime_parser=verdict.runtime_parser)
