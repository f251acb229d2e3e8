"""The model store's plain functions (roles/sglang_model/module_utils/model_store.py)."""

from __future__ import annotations

import hashlib
import os

from ansible.module_utils.model_store import (
    HubFile,
    content_problem,
    git_blob_sha1,
    input_problems,
    plan,
    progress_line,
    safe_relpath,
    space_problem,
)


def entry(path: str, data: bytes, lfs: bool) -> HubFile:
    blob = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()  # noqa: S324
    return HubFile(path, len(data), hashlib.sha256(data).hexdigest() if lfs else None, blob)


def test_content_is_checked_by_size_then_sha256_or_git_blob_id(tmp_path):
    data = b"x" * 1000
    (tmp_path / "f").write_bytes(data)
    assert git_blob_sha1(str(tmp_path / "f")) == entry("f", data, False).blob_id
    assert content_problem(str(tmp_path / "f"), entry("f", data, True)) is None
    assert content_problem(str(tmp_path / "f"), entry("f", data, False)) is None
    other = b"y" + data[1:]
    assert "sha256" in content_problem(str(tmp_path / "f"), entry("f", other, True))
    assert "git blob id" in content_problem(str(tmp_path / "f"), entry("f", other, False))
    assert "1000 bytes, the Hub's tree says 999" in content_problem(str(tmp_path / "f"), entry("f", data[1:], True))


def test_plan_counts_what_is_staged_and_trusts_only_unchanged_recorded_files(tmp_path):
    final, partial = tmp_path / "c", tmp_path / "p"
    final.mkdir()
    partial.mkdir()
    a, b, c = entry("a", b"a" * 10, True), entry("b", b"b" * 20, True), entry("c", b"c" * 30, True)
    (final / "a").write_bytes(b"a" * 10)
    (final / "b").write_bytes(b"b" * 20)
    (partial / "c.incomplete").write_bytes(b"c" * 12)
    stat = os.stat(final / "a")
    manifest = {"files": {"a": dict(a.as_dict(), mtime_ns=stat.st_mtime_ns, verified=True)}}
    work = plan([a, b, c], str(final), str(partial), manifest, full=False)
    assert work.good == ["a"] and [e.path for e in work.to_check] == ["b"] and [e.path for e in work.to_fetch] == ["c"]
    assert work.bytes_needed == 18 and work.total_bytes == 60
    assert [e.path for e in plan([a, b, c], str(final), str(partial), manifest, full=True).to_check] == ["a", "b"]


def test_inputs_paths_space_and_progress_are_named():
    assert input_problems("nvidia/GLM-5-NVFP4", "main", "/srv/m", "cheap", "") == []
    problems = input_problems("../x", "a b", "relative", "fast", "rel")
    assert len(problems) == 5 and "sglang_model_repo='../x'" in problems[0]
    assert not safe_relpath("../etc/passwd") and not safe_relpath("/abs") and not safe_relpath(".sglang-model.json")
    assert safe_relpath("sub/dir/model.safetensors")
    assert space_problem("/srv", 100, 1000, 0) is None
    assert "only 1000 B is free" in space_problem("/srv", 2000, 1000, 0)
    assert progress_line(50, 200, 10.0, "s1") == "25.0% of 200 B, 10 B/s, 0 min 15 s left (s1)"
