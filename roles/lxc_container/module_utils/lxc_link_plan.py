"""A plain-LXC container's one network link: none, or a veth on a host-only bridge.

Plain functions for plain_lxc_container's network link. The link is what ssh into the
container rides on, the way production reaches its containers:

- the host bridge (`ip link add NAME type bridge`) holding one link-local
  address, read back from `ip -j -d addr show`; no route, no NAT, so the
  container reaches the host and nothing else;
- the container config's `lxc.net.*` lines (a veth on that bridge with a
  static address, or `lxc.net.0.type = empty` when there is no link);
- inside the rootfs: the Debian template's `iface eth0 inet dhcp` turned to
  `manual` (LXC sets the address; DHCP would stall the boot for a minute),
  root's authorized key, and the ssh host keys for the controller's
  known_hosts.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from dataclasses import dataclass, field

# RFC 3927 keeps 169.254.0.0/24 and 169.254.255.0/24 out of host use.
LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")
RESERVED = (ipaddress.ip_network("169.254.0.0/24"), ipaddress.ip_network("169.254.255.0/24"))
IFNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}\Z")
INTERFACE = "eth0"
NET_KEY = re.compile(r"^\s*(lxc\.net\.[A-Za-z0-9_.]+)\s*=\s?(.*)$")
KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
)
PUBKEY = re.compile(r"^(\S+) ([A-Za-z0-9+/]+={0,2})(?: ([^\x00-\x1f\x7f]*))?\Z")
DHCP = re.compile(rf"^(\s*iface\s+{INTERFACE}\s+inet\s+)dhcp(\s*)$")


@dataclass(frozen=True)
class Link:
    """The host-only link: the bridge, the host's address on it, the container's."""

    bridge: str
    host: ipaddress.IPv4Interface
    address: ipaddress.IPv4Address

    @property
    def network(self) -> ipaddress.IPv4Network:
        return self.host.network


@dataclass
class NetPlan:
    """What changes in the config's lxc.net.* lines."""

    text: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def parse_link(bridge: str, host_address: str, address: str) -> Link | None:
    """The link asked for, or None for no network; ValueError names every bad value."""
    if not bridge:
        extra = [name for name, value in (("host_address", host_address), ("address", address)) if value]
        if extra:
            raise ValueError(f"{' and '.join(extra)} given without a bridge (lxc_container_lxc_bridge is empty): "
                             "set the bridge, or leave both empty for a container with no network")
        return None
    problems = []
    if not IFNAME.match(bridge):
        problems.append(f"bridge {bridge!r} is not an interface name (letters, digits, '_', '.', '-'; "
                        "at most 15 characters)")
    host = None
    try:
        host = ipaddress.IPv4Interface(host_address)
        if "/" not in host_address or not 16 <= host.network.prefixlen <= 30:
            raise ValueError
    except ValueError:
        problems.append(f"host_address {host_address!r} is not an IPv4 address with a prefix of /16 to /30 "
                        "(e.g. 169.254.77.1/24)")
        host = None
    if host is not None and (host.ip not in LINK_LOCAL or any(host.ip in net for net in RESERVED)
                             or not host.network.subnet_of(LINK_LOCAL)):
        problems.append(f"host_address {host_address} is not link-local (169.254.1.0 to 169.254.254.255): "
                        "a host-only link must not take an address of a real network")
        host = None
    if host is not None and host.ip in (host.network.network_address, host.network.broadcast_address):
        problems.append(f"host_address {host_address} is its network's own or broadcast address")
        host = None
    ip = None
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        problems.append(f"address {address!r} is not an IPv4 address (the container's, without a prefix, "
                        "e.g. 169.254.77.2)")
    if host is not None and ip is not None:
        if ip not in host.network or ip in (host.network.network_address, host.network.broadcast_address):
            problems.append(f"address {ip} is not a host address of the bridge's network {host.network}")
        elif ip == host.ip:
            problems.append(f"address {ip} is the host's own address on the bridge")
    if problems:
        raise ValueError("; ".join(problems))
    assert host is not None and ip is not None
    return Link(bridge, host, ip)


def hwaddr(name: str) -> str:
    """A stable MAC for the container's veth (LXC's 00:16:3e prefix), so ARP survives restarts."""
    digest = hashlib.sha256(name.encode()).digest()
    return "00:16:3e:" + ":".join(f"{byte:02x}" for byte in digest[:3])


# The line the role puts in the config it creates a container with (lxc-create keeps comments): a
# container whose config has neither it nor the link's MAC derived from its name (what containers
# made before the line carry) was not made by this role, and is left alone unless adopted.
OWNER_MARK = "# sglang-deploy: made by the lxc_container role; its config is the role's to change"


def owned(text: str, name: str) -> bool:
    """Whether the config is one this role made: its mark, or the veth MAC it derives from the name."""
    lines = [line.strip() for line in text.splitlines()]
    mine = f"lxc.net.0.hwaddr = {hwaddr(name)}"
    return OWNER_MARK in lines or any(" ".join(line.replace("=", " = ").split()) == mine for line in lines)


def with_mark(text: str) -> str:
    """The config with the role's mark (adoption), every line kept."""
    return text + ("" if not text or text.endswith("\n") else "\n") + OWNER_MARK + "\n"


def net_lines(link: Link | None, name: str) -> list[tuple[str, str]]:
    """The config's lxc.net.* lines for this link, in LXC's order (type first)."""
    if link is None:
        return [("lxc.net.0.type", "empty")]
    return [
        ("lxc.net.0.type", "veth"),
        ("lxc.net.0.link", link.bridge),
        ("lxc.net.0.flags", "up"),
        ("lxc.net.0.name", INTERFACE),
        ("lxc.net.0.hwaddr", hwaddr(name)),
        ("lxc.net.0.ipv4.address", f"{link.address}/{link.network.prefixlen}"),
    ]


def plan_net(text: str, wanted: list[tuple[str, str]]) -> NetPlan:
    """Make the config's lxc.net.* lines exactly the wanted ones, every other line kept.

    The network is decided by the link alone, so every lxc.net.* line of the
    main section (before any [snapshot] section) is ours. Unchanged, the text
    is returned as it was; changed, the wanted block takes the place of the
    first lxc.net line (or ends the main section).
    """
    lines = text.splitlines()
    end = next((n for n, line in enumerate(lines) if line.startswith("[")), len(lines))
    found = [(n, NET_KEY.match(line)) for n, line in enumerate(lines[:end])]
    found = [(n, match) for n, match in found if match]
    have = [(match.group(1), match.group(2).strip()) for _, match in found]
    if have == wanted:
        return NetPlan(text=text)
    block = [f"{key} = {value}" for key, value in wanted]
    at = found[0][0] if found else end
    drop = {n for n, _ in found}
    out = [line for n, line in enumerate(lines[:at]) if n not in drop] + block
    out += [line for n, line in enumerate(lines[at:end], start=at) if n not in drop] + lines[end:]
    added = [line for line, pair in zip(block, wanted) if pair not in have]
    removed = [lines[n] for n, match in found if (match.group(1), match.group(2).strip()) not in wanted]
    return NetPlan(text="\n".join(out) + "\n", added=added, removed=removed)


def plan_interfaces(text: str) -> str | None:
    """The guest's ifupdown config with eth0 left to LXC (dhcp -> manual), or None if unchanged."""
    lines = text.splitlines(keepends=True)
    out = [DHCP.sub(r"\1manual\2", line.rstrip("\n")) + ("\n" if line.endswith("\n") else "") for line in lines]
    return None if out == lines else "".join(out)


def parse_pubkey(text: str) -> str:
    """One OpenSSH public key line (type, base64 blob, comment); ValueError otherwise.

    No options (`command=...`), no second line: the key goes into root's
    authorized_keys as given.
    """
    key = text.strip()
    match = PUBKEY.match(key)
    if "\n" in key:
        raise ValueError(f"pubkey has {len(key.splitlines())} lines, expected one OpenSSH public key line")
    if not match or match.group(1) not in KEY_TYPES:
        raise ValueError(f"pubkey is not one OpenSSH public key line (TYPE BASE64 [COMMENT], TYPE one of "
                         f"{', '.join(KEY_TYPES)}, no options, one line); found {shorten(key)!r}")
    try:
        blob = base64.b64decode(match.group(2), validate=True)
    except ValueError:
        blob = b""
    kind = match.group(1).encode()
    if blob[:4] != len(kind).to_bytes(4, "big") or blob[4:4 + len(kind)] != kind:
        raise ValueError(f"pubkey's key data is not a {match.group(1)} key; found {shorten(key)!r}")
    return key


def shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def plan_authorized_keys(text: str, key: str) -> str | None:
    """authorized_keys with the key added (other keys kept), or None when it is there."""
    kind, blob = key.split()[:2]
    for line in text.splitlines():
        fields = line.split()
        if kind in fields and fields.index(kind) + 1 < len(fields) and fields[fields.index(kind) + 1] == blob:
            return None
    return text + ("" if not text or text.endswith("\n") else "\n") + key + "\n"


# The alias a bridge made by this role carries (`ip link set ... alias`): a bare bridge without it
# may be another network's layer-2 bridge, and is not given an address.
BRIDGE_ALIAS = "sglang-deploy lxc_container link"


def plan_bridge(interfaces: list[dict], link: Link) -> list[list[str]]:
    """The `ip` commands that make the bridge carry the link, from `ip -j -d addr show`.

    ValueError, before any command, when the name is taken by something that
    is not a bridge, when the bridge carries another IPv4 address, when it
    carries none and is not one this role made (its alias), or when another
    interface has an address in the link's network.
    """
    name = link.bridge
    wanted = f"{link.host.ip}/{link.network.prefixlen}"
    mine = None
    for item in interfaces:
        inet = [f"{a.get('local')}/{a.get('prefixlen')}" for a in item.get("addr_info", []) if a.get("family") == "inet"]
        if item.get("ifname") == name:
            mine = (item, inet)
            continue
        for found in inet:
            if ipaddress.IPv4Interface(found).network.overlaps(link.network):
                raise ValueError(f"{item.get('ifname')} already has {found}, which overlaps the link's network "
                                 f"{link.network}: choose another subnet for the bridge {name}")
    if mine is None:
        return [["ip", "link", "add", "name", name, "type", "bridge"],
                ["ip", "link", "set", "dev", name, "alias", BRIDGE_ALIAS],
                ["ip", "address", "add", wanted, "dev", name],
                ["ip", "link", "set", "dev", name, "up"]]
    item, inet = mine
    kind = item.get("linkinfo", {}).get("info_kind")
    if kind != "bridge":
        raise ValueError(f"{name} exists and is {'a ' + kind if kind else 'not a bridge'}: choose another bridge name")
    other = [found for found in inet if found != wanted]
    if other:
        raise ValueError(f"the bridge {name} carries {', '.join(other)}, expected only {wanted}: it is not this "
                         "link's; choose another bridge name or remove the address")
    if wanted not in inet and item.get("ifalias") != BRIDGE_ALIAS:
        raise ValueError(f"the bridge {name} exists with no IPv4 address and this role did not make it (its alias is "
                         f"{item.get('ifalias')!r}, not {BRIDGE_ALIAS!r}): it may be another network's layer-2 "
                         f"bridge, and is left alone. Choose another bridge name (lxc_container_lxc_bridge), or give "
                         f"it {wanted} yourself if it is meant for this link")
    commands = [] if wanted in inet else [["ip", "address", "add", wanted, "dev", name]]
    if "UP" not in item.get("flags", []):
        commands.append(["ip", "link", "set", "dev", name, "up"])
    return commands
