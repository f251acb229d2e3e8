#!/usr/bin/python
"""Ansible module: SGLang's serving-benchmark command lines for the installed release."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench_command
short_description: Build SGLang's serving-benchmark command lines for the installed release (read-only)
description:
  - Finds the installed SGLang package, from I(package_dir) or from the package
    that I(python) would import, without importing it.
  - Picks the benchmark module the release ships (C(sglang.benchmark.serving)
    when C(sglang/benchmark/serving.py) exists, else C(sglang.bench_serving)),
    reads the flags it accepts from its source and fails when one this module
    uses, or the C(random-ids) dataset, is missing.
  - Returns one command per concurrency, C(--num-prompts) scaled to it.
options:
  package_dir:
    description: The sglang package directory, taken literally (no C($VAR) or C(~)).
    type: str
  python:
    description: Interpreter of the SGLang virtualenv; locates the package and runs the benchmark. Taken literally.
    type: str
  host:
    description: Address of the SGLang server.
    type: str
    required: true
  port:
    description: Port of the SGLang server.
    type: int
    required: true
  model:
    description: Model path the server serves (gives the benchmark its tokenizer).
    type: str
    required: true
  served_model_name:
    description: Name the server answers to.
    type: str
    required: true
  concurrencies:
    description: Concurrency levels, run in this order.
    type: list
    elements: int
    required: true
  input_len:
    description: Input tokens per request.
    type: int
    default: 1024
  output_len:
    description: Output tokens per request.
    type: int
    default: 1024
  prompts_multiplier:
    description: C(--num-prompts) is this times the concurrency (at least 2).
    type: int
    default: 2
  prompts_minimum:
    description: Lower bound of C(--num-prompts).
    type: int
    default: 0
  output_file:
    description: The JSONL file the benchmark appends one line per level to.
    type: str
    required: true
attributes:
  check_mode:
    support: full
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Plan the benchmark
  sglang_bench_command:
    python: /opt/sglang/current/bin/python
    host: 127.0.0.1
    port: 30000
    model: /models/GLM-5-NVFP4
    served_model_name: glm-5
    concurrencies: [64, 256, 512, 1024]
    output_file: /var/tmp/sglang-bench/results.jsonl
  register: plan
"""

RETURN = r"""
version:
  description: SGLang version.
  returned: always
  type: str
module:
  description: The benchmark module run with C(python -m).
  returned: always
  type: str
  sample: sglang.bench_serving
source:
  description: The benchmark's source file.
  returned: always
  type: str
commands:
  description: Per level, C(concurrency), C(num_prompts), C(argv) and C(command_line).
  returned: always
  type: list
  elements: dict
"""

import shlex
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_locate import (
    LOCATE_ARGUMENT_SPEC,
    LOCATE_REQUIRED_ONE_OF,
    locate_package,
    sglang_version,
)
from ansible.module_utils.sglang_bench_levels import BenchError, inspect_benchmark, level_commands


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            LOCATE_ARGUMENT_SPEC,
            host=dict(type="str", required=True),
            port=dict(type="int", required=True),
            model=dict(type="str", required=True),
            served_model_name=dict(type="str", required=True),
            concurrencies=dict(type="list", elements="int", required=True),
            input_len=dict(type="int", default=1024),
            output_len=dict(type="int", default=1024),
            prompts_multiplier=dict(type="int", default=2),
            prompts_minimum=dict(type="int", default=0),
            output_file=dict(type="str", required=True),
        ),
        required_one_of=LOCATE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    params = module.params
    located = locate_package(module, params["package_dir"], params["python"])
    if located is None:
        module.exit_json(changed=False, not_installed=True, version="", module="", source="", commands=[])
    package_dir = Path(located)
    try:
        benchmark = inspect_benchmark(package_dir)
        commands = level_commands(
            benchmark, params["python"] or "python3", params["host"], params["port"], params["model"],
            params["served_model_name"], params["concurrencies"], params["input_len"], params["output_len"],
            params["output_file"], params["prompts_multiplier"], params["prompts_minimum"],
        )
    except BenchError as exc:
        module.fail_json(msg=str(exc), version=sglang_version(package_dir))
    module.exit_json(
        changed=False,
        version=sglang_version(package_dir),
        module=benchmark.module,
        source=benchmark.source,
        commands=[dict(c.as_dict(), command_line=shlex.join(c.argv)) for c in commands],
    )


if __name__ == "__main__":
    main()
