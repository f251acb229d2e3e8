"""The running server as systemd sees it: whether it runs the current code, and readiness.

State comes from systemd and the files themselves: a server needs a restart
when a file its process depends on (the unit, the environment file, the
`current` link, the autotune gate) changed after its main process started.
A controller killed between writing a file and restarting therefore still
restarts on the next run. Readiness is one bounded poll of the server's
endpoint that gives up as soon as systemd says the start failed.

Standard library only; the role's sglang_server_state module is the adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus",
                   "NRestarts", "InvocationID", "MainPID", "ExecMainStartTimestampMonotonic")


@dataclass(frozen=True)
class UnitState:
    """The properties of `systemctl show` this role decides on."""

    load: str = ""
    active: str = ""
    sub: str = ""
    result: str = ""
    exit_status: str = ""
    restarts: int = 0
    invocation: str = ""
    main_pid: int = 0
    started_monotonic_us: int = 0

    @property
    def running(self) -> bool:
        return self.active in ("active", "activating", "reloading") and self.sub != "auto-restart"

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
    )


def started_epoch(state: UnitState, monotonic_now: float, wall_now: float) -> Optional[float]:
    """Wall-clock time the main process started, from systemd's monotonic stamp."""
    if not state.running or state.started_monotonic_us <= 0:
        return None
    return wall_now - (monotonic_now - state.started_monotonic_us / 1e6)


def stale_paths(mtimes: Mapping[str, Optional[float]], started: Optional[float]) -> list[str]:
    """The paths changed after the server started (all of them when it does not run).

    A missing path (None) does not count: the gate file is absent on releases
    without the gate, and the caller does not pass paths it does not use.
    """
    if started is None:
        return []
    return sorted(path for path, mtime in mtimes.items() if mtime is not None and mtime > started)


def start_failure(first: UnitState, now: UnitState) -> Optional[str]:
    """Why the start being waited on has failed, or None while it may still come up."""
    if now.invocation and first.invocation and now.invocation != first.invocation:
        return (f"the unit was restarted while starting (invocation {first.invocation} -> "
                f"{now.invocation}; {now.describe()})")
    if now.sub == "auto-restart" or now.restarts > first.restarts:
        return f"the server exited and systemd is restarting it ({now.describe()})"
    if now.active in ("failed", "inactive", "deactivating"):
        return f"the server is not running ({now.describe()})"
    return None
