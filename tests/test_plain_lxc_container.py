"""The plain-LXC container's config (plain_lxc_container, state=present): its link (addresses, config lines, guest files, the host bridge) and its GPU entries."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from ansible.module_utils.lxc_link_plan import (
    OWNER_MARK,
    hwaddr,
    net_lines,
    owned,
    with_mark,
    parse_link,
    parse_pubkey,
    plan_authorized_keys,
    plan_bridge,
    plan_interfaces,
    plan_net,
)

LINK = parse_link("sgldemo0", "169.254.213.1/24", "169.254.213.2")
# What lxc-create writes with the role's creation config (no link), abridged.
CREATED = """# Template used to create this container: /usr/share/lxc/templates/lxc-debian

lxc.apparmor.profile = unconfined
lxc.net.0.type = empty
lxc.rootfs.path = dir:/var/lib/lxc/sglang-demo/rootfs

# Common configuration
lxc.include = /usr/share/lxc/config/debian.common.conf
lxc.uts.name = sglang-demo
"""
TEMPLATE_INTERFACES = "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n"


def ed25519_key(seed: int, comment: str = "demo") -> str:
    blob = len(b"ssh-ed25519").to_bytes(4, "big") + b"ssh-ed25519" + (32).to_bytes(4, "big") + bytes([seed]) * 32
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def iface(name: str, kind: str | None, *inet: str, up: bool = True) -> dict:
    item = {"ifname": name, "flags": ["BROADCAST", "UP"] if up else ["BROADCAST"],
            "addr_info": [{"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1])} for a in inet]
            + [{"family": "inet6", "local": "fe80::1", "prefixlen": 64}]}
    if kind:
        item["linkinfo"] = {"info_kind": kind}
    return item


HOST = [iface("lo", None, "127.0.0.1/8"), iface("eth0", None, "192.0.2.2/24"), iface("docker0", "bridge", "172.17.0.1/16")]


@pytest.mark.parametrize(("bridge", "host", "address"), [
    ("sgldemo0", "169.254.213.1/24", "169.254.213.2"),
    ("br.test-1_x", "169.254.1.1/16", "169.254.254.254"),
    ("abcdefghijklmno", "169.254.254.1/30", "169.254.254.2"),
])
def test_a_link_local_link_is_accepted(bridge: str, host: str, address: str) -> None:
    link = parse_link(bridge, host, address)
    assert link is not None and link.bridge == bridge and str(link.address) == address


def test_no_bridge_means_no_network() -> None:
    assert parse_link("", "", "") is None
    assert net_lines(None, "sglang-demo") == [("lxc.net.0.type", "empty")]


@pytest.mark.parametrize(("bridge", "host", "address", "needles"), [
    ("sgl demo", "169.254.213.1/24", "169.254.213.2", ["bridge 'sgl demo' is not an interface name"]),
    ("a" * 16, "169.254.213.1/24", "169.254.213.2", ["at most 15 characters"]),
    ("br0\nlxc.rootfs.path = dir:/", "169.254.213.1/24", "169.254.213.2", ["is not an interface name"]),
    ("sgldemo0", "10.0.0.1/24", "10.0.0.2", ["host_address 10.0.0.1/24 is not link-local", "real network"]),
    ("sgldemo0", "192.168.1.1/24", "192.168.1.2", ["is not link-local"]),
    ("sgldemo0", "169.254.0.1/24", "169.254.0.2", ["is not link-local (169.254.1.0 to 169.254.254.255)"]),
    ("sgldemo0", "169.254.255.1/24", "169.254.255.2", ["is not link-local"]),
    ("sgldemo0", "169.254.213.1", "169.254.213.2", ["with a prefix of /16 to /30"]),
    ("sgldemo0", "169.254.213.1/8", "169.254.213.2", ["with a prefix of /16 to /30"]),
    ("sgldemo0", "169.254.213.1/31", "169.254.213.0", ["with a prefix of /16 to /30"]),
    ("sgldemo0", "169.254.213.0/24", "169.254.213.2", ["its network's own or broadcast address"]),
    ("sgldemo0", "169.254.213.1/24", "169.254.214.2", ["address 169.254.214.2 is not a host address of",
                                                        "169.254.213.0/24"]),
    ("sgldemo0", "169.254.213.1/24", "169.254.213.255", ["is not a host address"]),
    ("sgldemo0", "169.254.213.1/24", "169.254.213.1", ["the host's own address on the bridge"]),
    ("sgldemo0", "169.254.213.1/24", "169.254.213.2/24", ["address '169.254.213.2/24' is not an IPv4 address"]),
    ("sgldemo0", "169.254.213.1/24", "", ["address '' is not an IPv4 address"]),
    ("", "169.254.213.1/24", "169.254.213.2", ["host_address and address given without a bridge"]),
    ("bad name", "10.0.0.1/24", "x", ["is not an interface name", "is not link-local", "'x' is not an IPv4"]),
])
def test_a_bad_link_is_refused_naming_each_value(bridge: str, host: str, address: str, needles: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        parse_link(bridge, host, address)
    for needle in needles:
        assert needle in str(caught.value)


def test_the_link_lines_are_a_veth_on_the_bridge_with_a_stable_mac() -> None:
    lines = dict(net_lines(LINK, "sglang-demo"))
    assert lines == {
        "lxc.net.0.type": "veth", "lxc.net.0.link": "sgldemo0", "lxc.net.0.flags": "up",
        "lxc.net.0.name": "eth0", "lxc.net.0.hwaddr": hwaddr("sglang-demo"),
        "lxc.net.0.ipv4.address": "169.254.213.2/24",
    }
    assert net_lines(LINK, "sglang-demo")[0] == ("lxc.net.0.type", "veth")
    assert "lxc.net.0.ipv4.gateway" not in lines  # the container routes nowhere but the link
    assert hwaddr("sglang-demo") == hwaddr("sglang-demo") != hwaddr("other")
    assert hwaddr("x").startswith("00:16:3e:")


def test_an_old_container_without_network_gets_the_link_in_place_of_its_line() -> None:
    plan = plan_net(CREATED, net_lines(LINK, "sglang-demo"))
    assert plan.changed and plan.removed == ["lxc.net.0.type = empty"]
    assert plan.added[0] == "lxc.net.0.type = veth" and len(plan.added) == 6
    lines = plan.text.splitlines()
    at = lines.index("lxc.net.0.type = veth")
    assert lines[at - 1] == "lxc.apparmor.profile = unconfined"
    assert lines[at + 6] == "lxc.rootfs.path = dir:/var/lib/lxc/sglang-demo/rootfs"
    others = [line for line in CREATED.splitlines() if not line.startswith("lxc.net.")]
    assert [line for line in lines if not line.startswith("lxc.net.")] == others
    again = plan_net(plan.text, net_lines(LINK, "sglang-demo"))
    assert not again.changed and again.text == plan.text


def test_removing_the_link_leaves_one_empty_line_and_the_rest() -> None:
    with_link = plan_net(CREATED, net_lines(LINK, "sglang-demo")).text
    back = plan_net(with_link, net_lines(None, "sglang-demo"))
    assert back.changed and back.added == ["lxc.net.0.type = empty"] and len(back.removed) == 6
    assert back.text == CREATED


@pytest.mark.parametrize("text", [
    CREATED.replace("lxc.net.0.type = empty\n", ""),  # no net line at all: appended to the main section
    CREATED.replace("lxc.net.0.type = empty", "lxc.net.0.type = veth\nlxc.net.0.link = lxcbr0\nlxc.net.1.type = veth"),
    CREATED + "[snap0]\nlxc.net.0.type = empty\n",  # a snapshot section keeps its own lines
    CREATED.replace("lxc.net.0.type = empty", "  lxc.net.0.type=empty"),
])
def test_every_net_line_of_the_main_section_is_replaced_and_nothing_else(text: str) -> None:
    plan = plan_net(text, net_lines(LINK, "ct"))
    main = plan.text.split("[snap0]")[0]
    assert [line for line in main.splitlines() if "lxc.net." in line] == \
        [f"{key} = {value}" for key, value in net_lines(LINK, "ct")]
    assert [line for line in plan.text.splitlines() if "lxc.net." not in line] == \
        [line for line in text.splitlines() if "lxc.net." not in line]
    if "[snap0]" in text:
        assert plan.text.endswith("[snap0]\nlxc.net.0.type = empty\n")
    assert not plan_net(plan.text, net_lines(LINK, "ct")).changed


@pytest.mark.parametrize(("before", "after"), [
    (TEMPLATE_INTERFACES, TEMPLATE_INTERFACES.replace("inet dhcp", "inet manual")),
    ("auto eth0\n  iface   eth0  inet dhcp  \n", "auto eth0\n  iface   eth0  inet manual  \n"),
    ("auto eth0\niface eth0 inet dhcp", "auto eth0\niface eth0 inet manual"),
])
def test_the_guest_leaves_eth0_to_lxc(before: str, after: str) -> None:
    assert plan_interfaces(before) == after
    assert plan_interfaces(after) is None


@pytest.mark.parametrize("text", [
    "auto eth0\niface eth0 inet manual\n",
    "auto eth0\niface eth0 inet static\n    address 169.254.213.2/24\n",  # the user's own: kept
    "auto eth1\niface eth1 inet dhcp\n",
    "iface eth0 inet6 dhcp\n",
    "# iface eth0 inet dhcp\n",
    "",
])
def test_other_interface_stanzas_are_left_alone(text: str) -> None:
    assert plan_interfaces(text) is None


@pytest.mark.parametrize("key", [ed25519_key(1), ed25519_key(2, "a comment with spaces"), ed25519_key(3, "")])
def test_one_public_key_line_is_accepted(key: str) -> None:
    assert parse_pubkey(key + "\n") == key.strip()


@pytest.mark.parametrize(("text", "needle"), [
    ('command="/bin/sh" ' + ed25519_key(1), "no options"),
    (ed25519_key(1) + "\n" + ed25519_key(2), "has 2 lines"),
    (ed25519_key(1).replace("ssh-ed25519", "ssh-dss"), "TYPE one of"),
    (ed25519_key(1).replace("ssh-ed25519", "ssh-rsa"), "is not a ssh-rsa key"),
    ("ssh-ed25519 !!!notbase64", "not one OpenSSH public key line"),
    ("ssh-ed25519 QUFBQQ== x", "is not a ssh-ed25519 key"),
    (ed25519_key(1, "bell\x07"), "not one OpenSSH public key line"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "not one OpenSSH public key line"),
])
def test_anything_else_as_pubkey_is_refused(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_pubkey(text)
    assert needle in str(caught.value)


def test_the_key_is_added_once_and_other_keys_are_kept() -> None:
    mine, theirs = ed25519_key(1, "mine"), ed25519_key(2, "theirs")
    assert plan_authorized_keys("", mine) == mine + "\n"
    added = plan_authorized_keys(theirs, mine)
    assert added == f"{theirs}\n{mine}\n"
    assert plan_authorized_keys(added, mine) is None
    # The same key with another comment or with options is already there.
    assert plan_authorized_keys(ed25519_key(1, "renamed") + "\n", mine) is None
    assert plan_authorized_keys('from="169.254.213.1" ' + mine + "\n", mine) is None


def test_a_missing_bridge_is_made_with_its_one_address() -> None:
    assert plan_bridge(HOST, LINK) == [
        ["ip", "link", "add", "name", "sgldemo0", "type", "bridge"],
        ["ip", "link", "set", "dev", "sgldemo0", "alias", "sglang-deploy lxc_container link"],
        ["ip", "address", "add", "169.254.213.1/24", "dev", "sgldemo0"],
        ["ip", "link", "set", "dev", "sgldemo0", "up"],
    ]


@pytest.mark.parametrize(("bridge", "commands"), [
    (iface("sgldemo0", "bridge", "169.254.213.1/24"), []),
    (iface("sgldemo0", "bridge", "169.254.213.1/24", up=False), [["ip", "link", "set", "dev", "sgldemo0", "up"]]),
    (dict(iface("sgldemo0", "bridge"), ifalias="sglang-deploy lxc_container link"),
     [["ip", "address", "add", "169.254.213.1/24", "dev", "sgldemo0"]]),
])
def test_an_existing_bridge_gets_only_what_it_lacks(bridge: dict, commands: list) -> None:
    assert plan_bridge([*HOST, bridge], LINK) == commands


@pytest.mark.parametrize(("interfaces", "needles"), [
    ([*HOST, iface("sgldemo0", "veth")], ["sgldemo0 exists and is a veth", "another bridge name"]),
    ([*HOST, iface("sgldemo0", None)], ["sgldemo0 exists and is not a bridge"]),
    ([*HOST, iface("sgldemo0", "bridge", "169.254.213.1/24", "10.9.9.1/24")],
     ["carries 10.9.9.1/24, expected only 169.254.213.1/24", "not this link's"]),
    ([*HOST, iface("sgldemo0", "bridge", "169.254.77.1/24")], ["carries 169.254.77.1/24"]),
    ([*HOST, iface("sgldemo0", "bridge")], ["the bridge sgldemo0 exists with no IPv4 address and this role did not "
                                            "make it (its alias is None", "another network's layer-2 bridge",
                                            "lxc_container_lxc_bridge"]),
    ([*HOST, iface("br-596b88a2be01", "bridge", "169.254.213.1/24")],
     ["br-596b88a2be01 already has 169.254.213.1/24", "overlaps the link's network 169.254.213.0/24"]),
    ([*HOST, iface("eth1", None, "169.254.0.5/16")], ["eth1 already has 169.254.0.5/16", "choose another subnet"]),
])
def test_a_bridge_or_subnet_that_is_not_ours_is_refused(interfaces: list[dict], needles: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        plan_bridge(interfaces, LINK)
    for needle in needles:
        assert needle in str(caught.value)


def test_this_hosts_own_interfaces_parse() -> None:
    """`ip -j -d address show` here: the plan reads it and, for a name no interface has, makes it."""

    shown = json.loads(subprocess.run(["ip", "-j", "-d", "address", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    taken = {item["ifname"] for item in shown}
    link = parse_link("pytestlink0", "169.254.201.1/24", "169.254.201.2")
    if "pytestlink0" not in taken and not any(a.get("local", "").startswith("169.254.201.")
                                              for item in shown for a in item.get("addr_info", [])):
        assert plan_bridge(shown, link)[0][:3] == ["ip", "link", "add"]
    with pytest.raises(ValueError, match="exists and is not a bridge"):
        plan_bridge(shown, parse_link("lo", "169.254.201.1/24", "169.254.201.2"))


# --------------------------------------------------- the playbook: the rootfs check comes first (D10)

import contextlib  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from conftest import REPO, run_module, run_playbook, tree_digest  # noqa: E402
from fake_nvidia_root import build  # noqa: E402
from ro_mount import read_only  # noqa: E402

STATE_AND_IP = """#!/bin/sh
# STAND-IN for lxc-info and ip (a plain-LXC host): the container exists, stopped; ip lists no
# interface and logs anything else it is asked to do.
case "$(basename "$0")" in
  lxc-info) echo STOPPED ;;
  ip) if [ "$1" = "-j" ]; then echo '[]'; else echo "$*" >> "$STANDIN_LOG"; fi ;;
  *) echo "$(basename "$0") $*" >> "$STANDIN_LOG" ;;
esac
"""


def plain_lxc_run(tmp_path: Path, config: str, *extra: str, ro: bool = False):
    """container.yml (lxc backend) on a container pytest-d10 that exists with this config, stopped.

    lxc-* and ip are stand-ins that log what they are asked to do; returns (run, log, digest before).
    """
    lxcpath = tmp_path / "lxc"
    (lxcpath / "pytest-d10" / "rootfs").mkdir(parents=True, exist_ok=True)
    (lxcpath / "pytest-d10" / "config").write_text(config.replace("LXCPATH", str(lxcpath)))
    stubs = tmp_path / "stubbin"
    stubs.mkdir()
    for name in ("lxc-info", "ip", "lxc-start", "lxc-create"):
        (stubs / name).write_text(STATE_AND_IP)
        (stubs / name).chmod(0o755)
    log = tmp_path / "standin.log"
    root = tmp_path / "fake-root"
    build(REPO / "tests" / "fixtures" / "gpu" / "h200-2gpu", root)
    before = tree_digest(lxcpath)
    private = tmp_path / "runner"
    private.mkdir()
    with read_only(lxcpath / "pytest-d10") if ro else contextlib.nullcontext():
        run = run_playbook(private, "container.yml",
                           ["-e", "lxc_container_backend=lxc", "-e", "lxc_container_name=pytest-d10",
                            "-e", f"lxc_container_lxcpath={lxcpath}", "-e", f"lxc_container_device_root={root}",
                            *extra],
                           inventory="[lxc_hosts]\nlocalhost ansible_connection=local\n",
                           envvars={"PATH": f"{stubs}:{os.environ['PATH']}", "STANDIN_LOG": str(log)})
    assert tree_digest(lxcpath) == before
    assert not log.exists(), log.read_text()
    return run


@pytest.mark.parametrize("config", ["lxc.uts.name = pytest-d10\n",
                                    "lxc.uts.name = pytest-d10\nlxc.rootfs.path = dir:/\n",
                                    "lxc.uts.name = pytest-d10\nlxc.rootfs.path = dir:LXCPATH/pytest-d10/rootfs\n"],
                         ids=["no-rootfs", "host-root", "no-init"])
@pytest.mark.parametrize("bridge", [False, True], ids=["no-link", "link"])
def test_a_config_without_its_rootfs_is_refused_before_a_net_line_or_bridge(tmp_path: Path, config: str,
                                                                            bridge: bool) -> None:
    link = ["-e", "lxc_container_lxc_bridge=pyd10br0", "-e", "lxc_container_lxc_bridge_address=169.254.203.1/24",
            "-e", "lxc_container_address=169.254.203.2"] if bridge else []
    run = plain_lxc_run(tmp_path, config, *link)
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    for needle in ("pytest-d10: ", "Nothing was written to", "no host bridge was made"):
        assert needle in message, message


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
def test_a_read_only_config_is_named_in_check_mode_as_in_the_real_run(tmp_path: Path, mode: list) -> None:
    container = tmp_path / "lxc" / "pytest-d10"
    (container / "rootfs" / "sbin").mkdir(parents=True)
    (container / "rootfs" / "sbin" / "init").write_text("")
    config = f"{OWNER_MARK}\nlxc.uts.name = pytest-d10\nlxc.rootfs.path = dir:LXCPATH/pytest-d10/rootfs\n"
    run = plain_lxc_run(tmp_path, config, *mode, ro=True)
    assert run.status == "failed", run.stdout
    message = " ".join(run.failures)
    assert f"cannot write {container}/config: its file system is read-only" in message, message


# --------------------------------------------------- no container yet: one call checks, the next makes


def lxc_config(args: dict, *flags: str) -> dict:
    """`ansible localhost -m plain_lxc_container -a JSON` with state=present (the config alone; these
    containers are directories, not LXC's): the module's result."""
    return run_module("plain_lxc_container", {"state": "present", **args},
                      ("lxc_container", "nvidia_discovery", "systemd_files"), *flags)[0]


MISSING_LINK = {"name": "pytest-nolxc", "bridge": "pynolxc0", "host_address": "169.254.204.1/24",
                "address": "169.254.204.2"}


def test_a_container_not_there_yet_is_only_checked_and_said_missing(tmp_path: Path) -> None:
    lxcpath = tmp_path / "lxc"
    (lxcpath / "pytest-nolxc" / "rootfs" / "root").mkdir(parents=True)  # a rootfs, but no config
    before = tree_digest(tmp_path)
    result = lxc_config({**MISSING_LINK, "config_path": str(lxcpath / "pytest-nolxc" / "config"),
                       "rootfs": str(lxcpath / "pytest-nolxc" / "rootfs"), "lxcpath": str(lxcpath),
                       "pubkey": ed25519_key(7), "require_host_key": True, "when_missing": "check"})
    assert result.get("failed") is not True, result
    assert result["exists"] is False and result["changed"] is False and result["diff"] == []
    assert result["bridge_commands"]  # planned for the call after the creation, none run
    assert not Path("/sys/class/net/pynolxc0").exists()
    assert tree_digest(tmp_path) == before


def test_a_bad_link_is_refused_before_a_creation_as_after_it(tmp_path: Path) -> None:
    result = lxc_config({**MISSING_LINK, "host_address": "10.0.0.1/24", "address": "10.0.0.2",
                       "config_path": str(tmp_path / "lxc" / "pytest-nolxc" / "config"), "when_missing": "check"})
    assert result["failed"] is True and "host_address 10.0.0.1/24 is not link-local" in result["msg"], result


def test_without_when_missing_a_container_not_there_fails_naming_its_config(tmp_path: Path) -> None:
    config = tmp_path / "lxc" / "pytest-nolxc" / "config"
    result = lxc_config({**MISSING_LINK, "config_path": str(config)})
    assert result["failed"] is True and result["msg"] == f"{config} does not exist: create the container first."
    assert not Path("/sys/class/net/pynolxc0").exists()


def unfinished_container(tmp_path: Path) -> Path:
    """What a killed lxc-create leaves: the config, a partial rootfs and LXC's `partial` marker."""
    container = tmp_path / "lxc" / "pytest-nolxc"
    (container / "rootfs" / "sbin").mkdir(parents=True)
    (container / "config").write_text(f"lxc.rootfs.path = dir:{container}/rootfs\nlxc.uts.name = pytest-nolxc\n")
    (container / "partial").write_text("")
    return container


def test_a_creation_a_killed_run_left_unfinished_is_not_there_yet(tmp_path: Path) -> None:
    container = unfinished_container(tmp_path)
    before = tree_digest(tmp_path)
    result = lxc_config({**MISSING_LINK, "config_path": str(container / "config"), "rootfs": str(container / "rootfs"),
                       "lxcpath": str(tmp_path / "lxc"), "when_missing": "check"})
    assert result.get("failed") is not True, result
    assert result["exists"] is False and result["changed"] is False
    assert tree_digest(tmp_path) == before and not Path("/sys/class/net/pynolxc0").exists()


def test_an_unfinished_creation_is_never_written_to(tmp_path: Path) -> None:
    container = unfinished_container(tmp_path)
    before = tree_digest(tmp_path)
    result = lxc_config({**MISSING_LINK, "config_path": str(container / "config"), "rootfs": str(container / "rootfs"),
                       "lxcpath": str(tmp_path / "lxc")})
    assert result["failed"] is True, result
    assert result["msg"] == (f"pytest-nolxc was left half-made by an lxc-create that did not finish (its partial marker "
                             f"is beside {container}/config). lxc-destroy -f -n pytest-nolxc removes it; the role does "
                             "that itself before it creates the container. Nothing was changed.")
    assert tree_digest(tmp_path) == before and not Path("/sys/class/net/pynolxc0").exists()


# ------------------------------------------------ someone else's container: refused unless adopted


def test_a_config_is_the_roles_by_its_mark_or_the_mac_it_derives() -> None:
    base = "lxc.uts.name = ct\nlxc.rootfs.path = dir:/var/lib/lxc/ct/rootfs\n"
    assert not owned(base, "ct")
    assert owned(f"# Template used to create this container\n{OWNER_MARK}\n{base}", "ct")
    assert owned(base + f"lxc.net.0.hwaddr={hwaddr('ct')}\n", "ct")  # made before the mark, with a link
    assert not owned(base + f"lxc.net.0.hwaddr = {hwaddr('other')}\n", "ct")
    assert not owned(base + f"#{OWNER_MARK}x\n", "ct")
    assert with_mark(base) == base + OWNER_MARK + "\n" and owned(with_mark(base), "ct")


def someone_elses_container(tmp_path: Path) -> Path:
    container = tmp_path / "lxc" / "theirs"
    (container / "rootfs" / "sbin").mkdir(parents=True)
    (container / "rootfs" / "sbin" / "init").write_text("")
    (container / "rootfs" / "root" / ".ssh").mkdir(parents=True)
    (container / "rootfs" / "root" / ".ssh" / "authorized_keys").write_text(ed25519_key(3) + "\n")
    (container / "config").write_text(f"lxc.rootfs.path = dir:{container}/rootfs\nlxc.uts.name = theirs\n"
                                      "lxc.net.0.type = veth\nlxc.net.0.link = lxcbr0\n")
    return container


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_a_container_the_role_did_not_make_is_refused_before_any_change(tmp_path: Path, check_mode: bool) -> None:
    container = someone_elses_container(tmp_path)
    before = tree_digest(tmp_path)
    args = {"name": "theirs", "pubkey": ed25519_key(7), "config_path": str(container / "config"),
            "rootfs": str(container / "rootfs"), "lxcpath": str(tmp_path / "lxc")}
    result = lxc_config(args, *(["--check"] if check_mode else []))
    assert result["failed"] is True and result["owned"] is False, result
    assert result["msg"] == (
        f"theirs: the container whose config is {container / 'config'} was not made by this role: its config has "
        f"neither the line {OWNER_MARK!r} the role creates containers with nor the veth MAC {hwaddr('theirs')} it "
        "gives them. It may be someone else's, and it is left as it is. If it is the one meant (made by hand, or by "
        "an earlier version of this project), re-run once with -e lxc_container_adopt=true: that adds the line (the "
        "container restarts once to take its config); otherwise set lxc_container_name to a name no container has. "
        "Nothing was written and no host bridge was made.")
    assert tree_digest(tmp_path) == before


def test_adopting_adds_the_mark_once_and_then_the_container_is_the_roles(tmp_path: Path) -> None:
    container = someone_elses_container(tmp_path)
    args = {"name": "theirs", "config_path": str(container / "config"), "rootfs": str(container / "rootfs"),
            "lxcpath": str(tmp_path / "lxc")}
    adopted = lxc_config({**args, "adopt": True})
    assert adopted.get("failed") is not True and adopted["changed"] and adopted["config_changed"], adopted
    text = (container / "config").read_text()
    assert text.endswith(f"lxc.net.0.type = empty\n{OWNER_MARK}\n"), text
    again = lxc_config(args)
    assert again.get("failed") is not True and not again["changed"], again


# --------------------------------------------------- the GPU entries, in the same write as the link

GPU = REPO / "tests" / "fixtures" / "gpu"
REAL = json.loads((GPU / "h200-2gpu" / "live-nvidia-devices.json").read_text())["nvidia"]
INJECT = "\nlxc.apparmor.profile = unconfined"


def ours(tmp_path: Path, config: str = "", init: bool = True) -> tuple[Path, dict]:
    """A plain-LXC container c1 of the role's (its mark), stopped, and the role's arguments for it."""
    container = tmp_path / "lxc" / "c1"
    (container / "rootfs" / "sbin").mkdir(parents=True)
    if init:
        (container / "rootfs" / "sbin" / "init").write_text("")
    text = config or f"{OWNER_MARK}\nlxc.rootfs.path = dir:ROOTFS\nlxc.uts.name = c1\nlxc.net.0.type = empty\n"
    (container / "config").write_text(text.replace("ROOTFS", str(container / "rootfs")))
    return container / "config", {"name": "c1", "config_path": str(container / "config"),
                                  "rootfs": str(container / "rootfs"), "lxcpath": str(tmp_path / "lxc"),
                                  "cgroup": "v2", "memlock": "65536"}


def test_the_gpu_entries_are_written_with_the_link_in_one_call_and_then_left_alone(tmp_path: Path) -> None:
    config, args = ours(tmp_path)
    other = config.read_text()
    first = lxc_config({**args, "nvidia": REAL})
    assert first.get("failed") is not True and first["changed"] and first["config_changed"], first
    text = config.read_text()
    assert len(first["added"]) == len(REAL["nodes"]) * 2 + 1 and first["removed"] == []
    for line in first["entries"]:
        assert line in text.splitlines()
    assert "lxc.cgroup2.devices.allow = c 195:0 rwm" in text and "lxc.prlimit.memlock = 65536" in text
    assert all(line in text.splitlines() for line in other.splitlines())  # every other line kept
    assert first["node_ids"] == [f"{n['path']} {n['major']}:{n['minor']}" for n in REAL["nodes"]]
    assert len(first["diff"]) == 1 and first["diff"][0]["after"] == text  # one write, one diff
    again = lxc_config({**args, "nvidia": REAL})
    assert not again["changed"] and not again["config_changed"] and again["added"] == again["removed"] == []
    assert config.read_text() == text


def test_a_gpu_gone_from_the_host_loses_exactly_its_entries(tmp_path: Path) -> None:
    config, args = ours(tmp_path)
    lxc_config({**args, "nvidia": REAL})
    one = {**REAL, "nodes": [n for n in REAL["nodes"] if n["path"] != "/dev/nvidia1"]}
    dropped = lxc_config({**args, "nvidia": one})
    assert dropped["changed"] and dropped["added"] == [], dropped
    assert sorted(dropped["removed"]) == sorted([
        "lxc.cgroup2.devices.allow = c 195:1 rwm",
        f"lxc.mount.entry = {next(n['host_path'] for n in REAL['nodes'] if n['path'] == '/dev/nvidia1')}"
        " dev/nvidia1 none bind,create=file 0 0"])
    assert "nvidia1" not in config.read_text()


def test_without_nvidia_the_gpu_entries_are_left_as_they_are(tmp_path: Path) -> None:
    config, args = ours(tmp_path)
    lxc_config({**args, "nvidia": REAL})
    text = config.read_text()
    alone = lxc_config(args)
    assert not alone["changed"] and alone["entries"] == [] and alone["node_ids"] == [], alone
    assert config.read_text() == text


def test_check_mode_says_what_would_be_added_and_writes_nothing(tmp_path: Path) -> None:
    config, args = ours(tmp_path)
    before = tree_digest(tmp_path)
    planned = lxc_config({**args, "nvidia": REAL}, "--check")
    assert planned["changed"] and len(planned["added"]) == len(REAL["nodes"]) * 2 + 1, planned
    assert tree_digest(tmp_path) == before
    assert config.exists()


def with_node(index: int, **changes: object) -> dict:
    nvidia = json.loads(json.dumps(REAL))
    nvidia["nodes"][index].update(changes)
    return nvidia


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
@pytest.mark.parametrize(("nvidia", "memlock", "needle"), [
    (with_node(0, path="/dev/nvidia0" + INJECT), "65536", "GPU entries for c1: "),
    (with_node(0, major=1, minor=1), "65536", "/dev/nvidia0 is 1:1, expected 195:0 (nvidia)"),
    ({**REAL, "majors": {**REAL["majors"], "nvidia-uvm": "238" + INJECT}}, "65536", "nvidia.majors['nvidia-uvm']"),
    (REAL, "unlimited" + INJECT, "memlock is 'unlimited\\nlxc.apparmor"),
], ids=["node-path", "node-number", "major", "memlock"])
def test_an_injected_node_or_memlock_is_refused_before_any_change(tmp_path: Path, check_mode: bool, nvidia: dict,
                                                                   memlock: str, needle: str) -> None:
    """Checked before the link, the ownership and the rootfs: nothing is written and no bridge is made."""
    _, args = ours(tmp_path)
    before = tree_digest(tmp_path)
    result = lxc_config({**args, "nvidia": nvidia, "memlock": memlock, "bridge": "pyd11br0",
                         "host_address": "169.254.211.1/24", "address": "169.254.211.2"},
                        *(["--check"] if check_mode else []))
    assert result.get("failed") is True, result
    assert needle in result["msg"] and "Nothing was changed" in result["msg"], result["msg"]
    assert tree_digest(tmp_path) == before
    assert subprocess.run(["ip", "link", "show", "pyd11br0"], capture_output=True).returncode != 0


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
@pytest.mark.parametrize(("config", "init", "needle"), [
    ("lxc.uts.name = c1\n", True, "names no lxc.rootfs.path"),
    ("", True, "names no lxc.rootfs.path"),
    ("lxc.rootfs.path = dir:/\n", True, "lxc.rootfs.path is 'dir:/', expected"),
    ("lxc.rootfs.path = dir:ROOTFS\nlxc.rootfs.path = dir:/\n", True, "lxc.rootfs.path is 'dir:/'"),
    ("lxc.rootfs.path = dir:ROOTFS\n", False, "sbin/init does not exist"),
])
def test_a_container_without_its_own_rootfs_gets_no_gpu_line_written(tmp_path: Path, check_mode: bool, config: str,
                                                                     init: bool, needle: str) -> None:
    """The rootfs check runs before the write: the config keeps its bytes, in --check and for real."""
    path, args = ours(tmp_path, f"{OWNER_MARK}\n{config}" if config else "\n", init)
    before = tree_digest(tmp_path)
    result = lxc_config({**args, "nvidia": REAL}, *(["--check"] if check_mode else []))
    assert result.get("failed") is True, result
    assert needle in result["msg"] and "c1: " in result["msg"], result["msg"]
    assert f"Nothing was written to {path}" in result["msg"]
    assert result["start_problem"]
    assert tree_digest(tmp_path) == before


# --------------------------------------------------- the model store, in the same write


def test_the_model_store_is_mounted_read_only_in_the_same_write_and_then_left_alone(tmp_path: Path) -> None:
    config, args = ours(tmp_path)
    store = tmp_path / "models"
    store.mkdir()
    first = lxc_config({**args, "nvidia": REAL, "model_dir": str(store)})
    assert first["changed"] and len(first["diff"]) == 1, first
    line = f"lxc.mount.entry = {store} models none bind,ro,create=dir 0 0"
    assert first["model_line"] == line and line in config.read_text().splitlines()
    assert "lxc.cgroup2.devices.allow = c 195:0 rwm" in config.read_text()  # the GPU entries too, in that write
    text = config.read_text()
    again = lxc_config({**args, "nvidia": REAL, "model_dir": str(store)})
    assert not again["changed"] and config.read_text() == text, again
    moved = lxc_config({**args, "nvidia": REAL, "model_dir": str(store), "model_mount": "/weights"})
    assert moved["changed"] and f"lxc.mount.entry = {store} weights none bind,ro,create=dir 0 0" in config.read_text()
    assert line in config.read_text()  # another mount point is another entry; ours at /models is kept


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
@pytest.mark.parametrize(("model_dir", "mount", "needle"), [
    ("relative/models", "/models", "Invalid model mount: "),
    ("/srv/models" + INJECT, "/models", "Invalid model mount: "),
    ("/srv/models", "/models two", "Invalid model mount: "),
], ids=["relative", "newline", "space"])
def test_a_bad_model_mount_is_refused_before_any_change(tmp_path: Path, check_mode: bool, model_dir: str,
                                                         mount: str, needle: str) -> None:
    _, args = ours(tmp_path)
    before = tree_digest(tmp_path)
    result = lxc_config({**args, "nvidia": REAL, "model_dir": model_dir, "model_mount": mount},
                        *(["--check"] if check_mode else []))
    assert result.get("failed") is True and needle in result["msg"], result
    assert "Nothing was changed" in result["msg"]
    assert tree_digest(tmp_path) == before
