"""Filters: the gateway's replicas from the inventory, its settings checked once, its unit escaped.

Plain typed functions (tests/test_sglang_router.py calls them); the filters are thin names.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

WILDCARDS = {"0.0.0.0", "::", "[::]", ""}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$")


def node_rank(name: str, hv: Mapping[str, Any], groups: Mapping[str, list[str]]) -> int:
    """The host's node rank in a multi-node replica (0 on one node), as the sglang_server role decides it:
    its published sglang_server_validated.effective, else sglang_server_node_rank, else its place in
    sglang_server_node_group."""
    effective = (hv.get("sglang_server_validated") or {}).get("effective") or {}
    if "node_rank" in effective:
        return int(effective["node_rank"])
    if int(hv.get("sglang_server_nnodes", 1) or 1) <= 1:
        return 0
    if "sglang_server_node_rank" in hv:
        return int(hv["sglang_server_node_rank"])
    members = list(groups.get(str(hv.get("sglang_server_node_group", "")), []))
    return members.index(name) if name in members else 0


def replicas_from(hostnames: list[str], hostvars: Mapping[str, Any],
                  groups: Mapping[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Each replica's name, address and port, from its host vars.

    The address: sglang_router_worker_address, else the address its server listens on
    (sglang_server_validated.effective.host, when not a wildcard), else ansible_host. The port:
    sglang_server_validated.effective.port, else sglang_server_port, else SGLang's 30000.
    A multi-node replica is one worker: its node of rank 0, the one that serves the API.
    """
    replicas = []
    for name in hostnames:
        hv = hostvars[name]
        if node_rank(str(name), hv, groups or {}) > 0:
            continue
        effective = (hv.get("sglang_server_validated") or {}).get("effective") or {}
        listen = str(effective.get("host", "") or "")
        address = hv.get("sglang_router_worker_address") or (listen if listen not in WILDCARDS else "") \
            or hv.get("ansible_host") or ""
        port = effective.get("port") or hv.get("sglang_server_port") or 30000
        replicas.append({"name": str(name), "address": str(address), "port": port})
    return replicas


def _address_problem(address: str) -> str:
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        ipaddress.ip_address(bare)
        return ""
    except ValueError:
        pass
    if HOSTNAME.match(bare):
        return ""
    return "is not an IP address or a host name"


def replica_problems(replicas: list[dict[str, Any]]) -> list[str]:
    """Every problem of the replica list at once, naming the replica and the fix."""
    problems: list[str] = []
    seen: dict[tuple[str, int], str] = {}
    names: set[str] = set()
    if not replicas:
        problems.append("no replicas: the group sglang_router_replica_group names has no hosts "
                        "(expected one host per SGLang replica, e.g. the group sglang_containers)")
    for replica in replicas:
        name = str(replica.get("name", ""))
        address = str(replica.get("address", "") or "")
        port = replica.get("port")
        if name in names:
            problems.append(f"replica {name} is listed twice; list each replica once")
        names.add(name)
        if not address:
            problems.append(f"replica {name} has no address: set sglang_router_worker_address (or ansible_host) "
                            "in its host vars to the address the gateway reaches it on")
            continue
        why = _address_problem(address)
        if why:
            problems.append(f"replica {name}'s address {address!r} {why}")
            continue
        try:
            number = int(port)
        except (TypeError, ValueError):
            problems.append(f"replica {name}'s port {port!r} is not a number (expected 1-65535)")
            continue
        if isinstance(port, bool) or not 1 <= number <= 65535 or str(port).strip() != str(number):
            problems.append(f"replica {name}'s port {port!r} is out of range (expected 1-65535)")
            continue
        key = (address.strip("[]").lower(), number)
        if key in seen:
            problems.append(f"replicas {seen[key]} and {name} are the same worker {address}:{number}; "
                            "each replica needs its own address and port")
        else:
            seen[key] = name
    return problems


def worker_url(replica: Mapping[str, Any]) -> str:
    address = str(replica["address"])
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"http://{address}:{int(replica['port'])}"


def settings_problems(settings: Mapping[str, Any]) -> list[str]:
    """The gateway's own settings and its replicas, every problem at once."""
    problems = replica_problems(list(settings["sglang_router_replicas"]))
    ports = {}
    for key in ("sglang_router_port", "sglang_router_metrics_port"):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            problems.append(f"{key} is {value!r}: expected a port 1-65535")
        elif value in ports:
            problems.append(f"{key} and {ports[value]} are both {value}: the metrics need their own port")
        else:
            ports[value] = key
    for key in ("sglang_router_host", "sglang_router_metrics_host"):
        value = str(settings[key])
        if value not in WILDCARDS and _address_problem(value):
            problems.append(f"{key} is {value!r}: expected one address or host name")
    if not str(settings["sglang_router_health_check_endpoint"]).startswith("/"):
        problems.append(f"sglang_router_health_check_endpoint is {settings['sglang_router_health_check_endpoint']!r}: "
                        "expected a path starting with /, such as /health")
    for key, value in settings["sglang_router_extra_flags"].items():
        if str(key).lstrip("-") in ("api-key", "worker-urls"):
            problems.append(f"sglang_router_extra_flags sets {key}: use "
                            f"{'sglang_router_api_key (kept out of the unit)' if 'api' in key else 'the inventory (sglang_router_replica_group)'}")
        for text in (str(key), str(value)):
            if CONTROL.search(text):
                problems.append(f"sglang_router_extra_flags[{key!r}] contains a control character")
    return problems


def router_flags(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The one set of flags the unit runs: the role's variables, then the user's extra flags."""
    flags: dict[str, Any] = {
        "host": settings["sglang_router_host"],
        "port": settings["sglang_router_port"],
        "worker-urls": [worker_url(r) for r in settings["sglang_router_replicas"]],
        "policy": settings["sglang_router_policy"],
        "health-check-endpoint": settings["sglang_router_health_check_endpoint"],
        "health-check-interval-secs": settings["sglang_router_health_check_interval_secs"],
        "health-check-timeout-secs": settings["sglang_router_health_check_timeout_secs"],
        "health-failure-threshold": settings["sglang_router_health_failure_threshold"],
        "health-success-threshold": settings["sglang_router_health_success_threshold"],
        "prometheus-host": settings["sglang_router_metrics_host"],
        "prometheus-port": settings["sglang_router_metrics_port"],
    }
    flags.update({str(k).lstrip("-"): v for k, v in settings["sglang_router_extra_flags"].items()})
    return flags


def _checked(settings: Mapping[str, Any]) -> list[str]:
    return settings_problems(settings)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_router_replicas_from": lambda hosts, hostvars, groups=None: replicas_from(list(hosts), hostvars, groups),
            "sglang_router_problems": _checked,
            "sglang_router_flags": router_flags,
            "sglang_router_worker_url": worker_url,
        }
