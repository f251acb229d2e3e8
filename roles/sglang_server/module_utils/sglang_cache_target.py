"""Which FlashInfer version and GPU a replica's install would tune for (plain, tested)."""

from __future__ import annotations

import re
from pathlib import Path

PIN = re.compile(r"^Requires-Dist: flashinfer[-_]python(?:\[[^\]]*\])?\s*\(?==+\s*([^\s;)]+)", re.M)


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
