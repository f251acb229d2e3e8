"""The Proxmox container request checked against PVE's own formats before any API request.

Pure functions (pve_format, pve_container); the playbook's way in is tests/test_proxmox_refusals.py.
"""

from __future__ import annotations

import pytest

from ansible.module_utils.pve_api import api_host_problem
from ansible.module_utils.pve_container import (
    OWNER_TAG,
    Request,
    describe,
    existing_problems,
    hostname_problem,
    merged,
    plan_update,
    request_problems,
    split_disk,
    vmid_of,
)
from ansible.module_utils.pve_format import MP_FORMAT, NET_FORMAT, property_problems


def request(**changes) -> Request:
    values = dict(vmid=120, hostname="sglang1", ostemplate="local:vztmpl/x.tar.zst", disk="local-lvm:200",
                  cores=32, memory=262144, swap=0, netif={"net0": "name=eth0,bridge=vmbr0,ip=dhcp"},
                  features=["nesting=1"], unprivileged=True, onboot=True)
    values.update(changes)
    return Request(**values)


def test_the_default_request_passes():
    assert request_problems(request()) == []


@pytest.mark.parametrize(("changes", "needle"), [
    ({"netif": {"net0": "name=eth0,bridge=vmbr0,ip=dhcp", "unprivileged": "0"}}, "the key 'unprivileged'"),
    ({"netif": {"description": "x\ny"}}, "the key 'description'"),
    ({"netif": {"tags": "a"}}, "the key 'tags'"),
    ({"netif": {"protection": "1"}}, "the key 'protection'"),
    ({"netif": {"net32": "name=eth0"}}, "net0 to net31"),
    ({"netif": {"net0": "name=eth0,bridge=vmbr0,ip=dhcp\nprotection: 1"}}, "control character(s) 0x0a"),
    ({"netif": {"net0": "name=eth0,bridge=vmbr0,rate=1,firewall=1,tag=5000"}}, "tag='5000' is not a VLAN tag"),
    ({"netif": {"net0": "bridge=vmbr0,ip=dhcp"}}, "lacks name"),
    ({"netif": {"net0": "name=eth0,ip=10.0.0.2"}}, "ip='10.0.0.2' is not dhcp, manual or an IPv4 CIDR"),
    ({"netif": {"net0": "name=eth0,volume=x"}}, "'volume' is not a key PVE takes there"),
    ({"disk": "ro=1,mountoptions=noexec,quota=1,volume=local-lvm:200"}, "is not a PVE storage id"),
    ({"disk": "local-lvm:0"}, "lxc_container_disk_gb='0' is not a size in GB"),
    ({"disk": "local-lvm:-1"}, "lxc_container_disk_gb='-1'"),
    ({"disk": "local-lvm: 200"}, "lxc_container_disk_gb=' 200'"),
    ({"cores": 0}, "lxc_container_cores=0 is out of range"),
    ({"memory": 0}, "lxc_container_memory_mb=0 is out of range"),
    ({"swap": -1}, "lxc_container_swap_mb=-1 is out of range"),
    ({"hostname": "sglang-"}, "is not a host name"),
    ({"features": ["nesting=1,unprivileged=0"]}, "'unprivileged' is not a key"),
])
def test_what_pve_would_refuse_or_read_otherwise_is_named(changes, needle):
    problems = request_problems(request(**changes))
    assert any(needle in problem for problem in problems), problems


@pytest.mark.parametrize("value", ["120 ", " 120", "+120", "0120", "0120x", "12 0", "99", "1000000000", True, "١٢٠"])
def test_a_vmid_that_is_not_digits_only_is_refused(value):
    with pytest.raises(ValueError, match="digits only"):
        vmid_of(value)
    assert vmid_of("120") == vmid_of(120) == 120


def test_split_disk_and_hostnames():
    assert split_disk("local-lvm:200") == ("local-lvm", 200)
    assert hostname_problem("sglang-1") is None and hostname_problem("-x") and hostname_problem("a" * 64)


def test_an_mp_value_uses_the_same_property_check():
    assert property_problems("mp0", "/srv/models,mp=/models,ro=1,backup=0", MP_FORMAT, default_key="volume") == []
    assert property_problems("mp0", "/srv/models,mp=/models,ro=2", MP_FORMAT, default_key="volume")
    assert property_problems("mp0", "/srv/models,ro=1", MP_FORMAT, default_key="volume")  # no mp
    assert property_problems("net0", "name=eth0,ip=10.0.0.2/24,gw=10.0.0.1,hwaddr=BC:24:11:00:00:01",
                             NET_FORMAT) == []


def test_merged_net_keeps_only_the_mac_and_type_of_the_old_value():
    old = "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:00:00:01,ip=10.9.9.9/24,gw=10.9.9.1,type=veth,tag=7"
    new = props_of(merged("net0", "name=eth0,bridge=vmbr0,ip=dhcp", old))
    assert new == {"name": "eth0", "bridge": "vmbr0", "ip": "dhcp", "hwaddr": "BC:24:11:00:00:01", "type": "veth"}


def props_of(value: str) -> dict:
    return dict(item.split("=", 1) for item in value.split(","))


def test_someone_elses_container_is_refused_naming_what_is_there():
    config = {"hostname": "prod-db", "description": "production database,\ndo not touch",
              "rootfs": "local-lvm:vm-120-disk-0,size=200G", "unprivileged": 1}
    (message,) = existing_problems(request(), config)
    for needle in ("hostname 'prod-db'", "'production database, do not touch'", "not 'sglang1'",
                   "pvesh get /cluster/nextid", "lxc_container_name='prod-db'", "Nothing was changed"):
        assert needle in message, message


def test_create_only_settings_that_differ_are_each_named_with_the_way_out():
    config = {"hostname": "sglang1", "rootfs": "local-lvm:vm-120-disk-0,size=8G", "tags": OWNER_TAG}
    (message,) = existing_problems(request(), config)
    for needle in ("is privileged but lxc_container_unprivileged=true", "cannot change this after creation",
                   "pct restore 120 BACKUP --unprivileged 1", "rootfs is 8G", "pct resize 120 rootfs 200G",
                   "lxc_container_disk_gb=8"):
        assert needle in message, message
    assert existing_problems(request(), dict(config, unprivileged=1, rootfs="local-lvm:vm-120-disk-0,size=1T")) == []


OURS = {"hostname": "sglang1", "cores": "32", "memory": "262144", "swap": "0", "onboot": "1",
        "features": "nesting=1", "unprivileged": 1, "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp",
        "rootfs": "local-lvm:vm-120-disk-0,size=200G"}


def test_a_create_carries_the_owner_tag():
    assert OWNER_TAG == "sglang-deploy"
    assert request().create_payload()["tags"] == OWNER_TAG


def test_our_hostname_without_the_owner_tag_is_refused_naming_it_and_the_way_to_adopt():
    config = dict(OURS, tags="prod;backup", description="made by hand,\nkeep")
    (message,) = existing_problems(request(), config)
    for needle in ("Container 120 already exists with hostname 'sglang1' but without the tag 'sglang-deploy'",
                   "(its tags: 'prod;backup'; its description: 'made by hand, keep')", "not made by this role",
                   "-e lxc_container_adopt=true", "its other tags kept", "pvesh get /cluster/nextid",
                   "Nothing was changed"):
        assert needle in message, message
    (bare,) = existing_problems(request(), OURS)
    assert "creates (its tags: none): it was not made by this role" in bare, bare
    # A tag that only contains ours, or ours among others in any case or separator, is ours.
    assert existing_problems(request(), dict(OURS, tags="sglang-deploy-old")) != []
    for tags in ("sglang-deploy", "prod;sglang-deploy", "SGLang-Deploy", "prod, sglang-deploy backup"):
        assert existing_problems(request(), dict(OURS, tags=tags)) == [], tags


def test_adopt_does_not_override_another_hostname_or_create_only_settings():
    (message,) = existing_problems(request(adopt=True), dict(OURS, hostname="prod-db"))
    assert "hostname 'prod-db'" in message and "not 'sglang1'" in message and "adopt" not in message, message
    (message,) = existing_problems(request(adopt=True), dict(OURS, unprivileged=0))
    assert "is privileged but lxc_container_unprivileged=true" in message, message


def test_adoption_adds_the_tag_to_the_users_own_and_an_owned_container_plans_nothing():
    config = dict(OURS, tags="prod;backup")
    assert existing_problems(request(adopt=True), config) == []
    update = plan_update(request(adopt=True), config)
    assert update.set == {"tags": "prod;backup;sglang-deploy"}, update.set
    assert update.before == {"tags": "prod;backup"}
    assert "tags: prod;backup;sglang-deploy" in describe(update.set)
    assert plan_update(request(adopt=True), dict(OURS)).set == {"tags": "sglang-deploy"}
    # Once tagged (PVE sorts and lowercases), nothing more, adopt or not; other settings keep their rule.
    for tags in ("backup;prod;sglang-deploy", "SGLANG-DEPLOY"):
        assert not plan_update(request(), dict(OURS, tags=tags)).changed
        assert not plan_update(request(adopt=True), dict(OURS, tags=tags)).changed
    assert plan_update(request(cores=16), dict(OURS, tags=OWNER_TAG)).set == {"cores": "16"}


@pytest.mark.parametrize(("host", "needle"), [
    ("https://127.0.0.51:8006", "lxc_container_api_host=127.0.0.51 and lxc_container_api_port=8006"),
    ("127.0.0.51:9999", "lxc_container_api_host=127.0.0.51 and lxc_container_api_port=9999"),
    ("pve1/api2", "is not a host name or address"),
    ("", "is not a host name or address"),
])
def test_an_api_host_url_or_host_port_is_named(host, needle):
    message = api_host_problem(host)
    assert message and needle in message, message
    for good in ("pve1.example.internal", "127.0.0.51", "::1", "[::1]"):
        assert api_host_problem(good) is None


def test_a_403_only_root_at_pam_may_pass_says_so_and_not_grant():
    import proxmoxer
    from ansible.module_utils.pve_api import ApiLogin, explain

    login = ApiLogin(host="pve1", port=8006, user="root@pam", token_id="ansible", token_secret="s3cr3t")
    exc = proxmoxer.ResourceException(403, "Forbidden", "Permission check failed (configuring device passthrough "
                                      "is only allowed for root@pam)")
    message = explain(exc, login, "PUT /nodes/pve1/lxc/120/config")
    assert "root@pam alone" in message and "lxc_container_api_password" in message, message
    assert "Grant the privilege" not in message


def test_a_500_on_the_ticket_is_not_called_a_refused_password():
    from proxmoxer import AuthenticationError
    from ansible.module_utils.pve_api import ApiLogin, explain

    login = ApiLogin(host="pve1", port=8006, user="root@pam", password="pw")
    message = explain(AuthenticationError("Couldn't authenticate user: root@pam to https://pve1:8006/api2/json"
                                          "/access/ticket code: 500"), login, "POST /access/ticket")
    assert "answered 500" in message and "refused" not in message and "401" not in message, message
    assert "(401)" in explain(AuthenticationError("... code: 401"), login, "POST /access/ticket")
