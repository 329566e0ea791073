"""Results kept on disk between processes, as JSON entries in a folder of the user's cache.

Each SLURM job and each step is a fresh process, and some of what they compute first is the same
every time (a module's code-digest facts: `apertus.core.codedigest`; lm-eval's index of its
built-in tasks: `apertus.evaluate.lmeval`). A :class:`JsonCache` keeps such results under a key
the caller derives from everything the result depends on, so a changed input never reads a
stale entry. An entry holds its key and a sha256 of its payload: a flipped byte, a truncated or
empty file, or another entry under its name reads as a miss (the caller computes again and the
entry is replaced). Entries are written atomically; a folder that cannot be written only costs
the time of computing again.

Where: ``$XDG_CACHE_HOME/apertus/<name>`` (``~/.cache``), or the folder an environment variable
names (``off``: no cache) — :func:`user_cache`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class JsonCache:
    """JSON payloads by key (a hex digest) in `folder`: ``<key>.json`` holds a first line
    ``{"key": ..., "sha256": ...}`` (the sha256 of the rest), then the payload."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def get(self, key: str) -> Any | None:
        """The payload stored under `key`, or None (absent, unreadable or not whole)."""
        try:
            head, _, body = (self.folder / f"{key}.json").read_bytes().partition(b"\n")
            stored = json.loads(head)
            if stored["key"] != key or stored["sha256"] != hashlib.sha256(body).hexdigest():
                return None
            return json.loads(body)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, payload: Any) -> None:
        body = json.dumps(payload).encode()
        head = json.dumps({"key": key, "sha256": hashlib.sha256(body).hexdigest()}).encode()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.folder, prefix=f".{key}.")
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(head + b"\n" + body)
            os.replace(temporary, self.folder / f"{key}.json")
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def user_cache(name: str, variable: str) -> JsonCache | None:
    """The cache `name`: the folder the environment variable `variable` names (``off``: None),
    else ``$XDG_CACHE_HOME/apertus/<name>`` (``~/.cache/apertus/<name>``)."""
    chosen = os.environ.get(variable)
    if chosen == "off":
        return None
    if chosen:
        return JsonCache(Path(chosen))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return JsonCache(Path(base) / "apertus" / name)
