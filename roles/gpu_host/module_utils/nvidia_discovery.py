"""Read what the NVIDIA driver exposes on a machine (or under a fake root).

Plain functions over text and a directory tree, so pytest can run them on
captured output. Nothing here writes anything.
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
from typing import Any, Optional

# Exact names in /proc/devices. "nvidia-caps-imex-channels" (and nvidiactl,
# nvidia-nvswitch, nvidia-nvlink) share a prefix and must never match.
MAJOR_NAMES = ("nvidia-frontend", "nvidia", "nvidia-uvm", "nvidia-caps")

# Fixed nodes under /dev, in the order they are reported after the nvidiaN ones.
FIXED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CAPS_DIR = "nvidia-caps"

_GPU_NODE = re.compile(r"^nvidia(\d+)$")
_VERSION_LINE = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\s+(?P<kind>Open Kernel Module for \S+|\S+ Kernel Module)"
    r"\s+(?P<version>\d+\.\d+(?:\.\d+)*)"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

# nvidia-smi --query-gpu fields we read; the CSV header names them (units in brackets).
SMI_QUERY = "index,name,uuid,pci.bus_id,memory.total,power.limit"


def parse_proc_devices(text: str) -> dict[str, int]:
    """Majors of the NVIDIA character devices, by exact name."""
    majors: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            in_char = stripped == "Character devices:"
            continue
        if not in_char or not stripped:
            continue
        parts = stripped.split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        name = parts[1].strip()
        if name in MAJOR_NAMES and name not in majors:
            majors[name] = int(parts[0])
    return majors


def parse_driver_version(text: str) -> tuple[Optional[str], Optional[str]]:
    """(version, 'open'|'proprietary') from /proc/driver/nvidia/version, else (None, None)."""
    for line in text.splitlines():
        match = _VERSION_LINE.match(line.strip())
        if match:
            kind = "open" if match.group("kind").startswith("Open ") else "proprietary"
            return match.group("version"), kind
    return None, None


def _number(value: str) -> Optional[float]:
    match = _NUMBER.search(value)
    return float(match.group(0)) if match else None


def parse_smi_csv(text: str) -> list[dict[str, Any]]:
    """GPUs from `nvidia-smi --query-gpu=... --format=csv` (with header, units or not)."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    rows = [row for row in rows if row and any(cell.strip() for cell in row)]
    if not rows:
        return []
    header = [cell.strip().split(" [", 1)[0].lower() for cell in rows[0]]
    needed = ("index", "name", "uuid", "pci.bus_id")
    missing = [field for field in needed if field not in header]
    if missing:
        raise ValueError(f"nvidia-smi CSV lacks column(s) {', '.join(missing)}; header was {rows[0]}")
    gpus = []
    for row in rows[1:]:
        cells = dict(zip(header, (cell.strip() for cell in row)))
        memory = _number(cells.get("memory.total", ""))
        power = _number(cells.get("power.limit", ""))
        gpus.append({
            "index": int(cells["index"]),
            "name": cells["name"],
            "uuid": cells["uuid"],
            "pci_bus_id": cells["pci.bus_id"],
            "memory_total_mib": int(memory) if memory is not None else None,
            "power_limit_w": power,
        })
    return sorted(gpus, key=lambda gpu: gpu["index"])


def _node_order(name: str) -> tuple[int, int, str]:
    match = _GPU_NODE.match(name)
    if match:
        return (0, int(match.group(1)), name)
    if name in FIXED_NODES:
        return (1, FIXED_NODES.index(name), name)
    digits = re.findall(r"\d+", name)
    return (2, int(digits[-1]) if digits else -1, name)


def _char_node(host_path: str) -> Optional[os.stat_result]:
    try:
        info = os.stat(host_path)
    except OSError:
        return None
    return info if stat.S_ISCHR(info.st_mode) else None


def scan_nodes(root: str) -> list[dict[str, Any]]:
    """NVIDIA character nodes under <root>/dev with the major:minor that stat reports.

    Order: nvidiaN by N, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset,
    then nvidia-caps/* by number.
    """
    dev = os.path.join(root, "dev")
    found: list[tuple[tuple[int, int, str], str]] = []
    try:
        names = os.listdir(dev)
    except OSError:
        names = []
    for name in names:
        if _GPU_NODE.match(name) or name in FIXED_NODES:
            found.append((_node_order(name), name))
    try:
        caps = os.listdir(os.path.join(dev, CAPS_DIR))
    except OSError:
        caps = []
    for name in caps:
        found.append(((3,) + _node_order(name)[1:], f"{CAPS_DIR}/{name}"))
    nodes = []
    for _, relative in sorted(found):
        host_path = os.path.join(dev, relative)
        info = _char_node(host_path)
        if info is None:
            continue
        nodes.append({
            "path": f"/dev/{relative}",
            "host_path": host_path,
            "major": os.major(info.st_rdev),
            "minor": os.minor(info.st_rdev),
        })
    return nodes


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def discover(root: str = "/", smi_csv: Optional[str] = None) -> dict[str, Any]:
    """The whole picture under root; smi_csv is nvidia-smi's CSV text when one was read."""
    version_text = _read(os.path.join(root, "proc", "driver", "nvidia", "version")) or ""
    driver_version, kernel_module = parse_driver_version(version_text)
    majors = parse_proc_devices(_read(os.path.join(root, "proc", "devices")) or "")
    nodes = scan_nodes(root)
    gpus = parse_smi_csv(smi_csv) if smi_csv else []
    return {
        "driver_version": driver_version,
        "kernel_module": kernel_module,
        "majors": majors,
        "nodes": nodes,
        "gpus": gpus,
        "gpu_nodes": sum(1 for node in nodes if _GPU_NODE.match(node["path"][len("/dev/"):])),
    }
