#!/usr/bin/env python3
"""STAND-IN for a Proxmox node's `pct` and `pvesh`, for the tests only (no Proxmox node here).

Linked as `pct` and `pvesh` into a test's bin directory. Both talk to the fake PVE API (fakepve)
the way the real tools act for root on a node: as root@pam, with full rights.
  pvesh get PATH --output-format json     GET PATH, the answer's data as JSON
  pct set VMID --devN VALUE ... [--delete devM,...]    PUT the container's config
  pct exec VMID -- ARGV...                run ARGV "inside" the container: chrooted, in a private
                                          mount namespace, into a root of this machine's /usr and
                                          /etc whose /dev holds the NVIDIA nodes the container's
                                          devN entries name, with the host's major:minor, as PVE
                                          makes them at start, and with its mpN bind mounts
                                          (`systemctl is-system-running --wait` answers running)
The fake's address, root's password, its CA, the fake host root, the node's conf dir and the conf
as it was at the container's last start (whose raw lxc.mount.entry lines, GPU nodes and bind
mounts, are applied too) come from the JSON file that $PVE_STANDIN names.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request


def settings() -> dict:
    with open(os.environ["PVE_STANDIN"], encoding="utf-8") as handle:
        return json.load(handle)


def request(method: str, path: str, data: dict | None = None) -> object:
    conf = settings()
    context = ssl.create_default_context(cafile=conf["cafile"])
    login = urllib.parse.urlencode({"username": "root@pam", "password": conf["password"]}).encode()
    with urllib.request.urlopen(conf["url"] + "/api2/json/access/ticket", login, context=context) as answer:
        ticket = json.load(answer)["data"]
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(conf["url"] + "/api2/json" + path, data=body, method=method, headers={
        "Cookie": "PVEAuthCookie=" + ticket["ticket"],
        "CSRFPreventionToken": ticket["CSRFPreventionToken"],
    })
    try:
        with urllib.request.urlopen(req, context=context) as answer:
            return json.load(answer)["data"]
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        sys.stderr.write(f"{exc.code} {exc.reason}: {detail}\n")
        sys.exit(255)


def pvesh(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "get":
        sys.stderr.write("stand-in pvesh: only `get PATH --output-format json`\n")
        return 2
    print(json.dumps(request("GET", argv[1])))
    return 0


def node_of(vmid: str) -> str:
    for item in request("GET", "/cluster/resources?type=vm"):
        if str(item.get("vmid")) == vmid:
            return item["node"]
    sys.stderr.write(f"Configuration file 'nodes/pve1/lxc/{vmid}.conf' does not exist\n")
    sys.exit(2)


def pct_set(vmid: str, argv: list[str]) -> int:
    data = {}
    while argv:
        key, value = argv[0].removeprefix("--"), argv[1]
        data[key] = value
        argv = argv[2:]
    request("PUT", f"/nodes/{node_of(vmid)}/lxc/{vmid}/config", data)
    return 0


def pct_exec(vmid: str, argv: list[str]) -> int:
    if argv == ["systemctl", "is-system-running", "--wait"]:
        print("running")
        return 0
    node = node_of(vmid)
    status = request("GET", f"/nodes/{node}/lxc/{vmid}/status/current")
    if status.get("status") != "running":
        sys.stderr.write(f"CT {vmid} not running\n")
        return 255
    config = request("GET", f"/nodes/{node}/lxc/{vmid}/config")
    root = settings()["device_root"]
    nodes, mounts = [], []
    for key, value in config.items():
        if key.startswith("dev") and key[3:].isdigit():
            path = str(value).split(",")[0].removeprefix("path=")
            if not path.startswith("/dev/nvidia"):
                continue  # only the fake root's GPU nodes are modelled
            info = os.stat(root + path)
            nodes.append((path, os.major(info.st_rdev), os.minor(info.st_rdev)))
        elif key.startswith("mp") and key[2:].isdigit():   # HOSTDIR,mp=/models,ro=1,...
            host, *options = str(value).split(",")
            opts = dict(o.partition("=")[::2] for o in options)
            mounts.append((host, opts.get("mp", ""), opts.get("ro") == "1"))
    # Raw keys as LXC read them at the container's last start (pve_fake.keep_the_conf_at_start):
    # PVE hands lxc.mount.entry lines to LXC unchanged, at start. A container the fake was given
    # running (no start on record) has its conf file as it is now.
    started = os.path.join(settings().get("started", ""), f"{vmid}.conf")
    conf = started if os.path.exists(started) else os.path.join(settings()["confdir"], f"{vmid}.conf")
    if os.path.exists(conf):
        with open(conf, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields = value.split()
                if key.strip() != "lxc.mount.entry" or len(fields) < 2:
                    continue
                if fields[1].startswith("dev/nvidia"):
                    info = os.stat(fields[0])
                    nodes.append(("/" + fields[1], os.major(info.st_rdev), os.minor(info.st_rdev)))
                else:
                    mounts.append((fields[0], "/" + fields[1], len(fields) > 3 and "ro" in fields[3].split(",")))
    # ARGV runs chrooted into a root of this machine's /usr and /etc, with a /dev of the nodes above
    # and the bind mounts above, in a private mount namespace: nothing shows outside it.
    work = tempfile.mkdtemp(prefix="pct-exec-")
    q = shlex.quote
    script = [f"R={q(work)}", 'mount -t tmpfs none "$R"', 'mkdir -p "$R/usr" "$R/etc" "$R/proc" "$R/dev" "$R/tmp"',
              'for d in usr etc proc; do mount --rbind "/$d" "$R/$d"; done',
              'for d in bin lib lib64 sbin; do if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$R/$d"; '
              'elif [ -d "/$d" ]; then mkdir "$R/$d" && mount --rbind "/$d" "$R/$d"; fi; done',
              'mount -t tmpfs none "$R/dev"', 'mknod -m 666 "$R/dev/null" c 1 3']
    for path, major, minor in nodes:
        script.append(f'mkdir -p "$R"{q(os.path.dirname(path))} && mknod "$R"{q(path)} c {major} {minor}')
    for host, target, read_only in mounts:
        script.append(f'mkdir -p "$R"{q(target)} && mount --bind {q(host)} "$R"{q(target)}')
        if read_only:
            script.append(f'mount -o remount,bind,ro "$R"{q(target)}')
    script.append('exec chroot "$R" "$@"')
    try:
        return subprocess.call(["unshare", "--mount", "--propagation", "private", "--", "sh", "-ec",
                                "\n".join(script), "pct-exec", *argv], stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pct(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "set":
        return pct_set(argv[1], argv[2:])
    if len(argv) >= 3 and argv[0] == "exec" and argv[2] == "--":
        return pct_exec(argv[1], argv[3:])
    sys.stderr.write(f"stand-in pct: unsupported {argv!r}\n")
    return 2


if __name__ == "__main__":
    tool = os.path.basename(sys.argv[0])
    sys.exit(pvesh(sys.argv[1:]) if tool == "pvesh" else pct(sys.argv[1:]))
