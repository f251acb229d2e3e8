"""Inside the real LXC container: the passed nodes, the device cgroup, the config."""

from __future__ import annotations

import json
import os
import re

FAKE_ROOT = "/var/tmp/molecule-fake-nvidia"
NAME = "molecule-gpu"
CONFIG = f"/var/lib/lxc/{NAME}/config"
NODES = {
    "/dev/nvidia0": (195, 0),
    "/dev/nvidia1": (195, 1),
    "/dev/nvidiactl": (195, 255),
    "/dev/nvidia-uvm": (238, 0),
    "/dev/nvidia-uvm-tools": (238, 1),
    "/dev/nvidia-caps/nvidia-cap1": (241, 1),
    "/dev/nvidia-caps/nvidia-cap2": (241, 2),
}
OPEN = (
    "import errno, os, sys\n"
    "try:\n"
    "    os.close(os.open(sys.argv[1], os.O_RDONLY))\n"
    "    print('opened')\n"
    "except OSError as exc:\n"
    "    print(errno.errorcode[exc.errno])\n"
)


def dropped(host) -> bool:
    return host.file(f"{FAKE_ROOT}/.nvidia1-dropped").exists


def expected_nodes(host) -> dict[str, tuple[int, int]]:
    nodes = dict(NODES)
    if dropped(host):
        del nodes["/dev/nvidia1"]
    return nodes


def inside(host, *argv: str) -> str:
    return host.check_output("lxc-attach --name %s -- " + " ".join(["%s"] * len(argv)), NAME, *argv)


def open_errno(host, path: str) -> str:
    return inside(host, "python3", "-c", OPEN, path)


def test_container_runs_systemd(host) -> None:
    state = host.run("lxc-attach --name %s -- systemctl is-system-running", NAME).stdout.strip()
    assert state in {"running", "degraded"}


def test_passed_nodes_have_the_hosts_major_and_minor(host) -> None:
    for path, (major, minor) in expected_nodes(host).items():
        assert inside(host, "stat", "--format=%F %Hr:%Lr", path) == f"character special file {major}:{minor}"


def test_a_dropped_gpu_is_gone_from_the_container(host) -> None:
    listed = inside(host, "python3", "-c", "import glob; print(*glob.glob('/dev/nvidia*'))").split()
    assert ("/dev/nvidia1" in listed) is not dropped(host)


def test_passed_nodes_are_allowed_but_have_no_driver(host) -> None:
    # ENXIO: the device cgroup let the open through and no driver answered.
    for path in expected_nodes(host):
        assert open_errno(host, path) == "ENXIO", path


def test_a_node_not_passed_is_denied_by_the_device_cgroup(host) -> None:
    inside(host, "rm", "-f", "/root/nvidia7")
    inside(host, "mknod", "/root/nvidia7", "c", "195", "7")
    assert open_errno(host, "/root/nvidia7") == "EPERM"


def test_config_carries_exactly_one_allow_and_one_mount_per_node(host) -> None:
    config = host.file(CONFIG).content_string
    allows = re.findall(r"^lxc\.cgroup2?\.devices\.allow = c (\d+):(\d+) rwm$", config, re.M)
    mounts = re.findall(r"^lxc\.mount\.entry = (\S+) (\S+) none bind,create=file 0 0$", config, re.M)
    nodes = expected_nodes(host)
    assert sorted((int(a), int(b)) for a, b in allows) == sorted(nodes.values())
    assert sorted(target for _, target in mounts) == sorted(path.lstrip("/") for path in nodes)
    assert all(source == FAKE_ROOT + "/" + target for source, target in mounts)
    assert "optional" not in config
    assert re.search(r"^lxc\.prlimit\.memlock = 65536$", config, re.M)
    assert os.path.basename(CONFIG) == "config"


WRITE = (
    "import errno, sys\n"
    "try:\n"
    "    open(sys.argv[1], 'w').close()\n"
    "    print('written')\n"
    "except OSError as exc:\n"
    "    print(errno.errorcode[exc.errno])\n"
)


def test_the_model_store_is_mounted_read_only(host) -> None:
    """The node's store (lxc_container_model_dir) at /models: readable, never writable from inside."""
    assert inside(host, "cat", "/models/config.json") == '{"architectures": ["GlmMoeDsaForCausalLM"]}'
    assert inside(host, "python3", "-c", WRITE, "/models/written-from-the-container") == "EROFS"
    assert inside(host, "python3", "-c", WRITE, "/models/config.json") == "EROFS"
    assert not host.file("/var/tmp/molecule-models/written-from-the-container").exists
    options = inside(host, "findmnt", "--noheadings", "--output", "OPTIONS", "/models").split(",")
    assert "ro" in options


def test_the_containers_veth_is_on_its_host_bridge(host) -> None:
    """The link plain_lxc_container made (molecule.yml gives the bridge), after a converge and after the bridge was made again."""
    ports = json.loads(host.check_output("ip -j link show master molgpu0"))
    assert len(ports) == 1 and ports[0]["ifname"].startswith("veth")
    assert "eth0" in inside(host, "ip", "-o", "link", "show", "eth0")
