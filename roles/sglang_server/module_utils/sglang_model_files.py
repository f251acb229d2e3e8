"""The model directory SGLang is pointed at, checked before any (re)start: present and whole.

A Hub repo id (ORG/NAME that is not a directory here) is left to SGLang, which fetches it itself.
A directory must hold config.json and every shard model.safetensors.index.json lists, each at its
size: the size the store's manifest recorded (.sglang-model.json, written by the sglang_model
role) where there is one, else the size the shard's own safetensors header implies (8 bytes, the
header, and the end of its last tensor), which a truncated copy does not reach.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any, Optional

INDEX = "model.safetensors.index.json"
MANIFEST = ".sglang-model.json"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def is_hub_id(path: str) -> bool:
    return bool(HUB_ID.match(path)) and not os.path.exists(path)


def safetensors_size(path: str) -> Optional[int]:
    """The file size a safetensors header implies, or None when the header cannot be read."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) != 8:
                return None
            (length,) = struct.unpack("<Q", head)
            if length > 100 * 1024 * 1024:
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError):
        return None
    ends = [int(item["data_offsets"][1]) for key, item in header.items()
            if key != "__metadata__" and isinstance(item, dict) and "data_offsets" in item]
    return 8 + length + max(ends, default=0)


def model_dir_problems(path: str) -> list[str]:
    """What is missing or short in the model directory; empty when SGLang can load it."""
    if not os.path.isdir(path):
        return [f"{path} is not a directory"]
    problems = []
    if not os.path.isfile(os.path.join(path, "config.json")):
        problems.append("config.json is missing")
    recorded: dict[str, Any] = {}
    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as handle:
            recorded = json.load(handle).get("files", {})
    except (OSError, ValueError, AttributeError):
        recorded = {}
    index_path = os.path.join(path, INDEX)
    if not os.path.isfile(index_path):
        if not any(name.endswith(".safetensors") for name in os.listdir(path)):
            problems.append(f"there is no {INDEX} and no *.safetensors file")
        return problems
    try:
        with open(index_path, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return problems + [f"{INDEX} is not a safetensors index (no weight_map)"]
    for shard in shards:
        file = os.path.join(path, shard)
        if not os.path.isfile(file):
            problems.append(f"{shard} (listed in {INDEX}) is missing")
            continue
        size = os.path.getsize(file)
        want = recorded.get(shard, {}).get("size") if isinstance(recorded.get(shard), dict) else None
        want = int(want) if want is not None else safetensors_size(file)
        if want is None:
            problems.append(f"{shard} has no readable safetensors header")
        elif size != want:
            problems.append(f"{shard} is {size} bytes, expected {want}")
    return problems
