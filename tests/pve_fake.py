"""A fake PVE 9 API for the tests: fakepve (PyPI) served from a thread on a loopback address.

Test tool only: no role imports it. Every request is checked against Proxmox's own API schema and,
once `grant()` has been called, against PVE's permission rules (root@pam's devN rule included).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Callable

from fakepve import FakePve
from fakepve.certs import make_cert

PASSWORD = "fake-root-password-6c1d"
TOKEN_ID = "ansible"
TOKEN_SECRET = "5f0c7e1a-fake-token-secret-93ab"
NODE = "pve1"
TEMPLATE = "debian-12-standard_12.12-1_amd64.tar.zst"


class PveThread:
    """A started FakePve in its own event loop; `run(fn)` calls fn(pve) inside that loop."""

    def __init__(self, workdir: Path, confdir: Path | None = None, started: Path | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.pve = FakePve(user="root@pam", password=PASSWORD)
        if confdir is not None:
            mirror_created_configs(self.pve, confdir)
            if started is not None:
                keep_the_conf_at_start(self.pve, confdir, started)
        self.certfile, self.keyfile, _ = make_cert(str(workdir), hosts=(self.pve.host,))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.pve.time_scale = 0
        self.pve.port = 0
        asyncio.run_coroutine_threadsafe(self.pve.start(self.certfile, self.keyfile), self.loop).result(30)

    def run(self, fn: Callable[[FakePve], Any]) -> Any:
        async def call() -> Any:
            result = fn(self.pve)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.pve.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def mirror_created_configs(pve: FakePve, confdir: Path) -> None:
    """STAND-IN for pmxcfs: a container the fake creates gets its /etc/pve/lxc/VMID.conf here.

    On a node the API writes that file itself; the role writes raw lxc.* keys into it.
    """
    create = pve._lxc_create

    async def create_and_mirror(user: str, values: dict) -> object:
        answer = await create(user, values)
        confdir.mkdir(parents=True, exist_ok=True)
        path = confdir / f"{values['vmid']}.conf"
        if not path.exists():
            path.write_text(f"arch: amd64\nhostname: {values.get('hostname', '')}\n", encoding="utf-8")
        return answer

    pve._lxc_create = create_and_mirror


def keep_the_conf_at_start(pve: FakePve, confdir: Path, started: Path) -> None:
    """STAND-IN for what LXC reads when PVE starts a container: the conf file as it was at that
    start (a start or a reboot), kept as started/VMID.conf for the stand-in `pct exec`.

    On a node, raw lxc.* lines written to /etc/pve/lxc/VMID.conf apply at the container's next
    start only (PVE's docs: a container must be restarted for a changed config file to take effect).
    """
    steps = pve._start_steps

    async def start_and_keep(ct, user, skiplock=False):
        await steps(ct, user, skiplock)
        started.mkdir(parents=True, exist_ok=True)
        conf = confdir / f"{ct.vmid}.conf"
        (started / f"{ct.vmid}.conf").write_text(conf.read_text(encoding="utf-8") if conf.exists() else "",
                                                encoding="utf-8")

    pve._start_steps = start_and_keep


def seed(pve: FakePve, template: bool = True) -> None:
    """A PVE 9 node as a user has it: root@pam's API token, ACLs on, the template on local."""
    pve.apitokens[f"root@pam!{TOKEN_ID}"] = TOKEN_SECRET
    # ACLs on: from here PVE's permission rules apply. root@pam holds everything, but
    # devN stays root@pam-only, for its tokens too.
    pve.grant("nobody@pve", "/vms", "VM.Audit")
    if template:
        add_template(pve)


def add_template(pve: FakePve, name: str = TEMPLATE) -> None:
    pve.storages["local"].setdefault("volumes", {})[f"vztmpl/{name}"] = {
        "content": "vztmpl", "size": 126 * 1024 ** 2, "format": "tzst", "ctime": 1764547200,
    }


def config_of(pve: FakePve, vmid: int) -> dict:
    ct = pve.ct(vmid)
    return dict(ct.config) if ct else {}
