"""A Proxmox container's settings: what the request wants against what the API's JSON says.

Plain functions; pve_lxc_container is the module over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Settings compared on every run; the rest (rootfs size, unprivileged, the template, the ssh
# key) exist only at creation: PVE cannot change them in place.
UPDATABLE = ("hostname", "cores", "memory", "swap", "onboot", "features")


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
    """The settings an existing container must change, with their current values."""
    update = Update()
    for key, wanted in request.settings().items():
        current = config.get(key)
        if not same(key, wanted, current):
            update.set[key] = merged(key, wanted, current)
            update.before[key] = "" if current is None else str(current)
    return update


def merged(key: str, wanted: str, current: Any) -> str:
    """A network device keeps what PVE added (its MAC address) when the request changes it."""
    if not key.startswith("net") or current is None:
        return wanted
    value = props(str(current))
    value.update(props(wanted))
    return ",".join(f"{k}={v}" if v != "" else k for k, v in value.items())


def describe(settings: dict[str, Any]) -> str:
    """Settings as `key: value` lines, for a diff."""
    return "".join(f"{key}: {settings[key]}\n" for key in sorted(settings))
