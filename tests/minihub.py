#!/usr/bin/env python3
"""minihub: a minimal, dependency-free (stdlib only; PyYAML optional) local Hugging Face Hub
server for loopback tests of huggingface_hub / transformers / datasets push & pull.

    python minihub.py --port 18111 --data ./minihub-data [--lfs auto|never] [--user testuser]

Client side:
    HF_ENDPOINT=http://127.0.0.1:18111  HF_TOKEN=hf_dummy  HF_HUB_DISABLE_XET=1
    (HF_HUB_DISABLE_XET=1 is required when hf_xet is installed and the server asks for LFS,
     because xet uploads need a Xet CAS server that minihub does not implement; with
     --lfs never every file is committed inline ("regular") and xet is never touched.)

Implemented (enough for HfApi.create_repo / delete_repo / upload_file / upload_folder /
create_commit (add, delete, copy of regular files) / create_branch / delete_branch / create_tag /
list_repo_refs / list_repo_commits / list_repo_files / list_repo_tree / get_paths_info /
model_info / dataset_info / repo_exists / file_exists / whoami / hf_hub_download /
snapshot_download / HfFileSystem, i.e. PreTrainedModel.push_to_hub, from_pretrained,
Dataset.push_to_hub, load_dataset(repo_id), ModelCard.push_to_hub):

  GET  /api/whoami-v2                              POST /api/repos/create
  DELETE /api/repos/delete                         POST /api/validate-yaml
  GET  /api/{t}s/{ns}/{name}[/revision/{rev}]       GET  /api/{t}s/{ns}/{name}/refs
  GET  /api/{t}s/{ns}/{name}/tree/{rev}[/{path}]    POST /api/{t}s/{ns}/{name}/paths-info/{rev}
  GET  /api/{t}s/{ns}/{name}/commits/{rev}          POST|DELETE /api/{t}s/{ns}/{name}/branch/{b}
  POST /api/{t}s/{ns}/{name}/tag/{rev}              DELETE /api/{t}s/{ns}/{name}/tag/{tag}
  POST /api/{t}s/{ns}/{name}/preupload/{rev}        POST /api/{t}s/{ns}/{name}/commit/{rev}
  GET  /api/{t}s/{ns}/{name}/auth-check[/write]     PUT  /api/{t}s/{ns}/{name}/settings
  POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch   (LFS "basic" transfer)
  PUT  /lfs-upload/{sha256}                         (upload href handed out by the batch call)
  HEAD|GET /{prefix}{ns}/{name}/resolve/{rev}/{path}  (Range supported; X-Repo-Commit, ETag)
Not implemented: xet (xet-write-token / CAS), multipart LFS, PR discussions, likes, search.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
LFS_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".onnx",
    ".msgpack",
    ".arrow",
    ".parquet",
    ".npy",
    ".npz",
    ".pkl",
    ".pickle",
    ".zip",
    ".gz",
    ".tar",
    ".tgz",
    ".gguf",
    ".png",
    ".jpg",
    ".jpeg",
    ".wav",
    ".mp3",
    ".model",
    ".joblib",
    ".tflite",
    ".ot",
)
LFS_THRESHOLD = 10 * 1024 * 1024


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Store:
    """Repos kept in memory and persisted as one JSON per repo; blobs content-addressed by sha256."""

    def __init__(self, root: str):
        self.root = root
        self.blob_dir = os.path.join(root, "blobs")
        self.repo_dir = os.path.join(root, "repos")
        os.makedirs(self.blob_dir, exist_ok=True)
        os.makedirs(self.repo_dir, exist_ok=True)
        self.lock = threading.RLock()
        self.repos: dict[str, dict] = {}
        for fn in os.listdir(self.repo_dir):
            with open(os.path.join(self.repo_dir, fn)) as f:
                r = json.load(f)
            self.repos[self.key(r["type"], r["id"])] = r

    @staticmethod
    def key(rtype: str, rid: str) -> str:
        return f"{rtype}:{rid}"

    def save(self, repo: dict) -> None:
        fn = os.path.join(
            self.repo_dir, hashlib.sha1(self.key(repo["type"], repo["id"]).encode()).hexdigest() + ".json"
        )
        tmp = fn + ".tmp"
        with open(tmp, "w") as f:
            json.dump(repo, f)
        os.replace(tmp, fn)

    def blob_path(self, sha: str) -> str:
        return os.path.join(self.blob_dir, sha)

    def has_blob(self, sha: str) -> bool:
        return os.path.exists(self.blob_path(sha))

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if not self.has_blob(sha):
            tmp = self.blob_path(sha) + f".{threading.get_ident()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.blob_path(sha))
        return sha

    def get(self, rtype: str, rid: str) -> dict:
        r = self.repos.get(self.key(rtype, rid))
        if r is None:
            raise HubError(404, "RepoNotFound", f"Repository {rid} not found")
        return r

    def resolve_rev(self, repo: dict, rev: str) -> str:
        rev = rev or "main"
        if rev in repo["branches"]:
            return repo["branches"][rev]
        if rev.startswith("refs/heads/") and rev[11:] in repo["branches"]:
            return repo["branches"][rev[11:]]
        if rev in repo["tags"]:
            return repo["tags"][rev]
        if rev.startswith("refs/pr/") and rev in repo["prs"]:
            return repo["prs"][rev]
        if re.fullmatch(r"[0-9a-f]{40}", rev) and rev in repo["commits"]:
            return rev
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")

    def make_commit(self, repo: dict, parent: str | None, tree: dict, title: str, message: str) -> str:
        date = now_iso()
        cid = hashlib.sha1(
            json.dumps([parent, tree, title, message, date, time.time_ns()], sort_keys=True).encode()
        ).hexdigest()
        repo["commits"][cid] = {"parent": parent, "tree": tree, "title": title, "message": message, "date": date}
        return cid


def file_entry(path: str, data_sha: str, size: int, is_lfs: bool, git_oid: str) -> dict:
    return {"sha256": data_sha, "size": size, "lfs": is_lfs, "oid": git_oid}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "minihub/0.1"
    store: Store
    cfg: argparse.Namespace

    # ------------------------------------------------------------------ plumbing
    def log_message(self, fmt, *args):  # noqa: D401
        if not self.cfg.quiet:
            sys.stderr.write(f"[minihub] {self.address_string()} - {fmt % args}\n")

    def base_url(self) -> str:
        host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_address[1]}"
        return f"http://{host}"

    def read_body_to(self, sink) -> None:
        if getattr(self, "_body_consumed", False):
            return
        self._body_consumed = True
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            while True:
                line = self.rfile.readline().strip()
                n = int(line.split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline().strip():
                        pass
                    break
                remaining = n
                while remaining:
                    chunk = self.rfile.read(min(remaining, 1 << 20))
                    sink(chunk)
                    remaining -= len(chunk)
                self.rfile.readline()
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                sink(chunk)
                remaining -= len(chunk)

    def read_body(self) -> bytes:
        parts: list[bytes] = []
        self.read_body_to(parts.append)
        return b"".join(parts)

    def send(
        self,
        status: int,
        body: bytes = b"",
        ctype: str = "application/json",
        headers: dict | None = None,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def send_json(self, obj, status: int = 200, headers: dict | None = None) -> None:
        self.send(status, json.dumps(obj).encode(), headers=headers)

    def send_error_json(self, e: HubError, head: bool = False) -> None:
        hdrs = {"X-Error-Message": e.message.replace("\n", " ")[:500]}
        if e.code:
            hdrs["X-Error-Code"] = e.code
        self.send(e.status, json.dumps({"error": e.message}).encode(), headers=hdrs, head=head)

    def check_auth(self, write: bool = False) -> None:
        auth = self.headers.get("Authorization", "")
        if self.cfg.token and auth != f"Bearer {self.cfg.token}":
            raise HubError(401, None, "Invalid credentials in Authorization header")
        if write and not auth:
            raise HubError(401, None, "You must be authenticated to write")

    def dispatch(self, method: str) -> None:
        head = method == "HEAD"
        self._body_consumed = False
        try:
            u = urlsplit(self.path)
            segs = [unquote(s) for s in u.path.split("/")[1:]]
            if segs and segs[-1] == "" and len(segs) > 1:
                segs = segs[:-1]
            q = parse_qs(u.query)
            self.route(method, segs, q)
        except HubError as e:
            self.send_error_json(e, head=head)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # pragma: no cover
            import traceback

            traceback.print_exc()
            self.send_error_json(HubError(500, None, f"{type(e).__name__}: {e}"), head=head)
        finally:
            try:  # an error raised before the body was read must not leave it in the keep-alive stream
                self.read_body_to(lambda _b: None)
            except Exception:
                self.close_connection = True

    do_GET = lambda self: self.dispatch("GET")  # noqa: E731
    do_HEAD = lambda self: self.dispatch("HEAD")  # noqa: E731
    do_POST = lambda self: self.dispatch("POST")  # noqa: E731
    do_PUT = lambda self: self.dispatch("PUT")  # noqa: E731
    do_DELETE = lambda self: self.dispatch("DELETE")  # noqa: E731

    # ------------------------------------------------------------------ routing
    def route(self, m: str, s: list[str], q: dict) -> None:
        if s[:1] == ["api"]:
            rest = s[1:]
            if rest == ["whoami-v2"]:
                self.check_auth(write=True)
                u = self.cfg.user
                return self.send_json(
                    {
                        "type": "user",
                        "id": "0" * 24,
                        "name": u,
                        "fullname": u,
                        "email": f"{u}@localhost",
                        "emailVerified": True,
                        "isPro": False,
                        "orgs": [{"name": o, "type": "org"} for o in self.cfg.orgs],
                        "auth": {"type": "access_token", "accessToken": {"displayName": "minihub", "role": "write"}},
                    }
                )
            if rest == ["agent-harnesses"]:
                return self.send_json({"standardEnvVars": [], "harnesses": {}})
            if rest == ["validate-yaml"] and m == "POST":
                return self.validate_yaml()
            if rest == ["repos", "create"] and m == "POST":
                return self.create_repo()
            if rest == ["repos", "delete"] and m == "DELETE":
                return self.delete_repo()
            if rest == ["repos", "move"] and m == "POST":
                return self.move_repo()
            if len(rest) >= 3 and rest[0] in REPO_TYPES:
                rtype = REPO_TYPES[rest[0]]
                rid = f"{rest[1]}/{rest[2]}"
                return self.repo_api(m, rtype, rid, rest[3:], q)
            raise HubError(404, None, f"Unknown API route /{'/'.join(s)}")
        if len(s) >= 2 and s[0] == "lfs-upload" and m == "PUT":
            return self.lfs_put(s[1])
        # git-lfs batch: /{prefix}{ns}/{name}.git/info/lfs/objects/batch
        if len(s) >= 5 and s[-4:] == ["info", "lfs", "objects", "batch"] and s[-5].endswith(".git"):
            rtype, pre = ("model", s[:-5])
            if pre and pre[0] in REPO_TYPES and len(pre) == 2:
                rtype, pre = REPO_TYPES[pre[0]], pre[1:]
            rid = "/".join(pre + [s[-5][:-4]])
            return self.lfs_batch(rtype, rid)
        # resolve: /{prefix}{ns}/{name}/resolve/{rev}/{path}
        rtype, p = "model", s
        if p and p[0] in REPO_TYPES and len(p) > 3 and p[3] == "resolve":
            rtype, p = REPO_TYPES[p[0]], p[1:]
        if len(p) >= 5 and p[2] == "resolve" and m in ("GET", "HEAD"):
            return self.resolve(m, rtype, f"{p[0]}/{p[1]}", p[3], "/".join(p[4:]))
        if s == ["health"]:
            return self.send_json({"ok": True})
        raise HubError(404, None, f"Not found: /{'/'.join(s)}")

    # ------------------------------------------------------------------ repo CRUD
    def validate_yaml(self) -> None:
        body = json.loads(self.read_body() or b"{}")
        content = body.get("content", "")
        errors = []
        mt = re.match(r"^\s*---\s*\n(.*?)\n---\s*(\n|$)", content, flags=re.S)
        if mt:
            try:
                import yaml

                meta = yaml.safe_load(mt.group(1))
                if meta is not None and not isinstance(meta, dict):
                    errors.append({"message": "metadata must be a YAML mapping"})
            except ImportError:
                pass
            except Exception as e:  # yaml error
                errors.append({"message": f"Invalid YAML: {e}"})
        if errors:
            return self.send_json({"errors": errors, "warnings": []}, status=400)
        return self.send_json({"errors": [], "warnings": []})

    def create_repo(self) -> None:
        self.check_auth(write=True)
        body = json.loads(self.read_body() or b"{}")
        rtype = body.get("type") or "model"
        ns = body.get("organization") or self.cfg.user
        rid = f"{ns}/{body['name']}"
        url = f"{self.base_url()}/{URL_PREFIX[rtype]}{rid}"
        with self.store.lock:
            k = self.store.key(rtype, rid)
            if k in self.store.repos:
                return self.send_json({"error": "You already created this model repo", "url": url}, status=409)
            repo = {
                "type": rtype,
                "id": rid,
                "private": body.get("visibility") == "private" or bool(body.get("private")),
                "createdAt": now_iso(),
                "branches": {},
                "tags": {},
                "prs": {},
                "commits": {},
            }
            ga = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
            sha = self.store.put_bytes(ga)
            tree = {".gitattributes": file_entry(".gitattributes", sha, len(ga), False, git_blob_oid(ga))}
            cid = self.store.make_commit(repo, None, tree, "initial commit", "")
            repo["branches"]["main"] = cid
            self.store.repos[k] = repo
            self.store.save(repo)
        self.send_json({"url": url, "name": rid, "id": rid})

    def delete_repo(self) -> None:
        self.check_auth(write=True)
        body = json.loads(self.read_body() or b"{}")
        rtype = body.get("type") or "model"
        rid = f"{body.get('organization') or self.cfg.user}/{body['name']}"
        with self.store.lock:
            k = self.store.key(rtype, rid)
            if k not in self.store.repos:
                raise HubError(404, "RepoNotFound", f"Repository {rid} not found")
            self.store.repos.pop(k)
            fn = os.path.join(self.store.repo_dir, hashlib.sha1(k.encode()).hexdigest() + ".json")
            if os.path.exists(fn):
                os.remove(fn)
        self.send_json({})

    def move_repo(self) -> None:
        self.check_auth(write=True)
        body = json.loads(self.read_body() or b"{}")
        rtype = body.get("type") or "model"
        with self.store.lock:
            src_k, dst_k = self.store.key(rtype, body["fromRepo"]), self.store.key(rtype, body["toRepo"])
            if src_k not in self.store.repos:
                raise HubError(404, "RepoNotFound", f"Repository {body['fromRepo']} not found")
            if dst_k in self.store.repos:
                raise HubError(409, None, f"Repository {body['toRepo']} already exists")
            repo = self.store.repos.pop(src_k)
            os.remove(os.path.join(self.store.repo_dir, hashlib.sha1(src_k.encode()).hexdigest() + ".json"))
            repo["id"] = body["toRepo"]
            self.store.repos[dst_k] = repo
            self.store.save(repo)
        self.send_json({})

    # ------------------------------------------------------------------ per-repo API
    # (operation, method or None for any) -> handler(repo, args, m, q); args are the path parts after the operation
    REPO_ROUTES = {
        ("refs", "GET"): "api_refs",
        ("tree", "GET"): "api_tree",
        ("paths-info", "POST"): "api_paths_info",
        ("commits", "GET"): "api_commits",
        ("branch", None): "api_branch",
        ("tag", None): "api_tag",
        ("preupload", "POST"): "api_preupload",
        ("commit", "POST"): "api_commit",
        ("super-squash", "POST"): "api_super_squash",
    }
    # operations whose route needs a revision/name after the operation
    NEEDS_ARGUMENT = {"tree", "paths-info", "commits", "branch", "tag"}

    def repo_api(self, m: str, rtype: str, rid: str, rest: list[str], q: dict) -> None:
        if m == "PUT" and rest == ["settings"]:
            return self.api_settings(rtype, rid)
        repo = self.store.get(rtype, rid)
        if repo.get("private"):
            self.check_auth(write=True)
        if not rest or (rest[0] == "revision" and len(rest) >= 2):
            rev = "/".join(rest[1:]) if rest else "main"
            return self.send_json(self.repo_info(repo, rev))
        op, args = rest[0], rest[1:]
        if op == "auth-check":
            if args == ["write"]:
                self.check_auth(write=True)
            return self.send_json({})
        if op.startswith("xet-") and op.endswith("-token"):
            raise HubError(501, None, "minihub does not implement Xet storage; set HF_HUB_DISABLE_XET=1 on the client")
        handler = self.REPO_ROUTES.get((op, m)) or self.REPO_ROUTES.get((op, None))
        if handler is None or (op in self.NEEDS_ARGUMENT and not args):
            raise HubError(404, None, f"Unknown repo API route {op}")
        return getattr(self, handler)(repo, args, m, q)

    def api_settings(self, rtype: str, rid: str) -> None:
        self.check_auth(write=True)
        body = json.loads(self.read_body() or b"{}")
        with self.store.lock:
            repo = self.store.get(rtype, rid)
            if "private" in body:
                repo["private"] = bool(body["private"])
            if "visibility" in body:
                repo["private"] = body["visibility"] != "public"
            self.store.save(repo)
        self.send_json({})

    def api_refs(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        def refs(kind: str, prefix: str) -> list[dict]:
            return [{"name": n, "ref": f"{prefix}{n}", "targetCommit": c} for n, c in repo[kind].items()]

        out = {"branches": refs("branches", "refs/heads/"), "tags": refs("tags", "refs/tags/"), "converts": []}
        if q.get("include_prs"):
            out["pullRequests"] = refs("prs", "")
        self.send_json(out)

    def api_tree(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        cid = self.store.resolve_rev(repo, args[0])
        recursive = q.get("recursive", ["false"])[0].lower() in ("1", "true")
        self.send_json(self.list_tree(repo["commits"][cid]["tree"], "/".join(args[1:]), recursive, cid))

    def api_paths_info(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        cid = self.store.resolve_rev(repo, "/".join(args))
        body = self.read_body().decode()
        if "json" in self.headers.get("Content-Type", ""):
            paths = json.loads(body).get("paths", [])
        else:
            paths = parse_qs(body).get("paths", [])
        tree = repo["commits"][cid]["tree"]
        out = []
        for p in (path.strip("/") for path in paths):
            if p in tree:
                out.append(self.file_json(p, tree[p], cid))
            elif p == "" or any(k.startswith(p + "/") for k in tree):
                out.append(self.folder_json(p))
        self.send_json(out)

    def api_commits(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        cid = self.store.resolve_rev(repo, "/".join(args))
        out = []
        while cid:
            c = repo["commits"][cid]
            authors = [{"user": self.cfg.user}]
            out.append({"id": cid, "title": c["title"], "message": c["message"], "date": c["date"], "authors": authors})
            cid = c["parent"]
        self.send_json(out)

    def edit_ref(self, repo: dict, kind: str, m: str, create_name: str | None, target_rev: str, delete_name: str):
        """POST creates ref ``create_name`` at ``target_rev`` (409 if taken); DELETE removes ``delete_name``."""
        self.check_auth(write=True)
        label = kind[:-1].capitalize()  # "Branch" / "Tag"
        with self.store.lock:
            refs = repo[kind]
            if m == "POST":
                if create_name in refs:
                    raise HubError(409, None, f"{label} {create_name} already exists")
                refs[create_name] = self.store.resolve_rev(repo, target_rev)
            elif m == "DELETE":
                if delete_name not in refs:
                    raise HubError(404, "RevisionNotFound", f"{label} {delete_name} not found")
                del refs[delete_name]
            self.store.save(repo)
        self.send_json({})

    def api_branch(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        name = "/".join(args)
        body = json.loads(self.read_body() or b"{}") if m == "POST" else {}
        self.edit_ref(repo, "branches", m, name, body.get("startingPoint") or "main", name)

    def api_tag(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        rev_or_tag = "/".join(args)  # POST .../tag/{rev} with {"tag": name}; DELETE .../tag/{name}
        body = json.loads(self.read_body() or b"{}") if m == "POST" else {}
        self.edit_ref(repo, "tags", m, body.get("tag"), rev_or_tag, rev_or_tag)

    def api_preupload(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        self.check_auth(write=True)
        body = json.loads(self.read_body() or b"{}")
        try:
            tree = repo["commits"][self.store.resolve_rev(repo, "/".join(args) or "main")]["tree"]
        except HubError:
            tree = {}  # a new branch
        files = []
        for f in body.get("files", []):
            mode = self.upload_mode(f["path"], int(f.get("size", 0)), base64.b64decode(f.get("sample", "")))
            cur = tree.get(f["path"])
            oid = None
            if cur is not None:
                oid = cur["sha256"] if mode == "lfs" else self.git_sha1_of_content(cur)
            files.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        self.send_json({"files": files, "commitOid": None})

    def api_commit(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        self.check_auth(write=True)
        self.commit(repo, "/".join(args) or "main", q)

    def api_super_squash(self, repo: dict, args: list[str], m: str, q: dict) -> None:
        self.check_auth(write=True)
        branch = "/".join(args) or "main"
        body = json.loads(self.read_body() or b"{}")
        with self.store.lock:
            head_c = repo["commits"][self.store.resolve_rev(repo, branch)]
            cid = self.store.make_commit(repo, None, dict(head_c["tree"]), body.get("message", "Super-squash"), "")
            repo["branches"][branch] = cid
            self.store.save(repo)
        self.send_json({"commitOid": cid})

    def git_sha1_of_content(self, entry: dict) -> str:
        with open(self.store.blob_path(entry["sha256"]), "rb") as f:
            return git_blob_oid(f.read())

    def upload_mode(self, path: str, size: int, sample: bytes) -> str:
        if self.cfg.lfs == "never" or size == 0:
            return "regular"
        if self.cfg.lfs == "always":
            return "lfs"
        if size >= LFS_THRESHOLD or path.lower().endswith(LFS_SUFFIXES) or b"\0" in sample:
            return "lfs"
        return "regular"

    def file_json(self, path: str, e: dict, cid: str) -> dict:
        d = {"type": "file", "oid": e["oid"], "size": e["size"], "path": path}
        if e["lfs"]:
            ptr = lfs_pointer(e["sha256"], e["size"])
            d["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": len(ptr)}
        return d

    @staticmethod
    def folder_json(path: str) -> dict:
        return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}

    def list_tree(self, tree: dict, path: str, recursive: bool, cid: str) -> list:
        path = path.strip("/")
        if path and path in tree:
            raise HubError(404, "EntryNotFound", f"{path} is a file, not a directory")
        prefix = path + "/" if path else ""
        keys = [k for k in tree if k.startswith(prefix)]
        if path and not keys:
            raise HubError(404, "EntryNotFound", f"{path} does not exist")
        out, folders = [], set()
        for k in sorted(keys):
            parts = k[len(prefix) :].split("/")
            if recursive:
                for i in range(1, len(parts)):
                    folders.add(prefix + "/".join(parts[:i]))
                out.append(self.file_json(k, tree[k], cid))
            elif len(parts) == 1:
                out.append(self.file_json(k, tree[k], cid))
            else:
                folders.add(prefix + parts[0])
        return [self.folder_json(f) for f in sorted(folders)] + out

    def repo_info(self, repo: dict, rev: str) -> dict:
        cid = self.store.resolve_rev(repo, rev)
        c = repo["commits"][cid]
        tree = c["tree"]
        siblings = []
        for p, e in sorted(tree.items()):
            sib = {"rfilename": p, "size": e["size"], "blobId": e["oid"]}
            if e["lfs"]:
                sib["lfs"] = {
                    "size": e["size"],
                    "sha256": e["sha256"],
                    "pointerSize": len(lfs_pointer(e["sha256"], e["size"])),
                }
            siblings.append(sib)
        info = {
            "_id": hashlib.sha1(repo["id"].encode()).hexdigest()[:24],
            "id": repo["id"],
            "modelId": repo["id"],
            "author": repo["id"].split("/")[0],
            "sha": cid,
            "lastModified": c["date"],
            "createdAt": repo["createdAt"],
            "private": repo["private"],
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(e["size"] for e in tree.values()),
        }
        card = self.card_data(tree)
        if card is not None:
            info["cardData"] = card
            info["tags"] = list(card.get("tags") or [])
            if repo["type"] == "model":
                for k in ("library_name", "pipeline_tag"):
                    if k in card:
                        info[k] = card[k]
                if "model-index" in card:
                    info["model-index"] = card["model-index"]
        if repo["type"] == "model" and "config.json" in tree:
            try:
                with open(self.store.blob_path(tree["config.json"]["sha256"]), "rb") as f:
                    cfgj = json.load(f)
                info["config"] = {k: cfgj[k] for k in ("architectures", "model_type", "auto_map") if k in cfgj}
            except Exception:
                pass
        return info

    def card_data(self, tree: dict):
        e = tree.get("README.md")
        if e is None:
            return None
        with open(self.store.blob_path(e["sha256"]), encoding="utf-8", errors="replace") as f:
            text = f.read()
        mt = re.match(r"^\s*---\s*\n(.*?)\n---\s*(\n|$)", text, flags=re.S)
        if not mt:
            return None
        try:
            import yaml

            d = yaml.safe_load(mt.group(1))
            return d if isinstance(d, dict) else None
        except Exception:
            return None

    # ------------------------------------------------------------------ commit
    def commit(self, repo: dict, rev: str, q: dict) -> None:
        st = self.store
        lines = [json.loads(raw) for raw in self.read_body().splitlines() if raw.strip()]
        header = next((line["value"] for line in lines if line["key"] == "header"), {})
        create_pr = q.get("create_pr", ["0"])[0] in ("1", "true")
        with st.lock:
            parent = st.resolve_rev(repo, rev)
            if header.get("parentCommit") and header["parentCommit"] != parent:
                raise HubError(412, None, "A commit has happened since. Please refresh and try again.")
            tree = dict(repo["commits"][parent]["tree"])
            for line in lines:
                k, v = line["key"], line["value"]
                if k == "file":
                    data = (
                        base64.b64decode(v["content"])
                        if v.get("encoding", "base64") == "base64"
                        else v["content"].encode()
                    )
                    sha = st.put_bytes(data)
                    tree[v["path"]] = file_entry(v["path"], sha, len(data), False, git_blob_oid(data))
                elif k == "lfsFile":
                    sha = v["oid"]
                    if not st.has_blob(sha):
                        raise HubError(422, None, f"LFS object {sha} for {v['path']} was never uploaded")
                    size = os.path.getsize(st.blob_path(sha))
                    tree[v["path"]] = file_entry(v["path"], sha, size, True, git_blob_oid(lfs_pointer(sha, size)))
                elif k == "deletedFile":
                    if v["path"] not in tree:
                        raise HubError(404, "EntryNotFound", f"A file with this name doesn't exist: {v['path']}")
                    del tree[v["path"]]
                elif k == "deletedFolder":
                    pre = v["path"].rstrip("/") + "/"
                    for p in [p for p in tree if p.startswith(pre)]:
                        del tree[p]
            cid = st.make_commit(repo, parent, tree, header.get("summary", ""), header.get("description", ""))
            pr_url = None
            if create_pr:
                n = len(repo["prs"]) + 1
                repo["prs"][f"refs/pr/{n}"] = cid
                pr_url = f"{self.base_url()}/{URL_PREFIX[repo['type']]}{repo['id']}/discussions/{n}"
            else:
                branch = rev[11:] if rev.startswith("refs/heads/") else rev
                if rev in repo["prs"]:
                    repo["prs"][rev] = cid
                elif branch in repo["branches"]:
                    repo["branches"][branch] = cid
                else:
                    raise HubError(400, None, f"Can only commit to a branch, not {rev}")
            st.save(repo)
        self.send_json(
            {
                "success": True,
                "commitOid": cid,
                "pullRequestUrl": pr_url,
                "commitUrl": f"{self.base_url()}/{URL_PREFIX[repo['type']]}{repo['id']}/commit/{cid}",
            }
        )

    # ------------------------------------------------------------------ LFS
    def lfs_batch(self, rtype: str, rid: str) -> None:
        self.check_auth(write=True)
        self.store.get(rtype, rid)
        body = json.loads(self.read_body() or b"{}")
        objs = []
        for o in body.get("objects", []):
            d = {"oid": o["oid"], "size": int(o["size"]), "authenticated": True}
            if not self.store.has_blob(o["oid"]):
                d["actions"] = {"upload": {"href": f"{self.base_url()}/lfs-upload/{o['oid']}", "header": {}}}
            objs.append(d)
        self.send(
            200, json.dumps({"transfer": "basic", "objects": objs}).encode(), ctype="application/vnd.git-lfs+json"
        )

    def lfs_put(self, sha: str) -> None:
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise HubError(400, None, "bad oid")
        h = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(dir=self.store.blob_dir, suffix=".part")
        with os.fdopen(fd, "wb") as f:

            def sink(b):
                h.update(b)
                f.write(b)

            self.read_body_to(sink)
        if h.hexdigest() != sha:
            os.remove(tmp)
            raise HubError(400, None, f"sha256 mismatch: got {h.hexdigest()}")
        os.replace(tmp, self.store.blob_path(sha))
        self.send(200, b"")

    # ------------------------------------------------------------------ downloads
    def resolve(self, m: str, rtype: str, rid: str, rev: str, path: str) -> None:
        st = self.store
        head = m == "HEAD"
        repo = st.get(rtype, rid)
        if repo.get("private"):
            self.check_auth(write=True)
        cid = st.resolve_rev(repo, rev)
        e = repo["commits"][cid]["tree"].get(path)
        if e is None:
            raise HubError(404, "EntryNotFound", f'{path} does not exist on "{rev}"')
        etag = e["sha256"] if e["lfs"] else e["oid"]
        size = e["size"]
        hdrs = {
            "X-Repo-Commit": cid,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
            "Content-Disposition": f'inline; filename="{os.path.basename(path)}"',
        }
        if e["lfs"]:
            hdrs["X-Linked-Etag"] = f'"{etag}"'
            hdrs["X-Linked-Size"] = str(size)
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and size:
            mt = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if mt:
                if mt.group(1) == "":
                    start = max(0, size - int(mt.group(2)))
                else:
                    start = int(mt.group(1))
                    end = int(mt.group(2)) if mt.group(2) else size - 1
                end = min(end, size - 1)
                if start > end:
                    self.send(416, b"", headers={"Content-Range": f"bytes */{size}"}, head=head)
                    return
                status = 206
                hdrs["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1) if size else 0
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        if head or not length:
            return
        with open(st.blob_path(e["sha256"]), "rb") as f:
            f.seek(start)
            remaining = length
            while remaining:
                chunk = f.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)


def make_server(
    host: str,
    port: int,
    data: str,
    lfs: str = "auto",
    user: str = "testuser",
    token: str | None = None,
    orgs: list[str] | None = None,
    quiet: bool = True,
) -> ThreadingHTTPServer:
    cfg = argparse.Namespace(lfs=lfs, user=user, token=token, orgs=orgs or [], quiet=quiet)
    handler = type("BoundHandler", (Handler,), {"store": Store(data), "cfg": cfg})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    return srv


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18111, help="0 = pick a free port (printed on stdout)")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "minihub-data"))
    ap.add_argument(
        "--lfs",
        choices=["auto", "never", "always"],
        default="auto",
        help="auto: LFS for binary/weights/>=10MB files (like the Hub); never: everything inline",
    )
    ap.add_argument("--user", default="testuser", help="user name returned by whoami / default namespace")
    ap.add_argument("--org", action="append", default=[], help="org names reported by whoami")
    ap.add_argument("--token", default=None, help="if set, require 'Authorization: Bearer TOKEN'")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    srv = make_server(a.host, a.port, a.data, a.lfs, a.user, a.token, a.org, quiet=not a.verbose)
    print(f"minihub listening on http://{a.host}:{srv.server_address[1]} data={a.data} lfs={a.lfs}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
