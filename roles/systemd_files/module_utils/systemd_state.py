"""A unit as systemd sees it, and the one restart rule of every service the project owns.

State comes from systemd and the files themselves: a unit needs a restart when
a file its process depends on (the unit file and its drop-ins, an environment
file, an install, a patched source file) changed after its main process
started. A controller killed between writing a file and restarting therefore
still restarts on the next run: the rule reads no note of ours and no
``is changed`` of an earlier task. The systemd_current and sglang_server
modules apply it (converge_service), and sglang_server_state reads the same properties.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ansible.module_utils.systemd_files import Runner

SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus",
                   "NRestarts", "InvocationID", "MainPID", "ExecMainStartTimestampMonotonic",
                   "NeedDaemonReload", "UnitFileState", "FragmentPath", "DropInPaths")

# UnitFileState values that need no `systemctl enable` (static units have no [Install]).
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient")


@dataclass(frozen=True)
class UnitState:
    """The properties of `systemctl show` the project decides on."""

    load: str = ""
    active: str = ""
    sub: str = ""
    result: str = ""
    exit_status: str = ""
    restarts: int = 0
    invocation: str = ""
    main_pid: int = 0
    started_monotonic_us: int = 0
    need_reload: bool = False
    file_state: str = ""
    fragment: str = ""
    drop_ins: tuple[str, ...] = ()

    @property
    def running(self) -> bool:
        """Active (a oneshot that exited with RemainAfterExit too), not waiting to restart."""
        return self.active in ("active", "activating", "reloading") and self.sub != "auto-restart"

    @property
    def enabled(self) -> bool:
        return self.file_state in ENABLED_STATES

    def describe(self) -> str:
        return (f"ActiveState={self.active} SubState={self.sub} Result={self.result or 'n/a'} "
                f"ExecMainStatus={self.exit_status or 'n/a'} NRestarts={self.restarts}")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def parse_show(text: str) -> UnitState:
    """`systemctl show -p ...` output (KEY=VALUE lines) as a UnitState."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return UnitState(
        load=props.get("LoadState", ""),
        active=props.get("ActiveState", ""),
        sub=props.get("SubState", ""),
        result=props.get("Result", ""),
        exit_status=props.get("ExecMainStatus", ""),
        restarts=_int(props.get("NRestarts", "0")),
        invocation=props.get("InvocationID", ""),
        main_pid=_int(props.get("MainPID", "0")),
        started_monotonic_us=_int(props.get("ExecMainStartTimestampMonotonic", "0")),
        need_reload=props.get("NeedDaemonReload", "no") == "yes",
        file_state=props.get("UnitFileState", ""),
        fragment=props.get("FragmentPath", ""),
        drop_ins=tuple(props.get("DropInPaths", "").split()),
    )


def started_epoch(state: UnitState, monotonic_now: float, wall_now: float) -> Optional[float]:
    """Wall-clock time the main process started, from systemd's monotonic stamp."""
    if not state.running or state.started_monotonic_us <= 0:
        return None
    return wall_now - (monotonic_now - state.started_monotonic_us / 1e6)


def mtimes(paths: list[str]) -> dict[str, Optional[float]]:
    """Each path's own modification time (a link's is that of the link), None when it is missing."""
    found: dict[str, Optional[float]] = {}
    for path in paths:
        try:
            found[path] = os.lstat(path).st_mtime
        except OSError:
            found[path] = None
    return found


def stale_paths(mtimes: Mapping[str, Optional[float]], started: Optional[float]) -> list[str]:
    """The paths changed after the unit's process started (none when it does not run).

    A missing path (None) does not count: the gate file is absent on releases
    without the gate, and a caller passes no path it does not use.
    """
    if started is None:
        return []
    return sorted(path for path, mtime in mtimes.items() if mtime is not None and mtime > started)


def decide(state: UnitState, stale: list[str], run: bool, restart: bool, pending: bool) -> tuple[str, str]:
    """(start | restart | none, why): the one restart rule, for a systemd unit.

    ``restart`` is a restart asked for by the caller (a peer of a multi-node
    replica restarts); ``pending`` counts what check mode did not write.
    """
    if not run:
        return "none", "it is not to run here"
    why_not = (f"it was not running ({state.describe()})" if state.load != "not-found" else "its unit is new")
    return decide_restart(state.running, why_not, stale, restart, pending)


def decide_restart(running: bool, why_not: str, stale: list[str], restart: bool, pending: bool) -> tuple[str, str]:
    """(start | restart | none, why) for anything that runs its files: a unit, a container.

    Not running: start (``why_not`` says why). Running: restart once when a
    file in ``stale`` changed after it started, when the caller asks, or (check
    mode) when this run would change what it runs on; else leave it.
    """
    if not running:
        return "start", why_not
    if stale:
        return "restart", ", ".join(stale) + " changed after it started"
    if restart:
        return "restart", "a restart was asked for (a node of its replica restarts)"
    if pending:
        return "restart", "this run changes what it runs on"
    return "none", "it runs its current files"


class ServiceError(Exception):
    """A systemctl call that failed: the message says which and where to look."""


@dataclass(frozen=True)
class Converged:
    """What converge_service did (or would do, in check mode) to a unit."""

    action: str
    reason: str
    stale: list[str]
    reloaded: bool
    enabled_now: bool
    invocation_id: str
    diff: dict[str, str]

    @property
    def changed(self) -> bool:
        return self.action != "none" or self.enabled_now or self.reloaded

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason, "stale": self.stale, "reloaded": self.reloaded,
                "enabled_now": self.enabled_now, "invocation_id": self.invocation_id}


def show(run: Runner, unit: str) -> UnitState:
    """`systemctl show` of the properties the rule reads."""
    rc, out, err = run(["systemctl", "show", unit] + [f"--property={p}" for p in SHOW_PROPERTIES])
    if rc != 0:
        raise ServiceError(f"systemctl show {unit} failed: {err.strip()}. Nothing was changed.")
    return parse_show(out)


def _systemctl(run: Runner, unit: str, *verb: str) -> None:
    rc, _, err = run(["systemctl", *verb, *([unit] if unit else [])])
    if rc != 0:
        raise ServiceError(f"systemctl {' '.join(verb)} {unit} failed (rc {rc}): {err.strip()}. "
                           f"See journalctl -u {unit} for why.")


def converge_service(run: Runner, name: str, paths: Sequence[str], run_here: bool, restart: bool,
                     pending: bool, check_mode: bool) -> Converged:
    """The one restart rule, applied: reload when systemd asks, enable, then start or restart once.

    ``paths`` are the files, besides the unit and its drop-ins, whose change after
    the process started needs a restart. In check mode nothing is done, and
    ``pending`` counts what this run would have written.
    """
    unit = f"{name}.service"
    state = first = show(run, unit)
    if state.load == "not-found" and not check_mode:
        raise ServiceError(f"{unit} has no unit file (LoadState=not-found): write it first. Nothing was changed.")
    reloaded = state.need_reload
    if reloaded and not check_mode:
        _systemctl(run, "", "daemon-reload")
        state = show(run, unit)
    enable = not state.enabled and state.load != "not-found"
    if enable and not check_mode:
        _systemctl(run, unit, "enable")
    files = [p for p in (state.fragment, *state.drop_ins, *paths) if p]
    stale = stale_paths(mtimes(files), started_epoch(state, time.monotonic(), time.time()))
    action, reason = decide(state, stale, run_here, restart, pending and check_mode)
    if action != "none" and not check_mode:
        # A deliberate start is not a crash: systemd's start-rate counter (StartLimitBurst) is
        # flushed so that a day of deploys is not refused. A unit that never failed has none.
        run(["systemctl", "reset-failed", unit])
        _systemctl(run, unit, action)
        state = show(run, unit)
    done = {"start": "started", "restart": "restarted once", "none": "left as it is"}[action]
    result = Converged(action, reason, stale, reloaded, enable, state.invocation, {})
    if not result.changed:
        return result
    before = f"{unit}: {first.active or 'unknown'} ({first.sub or 'no unit yet'})\n"
    after = (f"{unit}: {'enabled, ' if enable else ''}{'reloaded, ' if reloaded else ''}{done}: "
             f"{reason}\n")
    return Converged(action, reason, stale, reloaded, enable, state.invocation, {"before": before, "after": after})
