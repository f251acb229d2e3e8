#!/usr/bin/python
"""Ansible module: check a profile of SGLang server flags against the installed SGLang."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_flags
short_description: Check SGLang server flags against the installed release (read-only)
description:
  - Finds the installed SGLang package, either from I(package_dir) or from the
    package that I(python) would import, and reads the server's command-line
    flags from its source with Python's AST (the module imports neither SGLang
    nor torch).
  - Understands the three ways SGLang has declared its flags
    (C(parser.add_argument) calls up to 0.5.13; annotated C(ServerArgs) fields
    from 0.5.14; fields split over C(srt/arg_groups/fields/) from 0.5.23).
  - Resolves I(flags) into an argv list in the spelling the installed release
    accepts. Known renames (C(--nsa-*-backend) <-> C(--dsa-*-backend)) are
    translated, with a note. Argparse prefix abbreviations (C(--tp)) are not
    accepted; the canonical spelling is emitted.
  - Fails, listing every problem at once, on unknown flags (with the closest
    valid names), invalid choices (with the valid ones), a value given to a
    switch, a bare switch given to a flag that needs a value, or a flag SGLang
    declares required (C(--model-path)) left out.
  - Where I(python) can import SGLang (a full install), SGLang's own parser is
    asked too, and it leads; see I(runtime_check).
  - Never changes anything.
options:
  package_dir:
    description: The sglang package directory (the folder holding C(srt/)), taken literally (no C($VAR) or C(~)).
    type: str
  python:
    description:
      - Python interpreter of the SGLang virtualenv; used to locate the package
        when I(package_dir) is not given (found, not imported), and to run SGLang's
        own parser (I(runtime_check)). Taken literally.
    type: str
  flags:
    description:
      - The profile, flag name without dashes -> value. C(true) passes a bare
        switch; C(false) or C(null) leaves the flag out; a list gives several
        values (flags taking nargs only); anything else is one value.
    type: dict
    default: {}
  env_flags:
    description:
      - Flags whose value systemd takes from the environment file at start, flag name
        without dashes -> environment variable (C(api-key) -> C(SGLANG_SERVER_API_KEY)). Their
        spelling is checked like I(flags); the value never passes through this module.
    type: dict
    default: {}
  runtime_check:
    description:
      - Also ask SGLang's own argument parser, run by I(python) (needs SGLang's dependencies
        there; no GPU; read-only, so in check mode too). Where it can run it leads - a
        disagreement with the static reader is one message, the failure where SGLang's parser
        refuses the flags, a warning where it accepts what the static reader refused.
      - Not done with I(package_dir). Where SGLang cannot be imported (the demo, C(--no-deps)
        installs, CI) the static reader decides, with a note.
    type: bool
    default: true
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check the GLM-5 profile against the SGLang in the virtualenv
  sglang_flags:
    python: /opt/sglang/current/bin/python
    flags:
      model-path: /models/GLM-5-NVFP4
      tp-size: 8
      quantization: modelopt_fp4
      moe-runner-backend: flashinfer_cutlass
      disable-radix-cache: true
      nsa-prefill-backend: trtllm
  register: sglang_cli

"""

RETURN = r"""
package_dir:
  description: The sglang package directory inspected.
  returned: always
  type: str
version:
  description: SGLang version (dist-info METADATA, else the package's version file).
  returned: success
  type: str
  sample: 0.5.23
argv:
  description: The flags as an argument list, in profile order.
  returned: success
  type: list
  elements: str
  sample: ["--tp-size", "8", "--disable-radix-cache"]
command_line:
  description: I(argv) shell-quoted and joined (shlex.join).
  returned: success
  type: str
  sample: --tp-size 8 --disable-radix-cache
notes:
  description: Renames applied, deprecated flags used, choices that could not be checked.
  returned: success
  type: list
  elements: str
flag_count:
  description: How many flags the installed SGLang defines.
  returned: success
  type: int
env_flags:
  description: I(env_flags) in the installed release's spelling, as [flag, VARIABLE] pairs.
  returned: success
  type: list
  elements: list
  sample: [["--api-key", "SGLANG_SERVER_API_KEY"]]
config_flag:
  description:
    - How this release reads options from a YAML file (C(--config)), or empty where it has no
      such flag; the service role passes the API key that way where it can.
  returned: success
  type: str
  sample: --config
runtime_parser:
  description:
    - What SGLang's own parser said - C(agrees), C(decided) (it accepted what the static reader
      refused), C(not available) (it cannot be imported here), or C(not asked).
  returned: success
  type: str
problems:
  description: Every problem found, one per entry.
  returned: failure
  type: list
  elements: str
"""

import shlex

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_flag_table import FlagError
from ansible.module_utils.sglang_locate import (
    LOCATE_ARGUMENT_SPEC,
    LOCATE_REQUIRED_ONE_OF,
    locate_package,
)
from ansible.module_utils.sglang_runtime_args import check_flags, parser_asker
def run(module: AnsibleModule) -> None:
    params = module.params
    package_dir = locate_package(module, params["package_dir"], params["python"])
    if package_dir is None:
        module.exit_json(changed=False, not_installed=True, argv=[], command_line="", notes=[],
                         env_flags=[], config_flag="", version="not installed", flag_count=0,
                         msg="SGLang is not installed yet: check mode cannot validate the flags.")
    try:
        ask = parser_asker(module.run_command, params["python"]) \
            if params["runtime_check"] and not params["package_dir"] else None
        checked = check_flags(package_dir, params["flags"] or {}, params["env_flags"] or {}, ask)
    except FlagError as exc:
        module.fail_json(msg=str(exc), problems=exc.problems, package_dir=package_dir, changed=False)
    if checked.warning:
        module.warn(checked.warning)
    module.exit_json(
        changed=False,
        package_dir=package_dir,
        version=checked.version,
        argv=checked.argv,
        command_line=shlex.join(checked.argv),
        notes=checked.notes,
        env_flags=checked.env_flags,
        config_flag=checked.config_flag,
        flag_count=checked.flag_count,
        runtime_parser=checked.runtime_parser,
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            LOCATE_ARGUMENT_SPEC,
            flags=dict(type="dict", default={}),
            env_flags=dict(type="dict", default={}),
            runtime_check=dict(type="bool", default=True),
        ),
        required_one_of=LOCATE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
