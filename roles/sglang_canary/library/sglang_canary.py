#!/usr/bin/python
"""Ansible module: the canary's plan and decision, and the promotion log (controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_canary
short_description: Plan a canary, decide on it, and keep the promotion log (on the controller)
description:
  - C(action=plan) (read-only) reads the promotion log and the release each replica runs, and
    returns the release the fleet runs (C(previous)), the canary's last benchmark run on it
    (C(baseline_run), empty when there is none) and whether a promotion is in progress.
  - C(action=decide) compares the candidate run with the baseline run at every concurrency,
    with the answer check's result, appends one entry to the promotion log (written whole,
    renamed over the old file) and returns the decision. It does not fail on a refusal; the
    caller rolls back first and fails after.
options:
  action: {description: plan or decide., type: str, required: true, choices: [plan, decide]}
  log: {description: The promotion log (JSON) on the controller., type: path, required: true}
  canary: {description: The canary replica's inventory name., type: str, required: true}
  versions: {description: "Replica -> the SGLang release its current install is (plan).", type: dict, default: {}}
  runs_dir: {description: sglang_bench's runs directory., type: path}
  concurrencies: {description: The fleet's concurrencies., type: list, elements: int, default: []}
  input_len: {description: Input tokens per request of the benchmark., type: int, default: 1024}
  output_len: {description: Output tokens per request of the benchmark., type: int, default: 1024}
  baseline_run: {description: "The current release's run on the canary (decide); default: its newest in runs_dir.", type: path}
  candidate_run: {description: "The candidate's run on the canary (decide); default: its newest in runs_dir.", type: path}
  release: {description: The candidate's SGLang version (decide)., type: str, default: ""}
  previous: {description: The release it would replace (decide)., type: str, default: ""}
  installs: {description: "The canary's install names: candidate and previous (decide).", type: dict, default: {}}
  answers: {description: The answer check's result; null when it was not run (decide)., type: dict}
  throughput_tolerance: {description: Percent of the baseline's total tok/s the candidate may lose (negative)., type: float, default: -3.0}
  ttft_tolerance: {description: Percent the candidate's p99 TTFT may grow., type: float, default: 10.0}
attributes:
  check_mode: {support: full}
  diff_mode: {support: full}
author:
  - sglang-deploy project
"""

EXAMPLES = r"""
- name: Decide on the canary
  sglang_canary:
    action: decide
    log: /srv/fleet/promotions.json
    canary: fleet-r1
    baseline_run: bench-runs/canary-baseline-20261202T030000Z-fleet-r1
    candidate_run: bench-runs/canary-20261202T031000Z-fleet-r1
    concurrencies: [64, 256]
    release: 0.5.24
    previous: 0.5.23
  delegate_to: localhost
"""

RETURN = r"""
previous: {description: The release the fleet runs (plan)., returned: plan, type: str}
baseline_run: {description: The canary's newest matching run on it, or empty (plan)., returned: plan, type: str}
in_progress: {description: The promoted entry whose roll is not finished, or null (plan)., returned: plan, type: dict}
promote: {description: Whether the rest may follow (decide)., returned: decide, type: bool}
verdicts: {description: "Per concurrency: tok/s and p99 TTFT of both, their ratios, regressions (decide).", returned: decide, type: list}
entry: {description: The entry appended to the log (decide)., returned: decide, type: dict}
msg: {description: One line naming the decision and every regression., returned: always, type: str}
"""

import datetime
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_canary_decision import (CanaryError, compare, decide, find_baseline, log_with,
                                                         previous_release, promotion_in_progress, read_levels,
                                                         read_log, verdicts_as_dicts, write_atomic)


def plan(module: AnsibleModule, log: Path) -> None:
    params = module.params
    entries = read_log(log)
    versions = {str(k): str(v) for k, v in params["versions"].items()}
    previous = previous_release(versions, params["canary"])
    baseline = find_baseline(Path(params["runs_dir"] or "."), params["canary"], previous, params["concurrencies"],
                             params["input_len"], params["output_len"]) if previous else None
    in_progress = promotion_in_progress(entries, versions)
    module.exit_json(changed=False, previous=previous, baseline_run=baseline or "", in_progress=in_progress,
                     msg=(f"fleet on {previous or 'nothing yet'}; canary {params['canary']}'s baseline run: "
                          f"{baseline or 'none yet'}"))


def decision(module: AnsibleModule, log: Path) -> None:
    params = module.params
    runs = {}
    for name, release in (("baseline_run", params["previous"]), ("candidate_run", params["release"])):
        runs[name] = params[name] or (find_baseline(
            Path(params["runs_dir"] or "."), params["canary"], release, params["concurrencies"], params["input_len"],
            params["output_len"]) if params["runs_dir"] and release else None)
        if not runs[name]:
            raise CanaryError(f"no benchmark run of {params['canary']} on SGLang {release or '(no release given)'} "
                              f"in {params['runs_dir']} at concurrencies {params['concurrencies']}; expected "
                              f"{name} or a runs_dir that holds one")
    entries = read_log(log)
    verdicts = compare(read_levels(Path(runs["baseline_run"]) / "results.jsonl"),
                       read_levels(Path(runs["candidate_run"]) / "results.jsonl"), params["concurrencies"],
                       params["throughput_tolerance"], params["ttft_tolerance"])
    promote, msg = decide(params["answers"], verdicts, params["canary"], params["release"], params["previous"])
    answers = params["answers"]
    entry = {
        "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "release": params["release"], "previous": params["previous"], "canary": params["canary"],
        "installs": params["installs"],
        "answers": None if answers is None else {k: answers.get(k) for k in ("passed", "samples", "classes", "msg")},
        "tolerances": {"throughput_pct": params["throughput_tolerance"], "p99_ttft_pct": params["ttft_tolerance"]},
        "baseline_run": runs["baseline_run"], "candidate_run": runs["candidate_run"],
        "verdicts": verdicts_as_dicts(verdicts), "decision": "promoted" if promote else "refused", "msg": msg,
    }
    before = log.read_text(encoding="utf-8") if log.exists() else ""
    after = log_with(entries, entry)
    if not module.check_mode:
        write_atomic(log, after)
    module.exit_json(changed=True, promote=promote, verdicts=entry["verdicts"], entry=entry, msg=msg,
                     diff={"before": before, "after": after, "before_header": str(log), "after_header": str(log)})


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["plan", "decide"]},
            "log": {"type": "path", "required": True},
            "canary": {"type": "str", "required": True},
            "versions": {"type": "dict", "default": {}},
            "runs_dir": {"type": "path"},
            "concurrencies": {"type": "list", "elements": "int", "default": []},
            "input_len": {"type": "int", "default": 1024},
            "output_len": {"type": "int", "default": 1024},
            "baseline_run": {"type": "path"},
            "candidate_run": {"type": "path"},
            "release": {"type": "str", "default": ""},
            "previous": {"type": "str", "default": ""},
            "installs": {"type": "dict", "default": {}},
            "answers": {"type": "dict"},
            "throughput_tolerance": {"type": "float", "default": -3.0},
            "ttft_tolerance": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    log = Path(module.params["log"])
    try:
        (plan if module.params["action"] == "plan" else decision)(module, log)
    except CanaryError as exc:
        module.fail_json(msg=f"{exc}. Nothing was written.")
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or log}: {exc.strerror}. Nothing was written.")


if __name__ == "__main__":
    main()
