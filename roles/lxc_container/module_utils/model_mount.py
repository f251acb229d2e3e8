"""The model store's read-only mount into the container: an mpN entry or an lxc.mount.entry line.

Proxmox (devN style): `mpN: HOSTDIR,mp=/models,ro=1,backup=0`, a bind mount point, which PVE lets
only root@pam set ("mount point type bind is only allowed for root@pam"), API tokens included:
the same two ways as devN (a root@pam ticket through the API, or pct on the node).
Raw style and plain LXC: `lxc.mount.entry = HOSTDIR models none bind,ro,create=dir 0 0`.
Ours is the entry whose mount point is the container path; every other entry is left alone.
"""

from __future__ import annotations

import os
import re
from typing import Optional

MP_KEY = re.compile(r"^mp(\d+)\Z")
MAX_MP = 256
RAW_KEY = "lxc.mount.entry"


def mount_problems(host_dir: str, mount: str) -> list[str]:
    problems = []
    for label, value in (("lxc_container_model_dir", host_dir), ("lxc_container_model_mount", mount)):
        if not value.startswith("/") or os.path.normpath(value) != value or value == "/" or re.search(r"[\s,=]", value):
            problems.append(f"{label}={value!r} must be an absolute, normalised path without spaces, commas or =")
    return problems


def mp_value(host_dir: str, mount: str) -> str:
    return f"{host_dir},mp={mount},ro=1,backup=0"


def mp_options(value: str) -> tuple[str, dict[str, str]]:
    parts = str(value).split(",")
    volume = parts[0].removeprefix("volume=")
    options = dict(part.split("=", 1) for part in parts[1:] if "=" in part)
    return volume, options


def plan_mp(config: dict[str, str], host_dir: str, mount: str) -> tuple[Optional[str], str]:
    """(key to set or None when it is right already, value): our mpN keeps its index."""
    wanted = mp_value(host_dir, mount)
    free = None
    for index in range(MAX_MP):
        key = f"mp{index}"
        if key not in config:
            free = key if free is None else free
            continue
        volume, options = mp_options(config[key])
        if options.get("mp") == mount:
            same = (volume == host_dir and options.get("ro") == "1" and options.get("backup") == "0")
            return (None if same else key), wanted
    if free is None:
        raise ValueError(f"the container has all {MAX_MP} mpN entries in use: none is free for {mount}")
    return free, wanted


def raw_line(host_dir: str, mount: str, separator: str) -> str:
    return f"{RAW_KEY}{separator}{host_dir} {mount.lstrip('/')} none bind,ro,create=dir 0 0"


def plan_raw_mount(text: str, host_dir: str, mount: str, separator: str) -> str:
    """The config text with exactly one entry of ours for mount, the rest as it was."""
    wanted = raw_line(host_dir, mount, separator)
    target = mount.lstrip("/")
    lines = text.splitlines()
    out: list[str] = []
    placed = False
    for line in lines:
        match = re.match(rf"^\s*{re.escape(RAW_KEY)}\s*[:=]\s*(\S+)\s+(\S+)", line)
        if match and match.group(2).strip("/") == target:
            if not placed:
                out.append(wanted)
                placed = True
            continue
        out.append(line)
    if not placed:
        # Before the first [snapshot] section of a Proxmox conf: that is the current config.
        section = next((i for i, line in enumerate(out) if line.startswith("[")), len(out))
        out.insert(section, wanted)
    return "\n".join(out) + "\n"
