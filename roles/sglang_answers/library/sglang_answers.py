#!/usr/bin/python
"""Ansible module: prove that a running OpenAI-compatible server still answers correctly."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_answers
short_description: Ask a running server a fixed prompt set and judge its answers
description:
  - Asks the server at I(url) every prompt of I(prompts) through C(/v1/completions), greedy
    (temperature 0), I(concurrency) at a time, and judges each answer (the classes are in
    C(module_utils/sglang_answers_check.py)). Degenerate answers (empty, U+FFFD, a run of one
    character or word, a looping phrase) and answers that miss their expected text fail always;
    with I(reference), answers that leave the recorded ones within their first I(prefix_words)
    words count as drift, and more than I(max_drift) of them fail.
  - Refuses a prompt set too small to see corrupt generations at I(detect_rate) with I(confidence).
  - A server that does not answer C(/v1/models) within 5 s fails at once, naming the URL. The whole
    check is bounded by I(timeout).
  - >-
    Reads only: it changes nothing, and runs the same in check mode. It returns the answers as a
    reference document (I(record)) for the caller to keep.
options:
  url:
    description: The server's base URL, e.g. C(http://127.0.0.1:30000).
    type: str
    required: true
  api_key:
    description: >-
      The server's API key, sent as C(Authorization: Bearer); never printed.
    type: str
    default: ""
  prompts:
    description: The prompt set (the role's C(files/prompts.json)).
    type: dict
    required: true
  reference:
    description: A reference recorded from a known-good server; omitted, drift is not judged.
    type: dict
  meta:
    description: What the returned reference document says of where it was recorded (release, host).
    type: dict
    default: {}
  concurrency:
    description:
      - Requests in flight at once. A reference that says at which concurrency it was recorded is
        compared at that one (greedy answers move with the batch).
    type: int
    default: 32
  timeout:
    description: Seconds for the whole check.
    type: int
    default: 150
  prefix_words:
    description: An answer agrees with the reference when its first this many words are the same.
    type: int
    default: 12
  max_drift:
    description: The largest fraction of compared answers that may drift from the reference.
    type: float
    default: 0.2
  detect_rate:
    description: The rate of corrupt generations the sample must see.
    type: float
    default: 0.05
  confidence:
    description: The probability with which the sample must see them.
    type: float
    default: 0.99
  must_pass:
    description: Fail the task when the answers fail; false returns C(passed=false) for the caller.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Check the answers against the reference
  sglang_answers:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_server_api_key }}"
    prompts: "{{ lookup('ansible.builtin.file', 'prompts.json') | from_json }}"
    reference: "{{ lookup('ansible.builtin.file', 'reference.json') | from_json }}"
"""

RETURN = r"""
passed:
  description: Whether every answer is sound (and drift within bounds).
  returned: always
  type: bool
samples:
  description: How many prompts were asked.
  returned: always
  type: int
classes:
  description: Each failure class and how many answers fell in it.
  returned: always
  type: dict
examples:
  description: Up to three failing answers, as prompt id, class and an excerpt.
  returned: always
  type: list
drift_fraction:
  description: The fraction of compared answers that drifted; null without a reference.
  returned: always
  type: float
seconds:
  description: How long the check took.
  returned: always
  type: float
model:
  description: The served model id.
  returned: always
  type: str
detection:
  description: The probability that this sample sees corrupt generations at detect_rate.
  returned: always
  type: float
record:
  description: The answers as a reference document (meta, model, answers).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_answers_check import (
    check_prompts,
    check_reference,
    detection_probability,
    judge,
    samples_needed,
)
from ansible.module_utils.sglang_answers_client import ServerDown, ask_all, check_url, served_model


def run(module: AnsibleModule) -> None:
    params = module.params
    try:
        base = check_url(params["url"])
        prompts = check_prompts(params["prompts"])
        reference = check_reference(params["reference"], prompts) if params["reference"] is not None else None
        needed = samples_needed(params["detect_rate"], params["confidence"])
    except ValueError as error:
        module.fail_json(msg=str(error), passed=False)
    for name, low in (("concurrency", 1), ("timeout", 5), ("prefix_words", 1)):
        if params[name] < low:
            module.fail_json(msg=f"{name} must be at least {low}, got {params[name]}", passed=False)
    if not 0 <= params["max_drift"] < 1:
        module.fail_json(msg=f"max_drift must be a fraction from 0 up to 1, got {params['max_drift']}", passed=False)
    if len(prompts) < needed:
        module.fail_json(passed=False, msg=(
            f"the prompt set has {len(prompts)} prompts; seeing corrupt generations at "
            f"{params['detect_rate']:.0%} with {params['confidence']:.0%} confidence takes {needed} "
            "(the chance to miss them all is (1 - rate) ** n). Add prompts or lower detect_rate."))
    try:
        model = served_model(base, params["api_key"])
    except ServerDown as error:
        module.fail_json(msg=str(error), passed=False, url=base)
    # Greedy answers move with the batch: a reference is compared at the concurrency it was recorded at.
    recorded_at = (params["reference"] or {}).get("concurrency")
    concurrency = recorded_at if isinstance(recorded_at, int) and recorded_at >= 1 else params["concurrency"]
    answers, seconds = ask_all(base, params["api_key"], model, prompts, concurrency, params["timeout"])
    verdict = judge(prompts, answers, reference, params["prefix_words"], params["max_drift"])
    result = {
        "changed": False, "passed": verdict.passed, "samples": verdict.samples, "classes": verdict.classes,
        "examples": verdict.examples, "drift_fraction": verdict.drift_fraction, "compared": verdict.compared,
        "seconds": round(seconds, 2), "model": model, "url": base, "concurrency": concurrency,
        "detection": round(detection_probability(params["detect_rate"], verdict.samples), 4),
        "msg": f"{base} ({model}), {seconds:.1f} s: {verdict.msg}",
    }
    if verdict.passed:
        result["record"] = {"version": 1, "meta": dict(params["meta"]), "model": model, "concurrency": concurrency,
                            "answers": {pid: got["text"] for pid, got in answers.items() if "text" in got}}
    if not verdict.passed and params["must_pass"]:
        module.fail_json(**result)
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "prompts": {"type": "dict", "required": True},
            "reference": {"type": "dict"},
            "meta": {"type": "dict", "default": {}},
            "concurrency": {"type": "int", "default": 32},
            "timeout": {"type": "int", "default": 150},
            "prefix_words": {"type": "int", "default": 12},
            "max_drift": {"type": "float", "default": 0.2},
            "detect_rate": {"type": "float", "default": 0.05},
            "confidence": {"type": "float", "default": 0.99},
            "must_pass": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
