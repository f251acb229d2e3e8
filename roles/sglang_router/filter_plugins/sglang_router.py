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


def decided(hv: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the sglang_server role decided for this host in this run (its registered
    sglang_server_validated.effective: listen address, port, node rank), or {} where it has not."""
    effective = (hv.get("sglang_server_validated") or {}).get("effective") or {}
    return effective if "port" in effective and "node_rank" in effective else {}


def replicas_from(hostnames: list[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each replica's name, address and port, from what its server role decided in this run.

    The address: sglang_router_worker_address, else the address its server listens on (when not
    a wildcard), else ansible_host. The port and the node rank: the server's decision, with no
    guess; a host with none is listed as undecided, which replica_problems names. A multi-node
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
        if replica.get("undecided"):
            problems.append(
                f"replica {name}: this run has not decided where its server listens (its "
                "sglang_server_validated.effective is not set: the sglang_server role did not run on it, "
                "failed, or --limit left it out). Deploy the replicas first (playbooks/fleet.yml does), or "
                "run their settings check (role sglang_server, tasks_from: settings) in a play before the "
                "gateway, as playbooks/rolling_upgrade.yml does")
            continue
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
            "sglang_router_replicas_from": lambda hosts, hostvars: replicas_from(list(hosts), hostvars),
            "sglang_router_problems": _checked,
            "sglang_router_flags": router_flags,
            "sglang_router_worker_url": worker_url,
        }
