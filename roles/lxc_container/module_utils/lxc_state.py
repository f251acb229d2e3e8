"""A plain-LXC container as LXC and the kernel see it: running, since when, on which bridge.

The container's restart follows the project's one rule (systemd_state's
decide_restart): it restarts once when its config changed after its init
process started, read from the config's own time against /proc/PID/stat, not
from an earlier task's ``is changed``. So a run killed between writing the
config and restarting still restarts on the next run. A link whose host
bridge was made again after the start (the veth left without a master) also
needs a restart. Standard library only; module_utils/lxc_run.py runs it for the plain_lxc_container module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

# What lxc-info reports with --state --pid --stats --no-humanize.
INFO_FLAGS = ("--state", "--pid", "--stats", "--no-humanize")

# States a start or restart may act on; the others are passing or need the user.
SETTLED_STATES = ("RUNNING", "STOPPED")

# What `systemctl is-system-running --wait` prints once the container's systemd has booted
# (degraded: booted with a failed unit, which the later plays' own checks name).
BOOTED_STATES = ("running", "degraded")

# Seconds between two tries of the boot wait (lxc-attach fails while the container's init starts).
BOOT_POLL_SECONDS = 3


@dataclass(frozen=True)
class ContainerState:
    """lxc-info's answer: the state, init's host PID and the host ends of its veths."""

    state: str = ""
    pid: int = 0
    links: tuple[str, ...] = ()

    @property
    def running(self) -> bool:
        return self.state == "RUNNING" and self.pid > 0


def parse_info(text: str) -> ContainerState:
    """`lxc-info --state --pid --stats --no-humanize` output as a ContainerState.

    Lines are ``Key: value``; a container with several networks has one
    ``Link:`` line per veth (the host end's name).
    """
    state, pid, links = "", 0, []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "State":
            state = value
        elif key == "PID" and value.isdigit():
            pid = int(value)
        elif key == "Link" and value:
            links.append(value)
    return ContainerState(state=state, pid=pid, links=tuple(links))


def start_ticks(stat_text: str) -> int:
    """Field 22 of /proc/PID/stat: the start time in clock ticks after boot.

    The command name (field 2) is in parentheses and may hold spaces, so the
    fields are counted after its closing parenthesis.
    """
    fields = stat_text.rpartition(")")[2].split()
    if len(fields) < 20 or not fields[19].isdigit():
        raise ValueError(f"not a /proc/PID/stat line: {stat_text[:80]!r}")
    return int(fields[19])


def started_epoch(ticks: int, ticks_per_second: int, boot_now: float, wall_now: float) -> float:
    """Wall-clock time of a process start given in ticks after boot (CLOCK_BOOTTIME now: boot_now)."""
    return wall_now - (boot_now - ticks / ticks_per_second)


def link_master(sysfs_net: str, link: str) -> Optional[str]:
    """The bridge a host interface is enslaved to (/sys/class/net/LINK/master), or None."""
    try:
        return os.path.basename(os.readlink(os.path.join(sysfs_net, link, "master")))
    except OSError:
        return None


def off_bridge(links: tuple[str, ...], bridge: str, masters: dict[str, Optional[str]]) -> Optional[str]:
    """Why the running container's link is not on ``bridge``, or None when it is (or none is asked)."""
    if not bridge:
        return None
    if any(masters.get(link) == bridge for link in links):
        return None
    if not links:
        return f"it has no veth on {bridge}"
    seen = ", ".join(f"{link} on {masters.get(link) or 'no bridge'}" for link in links)
    return f"its veth is not on {bridge} ({seen}): the bridge was made again after it started"


def booted(systemctl_output: str) -> bool:
    """Whether `systemctl is-system-running --wait`'s output says the boot has ended."""
    return systemctl_output.strip() in BOOTED_STATES


def boot_tries(timeout: int) -> int:
    """How many tries of the boot wait fit in ``timeout`` seconds (at least one)."""
    return max(1, -(-timeout // BOOT_POLL_SECONDS))


def inside_difference(seen: list[str], wanted: list[str]) -> str:
    """Why what the running container lists (files/list_nodes.py's lines) is not what the host passes;
    empty when it is, the same lines in any order."""
    if sorted(seen) == sorted(wanted):
        return ""
    missing = [line for line in wanted if line not in seen]
    extra = [line for line in seen if line not in wanted]
    parts = [f"it lacks {', '.join(missing)}"] if missing else []
    parts += [f"it has {', '.join(extra)}, which the host does not pass"] if extra else []
    return "what it sees inside is not what the host passes: " + ("; ".join(parts) or "a line is listed twice")
