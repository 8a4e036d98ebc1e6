"""A stand-in for huggingface.co on loopback: enough of the Hub's HTTP protocol for huggingface_hub to download a
snapshot from it, so that `quire models pull` is proven over real HTTP on machines that cannot reach the hub.

It answers what huggingface_hub 2.x asks when it downloads a snapshot (point HF_ENDPOINT at `endpoint`):

- `GET /api/models/{repo}/revision/{rev}`: the model info, whose `sha` is the commit a branch points at;
- `GET /api/models/{repo}/tree/{commit}?recursive=…`: every file with its size and git blob id, plus the sha256 of
  the LFS ones (the client caches this listing and, offline, checks a cached snapshot against it);
- `HEAD` and `GET /{repo}/resolve/{rev}/{file}`: X-Repo-Commit names the version, ETag (the git blob id) the content,
  and Content-Length its size, as the hub answers for files kept in git.

LFS files (the safetensors weights, and anything of 10 MiB or more) are answered as the hub does: a 302 to a second
server standing for its storage (CDN), carrying X-Linked-Etag (the sha256, which names the blob in the cache) and
X-Linked-Size. The storage is another origin, so the client takes the metadata from the redirect itself and then
downloads from the storage, exactly as with huggingface.co. No response names a Xet hash, so downloads use plain
HTTP. Each repository has one commit, reachable as `main` or by its hash; the repositories served here are flat.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_MIN_SIZE = 10 * 1024 * 1024  # what the hub refuses to keep in git
_INFO = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?")
_TREE = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?")
_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)")
_BLOB = re.compile(r"/lfs/(?P<sha256>[0-9a-f]{64})")


@dataclass(frozen=True)
class HubFile:
    """One file of a repository, with the identities the hub gives it."""

    path: str
    data: bytes
    sha256: str
    git_oid: str  # the git blob id: of the content, or for an LFS file of its pointer
    lfs: bool

    @classmethod
    def of(cls, path: str, data: bytes) -> HubFile:
        lfs = path.endswith(".safetensors") or len(data) >= LFS_MIN_SIZE
        sha256 = hashlib.sha256(data).hexdigest()
        return cls(path, data, sha256, _git_blob_id(_lfs_pointer(sha256, len(data)) if lfs else data), lfs)

    def tree_entry(self) -> dict[str, Any]:
        """The file as the tree listing shows it."""
        entry: dict[str, Any] = {"type": "file", "oid": self.git_oid, "size": len(self.data), "path": self.path}
        if self.lfs:
            pointer = _lfs_pointer(self.sha256, len(self.data))
            entry["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": len(pointer)}
        return entry


@dataclass(frozen=True)
class HubRepo:
    """A model repository at its one commit, whose hash is derived from the files so that it changes with them."""

    repo_id: str
    files: dict[str, HubFile]
    commit: str

    @classmethod
    def of(cls, repo_id: str, contents: dict[str, bytes]) -> HubRepo:
        files = {path: HubFile.of(path, data) for path, data in sorted(contents.items())}
        tree = "".join(f"{path}\0{file.git_oid}\n" for path, file in files.items())
        return cls(repo_id, files, hashlib.sha1(f"{repo_id}\n{tree}".encode()).hexdigest())

    def info(self) -> dict[str, Any]:
        """The model info without `expand`: what `HfApi.model_info` parses."""
        return {"_id": self.commit[:24], "id": self.repo_id, "modelId": self.repo_id, "sha": self.commit,
                "private": False, "gated": False, "disabled": False, "lastModified": "2025-10-16T00:00:00.000Z",
                "tags": [], "siblings": [{"rfilename": path} for path in self.files]}


def repo_contents(directory: Path) -> dict[str, bytes]:
    """A checkpoint directory as repository contents: relative path → bytes."""
    return {path.relative_to(directory).as_posix(): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    sends: tuple[str, str] | None = None  # (repo, file) whose bytes this reply carries


class HubServer:
    """The hub and its storage on two loopback ports; records every request and every file whose bytes went out."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = {repo_id: HubRepo.of(repo_id, contents) for repo_id, contents in repos.items()}
        self.requests: list[tuple[str, str]] = []  # (method, path) in arrival order, hub and storage alike
        self.sent: list[tuple[str, str]] = []  # (repo, file) per body sent
        self.refused: list[tuple[str, str]] = []  # (method, path) answered with an error: what the stand-in lacks
        self._blobs = {file.sha256: (repo.repo_id, file) for repo in self.repos.values()
                       for file in repo.files.values() if file.lfs}
        self._lock = threading.Lock()
        self._hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(self._hub_reply))
        self._storage = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(self._storage_reply))
        self.endpoint = f"http://127.0.0.1:{self._hub.server_address[1]}"
        self.storage = f"http://127.0.0.1:{self._storage.server_address[1]}"
        self._stopped = threading.Event()

    def commit(self, repo_id: str) -> str:
        return self.repos[repo_id].commit

    def downloaded(self, repo_id: str) -> set[str]:
        """The files of `repo_id` whose bytes were sent at least once."""
        with self._lock:
            return {path for repo, path in self.sent if repo == repo_id}

    def start(self) -> None:
        for server in (self._hub, self._storage):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop listening (the port refuses connections after this); calling it again does nothing."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        for server in (self._hub, self._storage):
            server.shutdown()
            server.server_close()

    def _hub_reply(self, method: str, path: str) -> Reply:
        if method == "GET" and (match := _TREE.fullmatch(path)):
            return self._versioned(match, lambda repo: _json(
                [file.tree_entry() for name, file in repo.files.items() if _under(name, match["path"])]))
        if method == "GET" and (match := _INFO.fullmatch(path)):
            return self._versioned(match, lambda repo: _json(repo.info()))
        if match := _RESOLVE.fullmatch(path):
            return self._versioned(match, lambda repo: self._resolve(repo, unquote(match["path"]), method))
        return Reply(404, {"Content-Length": "0"})

    def _versioned(self, match: re.Match[str], answer: Any) -> Reply:
        """`answer(repo)` when the repository exists and the revision is `main` or its commit; else the hub's 404."""
        repo = self.repos.get(unquote(match["repo"]))
        if repo is None:
            return _error(404, "RepoNotFound", "Repository not found")
        if unquote(match["rev"] or "main") not in ("main", repo.commit):
            return _error(404, "RevisionNotFound", "Invalid rev id", repo.commit)
        return answer(repo)

    def _resolve(self, repo: HubRepo, path: str, method: str) -> Reply:
        file = repo.files.get(path)
        if file is None:
            return _error(404, "EntryNotFound", f"{path} does not exist on main", repo.commit)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{file.git_oid}"'}
        if file.lfs:
            return Reply(302, {**headers, "X-Linked-Etag": f'"{file.sha256}"', "X-Linked-Size": str(len(file.data)),
                               "Location": f"{self.storage}/lfs/{file.sha256}", "Content-Length": "0"})
        return _file_reply(headers, file, repo, method)

    def _storage_reply(self, method: str, path: str) -> Reply:
        match = _BLOB.fullmatch(path)
        if match is None or match["sha256"] not in self._blobs:
            return Reply(404, {"Content-Length": "0"})
        repo_id, file = self._blobs[match["sha256"]]
        return _file_reply({"ETag": f'"{file.sha256}"'}, file, self.repos[repo_id], method)

    def _handler(self, reply_to: Any) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's client expects of the hub

            def do_GET(self) -> None:
                self._answer()

            def do_HEAD(self) -> None:
                self._answer()

            def _answer(self) -> None:
                path = urlsplit(self.path).path
                with hub._lock:
                    hub.requests.append((self.command, path))
                reply = reply_to(self.command, path)
                if reply.status >= 400:
                    with hub._lock:
                        hub.refused.append((self.command, path))
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command == "GET" and reply.body:
                    self.wfile.write(reply.body)
                    if reply.sends:
                        with hub._lock:
                            hub.sent.append(reply.sends)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def hub_server(repos: dict[str, dict[str, bytes]]) -> Iterator[HubServer]:
    """A running HubServer serving `repos` (repo id → relative path → bytes), stopped on the way out."""
    server = HubServer(repos)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _file_reply(headers: dict[str, str], file: HubFile, repo: HubRepo, method: str) -> Reply:
    return Reply(200, {**headers, "Content-Type": "application/octet-stream", "Content-Length": str(len(file.data))},
                 file.data if method == "GET" else b"", (repo.repo_id, file.path))


def _json(payload: Any) -> Reply:
    body = json.dumps(payload).encode()
    return Reply(200, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body)


def _error(status: int, code: str, message: str, commit: str | None = None) -> Reply:
    """An error the way the hub words it: huggingface_hub maps X-Error-Code to its exception classes."""
    body = json.dumps({"error": message}).encode()
    headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json",
               "Content-Length": str(len(body))}
    return Reply(status, {**headers, "X-Repo-Commit": commit} if commit else headers, body)


def _under(path: str, folder: str | None) -> bool:
    return folder is None or path.startswith(unquote(folder).rstrip("/") + "/")


def _lfs_pointer(sha256: str, size: int) -> bytes:
    """What git keeps in place of an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
