#!/usr/bin/python
"""Ansible module: a plain-LXC container, converged in one call: its config and its run state."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: plain_lxc_container
short_description: A plain-LXC container converged in one call - its config (link, GPU entries, model store) and its run state
description:
  - The one module of a plain-LXC container made with lxc-create, as C(sglang_server) is the server's.
    It writes the config - the network link, with I(nvidia) the GPU entries, with I(model_dir) the
    model store's read-only bind mount - planned on the text read once and written in place in one
    write; then it starts the container, or restarts it once when its config changed after its init
    started, waits for its boot, and reads what it sees inside.
  - >-
    With I(bridge) empty, the container has no network: its config carries C(lxc.net.0.type = empty).
  - With I(bridge), a host-only link for ssh, as production reaches its containers. The host
    bridge is created with C(ip) and carries only I(host_address) (link-local, no route, no NAT);
    the config carries a veth on it named C(eth0) with the static I(address) and a MAC derived
    from I(name); the guest's C(iface eth0 inet dhcp) (the Debian template's) becomes C(manual);
    I(pubkey) is added to root's C(authorized_keys) in I(rootfs).
  - >-
    With I(nvidia) (the C(nvidia) result of nvidia_devices), the config carries exactly one allow
    entry and one bind mount per node and C(lxc.prlimit.memlock); entries of ours that are no longer
    wanted are removed and every other line is kept. A node that is not an NVIDIA node of its majors,
    or a memlock no config line may carry, is refused before any change.
  - >-
    With I(model_dir), the config carries one C(lxc.mount.entry = MODEL_DIR MOUNT none
    bind,ro,create=dir 0 0) for I(model_mount), every other mount entry left alone.
  - State is read from the things themselves (C(ip -j -d addr show), the config, the files).
  - An existing container whose config has neither the role's mark line (C(OWNER_MARK), put there at
    creation) nor the veth MAC derived from I(name) was not made by the role and is refused before
    any change, unless I(adopt), which adds the mark line.
  - Every value is checked before any change; a bridge name taken by another kind of interface,
    another address on the bridge, or another interface in the link's network is refused.
  - >-
    Without I(config_path) it only checks and plans. With I(when_missing=check) and no file at
    I(config_path), it does the same and returns I(exists) false, so that the caller creates the
    container and calls it again; a container that exists needs one call, not a probe first.
  - >-
    The restart rule reads LXC and the kernel, not this run's notes: the config's own time against
    its init's start (C(/proc/PID/stat)), and whether one of its veths is on I(bridge) (the bridge
    made again). A controller killed between the write and the restart still restarts on the next
    run. Before any start it checks that the config names the container's own rootfs and that
    C(rootfs/sbin/init) exists, so a config made by C(lxc-create -t none) never boots on the host's /.
  - >-
    With I(wait_timeout), it waits until the container's systemd has booted (C(systemctl
    is-system-running --wait) through C(lxc-attach)), whether it started it or found it running.
    With I(inside), it then runs that command inside, which lists what the running container really
    got (its NVIDIA nodes, the model store's mount), and compares the lines with what this call
    passes (I(inside_wanted) in the result). Entries apply at a start, so a run killed between writing
    them and the restart, or C(optional) mounts, show there and nowhere else. When they differ it
    restarts the container once, waits and reads again; the caller checks that second reading.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  name:
    description: The container's name (the MAC of its veth is derived from it).
    type: str
    required: true
  bridge:
    description: Host bridge of the link; empty for no network.
    type: str
    default: ""
  host_address:
    description: The host's address on the bridge, link-local with a prefix (169.254.77.1/24).
    type: str
    default: ""
  address:
    description: The container's address on the bridge, without a prefix.
    type: str
    default: ""
  pubkey:
    description: An OpenSSH public key line for root's authorized_keys in the container.
    type: str
    default: ""
  config_path:
    description: The container's config, whose lxc.net.* lines are made the wanted ones in place.
    type: path
  rootfs:
    description: The container's root file system (on the host), for the guest's files.
    type: path
  require_host_key:
    description: Fail when I(rootfs) holds no ssh host key (the container is reached by ssh).
    type: bool
    default: false
  lxcpath:
    description:
      - Where containers live. Given with I(config_path), the config must name
        C(LXCPATH/NAME/rootfs) as its rootfs and that rootfs must hold sbin/init, before any
        line is written or any bridge made.
    type: path
  adopt:
    description: Take over an existing container the role did not make (C(lxc_container_adopt)) - the mark line is added.
    type: bool
    default: false
  nvidia:
    description: The C(nvidia) result of nvidia_devices on this host; omitted, the GPU entries are left as they are.
    type: dict
  cgroup:
    description: Which allow key to write; C(auto) reads the host (a unified hierarchy means v2).
    type: str
    choices: [auto, v1, v2]
    default: auto
  memlock:
    description: Value of C(lxc.prlimit.memlock) while any GPU node is passed; empty leaves it out.
    type: str
    default: unlimited
  model_dir:
    description: The node's model store, mounted read-only at I(model_mount); empty, no such entry is made.
    type: str
    default: ""
  model_mount:
    description: Where the model store is mounted inside the container.
    type: str
    default: /models
  state:
    description:
      - C(started) (the role's) - the config made, then the container running it, booted and read
        inside. C(present) - the config made, the run state left as it is (a change applies at the next
        start).
    type: str
    choices: [started, present]
    default: started
  wait_timeout:
    description:
      - Seconds to wait for the container's systemd to finish booting after the call; 0 does not wait.
        Not in check mode.
    type: int
    default: 0
  inside:
    description:
      - A command (argv) run inside the container after the boot wait that prints what it sees, one
        item a line (a node as C(PATH MAJOR:MINOR), the store as C(MOUNT mounted read-only)). Empty
        reads nothing. Not in check mode.
    type: list
    elements: str
    default: []
  when_missing:
    description:
      - What to do when I(config_path) does not exist. C(fail) (the container must be there), or
        C(check) (only check and plan, return I(exists) false, change nothing).
    type: str
    choices: [fail, check]
    default: fail
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: The container with a host-only link for ssh and the host's GPUs, running its config
  plain_lxc_container:
    name: sglang-demo
    bridge: sgldemo0
    host_address: 169.254.77.1/24
    address: 169.254.77.2
    pubkey: "{{ lookup('ansible.builtin.file', '~/.cache/sglang-deploy/demo-ssh/id_ed25519.pub') }}"
    config_path: /var/lib/lxc/sglang-demo/config
    rootfs: /var/lib/lxc/sglang-demo/rootfs
    nvidia: "{{ discovery.nvidia }}"
    wait_timeout: 180
    inside: [python3, -c, "{{ lookup('ansible.builtin.file', 'list_nodes.py') }}"]
"""

RETURN = r"""
net_lines:
  description: The config's lxc.net.* lines for this link, as C(key = value).
  returned: always
  type: list
bridge_commands:
  description: The C(ip) commands run (or, in check mode, that would run) for the bridge.
  returned: always
  type: list
config_changed:
  description: Whether the config changed - its lxc.net.* lines, GPU entries or mark (a running container restarts for it).
  returned: always
  type: bool
host_keys:
  description: The container's ssh host public keys (C(TYPE BASE64)), read from I(rootfs).
  returned: always
  type: list
exists:
  description: >-
    Whether the container is there: its config, without the C(partial) marker that lxc-create leaves
    beside it until it has finished (true when no I(config_path) is given).
  returned: always
  type: bool
owner_mark:
  description: The line the role creates containers with (their config's first line of its own), its mark of ownership.
  returned: always
  type: str
node_ids:
  description: C(PATH MAJOR:MINOR) of each node passed (empty without I(nvidia)), as the container sees it inside.
  returned: always
  type: list
cgroup:
  description: The cgroup version whose allow key is used (v1 or v2).
  returned: always
  type: str
entries:
  description: The config's lines for the GPUs, as C(key = value) (empty without I(nvidia)).
  returned: always
  type: list
added:
  description: GPU lines added (or, in check mode, that would be).
  returned: always
  type: list
removed:
  description: GPU lines removed (or, in check mode, that would be).
  returned: always
  type: list
model_line:
  description: The model store's entry the config carries (empty without I(model_dir)).
  returned: always
  type: str
action:
  description: What was done (or would be, in check mode).
  returned: with state=started, once the container exists
  type: str
  choices: [start, restart, none]
reason:
  description: Why, in words.
  returned: with state=started, once the container exists
  type: str
stale:
  description: The config, when it changed after the init process started.
  returned: with state=started, once the container exists
  type: list
  elements: str
pid:
  description: The host PID of the container's init after the call (0 in check mode when it was stopped).
  returned: with state=started, once the container exists
  type: int
booted:
  description: What C(systemctl is-system-running) said inside at the end (empty when not waited for).
  returned: with state=started, once the container exists
  type: str
inside:
  description: The lines I(inside) printed, after the restart when the first reading differed (empty without I(inside)).
  returned: with state=started, once the container exists
  type: list
  elements: str
inside_stderr:
  description: What I(inside) wrote to stderr at that reading.
  returned: with state=started, once the container exists
  type: str
reread:
  description: The first reading differed from I(inside_wanted), so the container was restarted once and read again.
  returned: with state=started, once the container exists
  type: bool
inside_wanted:
  description: What I(inside) must print, in any order - the nodes passed and the model store's mount.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lxc_plain_config import CONFIG_ARGUMENT_SPEC, converge_config
from ansible.module_utils.lxc_run import converge_run


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **CONFIG_ARGUMENT_SPEC,
            "state": {"type": "str", "choices": ["started", "present"], "default": "started"},
            "wait_timeout": {"type": "int", "default": 0},
            "inside": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"]
    if not name or "/" in name or any(c.isspace() or ord(c) < 32 for c in name):
        module.fail_json(msg=f"name is {name!r}: expected a container name without slash or whitespace. "
                         "Nothing was changed.")
    result, planning = converge_config(module)
    # What the running container must show: each node passed, and the store mounted read-only.
    result["inside_wanted"] = result["node_ids"] + ([f"{p['model_mount']} mounted read-only"] if p["model_dir"] else [])
    if planning or p["state"] == "present":  # not there yet (the caller creates it, then calls again), or config only
        module.exit_json(**result)
    run = converge_run(module, name, p["lxcpath"] or "/var/lib/lxc", p["bridge"], result["changed"],
                       p["wait_timeout"], p["inside"], result["inside_wanted"],
                       written=result["changed"] and not module.check_mode)
    diff = result["diff"] + ([run["run_diff"]] if run["run_diff"] else [])
    del run["run_diff"]
    result.update(run, changed=result["changed"] or run["changed"], diff=diff)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
