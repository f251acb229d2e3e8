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
  - With I(inspect), reports the resolved package versions, a hash of C(pip freeze)
    and the result of C(pip check) for one virtualenv.
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
  inspect:
    description: A virtualenv path to inspect.
    type: path
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
  description: Paths of virtualenvs to delete.
  returned: always
  type: list
resolved:
  description: Installed versions of I(packages) (absent ones omitted).
  returned: with inspect
  type: dict
freeze_sha256:
  description: sha256 of C(pip freeze --all) output.
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
"""

import hashlib
import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_venvs import (
    VenvError,
    describe,
    plan_install,
    prune_list,
    scan,
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


def inspect(module: AnsibleModule, venv: str) -> dict:
    python = str(Path(venv) / "bin" / "python")
    if not Path(python).exists():
        module.fail_json(msg=f"{venv} is not a virtualenv: {python} is missing")
    rc, out, err = module.run_command([python, "-c", VERSIONS, *module.params["packages"]])
    if rc != 0:
        module.fail_json(msg=f"cannot read package versions in {venv}: {err.strip()}")
    data = json.loads(out)
    rc, freeze, err = module.run_command([python, "-m", "pip", "freeze", "--all"])
    if rc != 0:
        module.fail_json(msg=f"pip freeze failed in {venv}: {err.strip()}")
    check_rc, check_out, check_err = module.run_command([python, "-m", "pip", "check"])
    return {
        "resolved": data["packages"],
        "python_version": data["python"],
        "sglang_requires": [p for p in data["pins"] if p.split("[")[0].split("=")[0].split("<")[0].split(">")[0]
                            .strip().lower().replace("_", "-") in PINNED],
        "freeze_sha256": hashlib.sha256(freeze.encode()).hexdigest(),
        "pip_check": {"ok": check_rc == 0, "output": (check_out + check_err).strip()},
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
            inspect=dict(type="path"),
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
    result = dict(
        changed=False,
        venvs=describe(venvs, current),
        current=current or "",
        current_manifest=current_venv.manifest if current_venv else {},
        prune=prune_list(venvs, current, params["keep"]),
    )
    if params["request"]:
        try:
            result["action"], result["switch_to"] = plan_install(
                venvs, current, params["request"], params["upgrade"], params["rollback"], params["rollback_to"])
        except VenvError as exc:
            module.fail_json(msg=str(exc), **result)
    if params["inspect"]:
        result.update(inspect(module, params["inspect"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
