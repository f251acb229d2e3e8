"""The Proxmox API helpers: faults named from real proxmoxer exceptions, checks on API answers."""

from __future__ import annotations

import sys
from pathlib import Path

import proxmoxer
import pytest
import requests

REPO = Path(__file__).resolve().parent.parent

from ansible.module_utils.pve_api import (  # noqa: E402
    ApiLogin,
    explain,
    lock_problem,
    missing_privileges,
    quorum_problem,
    split_volid,
    task_error,
    wanted_privileges,
)
from ansible.module_utils.pve_container import Request, plan_update  # noqa: E402

LOGIN = ApiLogin(host="pve1.example.internal", port=8006, user="root@pam", token_id="ansible",
                 token_secret="s3cr3t-token")


@pytest.mark.parametrize(("exc", "needles"), [
    (requests.exceptions.SSLError("certificate verify failed: self-signed certificate"),
     ["TLS verification", "REQUESTS_CA_BUNDLE", "lxc_container_api_validate_certs"]),
    (requests.exceptions.ConnectionError("Connection refused"), ["unreachable", "lxc_container_api_host"]),
    (requests.exceptions.ConnectTimeout("timed out"), ["unreachable"]),
    (proxmoxer.ResourceException(401, "Unauthorized", "invalid token value s3cr3t-token"),
     ["401", "root@pam!ansible", "lxc_container_api_token_secret"]),
    (proxmoxer.ResourceException(403, "Forbidden", "Permission check failed (/vms/120, VM.Allocate)"),
     ["403", "/vms/120, VM.Allocate", "pveum acl modify"]),
    (proxmoxer.ResourceException(500, "Internal", "cluster not ready - no quorum?"), ["no quorum", "pvecm status"]),
    (proxmoxer.ResourceException(595, "Errors during connection establishment", "proxy handshake failed"),
     ["offline"]),
    (proxmoxer.AuthenticationError("Couldn't authenticate user: root@pam"), ["password login", "root@pam"]),
])
def test_faults_are_named_with_the_way_out_and_no_secret(exc, needles):
    message = explain(exc, LOGIN, "GET /nodes/pve1/lxc")
    for needle in needles:
        assert needle in message, message
    assert "s3cr3t-token" not in message


@pytest.mark.parametrize(("exc", "what", "unknown"), [
    (requests.exceptions.ReadTimeout("read timed out"), "PUT /nodes/pve1/lxc/120/config", True),
    (requests.exceptions.ConnectionError("Connection reset by peer"), "POST /nodes/pve1/lxc/120/status/stop", True),
    (requests.exceptions.ConnectionError("Connection reset by peer"), "DELETE /nodes/pve1/lxc/120", True),
    (requests.exceptions.ConnectTimeout("timed out"), "PUT /nodes/pve1/lxc/120/config", False),
    (requests.exceptions.ReadTimeout("read timed out"), "GET /nodes/pve1/lxc/120/config", False),
    (requests.exceptions.ReadTimeout("read timed out"), "POST /access/ticket", False),
])
def test_a_write_without_an_answer_never_claims_nothing_changed(exc, what, unknown):
    """pve_lxc_devices and lxc_model_mount write with one PUT: no answer leaves its outcome unknown."""
    message = explain(exc, LOGIN, what)
    assert ("Nothing was changed" not in message) == unknown, message
    assert (f"{what} may have reached the node: whether it took effect is unknown" in message) == unknown


def test_quorum_and_node_state_from_cluster_status():
    healthy = [{"type": "cluster", "name": "c", "quorate": 1}, {"type": "node", "name": "pve1", "online": 1}]
    assert quorum_problem(healthy, "pve1") is None
    assert "no quorum" in quorum_problem([{**healthy[0], "quorate": 0}, healthy[1]], "pve1")
    assert "offline" in quorum_problem([healthy[0], {**healthy[1], "online": 0}], "pve1")
    assert "has no node 'pve7'" in quorum_problem(healthy, "pve7")


@pytest.mark.parametrize("lock", ["backup", "migrate", "snapshot", "rollback"])
def test_every_lock_is_named(lock):
    message = lock_problem(120, {"lock": lock})
    assert f"locked ({lock})" in message and "pct unlock 120" in message
    assert lock_problem(120, {}) is None


def test_a_create_lock_is_an_unfinished_create_to_destroy_not_unlock():
    message = lock_problem(120, {"lock": "create"}, "pve1")
    for needle in ("locked (create)", "create did not finish", "--vmid 120 --source active", "pct destroy 120"):
        assert needle in message, message
    assert "`pct unlock 120`" not in message


def test_privileges_come_from_access_permissions_with_inheritance():
    wanted = wanted_privileges(120, "local-lvm", "local", creating=True, fetching_template=True)
    everything = {"/": {priv: 1 for privs in wanted.values() for priv in privs}}
    assert missing_privileges(everything, wanted) == []
    partial = {"/vms": {"VM.Audit": 1, "VM.Allocate": 1}, "/storage/local-lvm": {"Datastore.AllocateSpace": 1}}
    missing = missing_privileges(partial, wanted)
    assert "VM.PowerMgmt on /vms/120" in missing
    assert "VM.Allocate on /vms/120" not in missing
    assert "Datastore.AllocateTemplate on /storage/local" in missing
    # /vms/12 does not cover /vms/120.
    assert "VM.Audit on /vms/120" in missing_privileges({"/vms/12": {"VM.Audit": 1}}, wanted)


@pytest.mark.parametrize("bad", ["debian.tar.zst", "local:iso/debian.iso", "local:vztmpl/", ":vztmpl/x.tar.zst"])
def test_template_volume_form(bad):
    assert split_volid("local:vztmpl/debian-12.tar.zst") == ("local", "debian-12.tar.zst")
    with pytest.raises(ValueError, match="STORAGE:vztmpl/NAME"):
        split_volid(bad)


def test_task_error_quotes_the_log_line():
    log = [{"n": 1, "t": "starting"}, {"n": 2, "t": "TASK ERROR: startup for container '120' failed"}]
    assert task_error({"status": "stopped", "exitstatus": "OK"}, log) is None
    assert task_error({"status": "running"}, log) is None
    assert task_error({"status": "stopped", "exitstatus": "x"}, log) == "TASK ERROR: startup for container '120' failed"
    assert task_error({"status": "stopped", "exitstatus": "unexpected status"}, []) == "TASK ERROR: unexpected status"


def request(**changes) -> Request:
    base = dict(vmid=120, hostname="sglang1", ostemplate="local:vztmpl/d.tar.zst", disk="local-lvm:200", cores=32,
                memory=262144, swap=0, netif={"net0": "name=eth0,bridge=vmbr0,ip=dhcp"}, features=["nesting=1"],
                unprivileged=True, onboot=True)
    return Request(**{**base, **changes})


def test_update_compares_what_pve_returns_and_keeps_its_mac():
    config = {"hostname": "sglang1", "cores": 32, "memory": 262144, "swap": 0, "onboot": 1, "features": "nesting=1",
              "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth", "tags": "sglang-deploy"}
    assert not plan_update(request(), config).changed
    update = plan_update(request(cores=16, netif={"net0": "name=eth0,bridge=vmbr1,ip=dhcp"}), config)
    assert update.set["cores"] == "16" and update.before["cores"] == "32"
    assert "hwaddr=BC:24:11:00:00:01" in update.set["net0"] and "bridge=vmbr1" in update.set["net0"]
    assert plan_update(request(features=["nesting=1", "keyctl=1"]), config).set["features"] == "nesting=1,keyctl=1"
    assert plan_update(request(features=[]), config).set["features"] == ""
