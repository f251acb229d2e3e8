"""A Proxmox container's settings: what the request wants against what the API's JSON says.

Plain functions; pve_lxc_container is the module over them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.pve_format import FEATURES_FORMAT, NET_FORMAT, STORAGE_ID_RE, property_problems

# Settings compared on every run; the rest (rootfs size, unprivileged, the template, the ssh
# key) exist only at creation: PVE cannot change them in place.
UPDATABLE = ("hostname", "cores", "memory", "swap", "onboot", "features")

# The PVE tag this role gives every container it creates: a container at the vmid without it was
# made by someone else (or by hand, or by a version of this project before the tag), and a same
# hostname does not make it ours. A pve-tag (pve-common): [a-z0-9_][a-z0-9_+.-]*; PVE keeps tags
# as one string split at ';', ',' or spaces, and lowercases them unless datacenter.cfg's
# tag-style says case-sensitive, so they are compared in lower case.
OWNER_TAG = "sglang-deploy"


@dataclass
class Request:
    vmid: int
    hostname: str
    ostemplate: str
    disk: str
    cores: int
    memory: int
    swap: int
    netif: dict[str, str]
    features: list[str]
    unprivileged: bool
    onboot: bool
    pubkey: str = ""
    adopt: bool = False

    def settings(self) -> dict[str, str]:
        """The updatable settings as PVE writes them in its config."""
        wanted = {
            "hostname": self.hostname,
            "cores": str(self.cores),
            "memory": str(self.memory),
            "swap": str(self.swap),
            "onboot": "1" if self.onboot else "0",
            "features": ",".join(self.features),
        }
        wanted.update(self.netif)
        return wanted

    def create_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "vmid": self.vmid,
            "ostemplate": self.ostemplate,
            "rootfs": self.disk,
            "unprivileged": 1 if self.unprivileged else 0,
        }
        payload.update({key: value for key, value in self.settings().items() if value != ""})
        payload["tags"] = OWNER_TAG
        if self.pubkey:
            payload["ssh-public-keys"] = self.pubkey
        return payload


@dataclass
class Update:
    set: dict[str, str] = field(default_factory=dict)
    before: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.set)


def props(value: str) -> dict[str, str]:
    """A PVE property string (`name=eth0,bridge=vmbr0,ip=dhcp`) as a dict; bare items map to ''."""
    out: dict[str, str] = {}
    for item in str(value).split(","):
        if item:
            key, _, val = item.partition("=")
            out[key] = val
    return out


def same(key: str, wanted: str, current: Any) -> bool:
    """Whether the current value already is what is wanted.

    Network devices and features are property strings: PVE adds keys of its own (hwaddr, type),
    so only the keys the request names are compared.
    """
    if current is None:
        return wanted == ""
    if key == "features" or key.startswith("net"):
        have = props(str(current))
        return all(have.get(k) == v for k, v in props(wanted).items()) and (
            key != "features" or set(have) == set(props(wanted)))
    return str(current) == wanted


def plan_update(request: Request, config: dict[str, Any]) -> Update:
    """The settings an existing container must change, with their current values.

    A container without the owner tag gets it added to its own tags (adoption; existing_problems
    lets only lxc_container_adopt=true reach here without it). Tags are never removed.
    """
    update = Update()
    for key, wanted in request.settings().items():
        current = config.get(key)
        if not same(key, wanted, current):
            update.set[key] = merged(key, wanted, current)
            update.before[key] = "" if current is None else str(current)
    if not owned(config):
        tags = tag_list(config.get("tags"))
        update.set["tags"] = ";".join([*tags, OWNER_TAG])
        update.before["tags"] = ";".join(tags)
    return update


def tag_list(value: Any) -> list[str]:
    """A container's tags as PVE stores them (`a;b`, also split at ',' and spaces), in order."""
    return [tag for tag in re.split(r"[;,\s]+", str(value or "")) if tag]


def owned(config: dict[str, Any]) -> bool:
    """Whether the container carries the tag this role gives the containers it creates."""
    return OWNER_TAG in (tag.lower() for tag in tag_list(config.get("tags")))


# What PVE adds to a network device of its own: kept when the request changes the device. Any
# other old key (a gateway of a static setup, a VLAN tag) goes: the request says the whole device.
NET_KEPT = ("hwaddr", "type")


def merged(key: str, wanted: str, current: Any) -> str:
    """A network device keeps what PVE added (its MAC address and type) when the request changes it."""
    if not key.startswith("net") or current is None:
        return wanted
    old = props(str(current))
    value = props(wanted)
    value.update({k: old[k] for k in NET_KEPT if k in old and k not in value})
    return ",".join(f"{k}={v}" if v != "" else k for k, v in value.items())


def describe(settings: dict[str, Any]) -> str:
    """Settings as `key: value` lines, for a diff."""
    return "".join(f"{key}: {settings[key]}\n" for key in sorted(settings))


# ------------------------------------------------------------------ checks before any request

NET_KEY_RE = re.compile(r"net([0-9]|[12][0-9]|3[01])\Z")  # pve-container: net0 to net31
DNS_LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
VMID_RE = re.compile(r"[1-9][0-9]*\Z")


def vmid_of(value: object) -> int:
    """The container id, digits only (no sign, space or padding), 100 to 999999999; ValueError otherwise."""
    text = str(value)
    if isinstance(value, bool) or not VMID_RE.match(text) or not text.isascii() or not 100 <= int(text) <= 999999999:
        raise ValueError(f"lxc_container_vmid={text!r} is not a Proxmox container id: expected digits only "
                         "without a leading 0, 100 to 999999999 (e.g. 120). Nothing was changed.")
    return int(text)


def hostname_problem(hostname: str) -> str | None:
    """PVE's dns-name: labels of letters, digits and '-', neither first nor last a '-'."""
    if len(hostname) <= 63 and DNS_LABEL_RE.match(hostname) and hostname.isascii():
        return None
    return (f"lxc_container_name={hostname!r} is not a host name: letters, digits and '-', at most 63, "
            "neither starting nor ending with '-'")


def split_disk(disk: str) -> tuple[str, int]:
    """`STORAGE:GB` as (storage, GB), checked against PVE's storage id and a size of at least 1 GB."""
    storage, sep, size = str(disk).partition(":")
    problems = []
    if not sep or not STORAGE_ID_RE.match(storage) or not storage.isascii():
        problems.append(f"lxc_container_storage={storage!r} is not a PVE storage id (a letter, then letters, "
                        "digits, '_', '.' or '-', ending in a letter or digit; e.g. local-lvm)")
    if not (size.isdigit() and size.isascii() and int(size) >= 1):
        problems.append(f"lxc_container_disk_gb={size!r} is not a size in GB: a whole number, at least 1")
    if problems:
        raise ValueError("; ".join(problems))
    return storage, int(size)


def request_problems(request: Request) -> list[str]:
    """What in the request PVE's formats would refuse or read otherwise: checked before any request."""
    problems = []
    problem = hostname_problem(request.hostname)
    if problem:
        problems.append(problem)
    try:
        split_disk(request.disk)
    except ValueError as exc:
        problems.append(str(exc))
    for name, value, low, high in (("lxc_container_cores", request.cores, 1, 8192),
                                   ("lxc_container_memory_mb", request.memory, 16, None),
                                   ("lxc_container_swap_mb", request.swap, 0, None)):
        if value < low or (high is not None and value > high):
            problems.append(f"{name}={value} is out of range: PVE takes {low} to {high or 'any size'}")
    for key, value in request.netif.items():
        if not NET_KEY_RE.match(str(key)):
            problems.append(f"lxc_container_netif has the key {key!r}: only network devices net0 to net31 go "
                            "there (other container options are variables of their own)")
        else:
            problems += property_problems(f"lxc_container_netif.{key}", value, NET_FORMAT)
    for item in request.features:
        problems += property_problems("lxc_container_features item", item, FEATURES_FORMAT)
    return problems


# ------------------------------------------------------------------ checks on an existing container

SIZE_UNITS = {"K": 1 / 1024 ** 2, "M": 1 / 1024, "G": 1, "T": 1024}


def size_gb(size: str) -> float | None:
    """A PVE disk size (`8G`, `512M`, `1T`, bytes without a unit) in GiB, or None when unreadable."""
    match = re.match(r"([0-9]+(?:\.[0-9]+)?)([KMGT]?)(?:iB)?\Z", size)
    if not match:
        return None
    return float(match.group(1)) * (SIZE_UNITS[match.group(2)] if match.group(2) else 1 / 1024 ** 3)


def existing_problems(request: Request, config: dict[str, Any]) -> list[str]:
    """Why the container found at the vmid is not ours to configure, or differs in what PVE cannot change."""
    vmid = request.vmid
    hostname = str(config.get("hostname", ""))
    if hostname != request.hostname:
        description = " ".join(str(config.get("description", "")).split())[:200]
        return [f"Container {vmid} already exists with hostname {hostname!r}"
                + (f" and description {description!r}" if description else "")
                + f", not {request.hostname!r}: it is not this request's container, and it is left as it is. "
                f"Set lxc_container_vmid to a free id (`pvesh get /cluster/nextid` on the node), or, if that "
                f"container is the one meant, set lxc_container_name={hostname!r}. Nothing was changed."]
    if not owned(config) and not request.adopt:
        tags = ";".join(tag_list(config.get("tags")))
        description = " ".join(str(config.get("description", "")).split())[:200]
        return [f"Container {vmid} already exists with hostname {hostname!r} but without the tag {OWNER_TAG!r} "
                "that this role gives the containers it creates (its tags: "
                + (repr(tags) if tags else "none")
                + (f"; its description: {description!r}" if description else "")
                + "): it was not made by this role, and it is left as it is. If it is the one meant (made by hand, or by an "
                "earlier version of this project), re-run once with `-e lxc_container_adopt=true`: that adds the "
                f"tag {OWNER_TAG!r} (its other tags kept) and the role manages it from then on. Otherwise set "
                "lxc_container_vmid to a free id (`pvesh get /cluster/nextid` on the node). Nothing was changed."]
    problems = []
    unprivileged = str(config.get("unprivileged", 0)).lower() in ("1", "true", "yes", "on")
    if unprivileged != request.unprivileged:
        have, want = ("unprivileged", "privileged") if unprivileged else ("privileged", "unprivileged")
        problems.append(
            f"container {vmid} is {have} but lxc_container_unprivileged={str(request.unprivileged).lower()} asks for "
            f"{want}: PVE cannot change this after creation. Either set lxc_container_unprivileged="
            f"{str(unprivileged).lower()} to keep it as it is, or back it up and restore it as {want} "
            f"(`vzdump {vmid}`, then `pct restore {vmid} BACKUP --unprivileged {int(request.unprivileged)} --force`), "
            "or destroy it and re-run")
    _, wanted_gb = split_disk(request.disk)
    rootfs = props(str(config.get("rootfs", "")))
    have_gb = size_gb(rootfs.get("size", ""))
    if have_gb is not None and have_gb < wanted_gb:
        problems.append(
            f"container {vmid}'s rootfs is {rootfs['size']} but lxc_container_disk_gb={wanted_gb} asks for "
            f"{wanted_gb}G: the role does not grow an existing disk. Grow it on the node with `pct resize {vmid} "
            f"rootfs {wanted_gb}G` (PUT /nodes/NODE/lxc/{vmid}/resize; a disk can grow, never shrink), or set "
            f"lxc_container_disk_gb={int(have_gb) if have_gb == int(have_gb) else have_gb} to accept it")
    if problems:
        return [f"The existing container differs in settings PVE sets only at creation: {'; '.join(problems)}. "
                "Nothing was changed."]
    return []


def pending_keys(entries: list[dict[str, Any]]) -> list[str]:
    """The keys of the API's pending list that a running container takes only at its next start."""
    return sorted(str(item["key"]) for item in entries if "pending" in item or item.get("delete"))


def start_or_restart(running: bool, pending: list[str], restart: bool) -> tuple[str, str]:
    """(start | restart | none, why) for a container that is to run. PVE's pending list decides,
    so that a change whose restart a killed run never made still restarts it; ``restart`` stands
    for what PVE cannot list (raw lxc lines in its conf file; in check mode, what was not written)."""
    if not running:
        return "start", "it was not running"
    if pending:
        return "restart", f"PVE holds {', '.join(pending)} for its next start"
    if restart:
        return "restart", "its raw lxc lines changed, or would (check mode)"
    return "none", "it runs with its current settings"
