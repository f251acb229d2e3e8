"""The proxmox backend refuses, before any request that changes something, what is not ours or
what PVE would read otherwise: against fakepve (PVE 9's schema, ACLs on), through container.yml.

Each case asserts the message and that nothing changed: fakepve's container config and status,
and the sha256 of every file in the node's conf dir. The values PVE would refuse or misread run in
one ansible-playbook process per mode, each an inventory host of its own (Node.play_cases).
"""

from __future__ import annotations

import json

import pytest
from test_proxmox_backend import VMID, Node, assert_converged, node, writes  # noqa: F401 - node is the fixture
from pve_fake import NODE

PROD_DB = {"hostname": "prod-db", "memory": 4096, "cores": 4, "unprivileged": 1,
           "net0": "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:00:00:09,ip=10.9.9.9/24,gw=10.9.9.1,type=veth",
           "description": "production database, do not touch", "rootfs": "local-lvm:vm-120-disk-0,size=32G"}

OURS = {"hostname": "sglang1", "cores": 32, "memory": 262144, "swap": 0, "onboot": 1, "features": "nesting=1",
        "unprivileged": 1, "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
        "rootfs": "local-lvm:vm-120-disk-0,size=200G"}


def refused(node, *extra, **options):
    """Run container.yml; it must fail, change nothing, and return its failure messages as one line."""
    before = node.digest()
    run = node.play(*extra, **options)
    assert run.status == "failed", run.stdout
    assert writes(run) == [], writes(run)
    assert node.digest() == before
    return " ".join(" ".join(run.failures).split())


@pytest.mark.parametrize("mode", [[], ["--check", "--diff"]], ids=["real", "check"])
def test_someone_elses_container_at_the_vmid_is_left_alone_and_named(node, mode):
    node.add_ct(status="running", config=PROD_DB, owned=False)
    message = refused(node, *mode)
    for needle in ("Container 120 already exists with hostname 'prod-db'", "'production database, do not touch'",
                   "lxc_container_vmid to a free id", "Nothing was changed"):
        assert needle in message, message


@pytest.mark.parametrize("mode", [[], ["--check", "--diff"]], ids=["real", "check"])
def test_our_hostname_without_the_owner_tag_is_not_ours_and_is_left_alone(node, mode):
    """A container someone made with the hostname the role would give: the hostname alone does not
    make it ours."""
    node.add_ct(status="running", config=dict(OURS, tags="backup;prod", description="made by hand"), owned=False)
    message = refused(node, *mode)
    for needle in ("Container 120 already exists with hostname 'sglang1' but without the tag 'sglang-deploy'",
                   "(its tags: 'backup;prod'; its description: 'made by hand')", "not made by this role",
                   "re-run once with `-e lxc_container_adopt=true`", "its other tags kept",
                   "lxc_container_vmid to a free id", "Nothing was changed"):
        assert needle in message, message


def test_adopt_tags_the_container_keeping_its_own_tags_then_nothing_changes(node):
    node.add_ct(status="running", config=dict(OURS, tags="backup;prod"), owned=False)
    tags = lambda: set(node.pve.ct(VMID).config.get("tags", "").split(";"))
    before = node.digest()
    check = node.play("--check", "--diff", "-e", "lxc_container_adopt=true")
    assert check.status == "successful", check.stdout
    assert "tags: backup;prod;sglang-deploy" in check.stdout, check.stdout
    assert writes(check) == [] and node.digest() == before

    adopted = node.play("-e", "lxc_container_adopt=true")
    assert adopted.status == "successful", adopted.stdout
    assert tags() == {"backup", "prod", "sglang-deploy"}
    assert any(method == "PUT" and path.endswith(f"/lxc/{VMID}/config") and b"tags=" in body
               for method, path, body in adopted.requests), adopted.requests
    # From here it is ours: without adopt, and with it, a run changes nothing.
    for again in (node.play(), node.play("-e", "lxc_container_adopt=true")):
        assert again.status == "successful" and again.changed == 0, again.stdout
        assert writes(again) == [], writes(again)
    assert tags() == {"backup", "prod", "sglang-deploy"}


def test_adopt_does_not_take_a_container_with_another_hostname(node):
    node.add_ct(status="running", config=PROD_DB, owned=False)
    message = refused(node, "-e", "lxc_container_adopt=true")
    assert "Container 120 already exists with hostname 'prod-db'" in message, message


# Each value reaches PVE's config only through a property string or a number: refused before any
# request, in --check too; given as -e JSON (typed) and as -e key=value (a string).
BAD = [
    ("netif-key", {"lxc_container_netif": {"net0": "name=eth0,bridge=vmbr0,ip=dhcp", "unprivileged": "0"},
                   "lxc_container_features": []}, "lxc_container_netif has the key 'unprivileged'"),
    ("netif-desc", {"lxc_container_netif": {"net0": "name=eth0,bridge=vmbr0,ip=dhcp", "description": "a\nb"}},
     "the key 'description'"),
    ("netif-value", {"lxc_container_netif": {"net0": "name=eth0,bridge=vmbr0,ip=dhcp,tag=0"}},
     "tag='0' is not a VLAN tag"),
    ("storage-inject", {"lxc_container_storage": "ro=1,mountoptions=noexec,quota=1,volume=local-lvm"},
     "is not a PVE storage id"),
    ("disk-0", {"lxc_container_disk_gb": 0}, "lxc_container_disk_gb='0' is not a size in GB"),
    ("disk-neg", {"lxc_container_disk_gb": "-1"}, "lxc_container_disk_gb='-1'"),
    ("cores-0", {"lxc_container_cores": 0}, "lxc_container_cores=0 is out of range"),
    ("memory-0", {"lxc_container_memory_mb": "0"}, "lxc_container_memory_mb=0 is out of range"),
    ("swap-neg", {"lxc_container_swap_mb": -1}, "lxc_container_swap_mb=-1 is out of range"),
    ("vmid-padded", {"lxc_container_vmid": "120 "}, "is not a Proxmox container id: digits only"),
    ("vmid-lead", {"lxc_container_vmid": " 120"}, "is not a Proxmox container id: digits only"),
    ("hostname-dash", {"lxc_container_name": "sglang-"}, "neither starting nor ending with -"),
    ("api-url", {"lxc_container_api_host": "https://127.0.0.51:8006"},
     "lxc_container_api_host=127.0.0.51 and lxc_container_api_port=8006"),
]


@pytest.fixture(scope="module", params=[False, True], ids=["fresh", "existing"])
def bad_values(request, tmp_path_factory):
    """Every case of BAD in one run of container.yml (a real run on a node without the container, a
    --check run on one with it): each case a proxmox_hosts member of its own (Node.play_cases)."""
    exists = request.param
    made = Node(tmp_path_factory.mktemp("existing" if exists else "fresh"))
    try:
        if exists:
            made.add_ct(status="running", config={"hostname": "sglang1", "unprivileged": 1,
                                                  "rootfs": "local-lvm:vm-120-disk-0,size=200G"})
        before = made.digest()
        runs = made.play_cases({name: values for name, values, _ in BAD}, *(["--check"] if exists else []))
        yield runs, before, made.digest(), made
    finally:
        made.stop()


@pytest.mark.parametrize(("name", "needle"), [(b[0], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_a_value_pve_would_refuse_or_misread_is_refused_before_any_request(bad_values, name, needle):
    runs, before, after, made = bad_values
    run = runs[name]
    assert run.status == "failed", run.stdout
    assert writes(run) == [], writes(run)
    assert after == before
    message = " ".join(" ".join(run.failures).split())
    assert needle in message and "othing was changed" in message, message
    assert not any(p.endswith(".conf") and " " in p for p in map(str, made.confdir.glob("*"))), "no '120 .conf'"


def test_a_padded_vmid_as_a_plain_string_is_refused_too(node):
    message = refused(node, "-e", "lxc_container_vmid=0120 ")
    assert "is not a Proxmox container id" in message, message
    assert node.pve.ct(VMID) is None


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
def test_create_only_settings_of_an_existing_container_are_compared_and_named(node, mode):
    # fakepve adds PVE's defaults but unprivileged=1 of its own; PVE's default is 0 (privileged).
    node.add_ct(status="stopped", config={"hostname": "sglang1", "rootfs": "local-lvm:vm-120-disk-0,size=8G",
                                          "unprivileged": 0})
    message = refused(node, *mode)
    for needle in ("is privileged but lxc_container_unprivileged=true", "PVE cannot change this after creation",
                   "rootfs is 8G", "pct resize 120 rootfs 200G", "Nothing was changed"):
        assert needle in message, message


@pytest.mark.parametrize("husk", [{"lock": "create"}, {}], ids=["locked", "unlocked-no-rootfs"])
def test_a_create_that_never_finished_is_named_with_pct_destroy(node, husk):
    node.add_ct(config={"hostname": "sglang1", "unprivileged": 1}, defaults=False, **husk)
    message = refused(node)
    for needle in ("its create did not finish", "--vmid 120 --source active", "pct destroy 120", "Nothing was changed"):
        assert needle in message, message


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
def test_a_storage_the_node_does_not_have_is_refused_by_the_preflight(node, mode):
    message = refused(node, "-e", "lxc_container_storage=nosuch-store", *mode)
    for needle in ("lxc_container_storage='nosuch-store' is not a storage on node pve1", "local-lvm",
                   "Nothing was changed"):
        assert needle in message, message
    assert node.pve.ct(VMID) is None


def test_a_fault_after_the_create_says_what_was_done_and_the_next_run_converges(node):
    node.fake.run(lambda pve: pve.fail("GET", "/log", 500, "the node fell over"))
    run = node.play()
    assert run.status == "failed", run.stdout
    message = " ".join(" ".join(run.failures).split())
    for needle in ("The Proxmox API answered 500", "Already done in this run before the fault",
                   "POST /nodes/pve1/lxc (the create of container 120)", "converges"):
        assert needle in message, message
    assert "Nothing was changed" not in message, message
    assert node.pve.ct(VMID) is not None
    node.fake.run(lambda pve: pve.failures.clear())
    assert_converged(node, node.play())


def test_a_host_without_gpus_needs_neither_password_nor_pct(node, tmp_path):
    empty = tmp_path / "no-gpu-root"
    empty.mkdir()
    run = node.play("--check", "-e", json.dumps({"lxc_container_device_root": str(empty),
                                                 "lxc_container_expected_gpus": None}), password=False, pct=False)
    assert run.status == "successful", run.stdout
    assert "gets no GPU passthrough" in run.stdout
    assert writes(run) == [] and node.pve.ct(VMID) is None


def test_an_existing_container_of_ours_gets_net0_without_the_old_gateway(node):
    node.add_ct(status="running", config=dict(PROD_DB, hostname="sglang1", rootfs="local-lvm:vm-120-disk-0,size=200G"))
    run = node.play()
    assert run.status == "successful", run.stdout
    net0 = node.pve.ct(VMID).config["net0"]
    assert "gw=" not in net0 and "bridge=vmbr0" in net0 and "hwaddr=BC:24:11:00:00:09" in net0, net0
    assert NODE == "pve1"


@pytest.mark.parametrize("mode", [[], ["--check"]], ids=["real", "check"])
def test_a_read_only_conf_file_is_named_in_check_mode_as_in_the_real_run(node, mode):
    from ro_mount import read_only

    node.add_ct(status="stopped", config=OURS)
    with read_only(node.confdir):
        message = refused(node, "-e", "lxc_container_passthrough=raw", "-e", "lxc_container_cgroup=v2", *mode)
    for needle in (f"cannot write {node.confdir}/120.conf: its file system is read-only", "pvecm status",
                   "Nothing was written"):
        assert needle in message, message
