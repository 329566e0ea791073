"""Retroactive robots.txt opt-out (RECIPE.md §5): a snapshot of robots.txt files, and a filter.

Apertus applies the robots.txt files of the top domains *as of January 2025* to every crawl dump,
including dumps collected before the site owners opted out. That takes two pieces:

* a **snapshot**: one JSON file mapping each host to its robots.txt text, built either from a
  directory of already-downloaded files (`snapshot_from_directory`) or by fetching
  ``https://<host>/robots.txt`` (`fetch_snapshot`), and written with `write_snapshot`;
* `RobotsFilter`, a datatrove filter that drops a document when any of the AI-crawler agents
  (`DEFAULT_AGENTS`) is disallowed for its URL by its host's robots.txt, read by Protego, by
  RFC 9309 (`Rfc9309Robots`), or by both (`READINGS`).

Where Protego 0.7.0 departs from RFC 9309 (§2.2.1; checked against Protego's source), for the
agents we check:

* **Agent prefix matching.** Protego applies a group to every agent whose name *starts with* the
  group's name at a word boundary, preferring the longest: ``User-agent: Applebot`` governs
  ``Applebot-Extended`` (and ``User-agent: Google`` governs ``Google-Extended``) when the site has
  no group of that exact name. RFC 9309 matches the product token exactly (case-insensitively),
  so ``Applebot-Extended`` falls to ``*`` there.
* **Other lines split groups.** Protego ends a run of ``User-agent`` lines at any other line but
  Sitemap/Host: in ``User-agent: GPTBot / Crawl-delay: 10 / User-agent: CCBot / Disallow: /``,
  GPTBot gets a group of its own with no rules (allowed everywhere). RFC 9309: a group is one or
  more user-agent lines followed by rules, and records it does not define must not interfere, so
  both are disallowed.
* **Versioned agents.** Protego compares the whole value: ``User-agent: GPTBot/1.1`` is a group
  for the literal ``gptbot/1.1``, which ``GPTBot`` does not match (it falls to ``*``), while the
  query ``CCBot/2.0`` matches a ``CCBot`` group by prefix. RFC 9309's product token is letters,
  ``_`` and ``-`` only; like Google's reference parser we read the token up to the first other
  character, so ``GPTBot/1.1`` in a file and ``CCBot/2.0`` as a query are ``gptbot`` and ``ccbot``.

Path rules (longest match, ``*``, ``$``, percent-encoding, ``/robots.txt`` always allowed) are
Protego's in every reading.

Snapshot format::

    {"created": "<ISO-8601 UTC>", "method": "directory" | "fetch", "source": "<dir>" | "https",
     "agents": null,
     "hosts": {"<host>": {"status": "ok" | "missing" | "error", "robots_txt": str | null,
                          "fetched": "<ISO-8601>" | null, "detail": "<HTTP status / error>"}}}

"missing" (no file, HTTP 4xx) and "error" (5xx, timeout, connection failure) carry no text, and
the recipe's rule "no robots.txt available -> keep" applies to both.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter
from protego import Protego

from apertus.core import ApertusError
from apertus.core.files import atomic_write_json

logger = logging.getLogger("apertus.data.robots")

# RECIPE.md §5: a document is dropped when any of these agents is disallowed for its URL.
# FacebookBot is not in the report's list but is in the released filtering scripts.
DEFAULT_AGENTS: tuple[str, ...] = (
    "AI2Bot",
    "Applebot-Extended",
    "Bytespider",
    "CCBot",
    "CCBot/1.0",
    "CCBot/2.0",
    "ClaudeBot",
    "cohere-training-data-crawler",
    "Diffbot",
    "Meta-ExternalAgent",
    "Google-Extended",
    "GPTBot",
    "PanguBot",
    "*",
    "FacebookBot",
)

# How a robots.txt is read (module docstring): "conservative" drops a document when either
# Protego's or RFC 9309's reading disallows it for an agent.
READINGS = ("conservative", "protego", "rfc9309")

STATUSES = ("ok", "missing", "error")
METHODS = ("directory", "fetch")

DEFAULT_USER_AGENT = "apertus-robots-snapshot/1.0 (robots.txt opt-out snapshot for LLM pretraining)"

# Google reads at most 500 KiB of a robots.txt and ignores the rest; we keep the same order.
DEFAULT_MAX_BYTES = 512_000

_PROGRESS_EVERY = 1000
_READ_CHUNK = 64 * 1024
# How many parsed robots.txt files one worker keeps; a shard touches far fewer hosts than that.
_PARSER_CACHE_SIZE = 50_000
# DNS host names after IDNA encoding: labels of letters, digits, '-' and '_' (seen in practice).
_HOST_RE = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
_CACHE_NAME_RE = re.compile(r"(?P<host>.+)\.(?P<date>\d{4}-\d{2}-\d{2})\.json")
# RFC 9309 §2.2.1: a product token is made of letters, "_" and "-".
_PRODUCT_TOKEN_RE = re.compile(r"[A-Za-z_-]*")


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _normalise_host(host: str) -> str | None:
    """The DNS form of a host name (lower case, IDNA, no trailing dot), or None if it is not one."""
    host = host.strip().lower().rstrip(".")
    if not host:
        return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    if len(host) > 253 or not _HOST_RE.fullmatch(host):
        return None
    return host


def url_host(url: str) -> str | None:
    """The lower-case host of `url`, without port or userinfo; None if it has no host."""
    if not isinstance(url, str):
        return None
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        return None
    if not host:
        return None
    return _normalise_host(host)


def _entry(status: str, robots_txt: str | None, fetched: str | None, detail: str) -> dict:
    return {"status": status, "robots_txt": robots_txt, "fetched": fetched, "detail": detail}


def _decode(data: bytes) -> str:
    # utf-8-sig strips a byte-order mark, which Protego would otherwise read as part of the
    # first directive ("\ufeffUser-agent"), silently dropping the first group.
    return data.decode("utf-8-sig", errors="replace")


def _requested_hosts(hosts: Iterable[str]) -> tuple[list[str], list[str]]:
    """The requested hosts, normalised and deduplicated in order, and those that are not hosts."""
    if isinstance(hosts, str):
        raise ApertusError("hosts must be an iterable of host names, not one string")
    valid: dict[str, None] = {}
    invalid: dict[str, None] = {}
    for raw in hosts:
        if not isinstance(raw, str):
            raise ApertusError(f"host names must be strings, got {raw!r}")
        if not raw.strip():
            continue  # blank lines in a host list
        host = _normalise_host(raw)
        if host is None:
            invalid[raw.strip()] = None
        else:
            valid[host] = None
    if invalid:
        logger.warning(
            "%d requested hosts are not host names and are recorded as errors, e.g. %s",
            len(invalid),
            list(invalid)[:5],
        )
    return list(valid), list(invalid)


def _snapshot(method: str, source: str, hosts: dict[str, dict]) -> dict:
    return {
        "created": _iso(_now()),
        "method": method,
        "source": source,
        "agents": None,
        "hosts": hosts,
    }


def snapshot_from_directory(directory: Path, hosts: Iterable[str]) -> dict:
    """A snapshot from a directory holding one ``<host>.txt`` robots.txt file per host.

    A requested host without a file is "missing" (no robots.txt: documents are kept); a file that
    cannot be read is an "error". ``fetched`` is the file's modification time.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ApertusError(f"robots.txt directory {directory} does not exist or is not a directory")
    valid, invalid = _requested_hosts(hosts)
    entries: dict[str, dict] = {}
    for host in valid:
        path = directory / f"{host}.txt"
        try:
            data = path.read_bytes()
            mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except FileNotFoundError:
            entries[host] = _entry("missing", None, None, f"no file {path.name}")
            continue
        except OSError as err:
            entries[host] = _entry("error", None, None, f"cannot read {path.name}: {err}")
            continue
        entries[host] = _entry("ok", _decode(data), _iso(mtime), f"file {path.name}")
    for raw in invalid:
        entries[raw] = _entry("error", None, None, "not a valid host name")
    counts = {s: sum(e["status"] == s for e in entries.values()) for s in STATUSES}
    logger.info("robots.txt snapshot from %s: %s", directory, counts)
    return _snapshot("directory", str(directory), entries)


# --- fetching -----------------------------------------------------------------------------------


def _default_url(host: str) -> str:
    return f"https://{host}/robots.txt"


def _fetch_one(
    opener: urllib.request.OpenerDirector,
    url: str,
    *,
    timeout: float,
    user_agent: str,
    max_bytes: int,
) -> dict:
    """Fetch one robots.txt and classify it; never raises for anything the host does."""
    fetched = _iso(_now())
    request = urllib.request.Request(
        url, headers={"User-Agent": user_agent, "Accept": "text/plain, */*"}
    )
    # `timeout` bounds each socket operation; the deadline also bounds a server that trickles bytes.
    deadline = time.monotonic() + timeout
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
            chunks: list[bytes] = []
            size = 0
            # One byte past the limit tells a file of exactly max_bytes from a longer one.
            while size <= max_bytes:
                if time.monotonic() > deadline:
                    return _entry(
                        "error", None, fetched, f"timed out after {timeout} s while reading"
                    )
                chunk = response.read(min(_READ_CHUNK, max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except urllib.error.HTTPError as err:
        err.close()
        # RFC 9309 §2.3.1.3-4 and Google's crawler: 4xx means "no robots.txt" (crawl anything);
        # 5xx means unreachable. Redirect loops also surface here as 3xx.
        # 429 is the exception, as for Google: a rate limit says nothing about the file.
        if 400 <= err.code < 500 and err.code != 429:
            return _entry("missing", None, fetched, f"HTTP {err.code}")
        return _entry("error", None, fetched, f"HTTP {err.code}")
    except urllib.error.URLError as err:
        return _entry("error", None, fetched, f"{type(err.reason).__name__}: {err.reason}")
    except (
        Exception
    ) as err:  # timeouts, resets, bad status lines, TLS: one host never stops the run
        return _entry("error", None, fetched, f"{type(err).__name__}: {err}")

    data = b"".join(chunks)
    detail = f"HTTP {status}"
    if len(data) > max_bytes:
        # Rules after the limit are ignored; the last, cut line is dropped too, because a cut
        # "Disallow: /private" would read as the far broader "Disallow: /p".
        data = data[:max_bytes]
        data = data[: data.rfind(b"\n") + 1]
        detail += f", truncated to {len(data)} bytes (limit {max_bytes})"
    return _entry("ok", _decode(data), fetched, detail)


def _cache_index(cache_dir: Path) -> dict[str, tuple[str, Path]]:
    """The newest cache file per host, from one listing of the cache directory."""
    newest: dict[str, tuple[str, Path]] = {}
    with os.scandir(cache_dir) as it:
        for item in it:
            match = _CACHE_NAME_RE.fullmatch(item.name)
            if not match or not item.is_file():
                continue
            host, date = match["host"], match["date"]
            if host not in newest or date > newest[host][0]:
                newest[host] = (date, Path(item.path))
    return newest


def _read_cache(path: Path, max_age_days: int | None, now: datetime) -> dict | None:
    """The cached entry in `path`, or None when it is unreadable, an error, or too old."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        _check_entry(entry, str(path))
        fetched = datetime.fromisoformat(entry["fetched"])
    except (OSError, ValueError, TypeError, ApertusError) as err:
        logger.warning("ignoring unreadable robots.txt cache file %s: %s", path, err)
        return None
    if entry["status"] == "error":
        return None  # 5xx and timeouts are often transient: ask again
    if fetched.tzinfo is None:
        fetched = fetched.replace(tzinfo=UTC)
    if max_age_days is not None and now - fetched > timedelta(days=max_age_days):
        return None
    return entry


def fetch_snapshot(
    hosts: Iterable[str],
    cache_dir: Path,
    *,
    concurrency: int = 16,
    timeout: float = 10.0,
    user_agent: str = DEFAULT_USER_AGENT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_age_days: int | None = None,
    url_for: Callable[[str], str] | None = None,
) -> dict:
    """A snapshot made by fetching each host's robots.txt (``https://<host>/robots.txt``).

    At most `concurrency` requests run at once, each bounded by `timeout` seconds and `max_bytes`
    bytes; redirects are followed. 2xx is "ok"; 4xx is "missing" (no robots.txt, so no
    restriction); 5xx, timeouts and connection failures are "error" with the reason in ``detail``.

    Every result is cached in `cache_dir` as ``<host>.<YYYY-MM-DD>.json`` and reused by later calls
    unless it is older than `max_age_days`; "error" results are fetched again. `url_for` maps a
    host to the URL to fetch (a local mirror or test server).
    """
    if concurrency < 1:
        raise ApertusError(f"robots.txt fetch concurrency must be at least 1, got {concurrency}")
    if not timeout > 0:
        raise ApertusError(f"robots.txt fetch timeout must be positive, got {timeout}")
    if max_bytes < 1:
        raise ApertusError(f"robots.txt max_bytes must be at least 1, got {max_bytes}")
    if max_age_days is not None and max_age_days < 0:
        raise ApertusError(f"robots.txt cache max_age_days must be >= 0, got {max_age_days}")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    make_url = url_for or _default_url
    valid, invalid = _requested_hosts(hosts)

    now = _now()
    index = _cache_index(cache_dir)
    entries: dict[str, dict] = {}
    to_fetch: list[str] = []
    for host in valid:
        cached = _read_cache(index[host][1], max_age_days, now) if host in index else None
        if cached is None:
            to_fetch.append(host)
        else:
            entries[host] = cached
    logger.info(
        "robots.txt: %d hosts, %d from cache %s, %d to fetch",
        len(valid),
        len(entries),
        cache_dir,
        len(to_fetch),
    )

    # Built here, not at import, so that proxy settings are read from the environment of this call.
    opener = urllib.request.build_opener()
    today = now.date().isoformat()

    def fetch_and_cache(host: str) -> dict:
        try:
            url = make_url(host)
            entry = _fetch_one(
                opener, url, timeout=timeout, user_agent=user_agent, max_bytes=max_bytes
            )
        except Exception as err:  # e.g. url_for failing for one host
            entry = _entry("error", None, _iso(_now()), f"{type(err).__name__}: {err}")
        atomic_write_json(cache_dir / f"{host}.{today}.json", entry)
        return entry

    done = 0
    fetched: dict[str, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        # A bounded window of pending futures keeps memory flat for millions of hosts.
        pending: dict[concurrent.futures.Future, str] = {}
        queue = iter(to_fetch)
        window = 4 * concurrency
        while True:
            for host in queue:
                pending[pool.submit(fetch_and_cache, host)] = host
                if len(pending) >= window:
                    break
            if not pending:
                break
            finished, _ = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in finished:
                fetched[pending.pop(future)] = future.result()
                done += 1
                if done % _PROGRESS_EVERY == 0:
                    logger.info("robots.txt: fetched %d / %d hosts", done, len(to_fetch))

    for host in valid:  # keep the requested order
        entries.setdefault(host, fetched.get(host))
    ordered = {host: entries[host] for host in valid}
    for raw in invalid:
        ordered[raw] = _entry("error", None, None, "not a valid host name")
    counts = {s: sum(e["status"] == s for e in ordered.values()) for s in STATUSES}
    logger.info("robots.txt snapshot fetched: %s", counts)
    return _snapshot("fetch", "https" if url_for is None else "url_for", ordered)


# --- snapshot files -----------------------------------------------------------------------------


def _check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise ApertusError(f"{where}: a host entry must be an object, got {type(entry).__name__}")
    missing = {"status", "robots_txt", "fetched", "detail"} - entry.keys()
    if missing:
        raise ApertusError(f"{where}: host entry lacks {sorted(missing)}")
    if entry["status"] not in STATUSES:
        raise ApertusError(f"{where}: status must be one of {STATUSES}, got {entry['status']!r}")
    if entry["status"] == "ok" and not isinstance(entry["robots_txt"], str):
        raise ApertusError(f'{where}: status "ok" needs robots_txt text')
    if entry["status"] != "ok" and entry["robots_txt"] is not None:
        raise ApertusError(f"{where}: status {entry['status']!r} must have robots_txt null")
    if entry["fetched"] is not None and not isinstance(entry["fetched"], str):
        raise ApertusError(f"{where}: fetched must be an ISO timestamp or null")
    if not isinstance(entry["detail"], str):
        raise ApertusError(f"{where}: detail must be a string")


def _check_snapshot(snapshot: Any, where: str) -> None:
    if not isinstance(snapshot, dict):
        raise ApertusError(f"{where}: a robots.txt snapshot must be a JSON object")
    missing = {"created", "method", "source", "agents", "hosts"} - snapshot.keys()
    if missing:
        raise ApertusError(f"{where}: robots.txt snapshot lacks {sorted(missing)}")
    if snapshot["method"] not in METHODS:
        raise ApertusError(f"{where}: method must be one of {METHODS}, got {snapshot['method']!r}")
    agents = snapshot["agents"]
    if agents is not None and not (
        isinstance(agents, list) and all(isinstance(a, str) for a in agents)
    ):
        raise ApertusError(f"{where}: agents must be null or a list of strings")
    if not isinstance(snapshot["hosts"], dict):
        raise ApertusError(f"{where}: hosts must be an object mapping host -> entry")
    for host, entry in snapshot["hosts"].items():
        _check_entry(entry, f"{where}: host {host!r}")


def write_snapshot(path: Path, snapshot: dict) -> None:
    """Write `snapshot` atomically (readers see the old file or the whole new one)."""
    _check_snapshot(snapshot, "snapshot to write")
    atomic_write_json(path, snapshot)


def load_snapshot(path: Path) -> dict:
    """Read a snapshot written by `write_snapshot`, with an error naming the file if it is bad."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ApertusError(f"robots.txt snapshot {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ApertusError(f"cannot read robots.txt snapshot {path}: {err}") from None
    try:
        snapshot = json.loads(text)
    except json.JSONDecodeError as err:
        raise ApertusError(f"robots.txt snapshot {path} is not valid JSON: {err}") from None
    _check_snapshot(snapshot, str(path))
    return snapshot


# --- RFC 9309 reading ---------------------------------------------------------------------------


def product_token(agent: str) -> str:
    """The RFC 9309 product token of a user-agent value, lower case: ``*``, or the letters, ``_``
    and ``-`` before the first other character (``GPTBot/1.1`` -> ``gptbot``), as Google's
    reference parser reads it; "" when the value starts with anything else."""
    agent = agent.strip()
    if agent == "*" or (agent.startswith("*") and agent[1].isspace()):
        return "*"
    return _PRODUCT_TOKEN_RE.match(agent).group().lower()


class Rfc9309Robots:
    """One robots.txt read by RFC 9309's grouping and agent matching (§2.1, §2.2.1).

    A group is one or more ``User-agent`` lines followed by ``Allow``/``Disallow`` rules; any other
    line (Crawl-delay, Sitemap, unknown records) is ignored and never ends a group. Groups naming
    the same product token are merged. An agent obeys the group of its exact product token, else
    the ``*`` group, else nothing restricts it. Path rules are matched by Protego, fed the
    group's rules alone.
    """

    def __init__(self, text: str):
        self._rules: dict[str, list[str]] = {}
        tokens: dict[str, None] = {}
        in_rules = False
        for raw in text.splitlines():
            field, sep, value = raw.split("#", 1)[0].partition(":")
            if not sep:
                continue
            field, value = field.strip().lower(), value.strip()
            if field == "user-agent":
                if in_rules:
                    tokens, in_rules = {}, False
                token = product_token(value)
                if token:  # a value that is no product token names no crawler
                    tokens[token] = None
                    self._rules.setdefault(token, [])
            elif field in ("allow", "disallow"):
                in_rules = True
                for token in tokens:  # none before the first user-agent line: no group
                    self._rules[token].append(f"{field}: {value}")
        self._parsers: dict[str, Protego] = {}

    def can_fetch(self, url: str, agent: str) -> bool:
        token = product_token(agent)
        if token not in self._rules:
            token = "*"
            if token not in self._rules:
                return True
        parser = self._parsers.get(token)
        if parser is None:
            parser = Protego.parse("\n".join(["User-agent: *", *self._rules[token]]))
            self._parsers[token] = parser
        return parser.can_fetch(url, "*")


# --- the filter ---------------------------------------------------------------------------------


class RobotsFilter(BaseFilter):
    """Drop documents whose URL the site's robots.txt disallows for any AI-crawler agent.

    RECIPE.md §5: robots.txt files fetched once (January 2025) are applied retroactively to every
    dump, so a site that opted out of AI training later also leaves the older crawls. A document is
    dropped when *any* of `agents` (default: `DEFAULT_AGENTS`, which includes ``*``) may not fetch
    its URL in the chosen `reading` of the robots.txt: Protego's ``can_fetch``, RFC 9309's
    (`Rfc9309Robots`), or, by default, "conservative": disallowed in either (the module docstring
    lists where they differ). Documents are kept when they have no URL, their host is not in the
    snapshot, or the snapshot has no robots.txt text for it (missing / error).

    Stats: ``no_url``, ``bad_url`` (no host could be read), ``no_robots``, ``allowed``, and for a
    dropped document one ``disallowed_<agent>`` per agent that is disallowed; in the conservative
    reading also one of ``both_readings_disallow``, ``only_protego_disallows``,
    ``only_rfc9309_disallows`` per dropped document, so the documents the readings disagree on are
    counted.

    Args:
        snapshot: a snapshot dict, or the path of a snapshot file (loaded lazily in the worker).
        agents: the crawler agents checked against each URL.
        reading: one of `READINGS`.
        exclusion_writer: optional writer receiving the dropped documents.
    """

    name = "🤖 robots.txt opt-out"

    def __init__(
        self,
        snapshot: dict | str | Path,
        agents: Sequence[str] = DEFAULT_AGENTS,
        reading: str = "conservative",
        exclusion_writer=None,
    ):
        super().__init__(exclusion_writer)
        if isinstance(agents, str) or not all(isinstance(a, str) and a.strip() for a in agents):
            raise ApertusError(
                f"RobotsFilter agents must be a list of non-empty names, got {agents!r}"
            )
        self.agents: tuple[str, ...] = tuple(dict.fromkeys(a.strip() for a in agents))
        if not self.agents:
            raise ApertusError("RobotsFilter needs at least one agent")
        if reading not in READINGS:
            raise ApertusError(f"RobotsFilter reading must be one of {READINGS}, got {reading!r}")
        self.reading = reading
        if reading != "protego":
            unreadable = [a for a in self.agents if not product_token(a)]
            if unreadable:
                raise ApertusError(
                    f"agents {unreadable} have no RFC 9309 product token (letters, '_', '-')"
                )
        if isinstance(snapshot, dict):
            _check_snapshot(snapshot, "RobotsFilter snapshot")
            self.snapshot_path: str | None = None
            self._robots: dict[str, str] | None = self._robots_by_host(snapshot)
        elif isinstance(snapshot, str | os.PathLike):
            self.snapshot_path = os.fspath(snapshot)
            self._robots = None
        else:
            raise ApertusError(
                f"RobotsFilter snapshot must be a dict or a path, got {type(snapshot).__name__}"
            )
        self._parsers: OrderedDict[str, tuple[Protego | None, Rfc9309Robots | None]] = OrderedDict()

    @staticmethod
    def _robots_by_host(snapshot: dict) -> dict[str, str]:
        """Host (normalised as `url_host` normalises it) -> robots.txt text, for hosts with text."""
        robots: dict[str, str] = {}
        for raw, entry in snapshot["hosts"].items():
            host = _normalise_host(raw) if isinstance(raw, str) else None
            if host is not None and entry["robots_txt"] is not None:
                robots.setdefault(host, entry["robots_txt"])
        return robots

    def __getstate__(self) -> dict:
        # Workers receive a pickled copy: send the path, not the loaded texts or parsed files.
        state = self.__dict__.copy()
        state["_parsers"] = OrderedDict()
        if self.snapshot_path is not None:
            state["_robots"] = None
        return state

    def _parser(self, host: str) -> tuple[Protego | None, Rfc9309Robots | None] | None:
        if self._robots is None:
            self._robots = self._robots_by_host(load_snapshot(Path(self.snapshot_path)))
        text = self._robots.get(host)
        if text is None:
            return None
        parser = self._parsers.get(host)
        if parser is None:
            # A BOM in a hand-made snapshot would hide the first User-agent line from Protego.
            text = text.removeprefix("\ufeff")
            parser = (
                Protego.parse(text) if self.reading != "rfc9309" else None,
                Rfc9309Robots(text) if self.reading != "protego" else None,
            )
            self._parsers[host] = parser
            if len(self._parsers) > _PARSER_CACHE_SIZE:
                self._parsers.popitem(last=False)
        else:
            self._parsers.move_to_end(host)
        return parser

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        url = doc.metadata.get("url")
        if url is None or url == "":
            self.stat_update("no_url")
            return True
        host = url_host(url)
        if host is None:
            self.stat_update("bad_url")
            return True
        parser = self._parser(host)
        if parser is None:
            self.stat_update("no_robots")
            return True
        protego, rfc9309 = parser
        try:
            by_protego = {
                a for a in self.agents if protego is not None and not protego.can_fetch(url, a)
            }
            by_rfc9309 = {
                a for a in self.agents if rfc9309 is not None and not rfc9309.can_fetch(url, a)
            }
        except ValueError:  # a URL urllib can split for the host but not for the path
            self.stat_update("bad_url")
            return True
        if by_protego or by_rfc9309:
            for agent in self.agents:
                if agent in by_protego or agent in by_rfc9309:
                    self.stat_update(f"disallowed_{agent}")
            if self.reading == "conservative":
                if by_protego and by_rfc9309:
                    self.stat_update("both_readings_disallow")
                else:
                    self.stat_update(
                        "only_protego_disallows" if by_protego else "only_rfc9309_disallows"
                    )
            return False, "robots"
        self.stat_update("allowed")
        return True
