"""Upload of the release folder to the Hugging Face Hub: one commit, then a tag.

The repository is created when missing (`exist_ok`), every file of the folder goes in ONE
commit (`HfApi.create_commit` with one `CommitOperationAdd` per file: large files are
pre-uploaded first and the commit that makes them visible is a single atomic call, so the
repository shows the previous release or the whole new one; `upload_folder` would split a
large folder into several commits when hf_xet is installed), and the commit is tagged.

The token comes only from the environment (`HF_TOKEN`) or the user's Hub login
(`huggingface_hub.get_token()`); it is handed to huggingface_hub and written nowhere (receipt,
manifest and log carry the repository, commit and files only). Without a token, or in offline
mode, nothing is sent. The endpoint is `HF_ENDPOINT` (read when the upload starts), else the
Hub.

By hand::

    python -m apertus.release.hub upload --folder results/RUN/release --repo-id OWNER/NAME
        [--dry-run] [--public] [--tag TAG] [--commit-message MSG] [--receipt FILE]
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
    """Upload `folder` to `hub.repo_id` (or, with `hub.dry_run`, only list it) and return the
    receipt: repository, endpoint, commit, tag, files (path, size, sha256)."""
    if not hub.repo_id:
        raise ApertusError("release.hub.repo_id is not set: no repository to upload to")
    files = upload_files(folder)
    tag = tag or hub.tag or default_tag(folder)
    endpoint = hub_endpoint()
    receipt: dict[str, Any] = {
        "repo_id": hub.repo_id,
        "endpoint": endpoint,
        "dry_run": hub.dry_run,
        "private": hub.private,
        "tag": tag,
        "revision": "main",
        "commit": None,
        "files": [vars(f) for f in files],
        "bytes": sum(f.size for f in files),
    }
    if hub.dry_run:
        for f in files:
            log.debug("would upload %s (%d bytes)", f.path, f.size)
        log.info("dry run: %d files, %d bytes, nothing sent", len(files), receipt["bytes"])
        return receipt
    if _offline():
        raise ApertusError(
            "offline mode (HF_HUB_OFFLINE, set by config `offline: true`) forbids the upload; "
            "set `offline: false` to upload, or `release.hub.dry_run: true`; nothing was sent"
        )
    token = hub_token()

    import httpx
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=endpoint, token=token, library_name="apertus")
    folder = Path(folder)
    message = hub.commit_message or (f"Release {tag}" if tag else "Release")
    doing = f"creating the repository {hub.repo_id}"
    try:
        api.create_repo(hub.repo_id, repo_type="model", private=hub.private, exist_ok=True)
        doing = f"committing {len(files)} files to {hub.repo_id}"
        log.info("%s at %s", doing, endpoint)
        commit = api.create_commit(
            hub.repo_id,
            operations=[CommitOperationAdd(f.path, str(folder / f.path)) for f in files],
            commit_message=message,
            repo_type="model",
            revision="main",
        )
        receipt["commit"] = commit.oid
        receipt["commit_url"] = str(commit.commit_url)
        if tag:
            doing = f"tagging commit {commit.oid} of {hub.repo_id} as {tag} (the commit is made)"
            api.create_tag(hub.repo_id, tag=tag, revision=commit.oid, tag_message=message)
    except httpx.TransportError as e:
        raise ApertusError(
            f"cannot reach the Hugging Face Hub at {endpoint} while {doing} "
            f"({type(e).__name__}: {e})"
            + ("; nothing was committed" if receipt["commit"] is None else "")
        ) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise ApertusError(
            f"the Hub at {endpoint} refused {doing}: HTTP {status} ({e.server_message or e})"
            + ("; nothing was committed" if receipt["commit"] is None else "")
        ) from None
    except ValueError as e:  # e.g. the Hub's README.md metadata validation
        raise ApertusError(f"the Hub at {endpoint} refused {doing}: {e}") from None
    log.info(
        "uploaded %d files to %s at commit %s, tag %s",
        len(files),
        hub.repo_id,
        receipt["commit"],
        tag,
    )
    return receipt


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m apertus.release.hub",
        description="Upload a release folder to the Hugging Face Hub in one tagged commit.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("upload", help="upload (or, with --dry-run, list) a release folder")
    up.add_argument("--folder", type=Path, required=True, help="the release folder")
    up.add_argument("--repo-id", help="OWNER/NAME (default: the config's release.hub.repo_id)")
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
                {k: receipt[k] for k in ("repo_id", "commit", "tag", "dry_run", "bytes")}
            )
        return
    receipt = upload_release(args.folder, hub, tag=args.tag)
    if args.receipt is not None:
        atomic_write_json(args.receipt, receipt)
    if hub.dry_run:
        for f in receipt["files"]:
            print(f"{f['size']:>14,}  {f['path']}")
        print(f"dry run: {len(receipt['files'])} files, {receipt['bytes']:,} bytes, nothing sent")
    else:
        print(
            f"uploaded {len(receipt['files'])} files to {receipt['repo_id']} "
            f"at commit {receipt['commit']}, tag {receipt['tag']}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    run_main(main)
