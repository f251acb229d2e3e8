"""Read what the NVIDIA driver exposes on a machine (or under a fake root).

Plain functions over text and a directory tree, so pytest can run them on
captured output. Nothing here writes anything.

Only NVIDIA nodes are taken: a name must match one of the driver's patterns
(ASCII digits, no whitespace or control character), and its major:minor must
be the one /proc/devices registers for that driver. Anything else that claims
an NVIDIA name is refused with a DiscoveryError naming it; a node whose driver
is not loaded at all is left out and listed in `left_out`.
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
# The driver's fixed major (NV_MAJOR_DEVICE_NUMBER), for nvidiaN, nvidiactl and nvidia-modeset.
FIXED_MAJOR = 195
FIXED_NAMES = ("nvidia", "nvidia-frontend", "nvidiactl")
# /proc/devices names checked for duplicates and impossible majors.
CHECKED_NAMES = MAJOR_NAMES + ("nvidiactl",)
MAX_MAJOR = 4095  # 12 bits of major in a dev_t
MAX_MINOR = (1 << 20) - 1

# Fixed nodes under /dev, in the order they are reported after the nvidiaN ones,
# with the driver (its /proc/devices name) and minor each must have.
FIXED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
FIXED_NODE_IDS = {
    "nvidiactl": ("nvidia", 255),
    "nvidia-uvm": ("nvidia-uvm", 0),
    "nvidia-uvm-tools": ("nvidia-uvm", 1),
    "nvidia-modeset": ("nvidia", 254),
}
CAPS_DIR = "nvidia-caps"

_GPU_NODE = re.compile(r"nvidia(0|[1-9][0-9]{0,2})", re.ASCII)
_CAP_NODE = re.compile(r"nvidia-cap(0|[1-9][0-9]{0,6})", re.ASCII)
# What an entry under /dev whose name starts with "nvidia" may be made of.
_CLEAN_NAME = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_DEVICES_LINE = re.compile(r"[ \t]*([0-9]+)[ \t]+([!-~]+)[ \t]*", re.ASCII)
_VERSION_LINE = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\s+(?P<kind>Open Kernel Module for \S+|\S+ Kernel Module)"
    r"\s+(?P<version>\d+\.\d+(?:\.\d+)*)"
)
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

# nvidia-smi --query-gpu fields we read; the CSV header names them (units in brackets).
SMI_QUERY = "index,name,uuid,pci.bus_id,memory.total,power.limit"


class DiscoveryError(ValueError):
    """What the host shows cannot be trusted; the message names the file, line or node."""


def shown(text: str) -> str:
    """A name or line as a message shows it: quoted, control characters escaped."""
    return ascii(text) if _CONTROL.search(text) or not text.isascii() else repr(text)


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "special file"


def read_text_file(path: str, what: str) -> Optional[str]:
    """The text of a regular file (procfs files are), None when it does not exist.

    A FIFO would hang the read and a device would read anything: both, and a
    directory, are refused naming the path.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DiscoveryError(f"{path}: cannot be read ({exc.strerror}); expected {what}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise DiscoveryError(f"{path} is a {file_kind(mode)}; expected {what} (a regular file)")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError as exc:
        raise DiscoveryError(f"{path}: cannot be read ({exc.strerror}); expected {what}") from None
    finally:
        os.close(descriptor)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DiscoveryError(f"{path}: byte {exc.start} is not UTF-8; expected {what}") from None


def parse_char_devices(text: str, source: str = "/proc/devices") -> list[tuple[int, str]]:
    """(major, name) of every character driver, with the NVIDIA lines checked.

    A line naming an NVIDIA driver that does not parse, a major out of range,
    an NVIDIA name listed twice, the fixed names off 195 and a dynamic major
    shared with another driver are refused, naming the line: never first-wins.
    """
    table: list[tuple[int, str]] = []
    lines_of: dict[str, int] = {}
    in_char = False
    # Split at newlines only: a vertical tab or a form feed stays in its line and is refused there.
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip(" \t")
        if stripped in ("Character devices:", "Block devices:"):
            in_char = stripped == "Character devices:"
            continue
        if not in_char or not stripped:
            continue
        where = f"{source}:{number}"
        match = _DEVICES_LINE.fullmatch(line)
        if not match:
            if "nvidia" in line.lower() or _CONTROL.search(line):
                raise DiscoveryError(f"{where}: {shown(line)} is not '<major> <name>'; "
                                     f"{source} is not what the kernel writes")
            continue
        major, name = int(match.group(1)), match.group(2)
        if name in CHECKED_NAMES:
            if not 1 <= major <= MAX_MAJOR:
                raise DiscoveryError(f"{where}: {name} at major {major}; a major is 1 to {MAX_MAJOR}")
            if name in lines_of:
                raise DiscoveryError(f"{where}: {name} is listed again (first on line {lines_of[name]}); "
                                     f"{source} names each driver once")
            lines_of[name] = number
            if name in FIXED_NAMES and major != FIXED_MAJOR:
                raise DiscoveryError(f"{where}: {name} at major {major}; the NVIDIA driver's major is "
                                     f"fixed at {FIXED_MAJOR}")
        table.append((major, name))
    for dynamic in ("nvidia-uvm", "nvidia-caps"):
        majors = [major for major, name in table if name == dynamic]
        if majors:
            others = sorted({name for major, name in table if major == majors[0] and name != dynamic})
            if others:
                raise DiscoveryError(f"{source}:{lines_of[dynamic]}: {dynamic} at major {majors[0]}, which "
                                     f"{', '.join(others)} also has; a dynamic major belongs to one driver")
    return table


def parse_proc_devices(text: str, source: str = "/proc/devices") -> dict[str, int]:
    """Majors of the NVIDIA character devices, by exact name (checked as parse_char_devices says)."""
    return {name: major for major, name in parse_char_devices(text, source) if name in MAJOR_NAMES}


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


def parse_smi_csv(text: str, source: str = "nvidia-smi's CSV") -> list[dict[str, Any]]:
    """GPUs from `nvidia-smi --query-gpu=... --format=csv` (with header, units or not).

    A row that does not fit the header is refused naming the source and its line.
    """
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            if row and any(cell.strip() for cell in row):
                rows.append((reader.line_num, row))
    except csv.Error as exc:
        raise DiscoveryError(f"{source}:{reader.line_num}: not CSV ({exc})") from None
    if not rows:
        return []
    header = [cell.strip().split(" [", 1)[0].lower() for cell in rows[0][1]]
    needed = ("index", "name", "uuid", "pci.bus_id")
    missing = [field for field in needed if field not in header]
    if missing:
        raise DiscoveryError(f"{source}:{rows[0][0]}: the header lacks column(s) {', '.join(missing)}; "
                             f"found {rows[0][1]} (query with --format=csv, header included)")
    gpus: dict[int, dict[str, Any]] = {}
    for number, row in rows[1:]:
        where = f"{source}:{number}"
        if len(row) != len(header):
            raise DiscoveryError(f"{where}: {len(row)} field(s), the header has {len(header)}; "
                                 f"a short or cut row: {shown(','.join(row))}")
        cells = dict(zip(header, (cell.strip() for cell in row)))
        bad = [key for key, cell in cells.items() if _CONTROL.search(cell) or not cell]
        if bad:
            raise DiscoveryError(f"{where}: {', '.join(bad)} empty or holding a control character")
        if not re.fullmatch(r"[0-9]{1,3}", cells["index"], re.ASCII):
            raise DiscoveryError(f"{where}: index is {shown(cells['index'])}; expected a GPU number")
        index = int(cells["index"])
        if index in gpus:
            raise DiscoveryError(f"{where}: GPU {index} is listed twice")
        memory = _number(cells.get("memory.total", ""))
        power = _number(cells.get("power.limit", ""))
        gpus[index] = {
            "index": index,
            "name": cells["name"],
            "uuid": cells["uuid"],
            "pci_bus_id": cells["pci.bus_id"],
            "memory_total_mib": int(memory) if memory is not None else None,
            "power_limit_w": power,
        }
    return [gpus[index] for index in sorted(gpus)]


def node_identity(relative: str) -> Optional[tuple[str, int]]:
    """(driver in /proc/devices, minor) an NVIDIA node of this name must have, None for other names.

    relative is the path under /dev: nvidia0, nvidiactl, nvidia-caps/nvidia-cap1.
    """
    match = _GPU_NODE.fullmatch(relative)
    if match and int(match.group(1)) < 254:
        return ("nvidia", int(match.group(1)))
    if relative in FIXED_NODE_IDS:
        return FIXED_NODE_IDS[relative]
    directory, _, name = relative.partition("/")
    match = _CAP_NODE.fullmatch(name) if directory == CAPS_DIR else None
    return ("nvidia-caps", int(match.group(1))) if match else None


def _node_order(relative: str) -> tuple[int, int]:
    match = _GPU_NODE.fullmatch(relative)
    if match:
        return (0, int(match.group(1)))
    if relative in FIXED_NODES:
        return (1, FIXED_NODES.index(relative))
    return (3, int(relative.rsplit("cap", 1)[1]))


def _entries(directory: str, prefix: str) -> list[str]:
    """Names under directory that claim to be NVIDIA nodes; a dirty one is refused."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DiscoveryError(f"{directory}: cannot be listed ({exc.strerror})") from None
    found = []
    for name in names:
        if prefix and not name.lower().startswith(prefix):
            continue
        if not _CLEAN_NAME.fullmatch(name):
            raise DiscoveryError(f"{directory}/{shown(name)[1:-1]}: a name with whitespace, a control or "
                                 "non-ASCII character is no NVIDIA node; remove it from the host")
        found.append(name)
    return found


def scan_nodes(root: str, table: list[tuple[int, str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """NVIDIA character nodes under <root>/dev with the major:minor that lstat reports.

    Returns (nodes, left_out). Order: nvidiaN by N, nvidiactl, nvidia-uvm,
    nvidia-uvm-tools, nvidia-modeset, then nvidia-caps/* by number.
    """
    dev = os.path.join(root, "dev")
    relatives = [name for name in _entries(dev, "nvidia") if node_identity(name)]
    caps = os.path.join(dev, CAPS_DIR)
    if os.path.lexists(caps):
        kind = file_kind(os.lstat(caps).st_mode)
        if kind != "directory":
            raise DiscoveryError(f"{caps} is a {kind}; expected the driver's directory of nvidia-capN nodes")
        relatives += [f"{CAPS_DIR}/{name}" for name in _entries(caps, "") if node_identity(f"{CAPS_DIR}/{name}")]
    registered = {name: major for major, name in table if name in MAJOR_NAMES}
    if "nvidia-frontend" in registered:
        registered.setdefault("nvidia", registered["nvidia-frontend"])
    nodes, left_out = [], []
    for relative in sorted(relatives, key=_node_order):
        host_path = os.path.join(dev, relative)
        info = os.lstat(host_path)
        kind = file_kind(info.st_mode)
        if kind != "character device":
            raise DiscoveryError(f"{host_path} is a {kind}, not a character device; expected the NVIDIA "
                                 "driver's node (nvidia-modprobe creates it): remove it and re-run")
        node = {"path": f"/dev/{relative}", "host_path": host_path,
                "major": os.major(info.st_rdev), "minor": os.minor(info.st_rdev)}
        driver, minor = node_identity(relative)  # type: ignore[misc]
        problem = node_problem(node, driver, minor, registered, table)
        if problem == "unregistered":
            left_out.append({**node, "reason": f"{driver} is not in /proc/devices (its module is not loaded)"})
            continue
        if problem:
            raise DiscoveryError(f"{host_path}: {problem}; it is not the NVIDIA node it is named after. "
                                 "Remove it (nvidia-modprobe recreates the real one) and re-run")
        nodes.append(node)
    return nodes, left_out


def node_problem(node: dict[str, Any], driver: str, minor: int, registered: dict[str, int],
                 table: list[tuple[int, str]]) -> Optional[str]:
    """Why this node is not its driver's, 'unregistered' when its driver is not loaded, else None."""
    found = f"{node['major']}:{node['minor']}"
    owners = sorted({name for major, name in table if major == node["major"]})
    expected = FIXED_MAJOR if driver == "nvidia" else registered.get(driver)
    if expected is None:
        if owners:
            return f"it is {found}, the major of {', '.join(owners)} in /proc/devices"
        return "unregistered"
    if node["major"] != expected or node["minor"] != minor:
        owner = f" ({', '.join(owners)} in /proc/devices)" if owners else ""
        return f"it is {found}{owner}, expected {expected}:{minor} ({driver})"
    if driver == "nvidia" and "nvidia" not in registered:
        return "unregistered"
    return None


def discover(root: str = "/", smi_csv: Optional[str] = None,
             smi_source: str = "nvidia-smi's CSV") -> dict[str, Any]:
    """The whole picture under root; smi_csv is nvidia-smi's CSV text when one was read."""
    version_path = os.path.join(root, "proc", "driver", "nvidia", "version")
    version_text = read_text_file(version_path, "the NVIDIA driver's version file") or ""
    driver_version, kernel_module = parse_driver_version(version_text)
    devices_path = os.path.join(root, "proc", "devices")
    table = parse_char_devices(read_text_file(devices_path, "the kernel's device list") or "", devices_path)
    nodes, left_out = scan_nodes(root, table)
    gpus = parse_smi_csv(smi_csv, smi_source) if smi_csv else []
    return {
        "driver_version": driver_version,
        "kernel_module": kernel_module,
        "majors": {name: major for major, name in table if name in MAJOR_NAMES},
        "nodes": nodes,
        "left_out": left_out,
        "gpus": gpus,
        "gpu_nodes": sum(1 for node in nodes if _GPU_NODE.fullmatch(node["path"][len("/dev/"):])),
    }


def gpu_count(nvidia: dict[str, Any]) -> int:
    """The host's GPUs: as nvidia-smi lists them, else as /dev/nvidiaN nodes."""
    return len(nvidia.get("gpus") or []) or int(nvidia.get("gpu_nodes") or 0)


def required_nodes(nvidia: dict[str, Any], expected_gpus: Optional[int] = None, modeset: bool = False,
                   uvm: bool = False) -> list[str]:
    """The nodes a host with this driver must have before a container gets its GPUs.

    nvidiactl, one /dev/nvidiaN per GPU (nvidia-smi's indexes, else 0..expected-1, else the nodes
    found), the two uvm nodes when nvidia_uvm is loaded (its major is listed) or `uvm` says they
    must be, and nvidia-modeset when asked for. None without a loaded driver.
    """
    if not nvidia.get("driver_version"):
        return []
    indexes = [int(gpu["index"]) for gpu in nvidia.get("gpus") or [] if "index" in gpu]
    if not indexes and expected_gpus:
        indexes = list(range(expected_gpus))
    wanted = [f"/dev/nvidia{index}" for index in indexes]
    if not indexes:
        wanted = [node["path"] for node in nvidia.get("nodes") or []
                  if _GPU_NODE.fullmatch(node["path"][len("/dev/"):])]
    wanted.append("/dev/nvidiactl")
    if uvm or "nvidia-uvm" in (nvidia.get("majors") or {}):
        wanted += ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    if modeset:
        wanted.append("/dev/nvidia-modeset")
    return wanted


def with_requirements(nvidia: dict[str, Any], expected_gpus: Optional[int] = None, modeset: bool = False,
                      uvm: bool = False) -> dict[str, Any]:
    """Discovery plus the facts decided from it: gpu_count, required_nodes, missing_nodes."""
    required = required_nodes(nvidia, expected_gpus, modeset, uvm)
    present = {node["path"] for node in nvidia.get("nodes") or []}
    return dict(nvidia, gpu_count=gpu_count(nvidia), required_nodes=required,
                missing_nodes=[path for path in required if path not in present])
