"""A stand-in for the Hugging Face Hub on 127.0.0.1: the part of its API that the real
``huggingface_hub`` client calls for ``model_info``, ``snapshot_download`` and
``hf_hub_download`` (checked against huggingface_hub 2.4's ``hf_api.py``, ``file_download.py``
and ``utils/_http.py``):

- ``GET /api/models/{repo}/revision/{rev}``: ``sha`` and ``siblings`` (``rfilename``, ``size``);
- ``GET /api/models/{repo}/tree/{rev}``: the file list ``snapshot_download`` downloads from;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, ``ETag`` and
  ``Content-Length``, which ``get_hf_file_metadata`` requires, then the bytes;
- errors as the Hub sends them: ``X-Error-Code`` ``RepoNotFound``, ``RevisionNotFound``,
  ``EntryNotFound``, and ``GatedRepo`` with 401 (no token) or 403 (a token without access) on
  a gated repo's files, whose listing stays public as on the real Hub.

Point ``HF_ENDPOINT`` at :attr:`FakeHub.url`. Every request is kept in :attr:`FakeHub.seen`.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["FakeHub", "FakeRepo", "Seen"]


@dataclass
class FakeRepo:
    """One model repo: its files, and for a gated one the token that accepted the licence."""

    files: dict[str, bytes]
    gated: bool = False
    token: str | None = None

    @property
    def sha(self) -> str:
        digest = hashlib.sha1()
        for path in sorted(self.files):
            digest.update(path.encode() + hashlib.sha1(self.files[path]).digest())
        return digest.hexdigest()


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    authorization: str | None


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo]
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve = lambda: self._server.serve_forever(poll_interval=0.05)  # noqa: E731  (quick close)
        threading.Thread(target=serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def downloads(self) -> list[str]:
        """The paths of files sent (GET on ``resolve``), in order."""
        return [
            s.path.split("/", 5)[-1]
            for s in self.seen
            if s.method == "GET" and "/resolve/" in s.path
        ]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, request: http.server.BaseHTTPRequestHandler, *, body: bool) -> None:
        path = unquote(urlsplit(request.path).path)
        auth = request.headers.get("Authorization")
        self.seen.append(Seen(request.command, path, auth))
        api = path.startswith("/api/models/")
        parts = path.removeprefix("/api/models/" if api else "/").split("/")
        repo_id, rest = "/".join(parts[:2]), parts[2:]
        repo = self.repos.get(repo_id)
        if repo is None:
            return _send(request, 404, {"X-Error-Code": "RepoNotFound"}, b"", body)
        if len(rest) < 2 or rest[1] not in ("main", repo.sha):
            return _send(request, 404, {"X-Error-Code": "RevisionNotFound"}, b"", body)
        commit = {"X-Repo-Commit": repo.sha}
        if api and rest[0] == "revision":
            siblings = [{"rfilename": p, "size": len(b)} for p, b in sorted(repo.files.items())]
            info = {"id": repo_id, "sha": repo.sha, "siblings": siblings, "gated": repo.gated}
            return _send(request, 200, _JSON, json.dumps(info).encode(), body)
        if api and rest[0] == "tree":
            tree = [
                {"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for p, b in sorted(repo.files.items())
            ]
            return _send(request, 200, _JSON, json.dumps(tree).encode(), body)
        filename = "/".join(rest[2:])
        if api or rest[0] != "resolve" or filename not in repo.files:
            return _send(request, 404, {**commit, "X-Error-Code": "EntryNotFound"}, b"", body)
        if repo.gated and auth != f"Bearer {repo.token}":
            status = 401 if auth is None else 403
            message = (
                f"Access to model {repo_id} is restricted and you are not in the authorized list."
            )
            gated = {"X-Error-Code": "GatedRepo", "X-Error-Message": message}
            return _send(request, status, gated, b"", body)
        content = repo.files[filename]
        etag = {"ETag": f'"{hashlib.sha256(content).hexdigest()}"'}
        return _send(request, 200, {**commit, **etag}, content, body)


_JSON = {"Content-Type": "application/json"}


def _send(
    request: http.server.BaseHTTPRequestHandler,
    status: int,
    headers: dict[str, str],
    content: bytes,
    body: bool,
) -> None:
    request.send_response(status)
    for key, value in {**headers, "Content-Length": str(len(content))}.items():
        request.send_header(key, value)
    request.end_headers()
    if body:
        request.wfile.write(content)
