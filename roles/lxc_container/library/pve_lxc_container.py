#!/usr/bin/python
"""Ansible module: a Proxmox VE container, through the API, every fault named."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pve_lxc_container
short_description: Ensure a Proxmox VE LXC container exists with its settings, and runs
description:
  - Reads the cluster, the node, the token's privileges, the container's config and status and
    the OS template through the Proxmox VE API (JSON), and refuses before any change when the
    API is unreachable, TLS fails, the token is refused (401) or lacks a privilege (403), the
    cluster has no quorum, the node is offline, the container is locked or the template is
    neither on the storage nor in Proxmox's appliance index.
  - Then creates the container (or changes the settings that differ), fetches the template
    when it is missing, and with I(state=started) starts it, or restarts it once when it runs
    and PVE holds changes for its next start (the API's C(pending) list, so that a run killed
    between a change and the restart still restarts it) or I(restart) is true. A task that ends
    in C(TASK ERROR) fails the module, quoting its log line.
  - Before any request, every value that goes into PVE's config is checked against PVE's own
    formats (the vmid, host name, storage id, sizes, the netif keys and property strings, the
    features). An existing container at the vmid with another hostname is refused, as is one whose
    create never finished, or whose C(unprivileged) or smaller rootfs differ from the request.
  - A container it creates gets the PVE tag C(sglang-deploy). An existing one with the hostname
    but without that tag was not made by this module and is refused, naming it, unless I(adopt)
    is true, which adds the tag to its own tags; it is managed from then on. Tags are never
    removed.
  - A fault after something was done says what was done (and returns C(changed), C(created)).
  - >-
    devN entries are not set here: PVE allows them to root@pam only (pve_lxc_devices).
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  api_host: {description: The node's API address., type: str, required: true}
  api_port: {description: The API port., type: int, default: 8006}
  api_user: {description: The token's user., type: str, default: root@pam}
  api_token_id: {description: The token's short id (not user!id)., type: str, required: true}
  api_token_secret: {description: The token's secret (Ansible Vault)., type: str, required: true}
  api_password: {description: Unused here; accepted so that one set of API options serves every module., type: str, default: ""}
  validate_certs: {description: Verify the API's TLS certificate., type: bool, default: true}
  api_timeout: {description: Seconds per API request., type: int, default: 30}
  node: {description: The Proxmox node that holds the container., type: str, required: true}
  vmid: {description: "The container id: digits only, 100 to 999999999 (C(\"120 \") is refused).", type: raw, required: true}
  hostname: {description: The container's host name., type: str, required: true}
  ostemplate: {description: "The template volume, C(STORAGE:vztmpl/NAME).", type: str, required: true}
  fetch_template: {description: Download a missing template from Proxmox's appliance index., type: bool, default: true}
  disk: {description: "The root disk at creation, C(STORAGE:GB).", type: str, required: true}
  cores: {description: CPU cores., type: int, required: true}
  memory: {description: Memory in MiB., type: int, required: true}
  swap: {description: Swap in MiB., type: int, default: 0}
  netif: {description: "Network devices, C(net0: name=eth0,bridge=vmbr0,ip=dhcp).", type: dict, default: {}}
  features: {description: Container features (nesting=1)., type: list, elements: str, default: []}
  unprivileged: {description: Unprivileged container (creation only)., type: bool, default: true}
  onboot: {description: Start at boot., type: bool, default: true}
  pubkey: {description: SSH public key for root (creation only)., type: str, default: ""}
  adopt:
    description: >-
      Take over an existing container with the hostname but without the tag C(sglang-deploy)
      (made by hand or by an earlier version): add the tag, keeping its other tags. False
      refuses it. A container with another hostname is refused either way.
    type: bool
    default: false
  state:
    description: C(present) makes it exist with its settings; C(started) also makes it run.
    type: str
    choices: [present, started]
    default: present
  restart:
    description: >-
      With I(state=started), restart a running container also when PVE holds nothing pending
      (what PVE cannot list: raw C(lxc.*) lines written to its conf file, and in check mode the
      entries this run did not write).
    type: bool
    default: false
  task_timeout: {description: Seconds to wait for a create, start or shutdown task., type: int, default: 300}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Ensure the GPU container exists
  pve_lxc_container:
    api_host: pve1.example.internal
    api_token_id: ansible
    api_token_secret: "{{ vault_token }}"
    node: pve1
    vmid: 120
    hostname: sglang1
    ostemplate: local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst
    disk: local-lvm:200
    cores: 32
    memory: 262144
  delegate_to: localhost
"""

RETURN = r"""
exists:
  description: Whether the container exists (after the run; in check mode, before it).
  returned: always
  type: bool
created:
  description: Whether this run created it (or would, in check mode).
  returned: always
  type: bool
status:
  description: C(running), C(stopped) or C(absent), after the run.
  returned: always
  type: str
was_running:
  description: Whether it ran before this run.
  returned: always
  type: bool
config:
  description: The container's config from the API after the run (the digest left out).
  returned: always
  type: dict
updated:
  description: The settings changed on an existing container.
  returned: always
  type: dict
template:
  description: C(present), C(fetched), or C(missing) (check mode before a fetch).
  returned: always
  type: str
action:
  description: C(start), C(restart) or C(none), with I(state=started).
  returned: always
  type: str
reason:
  description: Why it started or restarted, or why not.
  returned: always
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pve_api import (
    API_ARGUMENT_SPEC,
    ApiLogin,
    Progress,
    PveFault,
    call,
    connect,
    lock_problem,
    missing_privileges,
    proxmoxer_missing,
    quorum_problem,
    split_volid,
    task_error,
    unfinished_create,
    wanted_privileges,
)
from ansible.module_utils.pve_container import (
    Request,
    describe,
    existing_problems,
    pending_keys,
    plan_update,
    request_problems,
    start_or_restart,
    split_disk,
    vmid_of,
)

ARGUMENT_SPEC = dict(
    API_ARGUMENT_SPEC,
    api_token_id={"type": "str", "required": True},
    api_token_secret={"type": "str", "required": True, "no_log": True},
    vmid={"type": "raw", "required": True},
    hostname={"type": "str", "required": True},
    ostemplate={"type": "str", "required": True},
    fetch_template={"type": "bool", "default": True},
    disk={"type": "str", "required": True},
    cores={"type": "int", "required": True},
    memory={"type": "int", "required": True},
    swap={"type": "int", "default": 0},
    netif={"type": "dict", "default": {}},
    features={"type": "list", "elements": "str", "default": []},
    unprivileged={"type": "bool", "default": True},
    onboot={"type": "bool", "default": True},
    pubkey={"type": "str", "default": ""},
    adopt={"type": "bool", "default": False},
    state={"type": "str", "choices": ["present", "started"], "default": "present"},
    restart={"type": "bool", "default": False},
    task_timeout={"type": "int", "default": 300},
)


class Container:
    """One container on one node, through one API client."""

    def __init__(self, module: AnsibleModule, login: ApiLogin, progress: Progress) -> None:
        self.progress = progress
        self.module = module
        self.login = login
        self.params = module.params
        self.node = self.params["node"]
        self.vmid = self.params["vmid"]
        self.api = connect(login)
        self.base = f"/nodes/{self.node}/lxc/{self.vmid}"

    def get(self, path: str, **query: object) -> object:
        return call(self.login, f"GET {path}", self.api(path.lstrip("/")).get, **query)

    def write(self, method: str, path: str, what: str, **data: object) -> object:
        """One change; what it did goes into progress (a fault's message says it)."""
        self.progress.sending = f"{method} {path} ({what})"
        answer = call(self.login, f"{method} {path}", getattr(self.api(path.lstrip("/")), method.lower()), **data)
        self.progress.done.append(self.progress.sending)
        self.progress.sending = ""
        return answer

    def wait(self, upid: str, what: str) -> None:
        """Wait for a task; its TASK ERROR line, quoted, fails the run."""
        status_path = f"/nodes/{self.node}/tasks/{upid}/status"
        deadline = time.monotonic() + self.params["task_timeout"]
        while True:
            status = self.get(status_path)
            if status.get("status") == "stopped":
                break
            if time.monotonic() > deadline:
                raise PveFault(f"{what} did not finish within {self.params['task_timeout']} s (task {upid}). "
                               "Look at the task on the node (Datacenter > Tasks) and re-run when it has ended.")
            time.sleep(1)
        log = self.get(f"/nodes/{self.node}/tasks/{upid}/log", limit=500)
        error = task_error(status, log)
        if error:
            raise PveFault(f"{what} failed on node {self.node}: {error!r} (task {upid}). Fix the cause and re-run: "
                           "the run converges from here.")

    def preflight(self, creating: bool, fetching: bool) -> None:
        self.get("/version")
        problem = quorum_problem(self.get("/cluster/status"), self.node)
        if problem:
            raise PveFault(problem)
        held = self.get("/access/permissions")
        storage, _ = split_disk(self.params["disk"])
        template_storage, _ = split_volid(self.params["ostemplate"])
        missing = missing_privileges(held, wanted_privileges(self.vmid, storage, template_storage, creating, fetching))
        if missing:
            raise PveFault(f"The API token {self.login.who} lacks {', '.join(missing)}: the container cannot be "
                           "managed. Grant them (for example `pveum acl modify /vms/{0} --tokens '{1}' --roles "
                           "PVEVMAdmin`, and PVEDatastoreUser on the storage), or use a token without privilege "
                           "separation. Nothing was changed.".format(self.vmid, self.login.who))
        if creating:
            self.storage_check(storage)

    def storage_check(self, storage: str) -> None:
        """The root disk's storage exists on the node, is enabled and takes container disks."""
        listing = self.get(f"/nodes/{self.node}/storage")
        found = {str(item.get("storage")): item for item in listing}
        item = found.get(storage)
        where = f"Storages on node {self.node}: {', '.join(sorted(found)) or 'none'} (`pvesm status` on the node)."
        if item is None:
            raise PveFault(f"lxc_container_storage={storage!r} is not a storage on node {self.node}. {where} Set "
                           "lxc_container_storage to one that holds container disks (content rootdir). Nothing "
                           "was changed.")
        content = str(item.get("content", "")).split(",")
        if "rootdir" not in content:
            raise PveFault(f"Storage {storage} on node {self.node} does not hold container disks (its content is "
                           f"{item.get('content', '')!r}, rootdir is not among it). {where} Add rootdir to its content "
                           "(`pvesm set STORAGE --content ...`) or set lxc_container_storage to another. Nothing was "
                           "changed.")
        if not int(item.get("enabled", 1) or 0) or not int(item.get("active", 1) or 0):
            raise PveFault(f"Storage {storage} on node {self.node} is disabled or inactive. {where} Nothing was "
                           "changed.")

    def exists(self) -> bool:
        listing = self.get(f"/nodes/{self.node}/lxc")
        return any(int(item.get("vmid", -1)) == self.vmid for item in listing)

    def config(self) -> dict:
        config = dict(self.get(f"{self.base}/config"))
        config.pop("digest", None)
        return config

    def status(self) -> str:
        return str(self.get(f"{self.base}/status/current").get("status", "unknown"))

    def pending(self) -> list[str]:
        """The settings PVE holds for the container's next start."""
        return pending_keys(self.get(f"{self.base}/pending"))

    def template_present(self) -> bool:
        storage, name = split_volid(self.params["ostemplate"])
        content = self.get(f"/nodes/{self.node}/storage/{storage}/content", content="vztmpl")
        return any(item.get("volid") == self.params["ostemplate"] for item in content)

    def fetch_template(self) -> None:
        storage, name = split_volid(self.params["ostemplate"])
        how = f"Get it on the node with `pveam update && pveam download {storage} {name}` and re-run."
        if not self.params["fetch_template"]:
            raise PveFault(f"The template {self.params['ostemplate']} is not on node {self.node} and "
                           f"lxc_container_ostemplate_fetch is false. {how} Nothing was changed.")
        index = self.get(f"/nodes/{self.node}/aplinfo")
        if not any(item.get("template") == name for item in index):
            raise PveFault(f"The template {self.params['ostemplate']} is not on node {self.node}, and Proxmox's "
                           f"appliance index there does not offer {name}. {how} (`pveam available --section system` "
                           "lists what it offers.) Nothing was changed.")
        if self.module.check_mode:
            return
        upid = self.write("POST", f"/nodes/{self.node}/aplinfo", f"downloading the template {name}",
                          storage=storage, template=name)
        self.wait(upid, f"Downloading the template {name}")
        if not self.template_present():
            raise PveFault(f"Downloading {name} to {storage} ended, but the storage still lists no "
                           f"{self.params['ostemplate']}. {how}")


def request_of(params: dict) -> Request:
    return Request(
        vmid=vmid_of(params["vmid"]), hostname=params["hostname"], ostemplate=params["ostemplate"],
        disk=params["disk"], cores=params["cores"], memory=params["memory"], swap=params["swap"],
        netif={str(k): str(v) for k, v in params["netif"].items()}, features=params["features"],
        unprivileged=params["unprivileged"], onboot=params["onboot"], pubkey=params["pubkey"],
        adopt=params["adopt"],
    )


def run(module: AnsibleModule, progress: Progress) -> dict:
    params = module.params
    check = module.check_mode
    request = request_of(params)
    problems = request_problems(request)
    if problems:
        raise ValueError(f"Invalid container request: {'; '.join(problems)}. Fix it and re-run; nothing was changed.")
    params["vmid"] = request.vmid
    ct = Container(module, ApiLogin.from_params(params), progress)
    exists = ct.exists()
    ct.preflight(creating=not exists, fetching=False)
    template = "present" if exists or ct.template_present() else "missing"
    if template == "missing" and params["fetch_template"]:
        ct.preflight(creating=True, fetching=True)
    result = {"changed": False, "exists": exists, "created": False, "updated": {}, "template": template,
              "was_running": False, "status": "absent", "config": {}, "action": "none",
              "reason": "it is only to exist (state=present)"}
    if exists:
        config = ct.config()
        problem = (unfinished_create(ct.vmid, ct.node, config) or lock_problem(ct.vmid, config, ct.node)
                   or " ".join(existing_problems(request, config)))
        if problem:
            raise PveFault(problem)
        update = plan_update(request, config)
        if update.changed:
            result.update(changed=True, updated=update.set)
            result["diff"] = {"before": describe(update.before), "after": describe(update.set),
                              "before_header": f"CT {ct.vmid}", "after_header": f"CT {ct.vmid}"}
            if not check:
                ct.write("PUT", f"{ct.base}/config", f"changed {', '.join(sorted(update.set))}", **update.set)
        result["was_running"] = ct.status() == "running"
        result["status"] = "running" if result["was_running"] else "stopped"
    else:
        if template == "missing":
            ct.fetch_template()
            result["template"] = "missing" if check else "fetched"
        payload = request.create_payload()
        result.update(changed=True, created=True, status="stopped")
        result["diff"] = {"before": "", "after": describe({k: v for k, v in payload.items() if k != "ssh-public-keys"}),
                          "before_header": f"CT {ct.vmid}", "after_header": f"CT {ct.vmid}"}
        if not check:
            upid = ct.write("POST", f"/nodes/{ct.node}/lxc", f"the create of container {ct.vmid}", **payload)
            progress.created = True
            ct.wait(upid, f"Creating container {ct.vmid}")
    if params["state"] == "started":
        held = ct.pending() if result["was_running"] else []
        action, reason = start_or_restart(result["status"] == "running", held, params["restart"])
        result.update(action=action, reason=reason)
        if action != "none":
            result["changed"] = True
            if not check:
                if action == "restart":
                    upid = ct.write("POST", f"{ct.base}/status/shutdown", f"a shutdown of container {ct.vmid}",
                                    timeout=120, forceStop=1)
                    ct.wait(upid, f"Shutting down container {ct.vmid} ({reason})")
                upid = ct.write("POST", f"{ct.base}/status/start", f"a start of container {ct.vmid}")
                ct.wait(upid, f"Starting container {ct.vmid}")
            result["status"] = "running"
    if not check or exists:
        if not check:
            result["exists"] = True
            result["status"] = ct.status()
        result["config"] = ct.config()
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    missing = proxmoxer_missing()
    if missing:
        module.fail_json(msg=missing)
    progress = Progress()
    try:
        result = run(module, progress)
    except PveFault as exc:
        module.fail_json(msg=progress.message(exc), changed=bool(progress.done), created=progress.created,
                         done=progress.done)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
