"""The gateway's settings checked, and what they decide: smg's flags, its workers, its local URL.

Plain typed functions on the smg_flags module's options (tests/test_sglang_router.py calls
them). The messages name the role's variables (``sglang_router_<option>``): that is what a user
sets. Types and choices are the module's argument_spec's to check; ranges, addresses and the
replicas are checked here, once, every problem at once.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Mapping

from ansible.module_utils.systemd_unit_name import unit_name_problem

WILDCARDS = {"0.0.0.0", "::", "[::]", ""}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$")
def address_problem(address: str) -> str:
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        ipaddress.ip_address(bare)
        return ""
    except ValueError:
        pass
    if HOSTNAME.match(bare):
        return ""
    return "is not an IP address or a host name"


def replica_problems(replicas: list[Mapping[str, Any]]) -> list[str]:
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
        why = address_problem(address)
        if why:
            problems.append(f"replica {name}'s address {address!r} {why}")
            continue
        try:
            number = int(port)  # type: ignore[arg-type]
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


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def worker_url(replica: Mapping[str, Any]) -> str:
    return f"http://{_bracketed(str(replica['address']))}:{int(replica['port'])}"


def local_url(host: str, port: int) -> str:
    """The gateway as its own host reaches it: a wildcard address by its loopback."""
    reach = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host in ("::", "[::]") else _bracketed(host)
    return f"http://{reach}:{port}"


def settings_problems(settings: Mapping[str, Any]) -> list[str]:
    """The gateway's own settings and its replicas (the module's options), every problem at once."""
    problems = replica_problems(list(settings["replicas"]))
    name = unit_name_problem(settings["unit_name"], "sglang_router_unit_name", "sglang-router")
    problems += [name] if name else []
    ports: dict[int, str] = {}
    for option in ("port", "metrics_port"):
        key, value = f"sglang_router_{option}", settings[option]
        if isinstance(value, bool) or not 1 <= value <= 65535:
            problems.append(f"{key} is {value!r}: expected a port 1-65535")
        elif value in ports:
            problems.append(f"{key} and {ports[value]} are both {value}: the metrics need their own port")
        else:
            ports[value] = key
    for option in ("host", "metrics_host"):
        value = str(settings[option])
        if value not in WILDCARDS and address_problem(value):
            problems.append(f"sglang_router_{option} is {value!r}: expected one address or host name")
    if not str(settings["health_check_endpoint"]).startswith("/"):
        problems.append(f"sglang_router_health_check_endpoint is {settings['health_check_endpoint']!r}: "
                        "expected a path starting with /, such as /health")
    for key, value in settings["extra_flags"].items():
        if str(key).lstrip("-") in ("api-key", "worker-urls"):
            problems.append(f"sglang_router_extra_flags sets {key}: use "
                            f"{'sglang_router_api_key (kept out of the unit)' if 'api' in key else 'the inventory (sglang_router_replica_group)'}")
        for text in (str(key), str(value)):
            if CONTROL.search(text):
                problems.append(f"sglang_router_extra_flags[{key!r}] contains a control character")
    return problems


def gateway_flags(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The one set of flags the unit runs: the role's options, the workers, then the user's extra flags."""
    flags: dict[str, Any] = {
        "host": settings["host"],
        "port": settings["port"],
        "worker-urls": [worker_url(r) for r in settings["replicas"]],
        "policy": settings["policy"],
        "health-check-endpoint": settings["health_check_endpoint"],
        "health-check-interval-secs": settings["health_check_interval_secs"],
        "health-check-timeout-secs": settings["health_check_timeout_secs"],
        "health-failure-threshold": settings["health_failure_threshold"],
        "health-success-threshold": settings["health_success_threshold"],
        "prometheus-host": settings["metrics_host"],
        "prometheus-port": settings["metrics_port"],
    }
    flags.update({str(k).lstrip("-"): v for k, v in settings["extra_flags"].items()})
    return flags


def decided(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What settings without problems decide: flags, workers (the flags' own --worker-urls, which
    extra_flags may not set), by_host, url."""
    flags = gateway_flags(settings)
    workers = list(flags["worker-urls"])
    return {"flags": flags, "workers": workers,
            "by_host": dict(zip((str(r["name"]) for r in settings["replicas"]), workers)),
            "url": local_url(str(settings["host"]), int(settings["port"]))}
