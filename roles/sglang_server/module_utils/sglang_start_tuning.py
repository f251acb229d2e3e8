"""Whether this start of the server is tuned, and whether it runs here, decided once, in the flag check.

Two inputs decide it:

- the sglang_autotune role's published result (``sglang_autotune_result``):
  its choice (``enabled``) and the server flags that choice needs
  (``server_args``), the gate file the server runs on and whether this run
  edits it;
- the answer check's last verdict on the replica (tasks/answers.yml writes
  it): the fallback it named for the install the server runs (skip_ops or
  untuned). A fallback belongs to the install it was measured on, so an
  upgrade (another virtualenv) tunes afresh.

The server role reads the result (``sglang_server_validated.tuning``) and never
the autotune role's result again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ansible.module_utils.sglang_settings import START_TRUE

FALLBACKS = ("none", "skip_ops", "untuned")
# The device node every NVIDIA driver makes: without it (sglang_server_start auto) the unit is
# rendered and enabled but not started.
NVIDIA_CONTROL = "/dev/nvidiactl"


def server_runs(start: Any, device: str = NVIDIA_CONTROL) -> bool:
    """Whether the server runs here: sglang_server_start (checked with the settings), auto asking the device node."""
    value = str(start).lower()
    if value == "auto":
        return os.path.lexists(device)
    return value in START_TRUE


@dataclass
class Tuning:
    """What this start runs with."""

    venv: str  # the install the server runs (its virtualenv, a link resolved), "" when there is none
    verdict: dict[str, Any]  # the replica's last answer verdict, {} when there is none
    fallback: str  # one of FALLBACKS
    tuned: bool  # the autotune role's choice, less an untuned fallback
    server_args: Any = field(default_factory=dict)  # the choice's flags and the fallback's (a dict once checked)
    gate_file: str = ""  # the gate file the server runs on ("" without the autotune role)
    gate_edited: bool = False  # whether this run edits it (a restart is due)
    warning: str = ""
    record_dir: str = ""  # the verdict file's directory where it is missing (tasks/answers.yml makes it), else ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def install_of(python: str) -> str:
    """The virtualenv of ``python`` (``<venv>/bin/python``), a link to it resolved; "" when it is missing."""
    venv = os.path.dirname(os.path.dirname(python))
    if not venv or not os.path.lexists(venv):
        return ""
    return os.path.realpath(venv) if os.path.islink(venv) else venv


def read_verdict(path: str) -> tuple[dict[str, Any], str]:
    """The verdict file's JSON object, or {} with why when it is missing or cannot be read as one."""
    if not path:
        return {}, ""
    if os.path.lexists(path) and not os.path.isfile(path):  # a FIFO would block the read: never opened
        return {}, (f"{path} (the answer check's last verdict) is not a regular file: this start runs with no "
                    "fallback, and its answers are checked again.")
    try:
        with open(path, encoding="utf-8") as handle:
            verdict = json.load(handle)
    except FileNotFoundError:
        return {}, ""
    except (OSError, ValueError) as exc:
        return {}, (f"{path} (the answer check's last verdict) cannot be read ({type(exc).__name__}: {exc}): "
                    "this start runs with no fallback, and its answers are checked again.")
    if not isinstance(verdict, dict):
        return {}, (f"{path} (the answer check's last verdict) holds a {type(verdict).__name__}, not a JSON "
                    "object: this start runs with no fallback, and its answers are checked again.")
    return verdict, ""


def autotune_problem(autotune: Any, required: bool) -> str:
    """Why the journal proof cannot run on what the autotune role published; "" when it can."""
    enabled = autotune.get("enabled") if isinstance(autotune, dict) else None
    if not required or isinstance(enabled, bool):
        return ""
    found = "not set" if enabled is None else json.dumps(enabled, default=str)
    return ("sglang_server_check_autotune=true proves autotune from the journal against "
            f"sglang_autotune_result.enabled, which is {found} (expected true or false, published by the "
            "sglang_autotune role). Run that role before this one (playbooks/sglang.yml does), or set "
            "sglang_server_check_autotune=false.")


def start_tuning(python: str, record: str, fallback_args: dict[str, Any], autotune: Optional[Any],
                 required: bool, taken: str = "") -> Tuning:
    """This start's tuning; ValueError, naming what to do, when the journal proof would lack its input.

    ``taken``: the fallback that failed answers just took (tasks/answers_failed.yml), which this start
    runs with whatever the verdict says; the verdict names it too, for a run killed before the restart.
    """
    problem = autotune_problem(autotune, required)
    if problem:
        raise ValueError(problem)
    if taken and (taken not in FALLBACKS or taken not in fallback_args):
        raise ValueError(f"the answer-check fallback {taken!r} has no flags here: expected one of "
                         f"{', '.join(name for name in FALLBACKS if name in fallback_args)}. Nothing was changed.")
    venv = install_of(python)
    verdict, warning = read_verdict(record)
    named = verdict.get("fallback")
    fallback = taken or (named if (venv and verdict.get("venv") == venv and named in FALLBACKS
                                   and named in fallback_args) else "none")
    result = autotune if isinstance(autotune, dict) else {}
    # Without the autotune role's word (it did not run) the server may be tuned: its cache is kept
    # and its answers checked all the same.
    tuned = bool(result.get("enabled", True)) and fallback != "untuned"
    args = result.get("server_args", {})
    if isinstance(args, dict):  # anything else goes to the settings check as given, which names it
        args = {**args, **(fallback_args.get(fallback) or {})}
    return Tuning(venv, verdict, fallback, tuned, args, str(result.get("file") or ""),
                  result.get("action", "none") not in ("none", None), warning, missing_directory(record))


def missing_directory(path: str) -> str:
    """PATH's directory when it does not exist, else "": only a directory the role makes gets its mode."""
    directory = os.path.dirname(os.path.expanduser(path)) if path else ""
    return directory if directory and not os.path.isdir(directory) else ""
