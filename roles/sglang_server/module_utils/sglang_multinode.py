"""Multi-node tensor parallelism: one SGLang replica over several nodes (plain, tested).

What SGLang 0.5.23 does with it (read in its wheel): every node runs the same
command with its own --node-rank; torch.distributed.init_process_group meets
at --dist-init-addr (tcp://HOST:PORT, the store of global rank 0, on the node
of rank 0) and waits there, bounded by --dist-timeout, until every rank has
joined: no start order is needed, only that all nodes start within that time.
Only rank 0 serves the API (entrypoints/http_server.py returns early for
node_rank >= 1); the other nodes answer /health and /health_generate from a
dummy server once their schedulers are ready (utils/common.py,
launch_dummy_health_check_server). SGLang asserts that tp_size * pp_size is a
multiple of nnodes (arg_groups/validation_hook.py).

The role renders --nnodes, --node-rank and --dist-init-addr from its own
variables only, never from flag overrides (one variable per fact), and the
NCCL and Gloo interface settings into the environment file.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Mapping, Optional

# Flags this module owns (SGLang's spellings, --nccl-init-addr an alias of --dist-init-addr).
OWNED_FLAGS = {"nnodes": "sglang_server_nnodes", "node-rank": "sglang_server_node_rank",
               "dist-init-addr": "sglang_server_dist_init_addr", "nccl-init-addr": "sglang_server_dist_init_addr"}
# NCCL_P2P_LEVEL's values (NCCL's documentation).
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
# NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: interface names (Linux: at most 15 characters),
# comma-separated, NCCL's ^ (exclude) or = (exact) prefix allowed.
IFNAME_RE = re.compile(r"[=^]?[A-Za-z0-9_.:@-]{1,15}(,[A-Za-z0-9_.:@-]{1,15})*")
HOSTNAME_RE = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                         r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
# Variable -> environment variable it sets (the names users write in sglang_server_environment).
ENV_OWNERS = {"NCCL_SOCKET_IFNAME": "sglang_server_nccl_socket_ifname",
              "GLOO_SOCKET_IFNAME": "sglang_server_gloo_socket_ifname",
              "NCCL_IB_DISABLE": "sglang_server_nccl_ib_disable",
              "NCCL_P2P_LEVEL": "sglang_server_nccl_p2p_level"}
KEYS = ("sglang_server_nnodes", "sglang_server_node_rank", "sglang_server_dist_init_addr",
        *ENV_OWNERS.values())


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        return int(value)
    return None


def dist_init_addr_problem(value: Any) -> Optional[str]:
    """HOST:PORT, [V6]:PORT: what SGLang's NetworkAddress.parse takes."""
    text = value if isinstance(value, str) else ""
    found = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\[\]]+):(\d+)", text)
    if found:
        host = found.group(1) or found.group(3)
        port = int(found.group(2) or found.group(4))
        try:
            ipaddress.ip_address(host)
            host_ok = True
        except ValueError:
            host_ok = bool(HOSTNAME_RE.fullmatch(host)) and not found.group(1)
        if host_ok and 1 <= port <= 65535:
            return None
    return (f"sglang_server_dist_init_addr must be HOST:PORT of the node of rank 0 (e.g. 10.0.0.1:20000, "
            f"[fd00::1]:20000), got {value!r}")


def problems(settings: Mapping[str, Any], flags: Mapping[str, Any], origin: Mapping[str, str]) -> list[str]:
    """Every problem of the multi-node and NCCL settings; only the keys present are checked."""
    found: list[str] = []
    for name, variable in OWNED_FLAGS.items():
        if flags.get(name) not in (None, False):
            found.append(f"{origin.get(name, 'a flag source')}[{name!r}]: --{name} is rendered from "
                         f"{variable} for each host; set that instead")
    if "sglang_server_nnodes" in settings:
        found += _node_problems(settings, flags)
    environment = settings.get("sglang_server_environment")
    if isinstance(environment, Mapping):
        for name, variable in ENV_OWNERS.items():
            if name in environment and variable in settings:
                found.append(f"sglang_server_environment sets {name}; set {variable} instead "
                             f"(one variable per setting)")
    for key in ("sglang_server_nccl_socket_ifname", "sglang_server_gloo_socket_ifname"):
        value = settings.get(key)
        if value not in (None, "") and not (isinstance(value, str) and IFNAME_RE.fullmatch(value)):
            found.append(f"{key} must be a network interface name such as enp65s0f0 (or NCCL's list form "
                         f"'eth0,eth1', '^docker'), got {value!r}")
    level = settings.get("sglang_server_nccl_p2p_level")
    if level not in (None, "") and level not in P2P_LEVELS:
        found.append(f"sglang_server_nccl_p2p_level must be one of {', '.join(P2P_LEVELS)} or empty (unset), "
                     f"got {level!r}")
    ib = settings.get("sglang_server_nccl_ib_disable")
    if ib is not None and not isinstance(ib, bool):
        found.append(f"sglang_server_nccl_ib_disable must be true or false, got {ib!r}")
    return found


def _node_problems(settings: Mapping[str, Any], flags: Mapping[str, Any]) -> list[str]:
    found = []
    nnodes, rank = _int(settings.get("sglang_server_nnodes")), _int(settings.get("sglang_server_node_rank", 0))
    addr = settings.get("sglang_server_dist_init_addr") or ""
    if nnodes is None or nnodes < 1:
        return [f"sglang_server_nnodes must be an integer >= 1, got {settings.get('sglang_server_nnodes')!r}"]
    if rank is None or not 0 <= rank < nnodes:
        found.append(f"sglang_server_node_rank must be an integer 0-{nnodes - 1} (sglang_server_nnodes is "
                     f"{nnodes}), got {settings.get('sglang_server_node_rank')!r}")
    if nnodes > 1 and not addr:
        found.append(f"--node-rank {settings.get('sglang_server_node_rank')} of {nnodes} nodes needs "
                     "--dist-init-addr: set sglang_server_dist_init_addr to HOST:PORT of the node of rank 0 "
                     "(or sglang_server_node_group to the inventory group of this replica's nodes)")
    elif nnodes > 1:
        found += [p for p in [dist_init_addr_problem(addr)] if p]
    elif addr:
        found.append("sglang_server_dist_init_addr is set but sglang_server_nnodes is 1: set the number of "
                     "nodes, or leave the address empty")
    tp = _int(flags.get("tp-size"))
    pp = _int(flags.get("pp-size", 1)) or 1
    if nnodes > 1 and tp is not None and (tp * pp) % nnodes:
        found.append(f"tp-size {tp} x pp-size {pp} is not a multiple of sglang_server_nnodes {nnodes} "
                     "(SGLang asserts it): each node runs tp*pp/nnodes ranks")
    if nnodes > 1 and not settings.get("sglang_server_nccl_socket_ifname"):
        found.append("sglang_server_nccl_socket_ifname is empty: across nodes NCCL and Gloo must use the "
                     "interface of the link between the nodes (e.g. enp65s0f0); set it")
    return found


def node_flags(settings: Mapping[str, Any]) -> dict[str, Any]:
    """--nnodes, --node-rank and --dist-init-addr for this host; none for one node."""
    nnodes = _int(settings.get("sglang_server_nnodes", 1)) or 1
    if nnodes == 1:
        return {}
    return {"nnodes": nnodes, "node-rank": _int(settings.get("sglang_server_node_rank", 0)),
            "dist-init-addr": settings["sglang_server_dist_init_addr"]}


def nccl_environment(settings: Mapping[str, Any]) -> dict[str, str]:
    """The NCCL and Gloo variables the settings give (an empty setting leaves its variable unset)."""
    env: dict[str, str] = {}
    nccl_if = settings.get("sglang_server_nccl_socket_ifname") or ""
    gloo_if = settings.get("sglang_server_gloo_socket_ifname") or ""
    if nccl_if:
        env["NCCL_SOCKET_IFNAME"] = nccl_if
    if gloo_if:
        env["GLOO_SOCKET_IFNAME"] = gloo_if
    if isinstance(settings.get("sglang_server_nccl_ib_disable"), bool):
        env["NCCL_IB_DISABLE"] = "1" if settings["sglang_server_nccl_ib_disable"] else "0"
    if settings.get("sglang_server_nccl_p2p_level"):
        env["NCCL_P2P_LEVEL"] = settings["sglang_server_nccl_p2p_level"]
    return env
