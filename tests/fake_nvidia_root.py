#!/usr/bin/env python3
"""Build a fake root (proc/devices, proc/driver/nvidia/version, dev nodes) from a GPU fixture.

    python tests/fake_nvidia_root.py FIXTURE_DIR DEST [--drop /dev/nvidia1] ...

A fixture directory holds captured text: proc-devices.txt, proc-driver-nvidia-version.txt
(absent: no driver) and ls-dev-nvidia.txt (`ls -ln /dev/nvidia* /dev/nvidia-caps`).
Device nodes are made with mknod (root needed) with the listed major:minor.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import sys
from pathlib import Path

# "crw-rw-rw- 1 0 0 195,   0 Nov 30 10:52 /dev/nvidia0" or "... 241, 1 Nov 30 10:52 nvidia-cap1"
_LS_NODE = re.compile(r"^c\S*\s+\d+\s+\S+\s+\S+\s+(?P<major>\d+),\s*(?P<minor>\d+)\s+.*?\s(?P<name>\S+)$")
_LS_DIR = re.compile(r"^(?P<dir>/\S+):$")


def parse_ls(text: str) -> dict[str, tuple[int, int, int]]:
    """Absolute node path -> (major, minor, permission bits) from an ls -l(n) listing."""
    nodes: dict[str, tuple[int, int, int]] = {}
    directory = "/dev"
    for line in text.splitlines():
        line = line.rstrip()
        header = _LS_DIR.match(line)
        if header:
            directory = header.group("dir")
            continue
        match = _LS_NODE.match(line)
        if not match:
            continue
        name = match.group("name")
        path = name if name.startswith("/") else f"{directory}/{name}"
        nodes[path] = (int(match.group("major")), int(match.group("minor")), _mode(line[:10]))
    return nodes


def _mode(symbolic: str) -> int:
    bits = 0
    for index, flag in enumerate(symbolic[1:10]):
        if flag != "-":
            bits |= 1 << (8 - index)
    return bits


def build(fixture: Path, dest: Path, drop: tuple[str, ...] = ()) -> dict[str, tuple[int, int, int]]:
    """Create dest/proc and dest/dev from the fixture; returns the nodes made."""
    (dest / "proc" / "driver" / "nvidia").mkdir(parents=True, exist_ok=True)
    (dest / "dev").mkdir(parents=True, exist_ok=True)
    devices = fixture / "proc-devices.txt"
    if devices.exists():
        shutil.copyfile(devices, dest / "proc" / "devices")
    version = fixture / "proc-driver-nvidia-version.txt"
    if version.exists():
        shutil.copyfile(version, dest / "proc" / "driver" / "nvidia" / "version")
    listing = fixture / "ls-dev-nvidia.txt"
    nodes = parse_ls(listing.read_text()) if listing.exists() else {}
    for path in drop:
        nodes.pop(path, None)
    for path, (major, minor, mode) in nodes.items():
        target = dest / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        os.mknod(target, stat.S_IFCHR | mode, os.makedev(major, minor))
        os.chmod(target, mode)
    return nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--drop", action="append", default=[], metavar="/dev/NODE",
                        help="leave this node out (repeatable)")
    args = parser.parse_args(argv)
    if not args.fixture.is_dir():
        parser.error(f"{args.fixture} is not a fixture directory")
    nodes = build(args.fixture, args.dest, tuple(args.drop))
    print(f"{args.dest}: {len(nodes)} nodes from {args.fixture}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
