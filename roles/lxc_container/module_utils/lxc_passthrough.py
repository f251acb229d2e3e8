"""GPU passthrough entries for an LXC container, computed from host discovery.

Plain functions over the `nvidia` result of the nvidia_devices module (driver
version, majors, nodes with their real major:minor). Two styles:

- raw: LXC's own keys (`lxc.cgroup2.devices.allow`, `lxc.mount.entry`), as
  plain LXC writes them (`key = value`) or as Proxmox keeps them in
  /etc/pve/lxc/<vmid>.conf (`key: value`);
- devices: Proxmox `devN: <path>,mode=...` entries, planned from the API's JSON config
  and applied by the pve_lxc_devices module (root@pam through the API, or `pct set`).

Our raw lines are recognised by what they say, not by comment markers:
Proxmox rewrites every `#` line of a container config into its description
at the top of the file on the next `pct set`, so markers would not survive.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ansible.module_utils.nvidia_discovery import with_requirements

ALLOW_KEYS = {"v1": "lxc.cgroup.devices.allow", "v2": "lxc.cgroup2.devices.allow"}
MOUNT_KEY = "lxc.mount.entry"
MEMLOCK_KEY = "lxc.prlimit.memlock"
# Fixed by the driver for /dev/nvidiaN and /dev/nvidiactl; the others are dynamic.
NVIDIA_FIXED_MAJOR = 195
DEV_KEY = re.compile(r"^dev(\d+)$")
ALLOW_VALUE = re.compile(r"^c (\d+):(\d+|\*) rwm$")
NVIDIA_SOURCE = re.compile(r"(^|/)dev/nvidia[^/\s]*(/[^\s]*)?$")
DEV_LIMIT = 256


@dataclass
class Node:
    """A device node as discovery saw it on the host."""

    path: str  # as the container sees it, e.g. /dev/nvidia0
    host_path: str  # where it is on the host (differs from path under a test root)
    major: int
    minor: int


@dataclass
class ConfigLine:
    """One `key = value` or `key: value` line of a container config."""

    key: str
    value: str
    text: str


@dataclass
class RawPlan:
    """What the raw style changes in a config file."""

    text: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass
class DevicesPlan:
    """The devN entries to set and delete so that a container's match the wanted nodes."""

    set: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    wanted: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.set or self.delete)


def nodes_of(nvidia: dict) -> list[Node]:
    """The nodes of a discovery result, in discovery's order (GPUs first), each one checked."""
    return checked_nodes(nvidia)


# --- what may reach a config line -----------------------------------------------------------
# The `nvidia` input is discovery's result or lxc_container_nvidia, a user variable: every
# path, major and minor written is checked here again, so that no string of it can end a
# line and start another `lxc.*` key. Discovery (nvidia_discovery) applies the same rules
# to the host's /dev and /proc/devices.
_NODE_PATHS = (
    (re.compile(r"/dev/nvidia(0|[1-9][0-9]{0,2})", re.ASCII), "nvidia", None),
    (re.compile(r"/dev/nvidiactl", re.ASCII), "nvidia", 255),
    (re.compile(r"/dev/nvidia-modeset", re.ASCII), "nvidia", 254),
    (re.compile(r"/dev/nvidia-uvm", re.ASCII), "nvidia-uvm", 0),
    (re.compile(r"/dev/nvidia-uvm-tools", re.ASCII), "nvidia-uvm", 1),
    (re.compile(r"/dev/nvidia-caps/nvidia-cap(0|[1-9][0-9]{0,6})", re.ASCII), "nvidia-caps", None),
)
_MAJOR_KEYS = ("nvidia", "nvidia-frontend", "nvidia-uvm", "nvidia-caps")
_HOST_PATH = re.compile(r"/[A-Za-z0-9._+/-]*", re.ASCII)
MAX_MAJOR, MAX_MINOR = 4095, (1 << 20) - 1


def _shown(value: object) -> str:
    return ascii(value)


def _device_number(value: object, what: str, highest: int) -> int:
    """An int (or a string of ASCII digits) from 0 to highest; bools, floats and the rest refused."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,7}", value, re.ASCII):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= highest:
        raise ValueError(f"{what} is {_shown(value)}; expected a number from 0 to {highest}")
    return value


def checked_majors(nvidia: dict) -> dict[str, int]:
    """The `majors` of an nvidia result, each a real major; nvidia and nvidia-frontend at 195."""
    majors = nvidia.get("majors") or {}
    if not isinstance(majors, dict):
        raise ValueError(f"nvidia.majors is {_shown(majors)}; expected a mapping such as {{\"nvidia\": 195}}")
    checked: dict[str, int] = {}
    for name, value in majors.items():
        if name not in _MAJOR_KEYS:
            raise ValueError(f"nvidia.majors has {_shown(name)}; expected only {', '.join(_MAJOR_KEYS)}")
        major = _device_number(value, f"nvidia.majors[{name!r}]", MAX_MAJOR)
        if major == 0 or (name in ("nvidia", "nvidia-frontend")) != (major == NVIDIA_FIXED_MAJOR):
            raise ValueError(f"nvidia.majors[{name!r}] is {major}; nvidia's major is {NVIDIA_FIXED_MAJOR} and "
                             "the dynamic ones (nvidia-uvm, nvidia-caps) are other, non-zero majors")
        checked[name] = major
    if "nvidia-frontend" in checked:
        checked.setdefault("nvidia", checked["nvidia-frontend"])
    return checked


def checked_node(item: object, majors: dict[str, int]) -> Node:
    """One node of an nvidia result, refused naming it unless it is an NVIDIA node of the host's majors."""
    if not isinstance(item, dict):
        raise ValueError(f"a node is {_shown(item)}; expected a mapping with path, major and minor")
    path = item.get("path")
    rule = next(((driver, minor, found) for pattern, driver, minor in _NODE_PATHS
                 if isinstance(path, str) and (found := pattern.fullmatch(path))), None)
    if rule is None:
        raise ValueError(f"node path {_shown(path)} is not an NVIDIA node (/dev/nvidiaN, /dev/nvidiactl, "
                         "/dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset, "
                         "/dev/nvidia-caps/nvidia-capN; ASCII digits, no whitespace or control character)")
    driver, minor, found = rule
    if minor is None:
        minor = int(found.group(1))
    host_path = item.get("host_path") or path
    if not (isinstance(host_path, str) and _HOST_PATH.fullmatch(host_path) and host_path.endswith(path)
            and "/../" not in host_path + "/" and "//" not in host_path):
        raise ValueError(f"{path}: host_path {_shown(host_path)} is not a plain absolute path ending in {path} "
                         "(letters, digits, . _ + - /; no whitespace, control character or ..)")
    node = Node(path=path, host_path=host_path,
                major=_device_number(item.get("major"), f"{path}: major", MAX_MAJOR),
                minor=_device_number(item.get("minor"), f"{path}: minor", MAX_MINOR))
    if driver not in majors:
        raise ValueError(f"{path}: nvidia.majors names no {driver}; the host's /proc/devices must list it "
                         "(run nvidia_devices on the host, or give its majors)")
    if (node.major, node.minor) != (majors[driver], minor):
        raise ValueError(f"{path} is {node.major}:{node.minor}, expected {majors[driver]}:{minor} ({driver}); "
                         "it is not the NVIDIA node it is named after")
    return node


def checked_nodes(nvidia: dict) -> list[Node]:
    """Every node of an nvidia result checked (see checked_node), each path once."""
    if not isinstance(nvidia, dict):
        raise ValueError(f"nvidia is {_shown(nvidia)}; expected the result of nvidia_devices")
    items = nvidia.get("nodes") or []
    if not isinstance(items, list):
        raise ValueError(f"nvidia.nodes is {_shown(items)}; expected a list")
    majors = checked_majors(nvidia)
    nodes = [checked_node(item, majors) for item in items]
    paths = [node.path for node in nodes]
    twice = sorted({path for path in paths if paths.count(path) > 1})
    if twice:
        raise ValueError(f"nvidia.nodes lists {', '.join(twice)} more than once")
    return nodes


def nvidia_majors(nvidia: dict) -> set[int]:
    """Every NVIDIA character major the host knows, plus the fixed one."""
    return set(checked_majors(nvidia).values()) | {NVIDIA_FIXED_MAJOR}


def checked_result(nvidia: dict, expected_gpus: int | None = None) -> dict:
    """A discovery result handed in (lxc_container_nvidia), its nodes checked, with the facts
    decided again by discovery's own rule for this run's expected count: gpu_count,
    required_nodes and missing_nodes, as nvidia_devices publishes them."""
    checked_nodes(nvidia)
    return with_requirements(nvidia, expected_gpus)


def node_ids(nodes: list[Node]) -> list[str]:
    """Each node as the container's own listing shows it (files/list_nodes.py): `PATH MAJOR:MINOR`."""
    return [f"{node.path} {node.major}:{node.minor}" for node in nodes]


def host_cgroup(choice: str) -> str:
    """The allow key's cgroup version: v1 or v2 as asked, or for auto the host's (a unified hierarchy is v2)."""
    if choice != "auto":
        return choice
    return "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"


def raw_lines(nodes: list[Node], cgroup: str) -> list[tuple[str, str]]:
    """The raw keys for these nodes: one allow and one bind mount per node.

    Allow entries name each node's major:minor, so a node taken out of the set
    loses its allow entry too. No `optional`: a missing node must stop the
    start instead of starting a container with no GPU.
    """
    if cgroup not in ALLOW_KEYS:
        raise ValueError(f"cgroup must be v1 or v2, not {cgroup!r}")
    lines = [(ALLOW_KEYS[cgroup], f"c {node.major}:{node.minor} rwm") for node in nodes]
    lines += [
        (MOUNT_KEY, f"{node.host_path} {node.path.lstrip('/')} none bind,create=file 0 0")
        for node in nodes
    ]
    return lines


def memlock_lines(nodes: list[Node], memlock: str) -> list[tuple[str, str]]:
    """Unlimited locked memory for CUDA and NCCL, while the container has GPUs."""
    if memlock and not re.fullmatch(r"unlimited|[0-9]+", memlock, re.ASCII):
        raise ValueError(f"memlock is {_shown(memlock)}; expected unlimited or a number of bytes")
    return [(MEMLOCK_KEY, memlock)] if memlock and nodes else []


def parse_config(text: str) -> tuple[list[ConfigLine | str], list[str]]:
    """Split a config into its main section (parsed lines) and the rest ([snapshot] sections)."""
    main: list[ConfigLine | str] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("["):
            return main, lines[number:]
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*[:=]\s?(.*)$", line)
        if match and not line.lstrip().startswith("#"):
            main.append(ConfigLine(match.group(1), match.group(2).strip(), line))
        else:
            main.append(line)
    return main, []


def is_ours(line: ConfigLine, majors: set[int]) -> bool:
    """Whether a raw line is one this role writes (and may therefore remove)."""
    if line.key in ALLOW_KEYS.values():
        match = ALLOW_VALUE.match(line.value)
        return bool(match) and int(match.group(1)) in majors
    if line.key == MOUNT_KEY:
        source = line.value.split()[0] if line.value.split() else ""
        return bool(NVIDIA_SOURCE.search(source))
    return line.key == MEMLOCK_KEY


def plan_raw(text: str, wanted: list[tuple[str, str]], majors: set[int], separator: str) -> RawPlan:
    """Make the config carry exactly the wanted raw lines, touching nothing else.

    Lines of ours that are no longer wanted go; wanted lines that are missing
    are appended together at the end of the main section (before any
    [snapshot] section); every other line keeps its place and bytes.
    """
    main, rest = parse_config(text)
    want = {(key, value) for key, value in wanted}
    kept: list[ConfigLine | str] = []
    have: set[tuple[str, str]] = set()
    removed: list[str] = []
    for line in main:
        if isinstance(line, ConfigLine) and is_ours(line, majors):
            pair = (line.key, line.value)
            if pair not in want or pair in have:
                removed.append(line.text)
                continue
            have.add(pair)
        kept.append(line)
    added = [f"{key}{separator}{value}" for key, value in wanted if (key, value) not in have]
    out = [line.text if isinstance(line, ConfigLine) else line for line in kept]
    if added:
        while out and not out[-1].strip() and rest:
            out.pop()
        out += added
        if rest:
            out.append("")
    out += rest
    new_text = "\n".join(out) + ("\n" if out else "")
    if not added and not removed:
        new_text = text
    return RawPlan(text=new_text, added=added, removed=removed)


def _dev_index(key: str) -> int:
    match = DEV_KEY.match(key)
    return int(match.group(1)) if match else DEV_LIMIT


def device_value(node: Node, mode: str, gid: int | None) -> str:
    value = f"{node.path},mode={mode}"
    if gid is not None:
        value += f",gid={gid}"
    return value


def plan_devices(current: dict[str, str], nodes: list[Node], mode: str, gid: int | None = None) -> DevicesPlan:
    """devN entries for the nodes, keeping the index each node already has.

    Ours are the devN entries whose path is an NVIDIA node; other devN entries
    (a USB stick, /dev/fuse) keep their index and value. A node new to the set
    takes the lowest free index.
    """
    values = {node.path: device_value(node, mode, gid) for node in nodes}
    by_path: dict[str, str] = {}
    plan = DevicesPlan()
    used = {key for key in current if DEV_KEY.match(key)}
    for key in sorted(used, key=_dev_index):
        path = current[key].split(",")[0].removeprefix("path=")
        if not re.match(r"^/dev/nvidia", path):
            continue
        if path in values and path not in by_path:
            by_path[path] = key
            if current[key] != values[path]:
                plan.set[key] = values[path]
        else:
            plan.delete.append(key)
    free = (f"dev{index}" for index in range(DEV_LIMIT) if f"dev{index}" not in used)
    for path, value in values.items():
        if path not in by_path:
            try:
                key = next(free)
            except StopIteration as exc:
                raise ValueError(f"no free devN index (0-{DEV_LIMIT - 1}) left for {path}") from exc
            by_path[path] = key
            plan.set[key] = value
    plan.wanted = {key: values[path] for path, key in by_path.items()}
    return plan


def rootfs_problem(config_text: str, name: str, lxcpath: str, init_exists: bool) -> str | None:
    """Why starting this plain-LXC container would be unsafe, or None.

    A config without lxc.rootfs.path (what `lxc-create -t none` writes) boots
    the container's systemd on the host's own / and wipes the host's /tmp.
    """
    expected = f"{lxcpath.rstrip('/')}/{name}/rootfs"
    main, _ = parse_config(config_text)
    paths = [line.value for line in main if isinstance(line, ConfigLine) and line.key == "lxc.rootfs.path"]
    if not paths:
        return f"the config names no lxc.rootfs.path (expected {expected}); refusing to start it"
    found = paths[-1].removeprefix("dir:")
    if found != expected:
        return f"the config's lxc.rootfs.path is {paths[-1]!r}, expected {expected}; refusing to start it"
    if not init_exists:
        return f"{expected}/sbin/init does not exist; the container was not created completely"
    return None
