"""Whether a start of the server being waited on has failed, from systemd's state.

Readiness is one bounded poll of the server's endpoint that gives up as soon
as systemd says the start failed. Whether the server needs a restart is the
project's one restart rule (systemd_files' module_utils/systemd_state.py).
The role's sglang_server_state module is the adapter.
"""

from __future__ import annotations

from typing import Optional

from ansible.module_utils.systemd_state import UnitState


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
