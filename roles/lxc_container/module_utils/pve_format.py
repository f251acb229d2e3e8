"""PVE's property strings (`name=eth0,bridge=vmbr0,ip=dhcp`) checked against PVE's own schema.

The key lists, types, patterns and ranges are those of the PVE 9 API schema (pve-container's
`net[n]`, `mp[n]` and `features` formats). A value that passes here is one PVE parses the same way;
a key PVE does not know, an empty value, a second `,`-separated option smuggled into a value, or a
control character is refused with the option named. `property_problems` serves every such option
(netif, features, and a mount point's mpN value).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

NAME_RE = re.compile(r"[-_.A-Za-z0-9]+\Z")
MAC_RE = re.compile(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}\Z")
TRUNKS_RE = re.compile(r"[0-9]+(;[0-9]+)*\Z")
MOUNTOPTIONS_RE = re.compile(r"(discard|lazytime|noatime|nodev|noexec|nosuid)(;(discard|lazytime|noatime|nodev|noexec|nosuid))*\Z")
SIZE_RE = re.compile(r"[0-9]+(\.[0-9]+)?(K|M|G|T|KiB|MiB|GiB|TiB)?\Z")
BOOLEANS = ("0", "1", "yes", "no", "on", "off", "true", "false")
# PVE's storage id (PVE::JSONSchema pve-storage-id): at least two characters.
STORAGE_ID_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]\Z")


def _cidr(version: int, text: str) -> bool:
    address, sep, bits = text.partition("/")
    if not sep or not bits.isdigit() or not bits.isascii():
        return False
    try:
        return ipaddress.ip_address(address).version == version and int(bits) <= (32 if version == 4 else 128)
    except ValueError:
        return False


def _ip(version: int, text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


@dataclass(frozen=True)
class Key:
    """One key of a property string: its type and what PVE accepts there."""

    kind: str = "string"  # string, boolean, integer, number
    expected: str = ""  # said in the message
    pattern: re.Pattern[str] | None = None
    words: tuple[str, ...] = ()  # literal values accepted besides the pattern/test
    test: object = None  # a callable(str) -> bool
    minimum: int | None = None
    maximum: int | None = None
    required: bool = False


def _string(expected: str, pattern: re.Pattern[str] | None = None, words: tuple[str, ...] = (),
            test: object = None, required: bool = False) -> Key:
    return Key("string", expected, pattern, words, test, required=required)


BOOL = Key("boolean", "0 or 1")

# pve-container's net[n] format.
NET_FORMAT: dict[str, Key] = {
    "name": _string("an interface name ([-_.A-Za-z0-9]+)", NAME_RE, required=True),
    "bridge": _string("a bridge name ([-_.A-Za-z0-9]+)", NAME_RE),
    "firewall": BOOL,
    "gw": _string("an IPv4 address", test=lambda v: _ip(4, v)),
    "gw6": _string("an IPv6 address", test=lambda v: _ip(6, v)),
    "host-managed": BOOL,
    "hwaddr": _string("a MAC address XX:XX:XX:XX:XX:XX", MAC_RE),
    "ip": _string("dhcp, manual or an IPv4 CIDR (10.0.0.2/24)", words=("dhcp", "manual"), test=lambda v: _cidr(4, v)),
    "ip6": _string("auto, dhcp, manual or an IPv6 CIDR", words=("auto", "dhcp", "manual"), test=lambda v: _cidr(6, v)),
    "link_down": BOOL,
    "mtu": Key("integer", "64 to 65535", minimum=64, maximum=65535),
    "rate": Key("number", "a rate in MB/s (a number >= 0)", minimum=0),
    "tag": Key("integer", "a VLAN tag 1 to 4094", minimum=1, maximum=4094),
    "trunks": _string("VLAN ids separated by ;", TRUNKS_RE),
    "type": _string("veth", words=("veth",)),
}

# pve-container's features format.
FEATURES_FORMAT: dict[str, Key] = {
    "force_rw_sys": BOOL, "fuse": BOOL, "keyctl": BOOL, "mknod": BOOL, "nesting": BOOL,
    "mount": _string("file system types separated by ; ([a-zA-Z0-9_ ]+)", re.compile(r"[a-zA-Z0-9_; ]+\Z")),
}

# pve-container's mp[n] format (the volume is the default key: `/host/dir,mp=/models,ro=1`).
MP_FORMAT: dict[str, Key] = {
    "volume": _string("a volume (STORAGE:NAME) or an absolute host path", required=True,
                      test=lambda v: v.startswith("/") or bool(STORAGE_ID_RE.match(v.partition(":")[0]))),
    "mp": _string("an absolute path inside the container", test=lambda v: v.startswith("/"), required=True),
    "acl": BOOL, "backup": BOOL, "keepattrs": BOOL, "quota": BOOL, "replicate": BOOL, "ro": BOOL, "shared": BOOL,
    "mountoptions": _string("discard, lazytime, noatime, nodev, noexec or nosuid, separated by ;", MOUNTOPTIONS_RE),
    "size": _string("a disk size (8G, 512M)", SIZE_RE),
}


def _value_problem(key: Key, value: str) -> str | None:
    """Why value is not acceptable for key, or None."""
    if key.kind == "boolean":
        return None if value.lower() in BOOLEANS else key.expected
    if key.kind in ("integer", "number"):
        pattern = r"[0-9]+\Z" if key.kind == "integer" else r"[0-9]+(\.[0-9]+)?\Z"
        if not re.match(pattern, value):
            return key.expected
        number = float(value)
        if (key.minimum is not None and number < key.minimum) or (key.maximum is not None and number > key.maximum):
            return key.expected
        return None
    if value in key.words:
        return None
    if key.pattern is not None and key.pattern.match(value):
        return None
    if callable(key.test) and key.test(value):
        return None
    return key.expected


def property_problems(option: str, value: object, keys: dict[str, Key], default_key: str | None = None) -> list[str]:
    """What is wrong with one property-string value of option (e.g. `lxc_container_netif.net0`).

    Every `,`-separated item must be `key=value` with a key of this format (a bare item is the
    default key's value, where the format has one), each key at most once, with a value PVE
    accepts; required keys must be present.
    """
    if not isinstance(value, str):
        return [f"{option}={value!r} must be a string such as {_example(keys)}"]
    shown = f"{option}={value!r}"
    bad = sorted({f"{ord(c):#04x}" for c in value if ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:
        return [f"{shown} holds control character(s) {', '.join(bad)}: PVE's config would not hold it as one line"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(value.split(",")):
        if item == "":
            problems.append(f"{shown} has an empty item (a stray ',')")
            continue
        name, sep, text = item.partition("=")
        if not sep:
            if default_key is None or index != 0:
                problems.append(f"{shown}: {item!r} is not key=value")
                continue
            name, text = default_key, item
        if name not in keys:
            problems.append(f"{shown}: {name!r} is not a key PVE takes there (it takes {', '.join(sorted(keys))})")
            continue
        if name in seen:
            problems.append(f"{shown}: {name} is given twice")
            continue
        seen.add(name)
        expected = "a value" if text == "" else _value_problem(keys[name], text)
        if expected:
            problems.append(f"{shown}: {name}={text!r} is not {expected}")
    missing = [name for name, key in keys.items() if key.required and name not in seen]
    if missing and not problems:
        problems.append(f"{shown} lacks {', '.join(missing)} (PVE requires it)")
    return problems


def _example(keys: dict[str, Key]) -> str:
    if keys is NET_FORMAT:
        return "name=eth0,bridge=vmbr0,ip=dhcp"
    if keys is MP_FORMAT:
        return "/srv/models,mp=/models,ro=1"
    return "nesting=1"
