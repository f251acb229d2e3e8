"""What gpu_host leaves on the (fake) 8-GPU node."""

from __future__ import annotations

UNIT = "/etc/systemd/system/nvidia-device-nodes.service"


def test_modules_load_at_boot(host):
    conf = host.file("/etc/modules-load.d/nvidia-gpu-host.conf")
    assert conf.mode == 0o644
    lines = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == ["nvidia", "nvidia_uvm"]


def test_unit_creates_every_node_before_guests(host):
    text = host.file(UNIT).content_string
    assert "Before=pve-guests.service" in text
    assert "Type=oneshot" in text and "RemainAfterExit=yes" in text
    execs = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ExecStart=")]
    assert execs == ["/usr/bin/nvidia-modprobe -u -c=0"] + [f"/usr/bin/nvidia-modprobe -c={n}" for n in range(8)]
    assert host.run(f"systemd-analyze verify {UNIT}").rc == 0


def test_unit_enabled_and_ran(host):
    service = host.service("nvidia-device-nodes")
    assert service.is_enabled
    assert host.run("systemctl is-active nvidia-device-nodes.service").stdout.strip() == "active"
    # The stand-in nvidia-modprobe logs each call: the unit ran at converge, once more after
    # side_effect touched its file (changed after it ran), and once more after side_effect removed
    # /dev/nvidia-uvm; idempotence ran nothing.
    log = host.file("/var/log/nvidia-modprobe-standin.log").content_string.splitlines()
    assert log == (["-u -c=0"] + [f"-c={n}" for n in range(8)]) * 3


def test_uvm_node_made_by_the_unit(host):
    uvm = host.file("/opt/fake-roots/8gpu/dev/nvidia-uvm")
    assert uvm.exists
    assert host.run("stat -c %t:%T /opt/fake-roots/8gpu/dev/nvidia-uvm").stdout.strip() == "1fe:0"  # 510:0


def test_persistenced_enabled(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled and service.is_running
