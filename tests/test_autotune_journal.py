"""Judging a start's journal for FlashInfer autotune.

No real journal of a GLM-5 start on SM120 ships with any package, so these
lines are synthetic, shaped after the log lines listed in the reference notes.
"""

from __future__ import annotations


from conftest import REPO, load_file

# A filter plugin, loaded from its file as Ansible's plugin loader does.
_journal = load_file(REPO / "roles" / "sglang_server" / "filter_plugins" / "sglang_journal.py")
autotune_evidence = _journal.autotune_evidence


def journal(tp: int, running: bool = True, completed: bool = True, skipped: int = 0, old: bool = False) -> str:
    lines = ["[2026-11-30 10:00:00] server_args=ServerArgs(...)"]
    for rank in range(tp):
        prefix = f"[2026-11-30 10:01:0{rank % 10} TP{rank}]"
        if running:
            lines.append(f"{prefix} Running FlashInfer autotune" + ("..." if old else " with cache: /var/cache/sglang/flashinfer/autotune/x.json"))
        lines.extend(f"{prefix} [Autotuner]: Skipping tactic {i} due to failure while profiling" for i in range(skipped))
        if completed:
            lines.append(f"{prefix} FlashInfer autotune completed.")
    lines.append("The server is fired up and ready to roll!")
    return "\n".join(lines)


def test_eight_ranks_tuned():
    result = autotune_evidence(journal(8, skipped=3), 8, expected=True)
    assert result["ok"] and (result["running"], result["completed"], result["skipped_tactics"]) == (8, 8, 24)
    assert "not failures" in result["message"]


def test_old_log_spelling_counts():
    assert autotune_evidence(journal(8, old=True), 8, expected=True)["ok"]


def test_no_line_at_all_means_the_gate_said_no():
    result = autotune_evidence(journal(8, running=False, completed=False), 8, expected=True)
    assert not result["ok"]
    assert "the gate returned False, autotune did not run" in result["message"]


def test_missing_ranks_or_completion_fail():
    assert not autotune_evidence(journal(4), 8, expected=True)["ok"]
    result = autotune_evidence(journal(8, completed=False), 8, expected=True)
    assert not result["ok"] and "0 completed" in result["message"]


def test_autotune_off_expects_silence():
    assert autotune_evidence(journal(8, running=False, completed=False), 8, expected=False)["ok"]
    result = autotune_evidence(journal(8), 8, expected=False)
    assert not result["ok"] and "expected no autotune lines" in result["message"]
