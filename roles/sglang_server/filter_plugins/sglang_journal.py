"""Filter: what a start's journal says about FlashInfer autotune."""

from __future__ import annotations

import re
from typing import Any

RUNNING = re.compile(r"Running FlashInfer autotune")
COMPLETED = re.compile(r"FlashInfer autotune completed\.")
SKIPPED_TACTIC = re.compile(r"\[Autotuner\]: Skipping tactic")


def autotune_evidence(journal: str, tp_size: int, expected: bool) -> dict[str, Any]:
    """Count the autotune lines of one start and judge them against the expectation.

    With autotune expected, SGLang logs one "Running FlashInfer autotune" and one
    "FlashInfer autotune completed." per tensor-parallel rank. No such line means
    the gate returned False. "[Autotuner]: Skipping tactic" warnings flood on
    SM120 and are not failures.
    """
    lines = journal.splitlines()
    running = sum(1 for line in lines if RUNNING.search(line))
    completed = sum(1 for line in lines if COMPLETED.search(line))
    skipped = sum(1 for line in lines if SKIPPED_TACTIC.search(line))
    if expected:
        ok = running == tp_size and completed == tp_size
        want = f"expected {tp_size} 'Running FlashInfer autotune' and {tp_size} 'FlashInfer autotune completed.'"
    else:
        ok = running == 0 and completed == 0
        want = "expected no autotune lines (autotune=false)"
    message = (
        f"autotune {'proven' if ok else 'NOT as expected'}: {running} running, {completed} completed, "
        f"{skipped} skipped-tactic warnings (not failures); {want}."
    )
    if not ok and expected and running == 0:
        message += " No autotune line at all: the gate returned False, autotune did not run."
    return {"ok": ok, "running": running, "completed": completed, "skipped_tactics": skipped, "message": message}


CACHE_LINE = re.compile(r"Running FlashInfer autotune with cache: (\S+)")


def autotune_cache_source(journal: str, cache_dir: str) -> dict[str, Any]:
    """Where this start's tuned tactics are, from its own journal line (SGLang 0.5.16+).

    SGLang's path is <cache_dir>/flashinfer/autotune/<flashinfer version>/<sm>/<key>/<rank>.json;
    the FlashInfer version and the SM come from the path, never from elsewhere. Empty
    fields when the journal has no such line or the path lies outside cache_dir.
    """
    root = cache_dir.rstrip("/") + "/flashinfer/autotune/"
    for match in CACHE_LINE.finditer(journal):
        path = match.group(1)
        if not path.startswith(root):
            continue
        parts = path[len(root):].split("/")
        if len(parts) == 4 and all(part and part not in (".", "..") for part in parts):
            flashinfer, sm, key, _ = parts
            return {"found": True, "flashinfer": flashinfer, "sm": sm, "key": key,
                    "dir": root + "/".join(parts[:3])}
    return {"found": False, "flashinfer": "", "sm": "", "key": "", "dir": ""}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_autotune_evidence": autotune_evidence,
                "sglang_autotune_cache_source": autotune_cache_source}
