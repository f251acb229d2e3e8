"""The fleet's autotune cache: which FlashInfer version and GPU an install tunes for, and
the hand-in of one replica's tuned tactics to the controller (plain, tested)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

PIN = re.compile(r"^Requires-Dist: flashinfer[-_]python(?:\[[^\]]*\])?\s*\(?==+\s*([^\s;)]+)", re.M)
# SGLang 0.5.16+ (flashinfer_autotune_cache_path): one file per rank, rank_tp<t>_pp<p>_dp<d>.json.
RANK_FILE = re.compile(r"rank_tp(\d+)_pp(\d+)_dp(\d+)\.json")


def flashinfer_version(site_packages: Path) -> tuple[str, str]:
    """(version, source): the installed flashinfer_python, else the exact pin of the installed SGLang."""
    for dist in sorted(site_packages.glob("flashinfer_python-*.dist-info")):
        return dist.name[len("flashinfer_python-"):-len(".dist-info")], "installed"
    for dist in sorted(site_packages.glob("sglang-*.dist-info")):
        found = PIN.search((dist / "METADATA").read_text(encoding="utf-8"))
        if found:
            return found.group(1), "pinned by " + dist.name[:-len(".dist-info")]
    return "", "no flashinfer_python installed and no exact pin in SGLang's METADATA"


def sm_name(compute_caps: list[str]) -> tuple[str, str]:
    """SGLang's sm<major><minor> from nvidia-smi's compute_cap lines; one kind of GPU only."""
    caps = sorted({line.strip() for line in compute_caps if line.strip()})
    if len(caps) != 1 or not re.fullmatch(r"\d+\.\d+", caps[0]):
        return "", f"expected one GPU kind from nvidia-smi --query-gpu=compute_cap, found {caps or 'none'}"
    major, minor = caps[0].split(".")
    return f"sm{major}{minor}", "nvidia-smi"


def complete_set_problem(files: dict[str, bytes], tp_size: int) -> str:
    """Why these rank files are not one replica's whole cache ("" when they are).

    SGLang gathers a digest of every TP rank's file before tuning and, when they
    differ (a rank without its file included), discards them all and tunes from
    scratch: a set is usable only with a file for every TP rank, all the same.
    """
    ranks: set[int] = set()
    for name, data in sorted(files.items()):
        found = RANK_FILE.fullmatch(name)
        if not found:
            return f"{name} is not a rank file of SGLang's cache (rank_tp<t>_pp<p>_dp<d>.json)"
        try:
            if not isinstance(json.loads(data), dict):
                return f"{name} is not a JSON object"
        except ValueError:
            return f"{name} is not JSON"
        ranks.add(int(found.group(1)))
    missing = sorted(set(range(tp_size)) - ranks)
    if missing:
        return f"no file for TP rank(s) {missing} of {tp_size}: SGLang would discard the set and tune again"
    if len({json.dumps(json.loads(d), sort_keys=True) for d in files.values()}) > 1:
        return "the ranks' files differ: SGLang would discard them ('per-rank caches disagree') and tune again"
    return ""


PROOF = "proof.json"


def proof_problem(proof: Any) -> str:
    """Why a cache's proof does not let it go to the fleet ("" when it does)."""
    answers = proof.get("answers") if isinstance(proof, dict) else None
    if not isinstance(answers, dict):
        return "it carries no answer check (proof.json with answers)"
    if answers.get("passed") is not True:
        return "its replica's answers did not pass the check"
    return ""


def hand_in(staging: Path, dest: Path, tp_size: int, check: bool = False,
            proof: dict[str, Any] | None = None) -> dict[str, Any]:
    """Move one replica's fetched cache (staging) to the fleet's dest in one rename, or say why not.

    The first complete set wins: dest is never overwritten or merged, so every
    file of it comes from one replica. Only regular files count (a link is
    refused), and only a replica whose answers passed hands in: its proof
    (versions, SM, the check's result) is kept beside the rank files as
    proof.json. The staging directory is removed after.
    """
    entries = sorted(staging.iterdir()) if staging.is_dir() and not staging.is_symlink() else []
    links = [p.name for p in entries if p.is_symlink() or not p.is_file()]
    files = {p.name: p.read_bytes() for p in entries if p.name not in links}
    if dest.is_dir():
        result = {"handed_in": False, "msg": f"the fleet already has {dest}; kept it"}
    elif links:
        result = {"handed_in": False, "msg": f"not handed in: {', '.join(links)} in {staging} "
                  "is not a regular file (a link or a directory)"}
    elif not files:
        result = {"handed_in": False, "msg": f"nothing fetched into {staging}"}
    else:
        problem = complete_set_problem(files, tp_size) or proof_problem(proof)
        result = {"handed_in": not problem, "msg": f"not handed in: {problem}" if problem else
                  f"handed in {len(files)} rank file(s) as {dest}, with their proof", "files": sorted(files)}
    if check:
        return {**result, "changed": result["handed_in"]}
    if result["handed_in"]:
        (staging / PROOF).write_text(json.dumps(proof, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, dest)   # atomic; refused when another replica got there first
        except OSError:
            result = {"handed_in": False, "msg": f"another replica handed in {dest} first; kept it"}
    if staging.is_symlink():
        staging.unlink()
    elif staging.exists():
        shutil.rmtree(staging)
    return {**result, "changed": result["handed_in"] or bool(files)}
