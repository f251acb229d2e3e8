#!/usr/bin/python
"""Ansible module: SGLang installed in a versioned virtualenv, proved, current switched, old pruned."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_install
short_description: Ensure SGLang is installed for a request, in its own virtualenv, with rollback kept
description:
  - First checks the root where it resolves on the target (not a system directory, through
    directories only, writable, and where it exists empty or holding only what this module makes
    there, C(venvs), C(current), C(tools), C(cache), C(.install.lock) and C(.current.tmp); check mode
    fails where the real run would), then makes the root
    and C(ROOT/venvs) directories of root's, 0755, or puts their owner and mode right, before
    anything else; the diff names each.
  - >-
    Owns C(ROOT/venvs/*) and the C(ROOT/current) link end to end. Reads the kept installs
    (each C(venvs/NAME/sglang-manifest.json)) and C(current), and decides: nothing to do (current
    was made for the request), C(reuse) a kept install made for it, C(rollback) to the previous one
    (or I(rollback_to)), or C(install).
  - C(install) makes a new virtualenv, installs with uv (from one hardlinked cache under the root)
    or pip, proves that SGLang (and with I(request.heavy_dependencies), torch and FlashInfer)
    import, reads what was resolved, writes the manifest, and only then points C(current) at it.
    Any failure removes the unfinished virtualenv and leaves C(current) as it was.
  - >-
    A virtualenv without a manifest never finished (a killed run): it is never used and is removed,
    only where its name is one the module gives installs (such as C(pypi-0.5.12-7f2f402c)); any
    other directory under C(ROOT/venvs) is left alone.
  - Installs beyond I(keep) are removed; C(current) and the one before it always stay.
  - >-
    One run at a time per root: it holds C(ROOT/.install.lock) from its decision to its last prune. The
    installer of a run whose controller was killed keeps running on the host and holds it until it ends;
    the next run waits for it (at most I(lock_timeout) seconds) and decides from what it left.
  - Check mode reports the decision and changes nothing.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  root: {description: "Root of the layout (C(venvs/), C(current), C(tools/uv), C(cache/uv)).", type: path, required: true}
  request:
    description: The install request (source, version, git, torch, flashinfer, heavy_dependencies, indexes, extra_args, python, installer).
    type: dict
    required: true
  upgrade: {description: Install anew even when an install for the request exists., type: bool, default: false}
  rollback: {description: Switch to the newest install older than current., type: bool, default: false}
  rollback_to: {description: Name of the kept install to switch to., type: str, default: ""}
  keep: {description: Complete installs to keep (current and its predecessor always stay)., type: int, default: 2}
  uv_version: {description: The uv installed under C(ROOT/tools/uv) for I(request.installer=uv)., type: str, default: "0.13.9"}
  environment: {description: Environment of the installer (proxies, CA bundles)., type: dict, default: {}}
  lock_timeout: {description: Seconds to wait for another run's hold on C(ROOT/.install.lock)., type: int, default: 1800}
  debs:
    description: Debian packages the installer needs; missing ones are installed with apt-get.
    type: list
    elements: str
    default: [python3, python3-venv, python3-packaging]
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Ensure SGLang 0.5.23 is installed, the previous install kept
  sglang_install:
    root: /opt/sglang
    request:
      source: pypi
      version: 0.5.23
      git: ""
      torch: ""
      flashinfer: ""
      heavy_dependencies: true
      indexes: {nightly: "", torch: "https://download.pytorch.org/whl/cu130", flashinfer: "", flashinfer_nightly: ""}
      extra_args: ""
      python: python3
      installer: uv
  register: sglang_install
"""

RETURN = r"""
decision: {description: "What the run did: C(none), C(reuse), C(rollback) or C(install).", returned: always, type: str}
current: {description: The install C(current) points at after the run., returned: always, type: str}
previous: {description: The install C(current) pointed at before the run., returned: always, type: str}
current_manifest: {description: The manifest of the current install., returned: always, type: dict}
kept: {description: Complete installs kept, oldest first., returned: always, type: list}
pruned: {description: Paths removed (or that would be, in check mode)., returned: always, type: list}
installed: {description: The name of the new install (C(install) only)., returned: when installed, type: str}
"""

import fcntl
import json
import os
import shutil
import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_venvs import (
    MANIFEST,
    UV_CACHE,
    UV_TOOL,
    VenvError,
    after_plan,
    install_steps,
    missing_debs,
    plan_install,
    scan,
    uv_argv,
    venv_name,
)
from ansible.module_utils.sglang_install_root import (
    CURRENT,
    CURRENT_TMP,
    LOCK,
    ensure_directories,
    nearest_existing,
    root_problem,
    venv_problem,
)
from ansible.module_utils.sglang_record_verify import RecordError, verify_distribution
from ansible.module_utils.sglang_venv_inspect import inspect_argv, parse_inspection, tool_version

LOW_SPACE_MIB = 200
IMPORT_CHECK = "import torch, flashinfer, sglang; print(sglang.__version__)"


class Step(Exception):
    """An install step that failed: its name and the end of what it printed."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.step = name
        self.detail = detail


class Installer:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        self.root = Path(self.params["root"])
        self.request = self.params["request"]
        self.env = {str(k): str(v) for k, v in self.params["environment"].items()}

    def run(self, name: str, argv: list[str]) -> tuple[str, str]:
        rc, out, err = self.module.run_command(argv, environ_update=self.env)
        if rc != 0:
            tail = " ".join((err or out).strip().splitlines()[-5:]).rstrip(".")
            raise Step(name, f"`{' '.join(argv[:3])} ...` exited {rc}: {tail}")
        return out, err

    def ensure_debs(self) -> None:
        dpkg_query = self.module.get_bin_path("dpkg-query")
        if not dpkg_query:
            return
        _, out, _ = self.module.run_command([dpkg_query, "-W", "-f", "${Package} ${Status}\n", *self.params["debs"]])
        missing = missing_debs(out, self.params["debs"])
        if not missing:
            return
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        rc, _, _ = self.module.run_command(["apt-get", "install", "-y", "-q", *missing], environ_update=env)
        if rc != 0:
            self.run("apt-get update", ["apt-get", "update", "-q"])
            self.run(f"apt-get install {' '.join(missing)}", ["apt-get", "install", "-y", "-q", *missing])

    def answers(self, uv: Path) -> str:
        """The version uv at this path reports, or '' when it is missing, not executable or does not answer."""
        if uv.is_symlink() or not uv.is_file() or not os.access(uv, os.X_OK):
            return ""
        try:
            rc, out, _ = self.module.run_command([str(uv), "--version"], handle_exceptions=False)
        except OSError:
            return ""
        return tool_version(out) if rc == 0 else ""

    def ensure_uv(self) -> None:
        """tools/uv answering `uv --version` with the wanted version, else built whole and put in place.

        It is built under a temporary name and renamed, so a kill or a full disk never leaves a
        half-built tool at tools/uv; anything there that does not answer (no pip, a truncated
        binary) is replaced whole.
        """
        tool = self.root / UV_TOOL
        wanted = self.params["uv_version"]
        if self.answers(tool / "bin" / "uv") == wanted:
            return
        building, old = tool.with_name(".uv.building"), tool.with_name(".uv.old")
        remove(building)
        extra = self.request.get("extra_args", "").split()
        try:
            self.run("Create the virtualenv that holds uv", [self.request["python"], "-m", "venv", str(building)])
            self.run(f"Install uv {wanted}", [str(building / "bin" / "python"), "-m", "pip", "install", "-q",
                                              *extra, f"uv=={wanted}"])
            found = self.answers(building / "bin" / "uv")
            if found != wanted:
                raise Step(f"Install uv {wanted}", f"the new {building}/bin/uv answers `uv --version` with "
                                                    f"{found or 'nothing'}")
            remove(old)
            if os.path.lexists(tool):
                os.replace(tool, old)
            os.replace(building, tool)
            remove(old)
        except (Step, OSError) as exc:
            remove(building)
            raise exc if isinstance(exc, Step) else Step(f"Install uv {wanted}", str(exc)) from exc

    def install(self, name: str, previous: str) -> dict:
        venv = self.root / "venvs" / name
        uv = self.request.get("installer") == "uv"
        if venv.is_dir():  # left by a killed run: it never got its manifest (a file there is refused earlier)
            shutil.rmtree(venv)
        try:
            if uv:
                self.run("Create the virtualenv", [str(self.root / UV_TOOL / "bin" / "uv"), "venv", "--python",
                                                   self.request["python"], "--no-python-downloads", str(venv)])
            else:
                self.run("Create the virtualenv", [self.request["python"], "-m", "venv", str(venv)])
            steps = install_steps(self.request, self.params["upgrade"])
            for step in steps:
                if uv:
                    argv = uv_argv(str(self.root)) + ["--python", str(venv / "bin" / "python")]
                else:
                    argv = [str(venv / "bin" / "pip"), "install"]
                self.run(f"Install {step['name']}", argv + step["args"] + step["packages"])
            if self.request.get("heavy_dependencies"):
                self.run("Prove that SGLang, torch and FlashInfer import", [str(venv / "bin" / "python"), "-c",
                                                                             IMPORT_CHECK])
            found = self.inspect(venv, uv)
            if "sglang" not in found["resolved"]:
                raise Step("Read what was installed", f"the installer reported success but no sglang "
                                                       f"distribution is installed in {venv}")
            try:
                found["record_verified"] = verify_distribution(venv, "sglang", "sglang")
            except RecordError as exc:
                cache = f" uv links files from its cache {self.root}/{UV_CACHE}: remove it (it is rebuilt)" if uv else ""
                raise Step("Check SGLang's files against the wheel's RECORD",
                           f"{exc}. The install is not used.{cache}") from exc
            manifest = {
                "name": name,
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "request": self.request,
                "overrides": ([f"flashinfer=={self.request['flashinfer']}"]
                              if self.request.get("flashinfer") and self.request.get("heavy_dependencies") else []),
                "indexes": self.request.get("indexes", {}),
                "installer": "uv" if uv else "pip",
                "install_commands": steps,
                "previous": previous,
                **found,
            }
            write_atomic(venv / MANIFEST, json.dumps(manifest, indent=4, sort_keys=True) + "\n")
        except (Step, OSError) as exc:
            shutil.rmtree(venv, ignore_errors=True)
            step = exc.step if isinstance(exc, Step) else "Write the install"
            detail = exc.detail if isinstance(exc, Step) else str(exc)
            self.module.fail_json(
                msg=(f"Installing SGLang into {venv} failed at \"{step}\": {detail}.{full_disk_note(self.root, detail)} "
                     f"{self.root}/current still points at {previous or 'nothing'}; the running server is "
                     "untouched. Fix the cause (index URLs, versions, network, disk space) and re-run."),
                step=step)
        return manifest

    def inspect(self, venv: Path, uv: bool) -> dict:
        uv_bin = str(self.root / UV_TOOL / "bin" / "uv")
        commands = inspect_argv(str(venv), uv_bin if uv else "")
        outputs = {}
        for key, argv in commands.items():
            rc, out, err = self.module.run_command(argv, environ_update=self.env)
            if rc != 0 and key != "check":
                raise Step("Read what was installed", f"`{' '.join(argv[:3])} ...` exited {rc}: {err.strip()}")
            outputs[key] = (rc, out, err)
        return parse_inspection(outputs)


def remove(path: Path) -> None:
    """Whatever is at path (a tree, a file or a link) gone; nothing there is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def full_disk_note(root: Path, detail: str) -> str:
    """A sentence for a failure on a full (or nearly full) disk, else ''.

    Installers often hide ENOSPC behind their own error (ensurepip: "returned non-zero exit
    status 1"), so the free space is read as well.
    """
    try:
        free = shutil.disk_usage(nearest_existing(root)).free // 2**20
    except OSError:
        free = -1
    if "No space left on device" in detail or "Errno 28" in detail:
        state = f"is full ({free} MiB free now)" if free >= 0 else "is full"
    elif 0 <= free < LOW_SPACE_MIB:
        state = f"has only {free} MiB free, too little for the install"
    else:
        return ""
    return (f" The disk holding {root} {state}: nothing half-built was kept; free space (an install needs "
            "a few GB, tools/uv about 60 MiB) and re-run.")


def write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def switch(root: Path, name: str) -> None:
    """Point current at venvs/NAME in one rename: a kill leaves the old link or the new one."""
    temporary = root / CURRENT_TMP
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(root / "venvs" / name)
    os.replace(temporary, root / CURRENT)


def hold_lock(root: Path, timeout: int) -> tuple[int | None, str]:
    """ROOT/.install.lock held by this process (released when it exits), or None and who holds it.

    ROOT exists: ensure_directories made it first."""
    fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                return None, holder
            time.sleep(1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode(), 0)
    return fd, ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "request": {"type": "dict", "required": True},
            "upgrade": {"type": "bool", "default": False},
            "rollback": {"type": "bool", "default": False},
            "rollback_to": {"type": "str", "default": ""},
            "keep": {"type": "int", "default": 2},
            "uv_version": {"type": "str", "default": "0.13.9"},
            "environment": {"type": "dict", "default": {}},
            "debs": {"type": "list", "elements": "str", "default": ["python3", "python3-venv", "python3-packaging"]},
            "lock_timeout": {"type": "int", "default": 1800},
        },
        supports_check_mode=True,
    )
    params = module.params
    root = Path(params["root"])
    problem = root_problem(params["root"])  # check mode too: it fails where the real run would
    if problem:
        module.fail_json(msg=problem)
    try:
        made = ensure_directories(root, module.check_mode)
    except OSError as exc:
        module.fail_json(msg=(f"Cannot make {root} and {root / 'venvs'} directories of root's (0755): {exc}."
                              f"{full_disk_note(root, str(exc))} Nothing was installed and current was not "
                              "moved. Fix the cause and re-run."))
    if not module.check_mode:
        try:
            lock, holder = hold_lock(root, params["lock_timeout"])
        except OSError as exc:
            module.fail_json(msg=(f"Cannot take {root / LOCK}: {exc}.{full_disk_note(root, str(exc))} Nothing "
                                  "was installed and current was not moved. Fix the cause and re-run."))
        if lock is None:
            module.fail_json(msg=(f"Another install holds {root / LOCK} ({holder}) after {params['lock_timeout']} s: "
                                  "the installer of a run whose controller was killed keeps running on this host "
                                  "until it ends. Nothing was changed. Wait for it to end (or stop that process), "
                                  "then re-run."))
    venvs, previous = scan(root)
    previous = previous or ""
    try:
        action, target = plan_install(venvs, previous or None, params["request"], params["upgrade"],
                                      params["rollback"], params["rollback_to"])
    except VenvError as exc:
        module.fail_json(msg=str(exc))
    result: dict = {"changed": False, "decision": action, "previous": previous}
    installer = Installer(module)
    if action == "install":
        target = venv_name(params["request"], params["upgrade"], time.gmtime())
        result["installed"] = target
        problem = venv_problem(root / "venvs" / target)
        if problem:
            module.fail_json(msg=problem)
        if not module.check_mode:
            try:
                installer.ensure_debs()
                if params["request"].get("installer") == "uv":
                    installer.ensure_uv()
            except Step as exc:
                module.fail_json(msg=(f"Preparing the installer failed at \"{exc.step}\": {exc.detail}."
                                      f"{full_disk_note(root, exc.detail)} {root}/current still points at "
                                      f"{previous or 'nothing'}; no virtualenv was made. Fix the cause and re-run."),
                                 step=exc.step)
            installer.install(target, previous)
            venvs, _ = scan(root)
    if action != "none" and not module.check_mode:
        switch(root, target)
    after = after_plan(venvs, previous or None, "reuse" if action == "install" else action, target, params["keep"])
    if action == "install" and module.check_mode:
        after["current"] = target
    if not module.check_mode:
        for path in after["prune"]:
            shutil.rmtree(path, ignore_errors=True)
    result.update(current=after["current"], current_manifest=after["current_manifest"], kept=after["kept"],
                  pruned=after["prune"], changed=action != "none" or bool(after["prune"]) or bool(made))
    diffs = list(made)
    if result["current"] != previous:
        diffs.append({"before": f"current -> {previous or '(none)'}\n",
                      "after": f"current -> {result['current']}\n",
                      "before_header": f"{root}/current", "after_header": f"{root}/current"})
    if diffs:  # one dict, as Ansible's modules give, or one per thing changed
        result["diff"] = diffs[0] if len(diffs) == 1 else diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
