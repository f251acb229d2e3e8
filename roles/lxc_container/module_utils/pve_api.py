"""The Proxmox VE API as the lxc_container role uses it: one connection, faults named, checks.

Plain functions over proxmoxer; the modules pve_lxc_container and pve_lxc_devices are thin
adapters. Every message says what was expected, what was found and what to do, and never holds
a secret (the token secret and the password are only handed to proxmoxer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# What a container request needs, by path, checked before anything changes. devN is
# root@pam-only whatever the ACL says (pve-container's check_ct_modify_config_perm).
CREATE_PRIVILEGES = ("VM.Allocate", "VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory",
                     "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt", "VM.Audit")
STORAGE_PRIVILEGES = ("Datastore.AllocateSpace",)
TEMPLATE_PRIVILEGES = ("Datastore.AllocateTemplate",)

API_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "api_host": {"type": "str", "required": True},
    "api_port": {"type": "int", "default": 8006},
    "api_user": {"type": "str", "default": "root@pam"},
    "api_token_id": {"type": "str", "default": ""},
    "api_token_secret": {"type": "str", "default": "", "no_log": True},
    "api_password": {"type": "str", "default": "", "no_log": True},
    "validate_certs": {"type": "bool", "default": True},
    "api_timeout": {"type": "int", "default": 30},
    "node": {"type": "str", "required": True},
}


def proxmoxer_missing() -> str | None:
    """Why the controller cannot talk to the API (proxmoxer not installed), or None."""
    import importlib.util

    if importlib.util.find_spec("proxmoxer") is not None:
        return None
    return ("Failed to import the required Python library (proxmoxer) on the controller. Run "
            "`scripts/dev.sh setup` (it installs requirements.txt) or `pip install -r requirements.txt` in "
            "the controller's Python.")


class PveFault(Exception):
    """A Proxmox API fault, with the message a person can act on.

    `answered` is true when the API answered with a status (the request was refused, so it
    changed nothing); false when the outcome of a request is unknown (no answer, a timeout).
    """

    def __init__(self, message: str, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered


class Progress:
    """What this run has done so far, for a fault's message: never "Nothing was changed" after a write."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.sending = ""
        self.created = False

    def message(self, fault: PveFault) -> str:
        text = str(fault)
        if not self.done and not self.sending:
            return text
        for claim in (" Nothing was changed.", " Nothing else was changed.", " nothing was changed."):
            text = text.replace(claim, "")
        parts = []
        if self.done:
            parts.append(f"Already done in this run before the fault: {'; '.join(self.done)}.")
        if self.sending and fault.answered:
            parts.append(f"The API refused {self.sending}, so that request changed nothing.")
        elif self.sending and "may have reached the node" not in text:
            parts.append(f"{self.sending} was sent and no answer came: whether it took effect is unknown (`pct "
                         "config VMID` and Datacenter > Tasks on the node show it).")
        parts.append("Re-run once the cause is fixed: the run converges from what exists.")
        return f"{text} {' '.join(parts)}"


def api_host_problem(host: str) -> str | None:
    """Why host is not a bare host name or address (a URL or host:port was given), or None."""
    text = str(host)
    bare = text.strip("[]")
    if "://" in text or "/" in text:
        hint = text.split("://", 1)[-1].split("/", 1)[0]
    elif text.count(":") == 1:
        hint = text
    elif not text or any(c.isspace() for c in text) or ("[" in text and not (text.startswith("[") and text.endswith("]"))):
        hint = ""
    else:
        return None if bare else "an empty host"
    host_part, _, port = hint.rpartition(":") if hint.count(":") == 1 else (hint, "", "")
    fix = (f" Set lxc_container_api_host={host_part or hint!s}" + (f" and lxc_container_api_port={port}" if port else "")
           + ".") if hint else ""
    return (f"lxc_container_api_host={text!r} is not a host name or address: give the host alone (e.g. "
            f"pve1.example.internal or 192.0.2.10); the port is lxc_container_api_port and https is implied.{fix} "
            "Nothing was changed.")


@dataclass
class ApiLogin:
    host: str
    port: int
    user: str
    token_id: str = ""
    token_secret: str = ""
    password: str = ""
    validate_certs: bool = True
    timeout: int = 30

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def who(self) -> str:
        """The identity PVE checks: user!token for a token, the user for a password login."""
        return f"{self.user}!{self.token_id}" if self.token_id and not self.password else self.user

    @classmethod
    def from_params(cls, params: dict[str, Any], with_password: bool = False) -> ApiLogin:
        problem = api_host_problem(params["api_host"])
        if problem:
            raise ValueError(problem)
        return cls(
            host=params["api_host"], port=params["api_port"], user=params["api_user"],
            token_id="" if with_password else params["api_token_id"],
            token_secret="" if with_password else params["api_token_secret"],
            password=params["api_password"] if with_password else "",
            validate_certs=params["validate_certs"], timeout=params["api_timeout"],
        )


def connect(login: ApiLogin) -> Any:
    """A proxmoxer client; a password login asks for its ticket here."""
    import proxmoxer  # the controller's: pinned in requirements.txt

    options: dict[str, Any] = {"port": login.port, "verify_ssl": login.validate_certs,
                               "timeout": login.timeout}
    if login.password:
        options.update(user=login.user, password=login.password)
    else:
        options.update(user=login.user, token_name=login.token_id, token_value=login.token_secret)
    try:
        return proxmoxer.ProxmoxAPI(login.host, **options)
    except Exception as exc:  # noqa: BLE001 - named below, whatever proxmoxer raised
        raise PveFault(explain(exc, login, "POST /access/ticket")) from None


def call(login: ApiLogin, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), with any fault named for `what` (METHOD PATH)."""
    try:
        return fn(*args, **kwargs)
    except PveFault:
        raise
    except Exception as exc:  # noqa: BLE001 - named below
        raise PveFault(explain(exc, login, what), answered=getattr(exc, "status_code", None) is not None) from None


def explain(exc: Exception, login: ApiLogin, what: str) -> str:
    """The fault behind exc, named, with the way out; no secret survives in it."""
    message = _explain(exc, login, what)
    for secret in (login.token_secret, login.password):
        if secret:
            message = message.replace(secret, "<secret>")
    return message


def _explain(exc: Exception, login: ApiLogin, what: str) -> str:
    name = type(exc).__name__
    text = str(exc)
    if name == "SSLError" or "CERTIFICATE_VERIFY_FAILED" in text:
        return (f"TLS verification of the Proxmox API at {login.url} failed ({_short(text)}). Give the "
                "node's CA to the controller (export REQUESTS_CA_BUNDLE=/path/to/pve-root-ca.pem, copied "
                "from the node's /etc/pve/pve-root-ca.pem), or set lxc_container_api_validate_certs: false "
                "for a node whose certificate you trust. Nothing was changed.")
    if name in ("ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "NewConnectionError"):
        # A write that may have reached the node (no answer, or the connection dropped after it was
        # sent) may have taken effect: only a connection never made proves that nothing changed.
        unknown = what.split(" ", 1)[0] in ("PUT", "POST", "DELETE") and what != "POST /access/ticket" \
            and name in ("ConnectionError", "ReadTimeout", "Timeout")
        outcome = (f"{what} may have reached the node: whether it took effect is unknown (`pct config VMID` "
                   "and Datacenter > Tasks on the node show it). Re-run once the API answers: the run "
                   "converges from what exists." if unknown else "Nothing was changed.")
        return (f"The Proxmox API at {login.url} is unreachable during {what} ({_short(text)}). Check "
                "lxc_container_api_host and lxc_container_api_port, that pveproxy runs on the node and "
                f"that the controller can reach port 8006. {outcome}")
    code = re.search(r"code: ([0-9]{3})", text) if name == "AuthenticationError" else None
    if code and code.group(1) != "401":
        return (f"The Proxmox API at {login.url} answered {code.group(1)} to the password login of {login.user} "
                f"(POST /access/ticket): the API itself failed, the password was not judged. Look at pveproxy "
                "on the node (`journalctl -u pveproxy`) and re-run. Nothing was changed.")
    if name == "AuthenticationError":
        return (f"The Proxmox API at {login.url} refused the password login of {login.user} (401). Check "
                "lxc_container_api_password (root@pam's password, in the vault) and that the account is "
                "not locked or using two-factor login. Nothing was changed.")
    status = getattr(exc, "status_code", None)
    content = f"{getattr(exc, 'status_message', '')}: {getattr(exc, 'content', '')}".strip(": ")
    errors = getattr(exc, "errors", None)
    if errors:
        content += f" ({errors})"
    if status == 401:
        return (f"The Proxmox API refused {login.who} with 401 ({_short(content)}) on {what}: the API token "
                "is wrong, deleted or expired. Check lxc_container_api_user, lxc_container_api_token_id and "
                "lxc_container_api_token_secret (`pveum user token list root@pam` on the node). Nothing was "
                "changed.")
    if status == 403 and "only allowed for root@pam" in content:
        return (f"The Proxmox API refused {login.who} with 403 on {what}: {_short(content)}. PVE allows this to "
                "root@pam alone, whatever the ACL says (no privilege grants it, and root@pam's API tokens do not "
                "count): give root@pam's password as lxc_container_api_password, or run it as root on the node "
                "with pct. Nothing was changed.")
    if status == 403:
        return (f"The Proxmox API refused {login.who} with 403 on {what}: {_short(content)}. Grant the "
                "privilege on that path (`pveum acl modify PATH --tokens 'USER!TOKEN' --roles ROLE`, or "
                "create the token without privilege separation). Nothing was changed.")
    if status == 595 or "offline" in content.lower() or "no route to host" in content.lower():
        return (f"Node {what.split('/nodes/')[-1].split('/')[0] if '/nodes/' in what else ''} is offline or "
                f"unreachable from the cluster ({status} {_short(content)}) on {what}. Bring it back or run "
                "against the node that holds the container. Nothing was changed.")
    if "quorum" in content.lower():
        return (f"The Proxmox cluster has no quorum ({_short(content)}) on {what}: /etc/pve is read-only "
                "until quorum is back (`pvecm status` on a node). Nothing was changed.")
    if status is not None:
        return f"The Proxmox API answered {status} on {what}: {_short(content)}."
    return f"The Proxmox API call {what} failed: {name}: {_short(text)}."


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------ checks on API answers


def quorum_problem(cluster_status: list[dict[str, Any]], node: str) -> str | None:
    """Why the cluster or the node cannot take a change, from GET /cluster/status."""
    cluster = next((item for item in cluster_status if item.get("type") == "cluster"), None)
    if cluster is not None and not int(cluster.get("quorate", 1)):
        return (f"The Proxmox cluster {cluster.get('name', '')!s} has no quorum: /etc/pve is read-only, so "
                "no container can be created or changed. Restore quorum (`pvecm status` on a node) and "
                "re-run. Nothing was changed.")
    nodes = {item.get("name"): item for item in cluster_status if item.get("type") == "node"}
    if nodes and node not in nodes:
        return (f"The Proxmox cluster has no node {node!r} (it has {', '.join(sorted(map(str, nodes)))}). Set "
                "lxc_container_pve_node to the node that holds the GPUs. Nothing was changed.")
    if node in nodes and not int(nodes[node].get("online", 1)):
        return (f"Proxmox node {node} is offline in the cluster: nothing can be created or started there. "
                "Bring it back (`pvecm status`, `systemctl status pve-cluster` on it) and re-run. Nothing was "
                "changed.")
    return None


def lock_problem(vmid: int, config: dict[str, Any], node: str = "NODE") -> str | None:
    """A container config lock (backup, migrate, snapshot, ...) stops every change.

    `lock: create` is a create that never finished: unfinished_create says what to do.
    """
    lock = config.get("lock")
    if lock == "create":
        return unfinished_create(vmid, node, config)
    if not lock:
        return None
    return (f"Container {vmid} is locked ({lock}): Proxmox refuses changes while it is. Wait for the "
            f"{lock} to end, or run `pct unlock {vmid}` on the node if nothing is running. Nothing was "
            "changed.")


def unfinished_create(vmid: int, node: str, config: dict[str, Any]) -> str | None:
    """A container whose create never finished (`lock: create`, or no rootfs): what to do about it."""
    if config.get("lock") != "create" and config.get("rootfs"):
        return None
    found = "is locked (create)" if config.get("lock") == "create" else "has no rootfs"
    return (f"Container {vmid} {found}: its create did not finish (a create killed or failed half-way leaves "
            f"this), and it cannot be configured or started. Check that no task runs for it (`pvesh get "
            f"/nodes/{node}/tasks --vmid {vmid} --source active`, or Datacenter > Tasks), then remove it on the "
            f"node with `pct destroy {vmid}` (not `pct unlock`: there is no disk to keep) and re-run, which "
            "creates it anew. Nothing was changed.")



def missing_privileges(held: dict[str, dict[str, int]], wanted: dict[str, tuple[str, ...]]) -> list[str]:
    """`PRIVILEGE on PATH` for each wanted privilege that GET /access/permissions does not grant."""
    missing = []
    for path, privileges in wanted.items():
        for privilege in privileges:
            if not any(_covers(granted, path) and held[granted].get(privilege) for granted in held):
                missing.append(f"{privilege} on {path}")
    return missing


def _covers(granted: str, path: str) -> bool:
    granted = granted.rstrip("/") or "/"
    return granted == "/" or path == granted or path.startswith(granted + "/")


def wanted_privileges(vmid: int, storage: str, template_storage: str, creating: bool,
                      fetching_template: bool) -> dict[str, tuple[str, ...]]:
    wanted: dict[str, tuple[str, ...]] = {f"/vms/{vmid}": CREATE_PRIVILEGES}
    if creating:
        wanted[f"/storage/{storage}"] = STORAGE_PRIVILEGES
    if fetching_template:
        wanted[f"/storage/{template_storage}"] = TEMPLATE_PRIVILEGES
    return wanted


def split_volid(volid: str) -> tuple[str, str]:
    """`local:vztmpl/NAME` as (storage, NAME); ValueError names the expected form."""
    storage, sep, volume = volid.partition(":")
    if not sep or not storage or not volume.startswith("vztmpl/") or len(volume) <= len("vztmpl/"):
        raise ValueError(f"lxc_container_ostemplate={volid!r} is not a template volume: expected "
                         "STORAGE:vztmpl/NAME, e.g. local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst")
    return storage, volume.removeprefix("vztmpl/")


def task_error(status: dict[str, Any], log: list[dict[str, Any]]) -> str | None:
    """The TASK ERROR line of a finished task, quoted from its log, or None when it ended OK."""
    exitstatus = status.get("exitstatus")
    if status.get("status") != "stopped" or exitstatus == "OK":
        return None
    lines = [str(item.get("t", "")) for item in log]
    errors = [line for line in lines if line.startswith("TASK ERROR")]
    return errors[-1] if errors else f"TASK ERROR: {exitstatus}"
