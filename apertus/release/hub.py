"""Upload of the released models to the Hugging Face Hub: one repository per model, one
commit each, then a tag.

Each model of the release folder (`base/`, `aligned/`: a Hugging Face folder with its model
card) goes to its own repository (`release.hub.repo_id`, `aligned_repo_id`), at the root, so
`from_pretrained(repo)` needs no subfolder; a folder that is itself one model goes to `repo_id`.
The repository is created when missing (`exist_ok`), and every file of the model goes in ONE
commit (`HfApi.create_commit` with one `CommitOperationAdd` per file, and one
`CommitOperationDelete` per file of an earlier upload that is no longer in the release: large
files are pre-uploaded first and the commit that makes them visible is a single atomic call, so
the repository shows the previous release or the whole new one; `upload_folder` would split a
large folder into several commits when hf_xet is installed), and the commit is tagged.

The token comes only from the environment (`HF_TOKEN`) or the user's Hub login
(`huggingface_hub.get_token()`); it is handed to huggingface_hub and written nowhere (receipt,
manifest and log carry the repository, commit and files only). Without a token, or in offline
mode, nothing is sent. The endpoint is `HF_ENDPOINT` (read when the upload starts), else the
Hub.

By hand::

    python -m apertus.release.hub upload --folder results/RUN/release --repo-id OWNER/NAME
        [--aligned-repo-id OWNER/NAME] [--dry-run] [--public] [--tag TAG]
        [--commit-message MSG] [--receipt FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import atomic_write_json, sha256_file
from apertus.core.stage import StepRun, parse_config_argument, run_main
from apertus.release.config import HubConfig

log = logging.getLogger("apertus")

RELEASE_MANIFEST = "RELEASE-MANIFEST.json"  # apertus.release.bundle.RELEASE_MANIFEST
DEFAULT_ENDPOINT = "https://huggingface.co"
# The released models, each a subfolder of the release holding a Hugging Face folder.
RELEASED_MODELS = ("base", "aligned")
# Files the Hub itself keeps in every repository: never deleted as stale.
HUB_OWN_FILES = frozenset({".gitattributes"})


@dataclass(frozen=True)
class UploadFile:
    path: str  # relative to the folder, as it will be in the repository
    size: int
    sha256: str


def upload_files(folder: str | os.PathLike) -> list[UploadFile]:
    """Every file of the folder, hidden files (`.snakemake_timestamp`...) left out."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ApertusError(f"release folder {folder} does not exist")
    files = [
        UploadFile(f.relative_to(folder).as_posix(), f.stat().st_size, sha256_file(f))
        for f in sorted(folder.rglob("*"))
        if f.is_file() and not any(p.startswith(".") for p in f.relative_to(folder).parts)
    ]
    if not files:
        raise ApertusError(f"release folder {folder} is empty: nothing to upload")
    return files


def model_folders(folder: str | os.PathLike, hub: HubConfig) -> list[tuple[str, str, Path]]:
    """(model, repository, folder) of each model to upload: the release's `base/` and
    `aligned/` (those holding a config.json), or the folder itself as `repo_id`'s model."""
    folder = Path(folder)
    models = [m for m in RELEASED_MODELS if (folder / m / "config.json").is_file()]
    if not models:
        return [("model", hub.repo_id, folder)]
    return [(m, hub.repo_for(m), folder / m) for m in models]


def default_tag(folder: str | os.PathLike) -> str | None:
    """`<run>-<code commit, 8>-<RELEASE-MANIFEST.json SHA-256, 8>`: a new release content never
    reuses a tag. None when the folder has no release manifest (an upload by hand)."""
    path = Path(folder) / RELEASE_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        run = manifest["config"]["run"]
        commit = manifest["code"].get("commit") or "nocommit"
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ApertusError(f"{path}: not a release manifest ({e})") from None
    return f"{run}-{commit[:8]}-{sha256_file(path)[:8]}"


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str:
    """The user's token (HF_TOKEN or the Hub login); a clear error when there is none."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise ApertusError(
            "no Hugging Face token: set HF_TOKEN or log in with `hf auth login`; nothing was sent"
        )
    return token


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def upload_release(
    folder: str | os.PathLike,
    hub: HubConfig,
    *,
    tag: str | None = None,
) -> dict[str, Any]:
    """Upload each model of `folder` to its repository (or, with `hub.dry_run`, only list them)
    and return the receipt: endpoint, tag, and per repository its model, commit, files (path,
    size, sha256) and the stale files the commit deleted."""
    if not hub.repo_id:
        raise ApertusError("release.hub.repo_id is not set: no repository to upload to")
    targets = [
        (model, repo, upload_files(path)) for model, repo, path in model_folders(folder, hub)
    ]
    tag = tag or hub.tag or default_tag(folder)
    endpoint = hub_endpoint()
    repos = [
        {
            "model": model,
            "repo_id": repo,
            "commit": None,
            "files": [vars(f) for f in files],
            "deleted": [],
            "bytes": sum(f.size for f in files),
        }
        for model, repo, files in targets
    ]
    receipt: dict[str, Any] = {
        "endpoint": endpoint,
        "dry_run": hub.dry_run,
        "private": hub.private,
        "tag": tag,
        "revision": "main",
        "repos": repos,
        "bytes": sum(r["bytes"] for r in repos),
    }
    if hub.dry_run:
        for entry in repos:
            for f in entry["files"]:
                log.debug(
                    "would upload %s to %s (%d bytes)", f["path"], entry["repo_id"], f["size"]
                )
        log.info("dry run: %d files, %d bytes, nothing sent", _count(repos), receipt["bytes"])
        return receipt
    if _offline():
        raise ApertusError(
            "offline mode (HF_HUB_OFFLINE, set by config `offline: true`) forbids the upload; "
            "set `offline: false` to upload, or `release.hub.dry_run: true`; nothing was sent"
        )
    token = hub_token()

    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token, library_name="apertus")
    message = hub.commit_message or (f"Release {tag}" if tag else "Release")
    for (_, _, path), entry in zip(model_folders(folder, hub), repos, strict=True):
        committed = [r["repo_id"] for r in repos if r["commit"] is not None]
        _upload_model(api, path, entry, message, tag, endpoint, committed, private=hub.private)
    log.info(
        "uploaded %d files to %s, tag %s",
        _count(repos),
        ", ".join(f"{r['repo_id']} at {r['commit']}" for r in repos),
        tag,
    )
    return receipt


def _count(repos: list[dict[str, Any]]) -> int:
    return sum(len(r["files"]) for r in repos)


def _upload_model(
    api,
    folder: Path,
    entry: dict[str, Any],
    message: str,
    tag: str | None,
    endpoint: str,
    committed: list[str],
    *,
    private: bool,
) -> None:
    """One repository: create it when missing, commit the model's files and delete the stale
    ones in one commit, tag it; fills `entry` (commit, commit_url, deleted)."""
    import httpx
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = entry["repo_id"]
    files = [f["path"] for f in entry["files"]]

    def nothing_committed() -> str:
        if entry["commit"] is not None:
            return ""
        if committed:
            return (
                f"; nothing was committed to {repo_id} (committed before: {', '.join(committed)})"
            )
        return "; nothing was committed"

    doing = f"creating the repository {repo_id}"
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        doing = f"listing the files of {repo_id}"
        stale = sorted(set(api.list_repo_files(repo_id, repo_type="model")) - set(files))
        entry["deleted"] = [p for p in stale if p not in HUB_OWN_FILES]
        doing = f"committing {len(files)} files to {repo_id}"
        log.info("%s at %s (deleting %d stale)", doing, endpoint, len(entry["deleted"]))
        commit = api.create_commit(
            repo_id,
            operations=[CommitOperationAdd(p, str(folder / p)) for p in files]
            + [CommitOperationDelete(p) for p in entry["deleted"]],
            commit_message=message,
            repo_type="model",
            revision="main",
        )
        entry["commit"] = commit.oid
        entry["commit_url"] = str(commit.commit_url)
        if tag:
            doing = f"tagging commit {commit.oid} of {repo_id} as {tag} (the commit is made)"
            api.create_tag(repo_id, tag=tag, revision=commit.oid, tag_message=message)
    except httpx.TransportError as e:
        raise ApertusError(
            f"cannot reach the Hugging Face Hub at {endpoint} while {doing} "
            f"({type(e).__name__}: {e})" + nothing_committed()
        ) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise ApertusError(
            f"the Hub at {endpoint} refused {doing}: HTTP {status} ({e.server_message or e})"
            + nothing_committed()
        ) from None
    except ValueError as e:  # e.g. the Hub's README.md metadata validation
        raise ApertusError(f"the Hub at {endpoint} refused {doing}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m apertus.release.hub",
        description="Upload each model of a release folder to its Hugging Face Hub repository "
        "in one tagged commit.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("upload", help="upload (or, with --dry-run, list) a release folder")
    up.add_argument("--folder", type=Path, required=True, help="the release folder")
    up.add_argument("--repo-id", help="the base model's OWNER/NAME (default: release.hub.repo_id)")
    up.add_argument(
        "--aligned-repo-id",
        help="the aligned model's OWNER/NAME (default: release.hub.aligned_repo_id)",
    )
    up.add_argument("--dry-run", action="store_true", help="list the files, send nothing")
    up.add_argument(
        "--public", action="store_true", help="create the repository as public (default private)"
    )
    up.add_argument("--tag", help="tag of the commit (default: run, code and content hashes)")
    up.add_argument("--commit-message")
    up.add_argument("--receipt", type=Path, help="write the receipt (JSON) here")
    up.add_argument(
        "--config",
        type=parse_config_argument,
        help="the `release.hub` config section as JSON (what rule release_upload passes)",
    )
    up.add_argument("--manifest", type=Path, help="write a step manifest (with --receipt)")
    return parser


def _hub_config(args: argparse.Namespace) -> HubConfig:
    section = dict(args.config or {})
    if args.repo_id:
        section["repo_id"] = args.repo_id
    if args.aligned_repo_id:
        section["aligned_repo_id"] = args.aligned_repo_id
    if args.dry_run:
        section["dry_run"] = True
    if args.public:
        section["private"] = False
    if args.commit_message:
        section["commit_message"] = args.commit_message
    return HubConfig.from_dict(section)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    hub = _hub_config(args)
    if args.manifest is not None:
        if args.receipt is None:
            raise ApertusError("--manifest needs --receipt (the step's output)")
        with StepRun(
            "release",
            "upload",
            args.config or {},
            inputs=[args.folder],
            outputs=[args.receipt],
            manifest=args.manifest,
        ) as step:
            receipt = upload_release(args.folder, hub, tag=args.tag)
            atomic_write_json(args.receipt, receipt)
            step.summary.update(
                {
                    **{k: receipt[k] for k in ("tag", "dry_run", "bytes")},
                    "repos": {r["repo_id"]: r["commit"] for r in receipt["repos"]},
                }
            )
        return
    receipt = upload_release(args.folder, hub, tag=args.tag)
    if args.receipt is not None:
        atomic_write_json(args.receipt, receipt)
    for entry in receipt["repos"]:
        if hub.dry_run:
            for f in entry["files"]:
                print(f"{f['size']:>14,}  {entry['repo_id']}  {f['path']}")
        else:
            print(
                f"uploaded {len(entry['files'])} files to {entry['repo_id']} at commit "
                f"{entry['commit']} (deleted {len(entry['deleted'])} stale), tag {receipt['tag']}"
            )
    if hub.dry_run:
        print(
            f"dry run: {_count(receipt['repos'])} files, {receipt['bytes']:,} bytes, nothing sent"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    run_main(main)
