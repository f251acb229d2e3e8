"""What pip says SGLang shipped: the sha256 that RECORD names for the gate file.

pip writes ``RECORD`` into ``sglang-<version>.dist-info`` at install: one CSV
row per installed file, with its sha256 as urlsafe base64. That hash is the
reference for the gate file, a witness this project never wrote. A row that
lists the file with a malformed hash, or a RECORD that cannot be read, is
refused as corrupt: taking it for "no RECORD" would hand the decision to this
role's log. Without any row for the file (an editable or source install) the
answer is None.
"""

from __future__ import annotations

import base64
import csv
import io
import os
import re
from pathlib import Path
from typing import Optional

RECORD_SHA256_RE = re.compile(r"sha256=([A-Za-z0-9_-]{43})=?")


class RecordError(Exception):
    """RECORD cannot say what was shipped; the message names it and the fix."""


def _reinstall(version: str) -> str:
    return f"Reinstall SGLang (pip install --force-reinstall --no-deps sglang=={version} with the virtualenv's pip)."


def _record_hex(record: Path, lineno: int, row: list[str], version: str) -> str:
    """The hex sha256 a RECORD row names; RecordError when the row is corrupt."""
    digest = row[1] if len(row) > 1 else ""
    match = RECORD_SHA256_RE.fullmatch(digest)
    if match:
        raw = base64.urlsafe_b64decode(match.group(1) + "=")
        if len(raw) == 32:
            return raw.hex()
    algorithm = digest.partition("=")[0] if "=" in digest else ""
    why = ("it has no hash" if not digest else
           f"its hash uses {algorithm}, this role compares sha256 only"
           if algorithm and algorithm != "sha256" and algorithm.isidentifier() else
           f"its hash {digest!r} is not sha256=<43 characters of urlsafe base64>")
    raise RecordError(
        f"{record} line {lineno} lists {row[0]!r}, the gate file, but {why}: this RECORD is "
        f"corrupt, so what SGLang shipped cannot be known. Nothing was changed. {_reinstall(version)}"
    )


def _record_rows(record: Path) -> list[list[str]]:
    if not record.is_file():
        what = "a directory" if record.is_dir() else "not a regular file"
        raise RecordError(f"{record} is {what}, expected pip's RECORD file. Nothing was changed. "
                          "Reinstall SGLang.")
    try:
        text = record.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RecordError(f"cannot read {record}: {exc.strerror}. Nothing was changed. Make it "
                          "readable, or reinstall SGLang.") from exc
    if "\x00" in text:
        raise RecordError(f"{record} holds a NUL byte: this RECORD is corrupt. Nothing was "
                          "changed. Reinstall SGLang.")
    try:
        return list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise RecordError(f"{record} is not CSV ({exc}): this RECORD is corrupt. Nothing was "
                          "changed. Reinstall SGLang.") from exc


def record_digest(package_dir: str, gate_file: str, version: str) -> Optional[tuple[str, str]]:
    """(the RECORD file, the hex sha256 it names for gate_file); None when no RECORD lists it.

    Two dist-info folders that disagree about the file (a broken upgrade) are refused.
    """
    site = Path(package_dir).parent
    rel = os.path.relpath(gate_file, site)
    found: list[tuple[str, str]] = []
    for dist_info in sorted(site.glob("sglang-*.dist-info")):
        record = dist_info / "RECORD"
        if not os.path.lexists(record):
            continue
        for lineno, row in enumerate(_record_rows(record), start=1):
            if row and os.path.normpath(row[0]) == rel:
                found.append((str(record), _record_hex(record, lineno, row, version)))
    if len({digest for _, digest in found}) > 1:
        raise RecordError(
            f"{len(found)} RECORD rows list {gate_file} with different sha256 "
            f"({', '.join(f'{r}: {d}' for r, d in found)}): more than one SGLang is "
            "installed over the other, or RECORD is corrupt. Reinstall SGLang into a clean virtualenv."
        )
    return found[0] if found else None
