"""A local stand-in for the Hugging Face Hub: just the API that huggingface_hub's create_repo,
list_repo_files, create_commit (README.md validation, preupload, LFS batch and upload, commit)
and create_tag call, on 127.0.0.1.

A file up to `lfs_threshold` bytes is answered "regular" at preupload, so its content arrives
base64-encoded in the commit's NDJSON; a larger one "lfs": huggingface_hub asks the LFS batch
API where to put it, PUTs it there, and the commit names it by its sha256 (the legacy LFS
protocol; the Xet protocol the Hub also speaks is not emulated, so uploads to the stand-in run
with HF_HUB_DISABLE_XET). A commit is applied whole or not at all, deletions included. Every
request is recorded with its Authorization header.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import yaml

REPO_ACTION = re.compile(
    r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<action>preupload|commit|tag|tree)/(?P<rev>[^/]+)$"
)
LFS_BATCH = re.compile(r"^/(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch$")
LFS_OBJECT = re.compile(r"^/lfs-objects/(?P<oid>[0-9a-f]{64})$")
# The Hub stores files above 10 MB with LFS (and binary types whatever their size).
HUB_LFS_THRESHOLD = 10 * 1024 * 1024


@dataclass
class Repo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    lfs: dict[str, str] = field(default_factory=dict)  # path -> sha256, files stored as LFS
    commits: list[dict[str, Any]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


class HubStandIn:
    def __init__(
        self, refuse: set[str] | None = None, lfs_threshold: int = HUB_LFS_THRESHOLD
    ) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs_threshold = lfs_threshold
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> content, as PUT by the client
        self.requests: list[dict[str, Any]] = []
        self.refuse = refuse or set()  # actions answered 403 (create, preupload, commit, tag)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._record(b"")
                with hub.lock:
                    status, reply = hub.handle_get(urlparse(self.path).path)
                self._reply(status, reply)

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._record(body)
                match = LFS_OBJECT.match(urlparse(self.path).path)
                if match is None or hashlib.sha256(body).hexdigest() != match["oid"]:
                    return self._reply(400, {"error": "not an LFS object of this sha256"})
                with hub.lock:
                    hub.lfs_objects[match["oid"]] = body
                self._reply(200, {})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._record(body)
                if not (self.headers.get("Authorization") or "").startswith("Bearer "):
                    return self._reply(401, {"error": "Invalid credentials"})
                with hub.lock:
                    status, reply = hub.handle(urlparse(self.path).path, body)
                self._reply(status, reply)

            def _record(self, body: bytes) -> None:
                with hub.lock:
                    hub.requests.append(
                        {
                            "method": self.command,
                            "path": self.path,
                            "authorization": self.headers.get("Authorization"),
                            "bytes": len(body),
                        }
                    )

        return Handler

    def handle_get(self, path: str) -> tuple[int, Any]:
        match = REPO_ACTION.match(path)
        if match is None or match["action"] != "tree":
            return 404, {"error": "not in the stand-in"}
        repo = self.repos.get(match["repo"])
        if repo is None:
            return 404, {"error": "Repository not found"}
        return 200, [
            {
                "type": "file",
                "path": name,
                "size": len(content),
                "oid": hashlib.sha1(content).hexdigest(),
            }
            for name, content in sorted(repo.files.items())
        ]

    def handle(self, path: str, body: bytes) -> tuple[int, Any]:
        if match := LFS_BATCH.match(path):
            if match["repo"] not in self.repos:
                return 404, {"error": "Repository not found"}
            objects = json.loads(body)["objects"]
            return 200, {
                "transfer": "basic",
                "objects": [
                    {
                        "oid": o["oid"],
                        "size": o["size"],
                        "actions": {"upload": {"href": f"{self.url}/lfs-objects/{o['oid']}"}},
                    }
                    for o in objects
                ],
            }
        if path == "/api/validate-yaml":
            content = json.loads(body)["content"]
            front = content.split("---\n")[1] if content.startswith("---\n") else ""
            try:
                yaml.safe_load(front)
            except yaml.YAMLError as e:
                return 400, {"errors": [{"message": str(e)}]}
            return 200, {"errors": [], "warnings": []}
        if path == "/api/repos/create":
            payload = json.loads(body)
            if "create" in self.refuse:
                return 403, {"error": "refused by the stand-in"}
            repo_id = f"{payload['organization']}/{payload['name']}"
            if repo_id in self.repos:
                return 409, {
                    "error": "You already created this model repo",
                    "url": f"{self.url}/{repo_id}",
                }
            self.repos[repo_id] = Repo(private=payload.get("visibility") == "private")
            return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id}
        match = REPO_ACTION.match(path)
        if match is None:
            return 404, {"error": f"{path} is not in the stand-in"}
        repo = self.repos.get(match["repo"])
        if repo is None:
            return 404, {"error": "Repository not found"}
        action = match["action"]
        if action in self.refuse:
            return 403, {"error": "refused by the stand-in"}
        if action == "preupload":
            files = json.loads(body)["files"]
            return 200, {
                "files": [
                    {
                        "path": f["path"],
                        "uploadMode": "lfs" if f["size"] > self.lfs_threshold else "regular",
                        "shouldIgnore": False,
                    }
                    for f in files
                ]
            }
        if action == "commit":
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            header = lines[0]
            staged, lfs, deleted = {}, {}, []
            for line in lines[1:]:
                value = line["value"]
                if line["key"] == "file" and value.get("encoding") == "base64":
                    staged[value["path"]] = base64.b64decode(value["content"])
                elif line["key"] == "lfsFile" and value["oid"] in self.lfs_objects:
                    staged[value["path"]] = self.lfs_objects[value["oid"]]
                    lfs[value["path"]] = value["oid"]
                elif line["key"] == "deletedFile" and value["path"] in repo.files:
                    deleted.append(value["path"])
                else:
                    return 400, {"error": f"the stand-in cannot apply {line}"}
            oid = hashlib.sha1(body).hexdigest()
            for path in deleted:
                del repo.files[path]
                repo.lfs.pop(path, None)
            repo.files.update(staged)
            for path in staged:
                repo.lfs.pop(path, None)
            repo.lfs.update(lfs)
            repo.commits.append(
                {
                    "oid": oid,
                    "summary": header["value"]["summary"],
                    "files": sorted(staged),
                    "deleted": sorted(deleted),
                }
            )
            return 200, {"commitUrl": f"{self.url}/{match['repo']}/commit/{oid}", "commitOid": oid}
        # tag
        tag = json.loads(body)["tag"]
        if tag in repo.tags:
            return 409, {"error": "tag exists"}
        repo.tags[tag] = match["rev"]
        return 200, {}
