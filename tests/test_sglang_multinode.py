"""Multi-node tensor parallelism in sglang_server: --nnodes, --node-rank, --dist-init-addr per host
from the inventory, the NCCL and Gloo settings, every bad input refused with nothing changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_playbook, tree_digest
from test_playbook_validate import unpack_flag_sources

from ansible.module_utils import sglang_settings as ss

ROLE = REPO / "roles" / "sglang_server"
PROFILE = {"model-path": "/models/GLM-5-NVFP4", "tp-size": 16, "host": "0.0.0.0", "port": 30000}
PAIR = {
    "sglang_server_profile": PROFILE, "sglang_autotune_result.server_args": {}, "sglang_server_extra_flags": {},
    "sglang_server_environment": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    "sglang_server_nnodes": 2, "sglang_server_node_rank": 1, "sglang_server_dist_init_addr": "10.0.0.1:20000",
    "sglang_server_nccl_socket_ifname": "enp65s0f0", "sglang_server_gloo_socket_ifname": "enp65s0f0",
    "sglang_server_nccl_ib_disable": True, "sglang_server_nccl_p2p_level": "SYS",
}
ONE = {**PAIR, "sglang_server_nnodes": 1, "sglang_server_node_rank": 0, "sglang_server_dist_init_addr": "",
       "sglang_server_nccl_socket_ifname": "", "sglang_server_gloo_socket_ifname": "",
       "sglang_server_profile": {**PROFILE, "tp-size": 8}}


def test_two_nodes_render_their_rank_and_the_meeting_point():
    assert ss.server_problems(PAIR) == []
    effective = ss.effective(PAIR)
    assert {k: effective["flags"][k] for k in ("nnodes", "node-rank", "dist-init-addr")} == {
        "nnodes": 2, "node-rank": 1, "dist-init-addr": "10.0.0.1:20000"}
    assert (effective["nnodes"], effective["node_rank"], effective["tp_size"], effective["local_tp_size"]) == (2, 1, 16, 8)
    assert effective["environment"] == {"NCCL_SOCKET_IFNAME": "enp65s0f0",
                                        "GLOO_SOCKET_IFNAME": "enp65s0f0", "NCCL_IB_DISABLE": "1",
                                        "NCCL_P2P_LEVEL": "SYS"}


def test_one_node_renders_no_node_flags_and_the_pcie_defaults():
    effective = ss.effective(ONE)
    assert not {"nnodes", "node-rank", "dist-init-addr"} & set(effective["flags"])
    assert (effective["nnodes"], effective["node_rank"], effective["local_tp_size"]) == (1, 0, 8)
    assert effective["environment"] == {"NCCL_IB_DISABLE": "1",
                                        "NCCL_P2P_LEVEL": "SYS"}
    off = ss.effective({**ONE, "sglang_server_nccl_ib_disable": False, "sglang_server_nccl_p2p_level": ""})
    assert off["environment"] == {"NCCL_IB_DISABLE": "0"}


BAD = [
    ({"sglang_server_dist_init_addr": ""}, "--node-rank 1 of 2 nodes needs --dist-init-addr: set sglang_server_dist_init_addr"),
    ({"sglang_server_node_rank": 0, "sglang_server_dist_init_addr": None}, "--node-rank 0 of 2 nodes needs --dist-init-addr"),
    ({"sglang_server_node_rank": 2}, "sglang_server_node_rank must be an integer 0-1 (sglang_server_nnodes is 2), got 2"),
    ({"sglang_server_node_rank": "one"}, "sglang_server_node_rank must be an integer 0-1"),
    ({"sglang_server_nnodes": 0}, "sglang_server_nnodes must be an integer >= 1, got 0"),
    ({"sglang_server_nnodes": 1}, "sglang_server_node_rank must be an integer 0-0 (sglang_server_nnodes is 1), got 1"),
    ({"sglang_server_nnodes": 1, "sglang_server_node_rank": 0}, "sglang_server_dist_init_addr is set but sglang_server_nnodes is 1"),
    ({"sglang_server_dist_init_addr": "10.0.0.1"}, "sglang_server_dist_init_addr must be HOST:PORT of the node of rank 0"),
    ({"sglang_server_dist_init_addr": "10.0.0.1:0"}, "got '10.0.0.1:0'"),
    ({"sglang_server_dist_init_addr": "head node:20000"}, "got 'head node:20000'"),
    ({"sglang_server_dist_init_addr": "[fd00::1]:70000"}, "got '[fd00::1]:70000'"),
    ({"sglang_server_dist_init_addr": "tcp://10.0.0.1:20000"}, "got 'tcp://10.0.0.1:20000'"),
    ({"sglang_server_nnodes": 3}, "tp-size 16 x pp-size 1 is not a multiple of sglang_server_nnodes 3"),
    ({"sglang_server_nccl_socket_ifname": ""}, "sglang_server_nccl_socket_ifname is empty: across nodes"),
    ({"sglang_server_nccl_socket_ifname": "eth0 eth1"}, "sglang_server_nccl_socket_ifname must be a network interface name"),
    ({"sglang_server_gloo_socket_ifname": "x" * 16}, "sglang_server_gloo_socket_ifname must be a network interface name"),
    ({"sglang_server_nccl_p2p_level": "NVLINK"}, "sglang_server_nccl_p2p_level must be one of LOC, NVL, PIX, PXB, PHB, SYS"),
    ({"sglang_server_nccl_ib_disable": "yes"}, "sglang_server_nccl_ib_disable must be true or false, got 'yes'"),
    ({"sglang_server_environment": {"NCCL_IB_DISABLE": "0"}}, "sglang_server_environment sets NCCL_IB_DISABLE; set sglang_server_nccl_ib_disable"),
    ({"sglang_server_environment": {"NCCL_SOCKET_IFNAME": "eth0"}}, "set sglang_server_nccl_socket_ifname instead"),
    ({"sglang_server_extra_flags": {"node-rank": 1}}, "sglang_server_extra_flags['node-rank']: --node-rank is rendered from sglang_server_node_rank"),
    ({"sglang_server_extra_flags": {"--nnodes": 2}}, "--nnodes is rendered from sglang_server_nnodes"),
    ({"sglang_server_profile": {**PROFILE, "dist-init-addr": "10.0.0.9:1"}}, "sglang_server_profile['dist-init-addr']: --dist-init-addr is rendered"),
    ({"sglang_server_extra_flags": {"nccl-init-addr": "10.0.0.9:1"}}, "--nccl-init-addr is rendered from sglang_server_dist_init_addr"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[json.dumps(c)[:50] for c, _ in BAD])
def test_bad_multinode_settings_are_refused(change, message):
    found = ss.server_problems({**PAIR, **change})
    assert any(message in p for p in found), found
    with pytest.raises(ss.SettingsError):
        ss.effective({**PAIR, **change})


def pair_inventory(tmp_path: Path, **node_b: object) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"children": {"sglang_containers": {"children": {"glm5_pair": {
        "hosts": {"node-a": {**local, "ansible_host": "10.0.0.1"}, "node-b": {**local, "ansible_host": "10.0.0.2", **node_b}},
        "vars": {"sglang_server_nnodes": 2, "sglang_server_node_group": "glm5_pair", "sglang_server_tp_size": 16,
                 "sglang_server_nccl_socket_ifname": "enp65s0f0"}}}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def validate_pair(tmp_path: Path, **node_b: object):
    package = unpack_flag_sources("0.5.23", tmp_path / "tree")
    out = tmp_path / "review"
    out.mkdir()
    (tmp_path / "runner").mkdir()
    before = tree_digest(package.parent, out)
    run = run_playbook(tmp_path / "runner", "validate.yml", [
        "-e", f"sglang_package_dir={package}", "-e", f"sglang_server_unit_out={out}/sglang.service"],
        inventory=str(pair_inventory(tmp_path, **node_b)))
    return run, package, out, before


def test_inventory_gives_each_node_its_rank_and_rank_0_as_the_meeting_point(tmp_path):
    run, *_ = validate_pair(tmp_path)
    assert run.status == "successful", run.stdout[-3000:]
    flat = " ".join(run.stdout.split())
    for rank in (0, 1):   # both nodes, each with its own rank, the address of node-a
        assert f"--nnodes 2 --node-rank {rank} --dist-init-addr 10.0.0.1:20000" in flat, flat[-3000:]


@pytest.mark.parametrize(("node_b", "message"), [
    ({"sglang_server_dist_init_addr": ""}, "--node-rank 1 of 2 nodes needs --dist-init-addr"),
    ({"sglang_server_node_rank": 2}, "sglang_server_node_rank must be an integer 0-1"),
    ({"sglang_server_dist_init_addr": "10.0.0.1"}, "sglang_server_dist_init_addr must be HOST:PORT"),
    ({"sglang_server_nccl_socket_ifname": ""}, "sglang_server_nccl_socket_ifname is empty"),
])
def test_a_bad_node_is_refused_through_ansible_with_nothing_changed(tmp_path, node_b, message):
    run, package, out, before = validate_pair(tmp_path, **node_b)
    assert run.status == "failed"
    assert any(message in failure for failure in run.failures), run.failures
    assert tree_digest(package.parent, out) == before


def test_every_node_of_the_replica_must_be_in_the_play(tmp_path):
    package = unpack_flag_sources("0.5.23", tmp_path / "tree")
    (tmp_path / "runner").mkdir()
    run = run_playbook(tmp_path / "runner", "validate.yml", ["-e", f"sglang_package_dir={package}", "--limit", "node-b"],
                       inventory=str(pair_inventory(tmp_path)))
    assert run.status == "failed"
    assert any("node-a is not in this play" in failure for failure in run.failures), run.failures


def test_nodes_of_rank_1_and_up_start_before_rank_0_and_restart_together():
    tasks = yaml.safe_load((ROLE / "tasks" / "service.yml").read_text())
    names = [task["name"] for task in tasks]
    workers = names.index("Start the nodes of rank 1 and up, or restart them once with their replica")
    first = [i for i, task in enumerate(tasks) if "rank == 0" in str(task.get("when", ""))]
    assert workers < min(first) and len(first) == 1
    # Each node's converging call said what it would need (sglang_server_validated.service, the
    # module leaves a multi-node replica's start to these tasks); one restart of any restarts all.
    assert tasks[workers]["systemd_current"]["restart"] == tasks[first[0]]["systemd_current"]["restart"] \
        == "{{ sglang_server_group_restarts }}"
    group = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["sglang_server_group_restarts"]
    assert "'sglang_server_validated', 'service', 'action'" in group


def test_the_rolling_upgrade_refuses_a_multi_node_replica_before_touching_anything(tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"children": {
        "sglang_gateway": {"hosts": {"gw": local}},
        "sglang_containers": {"hosts": {"one": {"ansible_host": "10.0.0.5"}}, "children": {"glm5_pair": {
            "hosts": {"node-a": {"ansible_host": "10.0.0.1"}, "node-b": {"ansible_host": "10.0.0.2"}},
            "vars": {"sglang_server_nnodes": 2, "sglang_server_node_group": "glm5_pair"}}}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    (tmp_path / "runner").mkdir()
    before = tree_digest(tmp_path / "inventory.yml")
    run = run_playbook(tmp_path / "runner", "rolling_upgrade.yml", ["-e", "sglang_version=0.5.23"], inventory=str(path))
    assert run.status == "failed"
    assert any("node-a, node-b are nodes of a multi-node replica" in f for f in run.failures), run.failures
    assert "Take the replica out" not in run.stdout and tree_digest(tmp_path / "inventory.yml") == before
