"""STAND-IN for the Hugging Face Hub (tests only): the routes huggingface_hub 2.4.0 really calls.

Read in huggingface_hub 2.4.0's source (hf_api.py, file_download.py, utils/_http.py):
  GET  /api/models/{repo}/revision/{rev}                     model_info -> id, sha, siblings
  GET  /api/models/{repo}/tree/{rev}?recursive=True&expand=False   list_repo_tree (Link: next paging)
  HEAD /{repo}/resolve/{rev}/{path}   get_hf_file_metadata: X-Repo-Commit, ETag, and for LFS a 302
                                      to another origin (a CDN) carrying X-Linked-Etag/X-Linked-Size
  GET  /{repo}/resolve/{rev}/{path} and GET on the CDN URL    http_get, with Range: bytes=N-
Errors as the Hub gives them: 401 + X-Error-Code: GatedRepo, 404 + RepoNotFound/RevisionNotFound.
The CDN is a second server on another loopback address (127.0.0.2), so the client treats it as
off-Hub exactly as it treats the real CDN. It serves a small model the test makes (make_model).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

LFS_MIN = 1024 * 1024


def make_model(root: Path, shards: int = 3, shard_mb: float = 4, seed: int = 1) -> Path:
    """A small model with GLM's file layout: config.json, the index, shards, tokenizer files."""
    root.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for number in range(1, shards + 1):
        name = f"model-{number:05d}-of-{shards:05d}.safetensors"
        tensor = f"model.layers.{number}.weight"
        size = int(shard_mb * 1024 * 1024)
        header = json.dumps({tensor: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
        data = hashlib.sha256(f"{seed}-{number}".encode()).digest() * (size // 32 + 1)
        (root / name).write_bytes(len(header).to_bytes(8, "little") + header + data[:size])
        weight_map[tensor] = name
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps({"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm"}))
    (root / "tokenizer_config.json").write_text("{}")
    (root / "README.md").write_text("a stand-in model made by the tests\n")
    return root


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()  # noqa: S324


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branches: tuple[str, ...] = ("main",)
    gated_token: Optional[str] = None  # a token the gated repo accepts; None: not gated

    def entry(self, path: str) -> dict:
        data = self.files[path]
        item = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
        if self.is_lfs(path):
            item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return item

    def is_lfs(self, path: str) -> bool:
        return path.endswith(".safetensors") or len(self.files[path]) >= LFS_MIN


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    rate: float = 0.0  # bytes per second per response; 0: as fast as it goes
    corrupt: set[str] = field(default_factory=set)  # paths served once with a flipped byte
    log: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, Range
    bytes_sent: int = 0
    auth_seen: list[tuple[str, str]] = field(default_factory=list)  # (server, path) with an Authorization

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.2", 0), self._handler("cdn"))
        self.hub.daemon_threads = self.cdn.daemon_threads = True
        for server in (self.hub, self.cdn):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.2:{self.cdn.server_address[1]}"

    def add(self, repo_id: str, folder: Path, **kwargs) -> Repo:
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        self.repos[repo_id] = Repo(files, **kwargs)
        return self.repos[repo_id]

    def close(self) -> None:
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()

    def _handler(self, side: str):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, side, head=True)

            def do_GET(self) -> None:
                hub._serve(self, side, head=False)

        return Handler

    def _error(self, h, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h, data) -> None:
        body = json.dumps(data).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _serve(self, h, side: str, head: bool) -> None:
        path = h.path.split("?")[0]
        with self.lock:
            self.log.append(("HEAD" if head else "GET", f"{side}:{path}", h.headers.get("Range", "")))
            if h.headers.get("Authorization"):
                self.auth_seen.append((side, path))
        if side == "cdn":
            match = re.match(r"^/cdn/([^/]+/[^/]+)/([0-9a-f]{64})/(.+)$", path)
            if not match or match.group(1) not in self.repos:
                return self._error(h, 404, "EntryNotFound", "no such object")
            return self._file(h, self.repos[match.group(1)], match.group(3), head)
        api = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)$", path)
        resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        repo_id = (api or resolve).group(1) if (api or resolve) else ""
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 401, "RepoNotFound", "Repository not found")
        if repo.gated_token is not None and h.headers.get("Authorization") != f"Bearer {repo.gated_token}":
            return self._error(h, 401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have "
                                                    "access to it and be authenticated to access it.")
        rev = (api or resolve).group(3 if api else 2)
        if rev != repo.commit and rev not in repo.branches:
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        if api and api.group(2) == "revision":
            return self._json(h, {"id": repo_id, "sha": repo.commit, "private": False,
                                  "gated": "auto" if repo.gated_token else False,
                                  "siblings": [{"rfilename": name} for name in sorted(repo.files)]})
        if api:
            return self._json(h, [repo.entry(name) for name in sorted(repo.files)])
        name = resolve.group(3)
        if name not in repo.files:
            return self._error(h, 404, "EntryNotFound", f"{name} does not exist")
        if repo.is_lfs(name):
            entry = repo.entry(name)
            h.send_response(302)
            h.send_header("Location", f"{self.cdn_url}/cdn/{repo_id}/{entry['lfs']['oid']}/{name}")
            h.send_header("X-Repo-Commit", repo.commit)
            h.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
            h.send_header("X-Linked-Size", str(entry["size"]))
            h.send_header("ETag", f'"{entry["oid"]}"')
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        return self._file(h, repo, name, head)

    def _file(self, h, repo: Repo, name: str, head: bool) -> None:
        data = repo.files[name]
        start = 0
        match = re.match(r"^bytes=(\d+)-$", h.headers.get("Range", ""))
        if match:
            start = min(int(match.group(1)), len(data))
        h.send_response(206 if match else 200)
        if match:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("X-Repo-Commit", repo.commit)
        h.send_header("ETag", f'"{repo.entry(name).get("lfs", {}).get("oid") or repo.entry(name)["oid"]}"')
        h.send_header("Content-Length", str(len(data) - start))
        h.end_headers()
        if head:
            return
        body = bytearray(data[start:])
        with self.lock:
            flip = name in self.corrupt and not head
            self.corrupt.discard(name)
        if flip and body:
            body[len(body) // 2] ^= 0xFF
        step = 256 * 1024
        try:
            for offset in range(0, len(body), step):
                chunk = bytes(body[offset:offset + step])
                h.wfile.write(chunk)
                with self.lock:
                    self.bytes_sent += len(chunk)
                if self.rate:
                    time.sleep(len(chunk) / self.rate)
        except (BrokenPipeError, ConnectionResetError):
            pass


def standin_env() -> dict[str, str]:
    """What the fetch process must not inherit from this machine: proxies for loopback."""
    env = {key: value for key, value in os.environ.items() if "proxy" not in key.lower()}
    env["NO_PROXY"] = "127.0.0.1,127.0.0.2,localhost"
    return env
