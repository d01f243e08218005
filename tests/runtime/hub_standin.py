"""A local HTTP server standing in for the Hugging Face Hub (``HF_ENDPOINT=http://127.0.0.1:PORT``): the three
routes ``huggingface_hub.snapshot_download`` uses for a public model repository, answered from files in memory.

- ``GET /api/models/ORG/NAME/revision/REV``: the repository's commit for a revision;
- ``GET /api/models/ORG/NAME/tree/COMMIT?recursive=...``: its files (path, size, git blob id);
- ``HEAD|GET /ORG/NAME/resolve/COMMIT/FILE``: a file, with the commit and ETag headers the client caches by.

Every request is logged in ``requests`` so a test can tell a download from a cache hit; ``token`` makes every
route answer 401 unless ``Authorization: Bearer <token>`` is sent, as a gated repository does.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id: str, files: dict[str, bytes], revisions: dict[str, str] | None = None):
        self.repo_id = repo_id
        self.files = files
        self.commit = hashlib.sha1(repo_id.encode() + b"".join(sorted(files.values()))).hexdigest()
        self.revisions = {"main": self.commit, **(revisions or {})}


class HubStandIn:
    def __init__(self, repos: list[Repo], token: str | None = None):
        self.repos = {r.repo_id: r for r in repos}
        self.token = token
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the test reads hub.requests
                pass

            def do_HEAD(self):
                hub.serve(self, head=True)

            def do_GET(self):
                hub.serve(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def downloads(self) -> list[str]:
        return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def serve(self, handler: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = urlsplit(handler.path).path
        self.requests.append(("HEAD" if head else "GET", path))
        if self.token and handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self.reply(handler, 401, {"error": "Access to this model is restricted: log in"}, head=head)
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            repo = self.repos.get(f"{parts[2]}/{parts[3]}")
            if repo is None:
                return self.reply(
                    handler, 404, {"error": "Repository not found"}, head=head, headers={"X-Error-Code": "RepoNotFound"}
                )
            revision = "/".join(parts[5:])
            commit = repo.revisions.get(revision) or (revision if revision == repo.commit else None)
            if commit is None:
                return self.reply(
                    handler, 404, {"error": "Invalid rev id"}, head=head, headers={"X-Error-Code": "RevisionNotFound"}
                )
            if parts[4] == "revision":
                return self.reply(
                    handler,
                    200,
                    {
                        "id": repo.repo_id,
                        "sha": commit,
                        "private": False,
                        "siblings": [{"rfilename": f} for f in sorted(repo.files)],
                    },
                    head=head,
                )
            if parts[4] == "tree":
                tree = [
                    {"type": "file", "path": f, "size": len(data), "oid": git_blob_id(data)}
                    for f, data in sorted(repo.files.items())
                ]
                return self.reply(handler, 200, tree, head=head)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self.repos.get(f"{parts[0]}/{parts[1]}")
            name = "/".join(parts[4:])
            if repo is not None and parts[3] in (repo.commit, *repo.revisions) and name in repo.files:
                data = repo.files[name]
                handler.send_response(200)
                handler.send_header("Content-Length", str(len(data)))
                handler.send_header("ETag", f'"{git_blob_id(data)}"')
                handler.send_header("X-Repo-Commit", repo.revisions.get(parts[3], parts[3]))
                handler.end_headers()
                if not head:
                    handler.wfile.write(data)
                return None
            return self.reply(
                handler, 404, {"error": "Entry not found"}, head=head, headers={"X-Error-Code": "EntryNotFound"}
            )
        return self.reply(handler, 404, {"error": f"no route {path}"}, head=head)

    @staticmethod
    def reply(handler, status: int, body, *, head: bool, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        if not head:
            handler.wfile.write(data)
