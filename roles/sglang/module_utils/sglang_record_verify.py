"""An installed distribution's files checked against its RECORD (the wheel's own list of hashes).

uv fills every virtualenv from one shared cache by hardlinks: a file changed in
the cache would land in each new install. The install module runs this before
``current`` moves to a new virtualenv.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from pathlib import Path

READ_CHUNK = 1 << 20


class RecordError(Exception):
    """The install does not match its RECORD; the message names the files."""


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise RecordError(f"{venv} has no lib/python*/site-packages")
    return found[0]


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
            sha.update(chunk)
    return base64.urlsafe_b64encode(sha.digest()).rstrip(b"=").decode()


def verify_distribution(venv: Path, distribution: str, package: str) -> int:
    """Check every file of ``package`` (a top-level directory) that ``distribution``'s RECORD hashes.

    Returns how many files were checked; raises RecordError naming what differs.
    """
    site = site_packages(venv)
    records = sorted(site.glob(f"{distribution}-*.dist-info/RECORD"))
    if len(records) != 1:
        raise RecordError(f"expected one {distribution}-*.dist-info/RECORD in {site}, found {len(records)}")
    bad: list[str] = []
    checked = 0
    text = records[0].read_text(encoding="utf-8", errors="replace")
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 2 or not row[0].startswith(f"{package}/") or not row[1]:
            continue
        algorithm, _, expected = row[1].partition("=")
        path = site / row[0]
        if algorithm != "sha256" or not expected:
            bad.append(f"{row[0]} (RECORD gives {row[1][:20]!r}, expected sha256=...)")
        elif path.is_symlink() or not path.is_file():
            bad.append(f"{row[0]} (missing)")
        elif _digest(path) != expected:
            bad.append(f"{row[0]} (sha256 differs from RECORD)")
        checked += 1
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise RecordError(f"{len(bad)} of {checked} files of {distribution} in {site} do not match its "
                          f"RECORD: {shown}")
    if not checked:
        raise RecordError(f"{records[0]} lists no hashed file under {package}/")
    return checked
