"""The Hugging Face Hub through its own client (huggingface_hub, pinned in the role's virtualenv).

What huggingface_hub 2.4.0 calls, read in its source (hf_api.py, file_download.py):
  HfApi.model_info(repo, revision)   GET  /api/models/{repo}/revision/{revision}      -> sha
  HfApi.list_repo_tree(recursive)    GET  /api/models/{repo}/tree/{commit}?recursive=True&expand=False
                                     (pages through the Link header)                  -> size, oid, lfs.oid
  get_hf_file_metadata(url)          HEAD /{repo}/resolve/{commit}/{path}   X-Repo-Commit, X-Linked-Size,
                                     X-Linked-Etag / ETag, Location (relative redirects followed)
  http_get(url, file, resume_size)   GET  with Range: bytes=N- (a 200 answer is restarted from 0)
Its own hf_hub_download is not used: in 2.4.0 it writes each file to a fresh temporary name and
removes it on failure (no resume across runs), and it never compares the bytes with the tree's
sha256. Here the bytes go to ROOT/.../.partial/COMMIT/PATH.incomplete, resumed with Range, and
model_fetch.py checks them before they get their final name.
"""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlparse

from ansible.module_utils.model_store import HubFile

# Plain HTTP (the Xet protocol needs the hf_xet binary and a Xet endpoint), no progress bars in
# a module's output, no telemetry; set before huggingface_hub reads its constants.
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

import huggingface_hub  # noqa: E402 - after the environment above
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get  # noqa: E402
from huggingface_hub.utils import build_hf_headers  # noqa: E402

VERSION = huggingface_hub.__version__


class HubFault(Exception):
    """A Hub answer we cannot go on with, named for the person running the play (never the token)."""


class HubSource:
    """The Hub (or the mirror sglang_model_hf_endpoint names), as one repo at one revision."""

    def __init__(self, endpoint: str, token: str, repo: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.repo = repo
        self.api = HfApi(endpoint=self.endpoint, token=token or False)
        self.where = f"the Hub at {self.endpoint}"

    def _fault(self, exc: Exception, what: str) -> HubFault:
        text = " ".join(str(exc).split())
        if self.token:
            text = text.replace(self.token, "<token>")
        if isinstance(exc, GatedRepoError):
            given = "the token given was not accepted" if self.token else "no token was given"
            return HubFault(f"{self.repo} is a gated repo on {self.endpoint} and {given} ({what}). Accept its "
                            "terms on the Hub with your account, then put a read token of that account in "
                            "Ansible Vault as sglang_model_hf_token. Nothing was downloaded.")
        if isinstance(exc, RevisionNotFoundError):
            return HubFault(f"{self.repo} has no revision that matches on {self.endpoint} ({what}: {text[:300]}). "
                            "Check sglang_model_revision (a commit hash, branch or tag). Nothing was downloaded.")
        if isinstance(exc, RepositoryNotFoundError):
            return HubFault(f"{self.endpoint} has no repo {self.repo}, or it is private and the token cannot "
                            f"read it ({what}). Check sglang_model_repo and sglang_model_hf_token.")
        if isinstance(exc, HfHubHTTPError):
            return HubFault(f"{self.endpoint} answered an error on {what}: {text[:400]}")
        return HubFault(f"{self.endpoint} could not be reached on {what}: {type(exc).__name__}: {text[:300]}. "
                        "Check sglang_model_hf_endpoint and the node's network (HTTPS_PROXY).")

    def resolve(self, revision: str) -> str:
        try:
            info = self.api.model_info(self.repo, revision=revision)
        except Exception as exc:  # noqa: BLE001 - named in _fault
            raise self._fault(exc, f"GET /api/models/{self.repo}/revision/{revision}") from None
        if not info.sha:
            raise HubFault(f"{self.endpoint} gave no commit for {self.repo}@{revision}.")
        return str(info.sha)

    def tree(self, commit: str) -> list[HubFile]:
        try:
            items = list(self.api.list_repo_tree(self.repo, revision=commit, recursive=True))
        except Exception as exc:  # noqa: BLE001
            raise self._fault(exc, f"GET /api/models/{self.repo}/tree/{commit}?recursive=True") from None
        files = []
        for item in items:
            if not hasattr(item, "size"):
                continue  # a folder
            lfs = getattr(item, "lfs", None)
            files.append(HubFile(item.path, int(item.size), lfs.sha256 if lfs else None, str(item.blob_id)))
        return files

    def fetch(self, commit: str, entry: HubFile, staged: str) -> None:
        """Append the rest of entry's bytes to staged (Range from its current size)."""
        url = hf_hub_url(self.repo, entry.path, revision=commit, endpoint=self.endpoint)
        what = f"HEAD /{self.repo}/resolve/{commit}/{entry.path}"
        try:
            meta = get_hf_file_metadata(url, token=self.token or False, endpoint=self.endpoint)
        except Exception as exc:  # noqa: BLE001
            raise self._fault(exc, what) from None
        if meta.commit_hash and meta.commit_hash != commit:
            raise HubFault(f"{what} answered for commit {meta.commit_hash}, not {commit}: the mirror is not "
                           "serving the commit its tree listed. Nothing was kept of that file.")
        if meta.size is not None and meta.size != entry.size:
            raise HubFault(f"{what} says {meta.size} bytes, the tree says {entry.size}: the Hub disagrees with "
                           "itself; re-run later. Nothing was kept of that file.")
        location = meta.location or url
        headers = build_hf_headers(token=self.token or False)
        headers["Accept-Encoding"] = "identity"
        if _origin(location) != _origin(self.endpoint):
            headers.pop("authorization", None)  # a CDN's signed URL: the token stays on the Hub
            headers.pop("Authorization", None)
        os.makedirs(os.path.dirname(staged), exist_ok=True)
        with open(staged, "ab") as handle:
            have = handle.tell()
            if have > entry.size:
                handle.truncate(0)
                handle.seek(0)
                have = 0
            try:
                http_get(location, handle, resume_size=have, headers=headers,
                         expected_size=entry.size, displayed_filename=entry.path)
            except Exception as exc:  # noqa: BLE001
                raise self._fault(exc, f"GET /{self.repo}/resolve/{commit}/{entry.path}") from None


def _origin(url: str) -> tuple[str, str, int]:
    parsed = urlparse(url)
    return parsed.scheme, (parsed.hostname or "").lower(), parsed.port or {"http": 80, "https": 443}.get(parsed.scheme, 0)


def hub_source(endpoint: str, token: Optional[str], repo: str) -> HubSource:
    return HubSource(endpoint, token or "", repo)
