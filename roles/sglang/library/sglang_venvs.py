#!/usr/bin/python
"""Ansible module: report the kept SGLang virtualenvs and decide switches (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_venvs
short_description: Report kept SGLang virtualenvs, the current one, rollback and prune targets
description:
  - Reads C(ROOT/venvs/*/sglang-manifest.json) and the C(ROOT/current) link.
  - Finds the install that matches a request, the rollback target, and what to prune.
  - With I(request), plans the run (I(action), I(switch_to)), gives the install
    commands for the request, and what C(current) and the prune list will be after
    a rollback, reuse or no-op, so that a converged run needs no second look.
  - With I(system), reports how the service user, group and install directories
    differ from what the role wants (empty when they match).
  - Reports the version of uv in C(ROOT/tools/uv).
  - With I(inspect), reports the resolved package versions, a hash of the installer's
    C(pip freeze), the result of its C(pip check) and the installer's version for one
    virtualenv.
  - Never changes anything.
options:
  root:
    description: Root of the layout (holds C(venvs/) and C(current)).
    type: path
    required: true
  request:
    description:
      - What the operator asked for; matched against each manifest's C(request).
        When given, the module plans the run (I(action), I(switch_to)).
    type: dict
    default: {}
  upgrade:
    description: Plan a new install even when one for I(request) exists.
    type: bool
    default: false
  rollback:
    description: Plan a switch to the newest install older than current.
    type: bool
    default: false
  rollback_to:
    description: Name of the kept install to roll back to.
    type: str
    default: ""
  keep:
    description: How many complete installs to keep (current and its predecessor always stay).
    type: int
    default: 2
  system:
    description:
      - The service account and directories to compare with the host, with keys
        C(user), C(group), C(home), C(shell), C(groups) (supplementary) and C(dirs)
        (root-owned 0755 directories).
    type: dict
  debs:
    description:
      - Debian packages the install needs; their absence is reported in I(debs_missing)
        (read with C(dpkg-query), so that a host that has them needs no C(apt-get update)).
    type: list
    elements: str
    default: []
  inspect:
    description: A virtualenv path to inspect.
    type: path
  installer:
    description: The installer whose C(pip freeze) and C(pip check) I(inspect) uses.
    type: str
    choices: [uv, pip]
    default: pip
  packages:
    description: Distribution names whose installed versions I(inspect) reports.
    type: list
    elements: str
    default: [sglang, sglang-kernel, sgl-kernel, torch, flashinfer-python, flashinfer-cubin, flashinfer-jit-cache]
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Read the kept installs
  sglang_venvs:
    root: /opt/sglang
    request: "{{ sglang_request }}"
  register: venvs
"""

RETURN = r"""
venvs:
  description: Kept virtualenvs, oldest first, with manifest, complete and current flags.
  returned: always
  type: list
current:
  description: Name of the install C(current) points at, or an empty string.
  returned: always
  type: str
current_manifest:
  description: That install's manifest.
  returned: always
  type: dict
action:
  description:
    - C(rollback), C(reuse) (switch to a kept install made for I(request)),
      C(install) (build a new virtualenv) or C(none) (current already matches).
  returned: when request is given
  type: str
switch_to:
  description: Name of the install C(current) should point at for C(rollback) and C(reuse).
  returned: when request is given
  type: str
prune:
  description: Paths of virtualenvs to delete (as things are now).
  returned: always
  type: list
uv_command:
  description: The C(uv pip install) command line before C(--python VENV/bin/python), the step's args and packages.
  returned: when request is given
  type: list
kept:
  description: Names of the complete installs that stay after pruning, oldest first.
  returned: always
  type: list
steps:
  description: Install steps for I(request), each with C(name), C(packages) and C(args) (installer options).
  returned: when request is given
  type: list
after:
  description:
    - C(current), C(current_manifest), C(prune) and C(kept) once the planned rollback, reuse or
      no-op is done (for C(install), scan again after the install).
  returned: when request is given
  type: dict
system_drift:
  description: How the host differs from I(system); empty when it matches.
  returned: when system is given
  type: list
debs_missing:
  description: Packages of I(debs) that are not installed (all of them where dpkg-query is absent).
  returned: when debs is given
  type: list
uv_version:
  description: Version of C(ROOT/tools/uv/bin/uv), or an empty string when absent or broken.
  returned: always
  type: str
resolved:
  description: Installed versions of I(packages) (absent ones omitted).
  returned: with inspect
  type: dict
freeze_sha256:
  description: sha256 of the installer's C(pip freeze) output (C(--all) for pip).
  returned: with inspect
  type: str
sglang_requires:
  description: SGLang's own requirements on torch, FlashInfer and its kernel package.
  returned: with inspect
  type: list
pip_check:
  description: C(ok) and C(output) of C(pip check).
  returned: with inspect
  type: dict
python_version:
  description: The virtualenv's Python version.
  returned: with inspect
  type: str
installer_version:
  description: Version of the installer I(inspect) used (uv or the virtualenv's pip).
  returned: with inspect
  type: str
"""

import hashlib
import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_venvs import (
    UV_TOOL,
    VenvError,
    after_plan,
    check_problems,
    describe,
    install_steps,
    kept_names,
    missing_debs,
    plan_install,
    prune_list,
    scan,
    system_drift,
    tool_version,
    uv_argv,
)

# SGLang's own pins worth recording next to what was installed.
PINNED = {"torch", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sglang-kernel", "sgl-kernel"}

VERSIONS = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "try:\n"
    "    requires = m.requires('sglang') or []\n"
    "except m.PackageNotFoundError:\n"
    "    requires = []\n"
    "pins = [r for r in requires if 'extra ==' not in r]\n"
    "print(json.dumps({'packages': out, 'python': sys.version.split()[0], 'pins': pins}))\n"
)


def uv_version(module: AnsibleModule, uv: Path) -> str:
    if not uv.exists():
        return ""
    rc, out, _ = module.run_command([str(uv), "--version"])
    return tool_version(out) if rc == 0 else ""


def inspect(module: AnsibleModule, venv: str) -> dict:
    python = str(Path(venv) / "bin" / "python")
    if not Path(python).exists():
        module.fail_json(msg=f"{venv} is not a virtualenv: {python} is missing")
    rc, out, err = module.run_command([python, "-c", VERSIONS, *module.params["packages"]])
    if rc != 0:
        module.fail_json(msg=f"cannot read package versions in {venv}: {err.strip()}")
    data = json.loads(out)
    if module.params["installer"] == "uv":
        uv = str(Path(module.params["root"]) / UV_TOOL / "bin" / "uv")
        pip = [uv, "pip"]
        target = ["--python", python]
        freeze_args = ["freeze", *target]
        version_argv = [uv, "--version"]
    else:
        pip = [python, "-m", "pip"]
        target = []
        freeze_args = ["freeze", "--all"]
        version_argv = [*pip, "--version"]
    rc, freeze, err = module.run_command([*pip, *freeze_args])
    if rc != 0:
        module.fail_json(msg=f"pip freeze failed in {venv}: {err.strip()}")
    check_rc, check_out, check_err = module.run_command([*pip, "check", *target])
    rc, version, err = module.run_command(version_argv)
    if rc != 0:
        module.fail_json(msg=f"cannot read the installer's version: {err.strip()}")
    return {
        "installer_version": tool_version(version),
        "resolved": data["packages"],
        "python_version": data["python"],
        "sglang_requires": [p for p in data["pins"] if p.split("[")[0].split("=")[0].split("<")[0].split(">")[0]
                            .strip().lower().replace("_", "-") in PINNED],
        "freeze_sha256": hashlib.sha256(freeze.encode()).hexdigest(),
        "pip_check": {"ok": check_rc == 0, "output": check_problems(check_out + check_err)},
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            request=dict(type="dict", default={}),
            upgrade=dict(type="bool", default=False),
            rollback=dict(type="bool", default=False),
            rollback_to=dict(type="str", default=""),
            keep=dict(type="int", default=2),
            system=dict(type="dict"),
            debs=dict(type="list", elements="str", default=[]),
            inspect=dict(type="path"),
            installer=dict(type="str", choices=["uv", "pip"], default="pip"),
            packages=dict(
                type="list",
                elements="str",
                default=["sglang", "sglang-kernel", "sgl-kernel", "torch", "flashinfer-python",
                         "flashinfer-cubin", "flashinfer-jit-cache"],
            ),
        ),
        supports_check_mode=True,
    )
    params = module.params
    venvs, current = scan(params["root"])
    current_venv = next((v for v in venvs if v.name == current), None)
    prune = prune_list(venvs, current, params["keep"])
    result = dict(
        changed=False,
        venvs=describe(venvs, current),
        current=current or "",
        current_manifest=current_venv.manifest if current_venv else {},
        prune=prune,
        kept=kept_names(venvs, prune),
        uv_version=uv_version(module, Path(params["root"]) / UV_TOOL / "bin" / "uv"),
    )
    if params["system"] is not None:
        want = params["system"]
        result["system_drift"] = system_drift(
            want["user"], want["group"], want["home"], want["shell"], list(want.get("groups", [])),
            list(want.get("dirs", [])))
    if params["debs"]:
        dpkg_query = module.get_bin_path("dpkg-query")
        out = ""
        if dpkg_query:
            _, out, _ = module.run_command([dpkg_query, "-W", "-f", "${Package} ${Status}\n", *params["debs"]])
        result["debs_missing"] = missing_debs(out, params["debs"])
    if params["request"]:
        try:
            result["action"], result["switch_to"] = plan_install(
                venvs, current, params["request"], params["upgrade"], params["rollback"], params["rollback_to"])
            result["steps"] = install_steps(params["request"], params["upgrade"])
            result["uv_command"] = uv_argv(params["root"])
        except VenvError as exc:
            module.fail_json(msg=str(exc), **result)
        except KeyError as exc:
            module.fail_json(msg=f"the install request lacks the index {exc}", **result)
        result["after"] = after_plan(venvs, current, result["action"], result["switch_to"], params["keep"])
    if params["inspect"]:
        result.update(inspect(module, params["inspect"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
