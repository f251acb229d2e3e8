"""bench_compare=autotune checks each arm's answers and the report never counts a corrupt arm as a gain.

The server is the stand-in SGLang of molecule/sglang_server/standin (tests only): it answers the
shipped prompt set, and a corrupting tactic in its autotune cache turns a share of the long
generations into runs of '!'. The benchmark itself is the stand-in of test_playbook_bench.
"""

from __future__ import annotations

import json

import pytest
from test_playbook_answers import server  # noqa: F401  (the stand-in server fixture)
from test_playbook_bench import bench, box, flat  # noqa: F401  (the benchmark's stand-in box)


# One case (an A/B run takes about 90 s here): the passing side of the report is in
# test_bench_report_limits.py, and the arm's wiring is the same for both outcomes.
@pytest.mark.parametrize(("tactic", "passed"), [({"tactic": "corrupt", "rate": 0.1}, False)])
def test_each_arm_records_its_answer_check_and_a_corrupt_arm_is_no_gain(box, server, tactic, passed):  # noqa: F811
    standin = server(tactic)
    run = bench(box, standin.port, "-e", "bench_compare=autotune", "-e", "sglang_bench_check_answers=true",
                "-e", "sglang_server_api_key=")
    assert run.status == "successful", run.stdout
    for arm in ("off", "on"):
        meta = json.loads((next(box["runs"].glob(f"autotune-{arm}-*")) / "run.json").read_text())
        answers = meta["answers"]
        assert answers["passed"] is passed and answers["samples"] == 96, answers
        assert (answers["classes"].get("degenerate_run", 0) > 0) is not passed
    report = (next(box["runs"].glob("autotune-compare-*")) / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| 1024 | autotune-on"))
    if passed:
        assert "Answers: `autotune-off` passed (96 answers checked); `autotune-on` passed" in report
        assert row.endswith("| 4.23 |"), row
    else:
        assert "`autotune-on` FAILED: degenerate\\_run" in report
        assert row.startswith("| 1024 | autotune-on (corrupt answers) |")
        assert row.endswith("| not counted: corrupt answers |"), row
        assert "4.23" not in report
