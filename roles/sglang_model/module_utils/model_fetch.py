"""One repo at one commit made complete and checked in the store: the fetch, end to end.

A source gives three things: resolve(revision) -> commit, tree(commit) -> [HubFile], and
fetch(commit, entry, staged) which appends the rest of the file's bytes to staged. The Hub is one
(model_hub.HubSource); a directory holding another node's store, or a mirror laid out the same
way, is another (DirSource). Whatever the source, every file is checked against the tree the Hub
gave (size; sha256 for LFS files, the git blob id for the others) before it gets its final name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any

from ansible.module_utils.model_store import (
    COMMIT_RE,
    CURRENT,
    SUFFIX,
    HubFile,
    content_problem,
    free_bytes,
    human,
    link_current,
    paths,
    plan,
    progress_line,
    read_manifest,
    repo_folder,
    safe_relpath,
    space_problem,
    tree_from_manifest,
    write_manifest,
)


class FetchFault(Exception):
    """The run cannot go on; the message names what and how to fix it."""


class DirSource:
    """Another store (a mounted share of the first node's sglang_model_dir, or a local mirror)."""

    def __init__(self, root: str, repo: str) -> None:
        self.base = os.path.join(root, repo_folder(repo))
        self.where = f"the store at {root}"

    def resolve(self, revision: str) -> str:
        if COMMIT_RE.match(revision) and os.path.isdir(os.path.join(self.base, revision)):
            return revision
        link = os.path.join(self.base, CURRENT)
        manifest = read_manifest(link) if os.path.islink(link) else {}
        if manifest.get("revision") == revision or manifest.get("commit") == revision:
            return str(manifest["commit"])
        raise FetchFault(f"{self.where} has no complete copy of {revision} under {self.base} (its current is "
                         f"{manifest.get('revision', 'absent')!r}). Run playbooks/model.yml on the first node "
                         "first, or check sglang_model_source.")

    def tree(self, commit: str) -> list[HubFile]:
        manifest = read_manifest(os.path.join(self.base, commit))
        if not manifest.get("complete"):
            raise FetchFault(f"{self.where} holds no complete, checked copy of {commit} ({self.base}/{commit} "
                             "has no complete manifest). Finish the first node's fetch first.")
        return tree_from_manifest(manifest)

    def fetch(self, commit: str, entry: HubFile, staged: str) -> None:
        os.makedirs(os.path.dirname(staged), exist_ok=True)
        with open(os.path.join(self.base, commit, entry.path), "rb") as src, open(staged, "ab") as dst:
            have = dst.tell()
            if have > entry.size:
                dst.truncate(0)
                have = 0
            src.seek(have)
            shutil.copyfileobj(src, dst, 16 * 1024 * 1024)


class Progress:
    """Percent, rate and time left, in a JSON file and a log the task names (one line each 5 s)."""

    def __init__(self, state_file: str, log_file: str, run_id: str) -> None:
        self.state_file, self.log_file, self.run_id = state_file, log_file, run_id
        self.total = self.done = self.moved = 0
        self.current = ""
        self.staged = ""
        self.started = time.monotonic()
        self.window: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.last_log = 0.0
        for path in (state_file, log_file):
            if path:
                os.makedirs(os.path.dirname(path), exist_ok=True)
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def begin(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            self.write("running")

    def _now(self) -> tuple[int, float]:
        extra = 0
        if self.staged:
            try:
                extra = os.path.getsize(self.staged)
            except OSError:
                extra = 0
        done = self.done + extra
        now = time.monotonic()
        self.window = [(t, d) for t, d in self.window if now - t <= 10] + [(now, done)]
        first_t, first_d = self.window[0]
        rate = (done - first_d) / (now - first_t) if now - first_t > 0.5 else 0.0
        return done, rate

    def write(self, state: str, message: str = "") -> None:
        done, rate = self._now()
        line = message or progress_line(done, self.total, rate, self.current)
        record = {"run_id": self.run_id, "pid": os.getpid(), "state": state, "done": done,
                  "total": self.total, "rate": rate, "line": line, "time": time.time()}
        if self.state_file:
            temp = self.state_file + ".tmp"
            with open(temp, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            os.replace(temp, self.state_file)
        if self.log_file and (state != "running" or time.monotonic() - self.last_log >= 5):
            self.last_log = time.monotonic()
            with open(self.log_file, "a", encoding="utf-8") as handle:
                handle.write(time.strftime("%Y-%m-%dT%H:%M:%SZ ", time.gmtime()) + line + "\n")

    def end(self, state: str, message: str) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        self.staged = ""
        self.write(state, message)


@dataclass
class Request:
    repo: str
    revision: str
    root: str
    full: bool
    keep_free: int
    check_mode: bool


def converge(req: Request, source: Any, progress: Progress) -> dict[str, Any]:
    """Make ROOT/ORG--NAME/COMMIT hold exactly the tree's files, checked; return what was done."""
    if req.check_mode:
        return _converge(req, source, progress)
    where = paths(req.root, req.repo, "-")
    return _locked(where, lambda: _converge(req, source, progress), progress)


def _converge(req: Request, source: Any, progress: Progress) -> dict[str, Any]:
    commit = req.revision if COMMIT_RE.match(req.revision) and _complete(req, req.revision) else None
    hub_called = commit is None
    commit = commit or source.resolve(req.revision)
    where = paths(req.root, req.repo, commit)
    manifest = read_manifest(where["final"])
    tree = tree_from_manifest(manifest) if manifest.get("complete") else source.tree(commit)
    unsafe = [entry.path for entry in tree if not safe_relpath(entry.path)]
    if unsafe:
        raise FetchFault(f"The tree of {req.repo}@{commit} lists paths that are not plain relative file names: "
                         f"{', '.join(map(repr, unsafe[:5]))}. Nothing was written.")
    work = plan(tree, where["final"], where["partial"], manifest, req.full)
    result: dict[str, Any] = {
        "commit": commit, "dir": where["final"], "current": where["current"], "hub_called": hub_called,
        "files": len(tree), "bytes": work.total_bytes, "fetched": [], "refused": [], "replaced": [], "rehashed": [],
        "bytes_needed": work.bytes_needed, "to_fetch": [entry.path for entry in work.to_fetch],
        "to_check": [entry.path for entry in work.to_check], "changed": False,
    }
    linked = os.path.islink(where["current"]) and os.readlink(where["current"]) == commit
    problem = space_problem(req.root, work.bytes_needed, free_bytes(req.root), req.keep_free) if work.to_fetch else None
    if problem:  # check mode fails here too, as the run would
        progress.end("failed", problem)
        raise FetchFault(problem)
    if req.check_mode or not (work.to_fetch or work.to_check):
        # In check mode, full verification cannot know without hashing: only what is missing counts.
        result["changed"] = bool(work.to_fetch or (work.to_check and not req.full)) or not linked
        if not req.check_mode and not linked:
            link_current(where["base"], commit)
        progress.end("done", f"{req.repo}@{commit}: {len(tree)} files, {human(work.total_bytes)}, all present "
                              "and recorded; nothing to download.")
        return result
    os.makedirs(where["final"], exist_ok=True)
    return _run(req, source, progress, where, commit, tree, work, manifest, result)


def _complete(req: Request, commit: str) -> bool:
    return bool(read_manifest(paths(req.root, req.repo, commit)["final"]).get("complete"))


def _locked(where: dict[str, str], action: Any, progress: Progress | None = None) -> Any:
    os.makedirs(where["base"], exist_ok=True)
    with open(where["lock"], "a", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # A run the controller lost (killed mid-play) can still be fetching on the node: wait for it.
            if progress is not None:
                progress.write("waiting", f"Waiting for another run fetching into {where['base']} "
                                          f"(it holds {where['lock']}).")
            fcntl.flock(lock, fcntl.LOCK_EX)
        return action()


def _record(entry: HubFile, path: str) -> dict[str, Any]:
    return dict(entry.as_dict(), mtime_ns=os.stat(path).st_mtime_ns, verified=True)


def _run(req: Request, source: Any, progress: Progress, where: dict[str, str], commit: str,
         tree: list[HubFile], work: Any, manifest: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    records: dict[str, Any] = dict(manifest.get("files", {}))
    base = {"repo": req.repo, "revision": req.revision, "commit": commit, "source": source.where}

    def save(complete: bool) -> None:
        write_manifest(where["final"], dict(base, files=records, complete=complete))

    save(False)
    began = time.monotonic()
    progress.begin(work.total_bytes, sum(e.size for e in tree if e.path in work.good))
    for entry in work.to_check:  # present but unrecorded, or sglang_model_verify=full
        final = os.path.join(where["final"], entry.path)
        progress.current = f"checking {entry.path}"
        problem = content_problem(final, entry)
        result["rehashed"].append(entry.path)
        if problem:
            os.unlink(final)
            records.pop(entry.path, None)
            result["replaced"].append(problem + " (on disk: removed and fetched again)")
            work.to_fetch.append(entry)
            continue
        records[entry.path] = _record(entry, final)
        progress.done += entry.size
    save(False)
    for entry in work.to_fetch:
        final = os.path.join(where["final"], entry.path)
        staged = os.path.join(where["partial"], entry.path + SUFFIX)
        progress.current, progress.staged = entry.path, staged
        source.fetch(commit, entry, staged)
        progress.staged = ""
        problem = content_problem(staged, entry)
        if problem:
            os.unlink(staged)
            result["refused"].append(problem + f" (from {source.where}: removed; the next run fetches it again)")
            continue
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.chmod(staged, 0o644)
        os.replace(staged, final)
        records[entry.path] = _record(entry, final)
        progress.done += entry.size
        result["fetched"].append(entry.path)
        save(False)
    result["seconds"] = round(time.monotonic() - began, 2)
    result["bytes_fetched"] = sum(e.size for e in tree if e.path in result["fetched"])
    result["changed"] = bool(result["fetched"] or result["refused"] or records != manifest.get("files"))
    if result["refused"]:
        save(False)
        message = (f"{len(result['refused'])} file(s) of {req.repo}@{commit} differ from the Hub's tree and "
                   f"were refused: {'; '.join(result['refused'])}. current was not switched.")
        progress.end("failed", message)
        raise FetchFault(message + " Re-run to fetch them again.")
    save(True)
    shutil.rmtree(where["partial"], ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(where["partial"]))
    result["changed"] = link_current(where["base"], commit) or result["changed"]
    progress.end("done", f"{req.repo}@{commit}: {len(tree)} files, {human(work.total_bytes)}, checked; "
                         f"{len(result['fetched'])} fetched from {source.where} "
                         f"({human(result['bytes_fetched'])} in {result['seconds']} s, with the checks).")
    return result

