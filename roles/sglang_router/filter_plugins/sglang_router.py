"""Filter: the gateway's replicas from the inventory (it reads hostvars, which only the controller has).

Everything else about the gateway's settings is the smg_flags module's (module_utils/sglang_router_settings.py).
A plain typed function (tests/test_sglang_router.py calls it); the filter is a thin name.
"""

from __future__ import annotations

from typing import Any, Mapping

WILDCARDS = {"0.0.0.0", "::", "[::]", ""}


def decided(hv: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the sglang_server role decided for this host in this run (its registered
    sglang_server_validated.effective: listen address, port, node rank), or {} where it has not."""
    effective = (hv.get("sglang_server_validated") or {}).get("effective") or {}
    return effective if "port" in effective and "node_rank" in effective else {}


def replicas_from(hostnames: list[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each replica's name, address and port, from what its server role decided in this run.

    The address: sglang_router_worker_address, else the address its server listens on (when not
    a wildcard), else ansible_host. The port and the node rank: the server's decision, with no
    guess; a host with none is listed as undecided, which the smg_flags module names. A multi-node
    replica is one worker: its node of rank 0, the one that serves the API.
    """
    replicas = []
    for name in hostnames:
        hv = hostvars[name]
        effective = decided(hv)
        if effective and int(effective["node_rank"]) > 0:
            continue
        listen = str(effective.get("host", "") or "")
        address = hv.get("sglang_router_worker_address") or (listen if listen not in WILDCARDS else "") \
            or hv.get("ansible_host") or ""
        replica: dict[str, Any] = {"name": str(name), "address": str(address), "port": effective.get("port")}
        if not effective:
            replica["undecided"] = True
        replicas.append(replica)
    return replicas


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_router_replicas_from": lambda hosts, hostvars: replicas_from(list(hosts), hostvars)}
