"""The robots.txt opt-out: hand-checked rulings on crafted robots.txt files, snapshots from a
directory and from a loopback HTTP server, snapshot files, and the datatrove filter (stats per
agent, pickling, worker processes)."""

from __future__ import annotations

import json
import os
import pickle
import socket
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from datatrove.data import Document
from protego import Protego

from apertus.core import ApertusError
from apertus.data.config import DataConfig
from apertus.data.robots import (
    DEFAULT_AGENTS,
    READINGS,
    Rfc9309Robots,
    RobotsFilter,
    fetch_snapshot,
    load_snapshot,
    product_token,
    snapshot_from_directory,
    url_host,
    write_snapshot,
)

HOST = "www.alpenblick-reisen.ch"


def snapshot_of(robots: dict[str, str | None]) -> dict:
    """A snapshot dict: text -> "ok", None -> "missing"."""
    hosts = {
        host: {
            "status": "ok" if text is not None else "missing",
            "robots_txt": text,
            "fetched": "2025-01-15T00:00:00+00:00" if text is not None else None,
            "detail": "HTTP 200" if text is not None else "HTTP 404",
        }
        for host, text in robots.items()
    }
    return {
        "created": "2025-01-15T00:00:00+00:00",
        "method": "fetch",
        "source": "https",
        "agents": None,
        "hosts": hosts,
    }


def doc(url=None, i: int = 0, **metadata) -> Document:
    if url is not None:
        metadata["url"] = url
    return Document(text=f"document {i}", id=str(i), metadata=metadata)


def kept(step: RobotsFilter, urls: list) -> list[bool]:
    """Which of the URLs' documents the filter forwards."""
    docs = [doc(url, i) for i, url in enumerate(urls)]
    forwarded = {d.id for d in step.run(iter(docs))}
    return [d.id in forwarded for d in docs]


def stats(step: RobotsFilter) -> dict[str, float]:
    return {name: metric.total for name, metric in step.stats.stats.items()}


def disallowed(step: RobotsFilter) -> dict[str, float]:
    return {
        k.removeprefix("disallowed_"): v
        for k, v in stats(step).items()
        if k.startswith("disallowed_")
    }


def keeps(robots_txt: str, path: str, agents=DEFAULT_AGENTS) -> bool:
    step = RobotsFilter(snapshot_of({HOST: robots_txt}), agents=agents)
    return kept(step, [f"https://{HOST}{path}"])[0]


# --- rulings on crafted robots.txt files (expectations worked out by hand from RFC 9309) ---------

WILDCARDS = """\
User-agent: GPTBot
Disallow: /*.pdf$
Disallow: /tmp/*/secret
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/reports/annual.pdf", False),  # "*" spans directories, "$" anchors at the end
        ("/reports/annual.pdf?download=1", True),  # the query is part of what "$" must end
        ("/reports/annual.pdfx", True),
        ("/reports/annual.PDF", True),  # paths are case-sensitive
        ("/tmp/a/b/secret-plans", False),  # "*" matches "a/b"; no "$", so a prefix is enough
        ("/tmp/secret", True),  # "/tmp/" then "/secret" needs two slashes
        ("/", True),
    ],
)
def test_wildcards_and_end_anchors(path, expected):
    assert keeps(WILDCARDS, path, agents=["GPTBot"]) is expected


LONGEST_MATCH = """\
User-agent: *
Disallow: /shop/
Allow: /shop/public/
Disallow: /shop/public/drafts
Allow: /page
Disallow: /page
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/shop/cart", False),
        ("/shop/public/item-42", True),  # the longer Allow beats the shorter Disallow
        ("/shop/public/drafts/7", False),  # ... and a still longer Disallow beats that Allow
        ("/shopping", True),  # "/shop/" is not a prefix of "/shopping"
        ("/page/1", True),  # equally long Allow and Disallow: the less restrictive wins
        ("/", True),
    ],
)
def test_longest_match_wins_between_allow_and_disallow(path, expected):
    assert keeps(LONGEST_MATCH, path) is expected


GROUPS = """\
User-agent: GPTBot
User-agent: ClaudeBot
Disallow: /no-ai/

User-agent: CCBot
Disallow: /archive/
"""


def test_agent_group_rules_apply_to_every_agent_of_the_group_and_count_per_agent():
    step = RobotsFilter(snapshot_of({HOST: GROUPS}))
    urls = [f"https://{HOST}/no-ai/page", f"https://{HOST}/archive/2019", f"https://{HOST}/news"]
    assert kept(step, urls) == [False, False, True]
    # CCBot/1.0 and CCBot/2.0 have no group of their own and fall to the "CCBot" group.
    assert disallowed(step) == {
        "GPTBot": 1,
        "ClaudeBot": 1,
        "CCBot": 1,
        "CCBot/1.0": 1,
        "CCBot/2.0": 1,
    }
    s = stats(step)
    assert s["total"] == 3
    assert s["forwarded"] == 1
    assert s["dropped"] == 2
    assert s["dropped_robots"] == 2
    assert s["allowed"] == 1


# --- where Protego departs from RFC 9309, under each reading ----------------------------------

PREFIX = "User-agent: Applebot\nDisallow: /\n"
CRAWL_DELAY_BETWEEN_AGENTS = "User-agent: GPTBot\nCrawl-delay: 10\nUser-agent: CCBot\nDisallow: /\n"
VERSIONED_IN_FILE = "User-agent: GPTBot/1.1\nDisallow: /\n"
VERSIONED_CCBOT = "User-agent: CCBot/2.0\nDisallow: /\n"


@pytest.mark.parametrize(
    ("robots", "agent", "by_protego", "by_rfc9309"),
    [
        # Protego: "Applebot" governs Applebot-Extended by prefix. RFC 9309: exact product tokens.
        (PREFIX, "Applebot-Extended", True, False),
        (PREFIX, "Applebot", True, True),
        # Protego: Crawl-delay ends the run of user-agent lines, GPTBot gets an empty group.
        # RFC 9309: only rules end a group, so GPTBot shares CCBot's "Disallow: /".
        (CRAWL_DELAY_BETWEEN_AGENTS, "GPTBot", False, True),
        (CRAWL_DELAY_BETWEEN_AGENTS, "CCBot", True, True),
        # Protego: "GPTBot/1.1" is a name of its own. RFC 9309: its product token is "GPTBot".
        (VERSIONED_IN_FILE, "GPTBot", False, True),
        # The versioned query agents of DEFAULT_AGENTS: Protego matches "CCBot/2.0" literally and
        # lets the bare CCBot through; RFC 9309 reads every one of them as the token "CCBot".
        (VERSIONED_CCBOT, "CCBot/2.0", True, True),
        (VERSIONED_CCBOT, "CCBot", False, True),
        (VERSIONED_CCBOT, "CCBot/1.0", False, True),
    ],
)
@pytest.mark.parametrize("reading", READINGS)
def test_each_reading_drops_what_it_disallows_and_conservative_what_either_does(
    robots, agent, by_protego, by_rfc9309, reading
):
    dropped = {
        "protego": by_protego,
        "rfc9309": by_rfc9309,
        "conservative": by_protego or by_rfc9309,
    }[reading]
    step = RobotsFilter(snapshot_of({HOST: robots}), agents=[agent], reading=reading)
    assert kept(step, [f"https://{HOST}/page"]) == [not dropped]
    assert disallowed(step) == ({agent: 1} if dropped else {})
    s = stats(step)
    readings_stats = {
        k
        for k in s
        if k in ("both_readings_disallow", "only_protego_disallows", "only_rfc9309_disallows")
    }
    if reading == "conservative" and dropped:
        expected = (
            "both_readings_disallow"
            if by_protego and by_rfc9309
            else "only_protego_disallows"
            if by_protego
            else "only_rfc9309_disallows"
        )
        assert readings_stats == {expected}
    else:
        assert readings_stats == set()


def test_rfc9309_sends_an_agent_without_an_exact_group_to_the_star_group():
    robots = PREFIX + "\nUser-agent: *\nDisallow: /private/\n"
    agents = ["Applebot-Extended"]
    for reading, expected in [("protego", [False, False]), ("rfc9309", [True, False])]:
        step = RobotsFilter(snapshot_of({HOST: robots}), agents=agents, reading=reading)
        assert kept(step, [f"https://{HOST}/open", f"https://{HOST}/private/x"]) == expected


def test_conservative_default_counts_every_versioned_ccbot_on_a_versioned_group():
    step = RobotsFilter(snapshot_of({HOST: VERSIONED_CCBOT}))
    assert step.reading == "conservative"
    assert kept(step, [f"https://{HOST}/any"]) == [False]
    assert disallowed(step) == {"CCBot": 1, "CCBot/1.0": 1, "CCBot/2.0": 1}
    assert stats(step)["both_readings_disallow"] == 1


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("GPTBot/1.1", "gptbot"),
        ("  Applebot-Extended ", "applebot-extended"),
        ("cohere-training-data-crawler", "cohere-training-data-crawler"),
        ("*", "*"),
        ("* # everyone", "*"),
        ("Mozilla/5.0 (compatible; GPTBot)", "mozilla"),
        ("/path", ""),
    ],
)
def test_product_token_is_the_leading_letters_underscores_and_hyphens(value, token):
    assert product_token(value) == token


def test_rfc9309_reading_merges_groups_of_one_token_and_ignores_rules_before_any_agent():
    robots = """\
Disallow: /orphan/
User-agent: gptbot
Disallow: /a/
Sitemap: https://example.org/sitemap.xml
Noindex: /ignored/

User-agent: GPTBOT/2.0
Disallow: /b/
"""
    rules = Rfc9309Robots(robots)
    url = f"https://{HOST}"
    assert not rules.can_fetch(f"{url}/a/x", "GPTBot")
    assert not rules.can_fetch(f"{url}/b/x", "GPTBot")
    assert rules.can_fetch(f"{url}/orphan/x", "GPTBot")
    assert rules.can_fetch(f"{url}/a/x", "CCBot")  # no group and no "*": unrestricted
    assert rules.can_fetch(f"{url}/robots.txt", "GPTBot")


def test_a_bad_reading_or_an_agent_without_a_product_token_is_refused():
    with pytest.raises(ApertusError, match="reading"):
        RobotsFilter(snapshot_of({}), reading="google")
    with pytest.raises(ApertusError, match="product token"):
        RobotsFilter(snapshot_of({}), agents=["/bot"])
    RobotsFilter(snapshot_of({}), agents=["/bot"], reading="protego")  # Protego reads any name


def test_the_config_default_reading_is_conservative():
    assert DataConfig.from_dict({}).robots.reading == "conservative"


def test_agent_names_and_directives_are_case_insensitive_but_paths_are_not():
    robots = "user-AGENT: gptBOT\nDISALLOW: /Private\n"
    assert keeps(robots, "/Private/x", agents=["GPTBot"]) is False
    assert keeps(robots, "/private/x", agents=["GPTBot"]) is True


STAR_AND_SPECIFIC = """\
User-agent: *
Disallow: /private/

User-agent: GPTBot
Allow: /
Disallow: /gpt-only/
"""


def test_a_bot_with_its_own_group_does_not_inherit_the_star_group():
    step = RobotsFilter(snapshot_of({HOST: STAR_AND_SPECIFIC}), agents=["GPTBot"])
    urls = [f"https://{HOST}/private/x", f"https://{HOST}/gpt-only/y"]
    assert kept(step, urls) == [True, False]
    assert disallowed(step) == {"GPTBot": 1}


def test_star_is_itself_checked_so_a_star_disallow_drops_with_the_default_agents():
    step = RobotsFilter(snapshot_of({HOST: STAR_AND_SPECIFIC}))
    assert kept(step, [f"https://{HOST}/private/x", f"https://{HOST}/open"]) == [False, True]
    # Every default agent except GPTBot falls to the "*" group.
    assert disallowed(step) == {agent: 1 for agent in DEFAULT_AGENTS if agent != "GPTBot"}


NOISE = """\
# robots.txt for alpenblick-reisen.ch
# User-agent: *
# Disallow: /
Sitemap: https://www.alpenblick-reisen.ch/sitemap.xml
User-agent: ClaudeBot   # Anthropic
Crawl-delay: 10
Request-rate: 1/5
<html><body>not robots</body></html>
::::
Foo: bar
Disallow: /claude-no   # trailing comment
Host: alpenblick-reisen.ch
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/claude-no/x", False),
        ("/claude-notes", False),  # a prefix rule: "/claude-no" is a prefix of "/claude-notes"
        ("/", True),  # the commented-out "Disallow: /" is not a rule
        ("/sitemap.xml", True),
    ],
)
def test_comments_crawl_delay_sitemap_and_malformed_lines_are_ignored(path, expected):
    assert keeps(NOISE, path) is expected


def test_empty_robots_txt_allows_everything_and_counts_as_allowed():
    step = RobotsFilter(snapshot_of({HOST: ""}))
    assert kept(step, [f"https://{HOST}/anything"]) == [True]
    assert stats(step)["allowed"] == 1
    assert "no_robots" not in stats(step)


def test_empty_disallow_allows_everything():
    robots = "User-agent: *\nDisallow:\n\nUser-agent: GPTBot\nDisallow: \n"
    assert keeps(robots, "/any/path?x=1") is True


def test_byte_order_mark_does_not_hide_the_first_group():
    robots = "\ufeffUser-agent: *\nDisallow: /\n"
    # Protego alone reads "\ufeffUser-agent" as an unknown directive and allows everything.
    assert Protego.parse(robots).can_fetch(f"https://{HOST}/x", "*") is True
    assert keeps(robots, "/x") is False


QUERIES = """\
User-agent: *
Disallow: /search?q=
Disallow: /*sessionid=
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/search?q=zermatt", False),
        ("/search", True),
        ("/search?lang=de", True),
        ("/a/b?x=1&sessionid=2", False),
        ("/a/b?x=1", True),
        ("/search?q=a#q=b", False),  # the fragment is not part of the URL a rule sees
    ],
)
def test_query_strings(path, expected):
    assert keeps(QUERIES, path) is expected


ENCODED = """\
User-agent: *
Disallow: /caf%C3%A9/
Disallow: /über/
Disallow: /a%2Fb
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/café/menu", False),  # the URL's "é" is compared as %C3%A9
        ("/caf%c3%a9/menu", False),  # lower-case hex is the same octets
        ("/%C3%BCber/reise", False),  # a raw "ü" in the rule matches its escape in the URL
        ("/a%2Fb", False),
        ("/a/b", True),  # an encoded "/" stays distinct from a path separator (RFC 9309 §2.2.2)
        ("/cafe/menu", True),
    ],
)
def test_percent_encoding(path, expected):
    assert keeps(ENCODED, path) is expected


def test_url_host_normalisation():
    assert url_host("HTTPS://User:Secret@WWW.Alpenblick-Reisen.CH:8443/a?b=c") == HOST
    assert url_host("https://www.alpenblick-reisen.ch./x") == HOST  # trailing root dot
    assert url_host("https://Bücher.de/x") == "xn--bcher-kva.de"  # IDNA, as DNS and files spell it
    assert url_host("www.alpenblick-reisen.ch/no-scheme") is None
    assert url_host("http://[::1") is None  # urlsplit raises on this
    assert url_host("http://a b.com/") is None
    assert url_host("mailto:someone@example.org") is None
    assert url_host("") is None
    assert url_host(42) is None


def test_ports_upper_case_hosts_and_snapshot_key_spelling_do_not_matter():
    robots = "User-agent: *\nDisallow: /private/\n"
    step = RobotsFilter(snapshot_of({"WWW.Alpenblick-Reisen.CH.": robots}))
    urls = [
        "HTTP://WWW.ALPENBLICK-REISEN.CH:8443/private/x",
        "https://user@www.alpenblick-reisen.ch/private/y",
        "https://www.alpenblick-reisen.ch:8443/public",
        "https://alpenblick-reisen.ch/private/z",  # a different host: robots.txt is per host
    ]
    assert kept(step, urls) == [False, False, True, True]
    s = stats(step)
    assert s["dropped_robots"] == 2
    assert s["allowed"] == 1
    assert s["no_robots"] == 1


def test_documents_without_usable_url_or_robots_are_kept_and_counted():
    robots = "User-agent: *\nDisallow: /\n"
    step = RobotsFilter(snapshot_of({HOST: robots, "gone.example.org": None}))
    docs = [
        doc(None, 0),  # no url key at all
        doc("", 1),
        doc("not a url", 2),
        doc(42, 3),
        doc("https://unknown.example.org/x", 4),  # host not in the snapshot
        doc("https://gone.example.org/x", 5),  # host whose robots.txt was missing
        doc(f"https://{HOST}/x", 6),
    ]
    forwarded = [d.id for d in step.run(iter(docs))]
    assert forwarded == ["0", "1", "2", "3", "4", "5"]
    s = stats(step)
    assert s["no_url"] == 2
    assert s["bad_url"] == 2
    assert s["no_robots"] == 2
    assert s["dropped_robots"] == 1


def test_robots_txt_itself_is_always_fetchable():
    assert keeps("User-agent: *\nDisallow: /\n", "/robots.txt") is True


def test_constructor_rejects_bad_options():
    with pytest.raises(ApertusError, match="agents"):
        RobotsFilter(snapshot_of({}), agents="GPTBot")
    with pytest.raises(ApertusError, match="agent"):
        RobotsFilter(snapshot_of({}), agents=[])
    with pytest.raises(ApertusError, match="agents"):
        RobotsFilter(snapshot_of({}), agents=["GPTBot", ""])
    with pytest.raises(ApertusError, match="dict or a path"):
        RobotsFilter(["not", "a", "snapshot"])
    with pytest.raises(ApertusError, match="lacks"):
        RobotsFilter({"hosts": {}})


def test_default_agents_are_the_recipe_list():
    assert set(DEFAULT_AGENTS) == {
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
    }
    assert len(DEFAULT_AGENTS) == 15


# --- snapshots from a directory and snapshot files ----------------------------------------------


def test_snapshot_from_directory(tmp_path):
    robots_dir = tmp_path / "robots"
    robots_dir.mkdir()
    (robots_dir / f"{HOST}.txt").write_text("User-agent: GPTBot\nDisallow: /\n", encoding="utf-8")
    (robots_dir / "bom.example.org.txt").write_bytes(b"\xef\xbb\xbfUser-agent: *\nDisallow: /x\n")
    (robots_dir / "latin1.example.org.txt").write_bytes(b"User-agent: *\nDisallow: /caf\xe9\n")
    (robots_dir / "dir.example.org.txt").mkdir()  # not a readable file
    (robots_dir / "unrequested.example.org.txt").write_text("User-agent: *\nDisallow: /\n")

    hosts = [HOST, "BOM.example.org", "latin1.example.org", "none.example.org"]
    snap = snapshot_from_directory(robots_dir, [*hosts, "dir.example.org", "bad host/..", "", HOST])

    assert snap["method"] == "directory"
    assert snap["source"] == str(robots_dir)
    assert snap["agents"] is None
    datetime.fromisoformat(snap["created"])
    entries = snap["hosts"]
    assert list(entries) == [
        HOST,
        "bom.example.org",
        "latin1.example.org",
        "none.example.org",
        "dir.example.org",
        "bad host/..",
    ]
    assert entries[HOST]["status"] == "ok"
    assert entries[HOST]["robots_txt"] == "User-agent: GPTBot\nDisallow: /\n"
    assert datetime.fromisoformat(entries[HOST]["fetched"]).tzinfo is not None
    assert entries["bom.example.org"]["robots_txt"] == "User-agent: *\nDisallow: /x\n"
    assert entries["latin1.example.org"]["robots_txt"] == "User-agent: *\nDisallow: /caf\ufffd\n"
    assert entries["none.example.org"] == {
        "status": "missing",
        "robots_txt": None,
        "fetched": None,
        "detail": "no file none.example.org.txt",
    }
    assert entries["dir.example.org"]["status"] == "error"
    assert entries["bad host/.."]["status"] == "error"

    step = RobotsFilter(snap)
    urls = [
        f"https://{HOST}/a",
        "https://bom.example.org/x/1",
        "https://none.example.org/x",
        "https://unrequested.example.org/x",
    ]
    assert kept(step, urls) == [False, False, True, True]


def test_snapshot_from_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ApertusError, match="does not exist"):
        snapshot_from_directory(tmp_path / "nope", [HOST])


def test_write_and_load_snapshot_round_trip(tmp_path):
    snap = snapshot_of({HOST: "User-agent: *\nDisallow: /\n", "gone.example.org": None})
    path = tmp_path / "snap" / "robots.json"
    write_snapshot(path, snap)
    assert load_snapshot(path) == snap
    assert [p.name for p in path.parent.iterdir()] == ["robots.json"]  # no temporary left behind


def test_write_snapshot_refuses_a_wrong_shape_and_writes_nothing(tmp_path):
    path = tmp_path / "robots.json"
    bad = snapshot_of({HOST: "x"})
    bad["hosts"][HOST]["status"] = "maybe"
    with pytest.raises(ApertusError, match="status"):
        write_snapshot(path, bad)
    assert not path.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"hosts": {', "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"created": "x", "method": "fetch", "source": "https", "agents": null}', "lacks"),
        (
            '{"created": "x", "method": "guess", "source": "s", "agents": null, "hosts": {}}',
            "method",
        ),
        (
            '{"created": "x", "method": "fetch", "source": "s", "agents": null, "hosts": []}',
            "hosts",
        ),
        (
            '{"created": "x", "method": "fetch", "source": "s", "agents": null, "hosts": '
            '{"a.org": {"status": "ok", "robots_txt": null, "fetched": null, "detail": ""}}}',
            "needs robots_txt",
        ),
        (
            '{"created": "x", "method": "fetch", "source": "s", "agents": null, "hosts": '
            '{"a.org": {"status": "missing", "robots_txt": null}}}',
            "lacks",
        ),
    ],
)
def test_load_snapshot_names_the_file_on_bad_content(tmp_path, content, message):
    path = tmp_path / "robots-snapshot.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ApertusError, match=message) as err:
        load_snapshot(path)
    assert str(path) in str(err.value)


def test_load_snapshot_missing_file(tmp_path):
    with pytest.raises(ApertusError, match="does not exist") as err:
        load_snapshot(tmp_path / "absent.json")
    assert "absent.json" in str(err.value)


# --- pickling and multiprocessing ---------------------------------------------------------------


def test_filter_from_path_loads_lazily_pickles_small_and_works_after_unpickling(tmp_path):
    path = tmp_path / "robots.json"
    robots = "User-agent: *\nDisallow: /private/\n" + "# padding\n" * 5000
    write_snapshot(path, snapshot_of({HOST: robots}))
    step = RobotsFilter(path)  # a path is not read at construction
    urls = [f"https://{HOST}/private/a", f"https://{HOST}/public/b"]
    assert kept(step, urls) == [False, True]

    # After use the step holds the texts and parsed files; its pickle must carry neither.
    data = pickle.dumps(step)
    assert len(data) < 10_000 < len(robots)
    clone = pickle.loads(data)
    assert kept(clone, urls) == [False, True]
    assert disallowed(clone) == {agent: 2 for agent in DEFAULT_AGENTS}  # stats travel too


def test_filter_from_dict_pickles_with_its_snapshot():
    step = RobotsFilter(snapshot_of({HOST: "User-agent: GPTBot\nDisallow: /\n"}))
    clone = pickle.loads(pickle.dumps(step))
    assert kept(clone, [f"https://{HOST}/x"]) == [False]
    assert disallowed(clone) == {"GPTBot": 1}


def test_filter_path_error_surfaces_at_first_document_naming_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{", encoding="utf-8")
    step = RobotsFilter(path)
    with pytest.raises(ApertusError, match=r"broken\.json"):
        kept(step, [f"https://{HOST}/x"])


def test_filter_runs_in_datatrove_worker_processes(tmp_path):
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    snap_path = tmp_path / "robots.json"
    write_snapshot(snap_path, snapshot_of({HOST: "User-agent: *\nDisallow: /private/\n"}))
    inputs = tmp_path / "in"
    inputs.mkdir()
    for shard in range(2):
        lines = [
            json.dumps({"text": f"t{shard}{i}", "id": f"{shard}-{i}", "metadata": {"url": url}})
            for i, url in enumerate(
                [f"https://{HOST}/private/{shard}", f"https://{HOST}/ok/{shard}"]
            )
        ]
        (inputs / f"shard{shard}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(inputs)),
            RobotsFilter(snap_path),
            JsonlWriter(str(tmp_path / "out"), compression=None),
        ],
        tasks=2,
        workers=2,
        logging_dir=str(tmp_path / "logs"),
    ).run()

    ids = sorted(
        json.loads(line)["id"]
        for f in (tmp_path / "out").iterdir()
        for line in f.read_text(encoding="utf-8").splitlines()
    )
    assert ids == ["0-1", "1-1"]


# --- fetching from a loopback HTTP server -------------------------------------------------------

ROBOTS_OK = "User-agent: GPTBot\nDisallow: /no-gpt/\n"
BIG_LINES = [f"Disallow: /private-{i:03d}\n" for i in range(200)]  # 22 bytes a line
BIG = "User-agent: *\n" + "".join(BIG_LINES)


class RobotsServer:
    """A loopback server answering /<host>/robots.txt with a behaviour picked by the host name."""

    def __init__(self, concurrency_target: int = 3):
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.concurrency_target = concurrency_target
        self.gathered = threading.Condition(self.lock)
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                host = self.path.strip("/").split("/")[0]
                with server.lock:
                    server.requests[host] = server.requests.get(host, 0) + 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.gathered.notify_all()
                try:
                    self.respond(host)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeouts)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def send(self, code: int, body: bytes = b"", headers: dict | None = None):
                self.send_response(code)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def respond(self, host: str):
                base = f"http://127.0.0.1:{server.port}"
                if host == "ok.test":
                    self.send(200, ROBOTS_OK.encode(), {"Content-Type": "text/plain"})
                elif host == "gone.test":
                    self.send(404, b"not found")
                elif host == "forbidden.test":
                    self.send(403, b"forbidden")
                elif host == "busy.test":
                    self.send(429, b"slow down")
                elif host == "broken.test":
                    self.send(500, b"oops")
                elif host == "slow.test":
                    server.release.wait(5)
                    self.send(200, ROBOTS_OK.encode())
                elif host == "moved.test":
                    self.send(301, headers={"Location": f"{base}/ok.test/robots.txt"})
                elif host == "loop.test":
                    self.send(302, headers={"Location": f"{base}/loop.test/robots.txt"})
                elif host == "big.test":
                    self.send(200, BIG.encode())
                elif host == "bom.test":
                    self.send(200, b"\xef\xbb\xbfUser-agent: *\nDisallow: /\n")
                elif host.startswith("pool"):
                    # Hold each request until the expected number run together (or 2 s pass), so
                    # the maximum seen is the client's bound, not an accident of timing.
                    with server.gathered:
                        server.gathered.wait_for(
                            lambda: server.in_flight >= server.concurrency_target, timeout=2
                        )
                    time.sleep(0.02)
                    self.send(200, f"# {host}\n".encode())
                else:
                    self.send(404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def url_for(self, host: str) -> str:
        return f"http://127.0.0.1:{self.port}/{host}/robots.txt"

    def total_requests(self) -> int:
        with self.lock:
            return sum(self.requests.values())


@pytest.fixture
def server(monkeypatch):
    # A proxy from the environment would send these requests elsewhere.
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = RobotsServer()
    srv.thread.start()
    yield srv
    srv.release.set()
    srv.httpd.shutdown()
    srv.httpd.server_close()


def test_fetch_status_semantics(server, tmp_path):
    hosts = ["ok.test", "gone.test", "forbidden.test", "busy.test", "broken.test", "moved.test"]
    hosts += ["loop.test", "bom.test"]
    snap = fetch_snapshot(hosts, tmp_path / "cache", timeout=2.0, url_for=server.url_for)
    entries = snap["hosts"]
    assert list(entries) == hosts
    assert snap["method"] == "fetch"
    assert snap["agents"] is None

    assert entries["ok.test"]["status"] == "ok"
    assert entries["ok.test"]["robots_txt"] == ROBOTS_OK
    assert entries["ok.test"]["detail"] == "HTTP 200"
    assert datetime.fromisoformat(entries["ok.test"]["fetched"]).tzinfo is not None
    assert entries["gone.test"]["status"] == "missing"
    assert entries["gone.test"]["robots_txt"] is None
    assert entries["gone.test"]["detail"] == "HTTP 404"
    assert entries["forbidden.test"]["status"] == "missing"  # any 4xx: no restrictions
    assert entries["busy.test"]["status"] == "error"  # 429 is a rate limit, not an answer
    assert entries["broken.test"]["status"] == "error"
    assert entries["broken.test"]["detail"] == "HTTP 500"
    assert entries["broken.test"]["robots_txt"] is None
    assert entries["moved.test"]["status"] == "ok"  # redirect followed
    assert entries["moved.test"]["robots_txt"] == ROBOTS_OK
    assert entries["loop.test"]["status"] == "error"
    assert entries["bom.test"]["robots_txt"] == "User-agent: *\nDisallow: /\n"
    assert server.requests["moved.test"] == 1
    assert server.requests["ok.test"] == 2  # its own request and the redirect's


def test_fetch_timeouts_and_connection_errors_do_not_stop_the_run(server, tmp_path):
    with socket.socket() as probe:  # a loopback port with nobody listening
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    def url_for(host: str) -> str:
        if host == "refused.test":
            return f"http://127.0.0.1:{closed_port}/robots.txt"
        if host == "unmappable.test":
            raise RuntimeError("no mirror for this host")
        return server.url_for(host)

    hosts = ["slow.test", "refused.test", "unmappable.test", "ok.test"]
    start = time.monotonic()
    snap = fetch_snapshot(hosts, tmp_path / "cache", timeout=0.3, url_for=url_for)
    assert time.monotonic() - start < 3  # the slow host was abandoned, not waited for (5 s)
    entries = snap["hosts"]
    assert entries["slow.test"]["status"] == "error"
    assert "timed out" in entries["slow.test"]["detail"]
    assert entries["refused.test"]["status"] == "error"
    assert "Connection" in entries["refused.test"]["detail"]
    assert entries["unmappable.test"]["status"] == "error"
    assert "no mirror" in entries["unmappable.test"]["detail"]
    assert entries["ok.test"]["status"] == "ok"


def test_fetch_truncates_at_max_bytes_and_drops_the_cut_line(server, tmp_path):
    header = len("User-agent: *\n")
    # The cut lands inside line 11, leaving "Disallow: /p", which would disallow "/public".
    max_bytes = header + 10 * 22 + len("Disallow: /p")
    snap = fetch_snapshot(
        ["big.test"], tmp_path / "cache", max_bytes=max_bytes, url_for=server.url_for
    )
    entry = snap["hosts"]["big.test"]
    assert entry["status"] == "ok"
    assert entry["robots_txt"] == "User-agent: *\n" + "".join(BIG_LINES[:10])
    assert "truncated" in entry["detail"]

    step = RobotsFilter(snap)
    assert kept(step, ["http://big.test/public", "http://big.test/private-009"]) == [True, False]

    exact = fetch_snapshot(
        ["big.test"], tmp_path / "cache2", max_bytes=len(BIG), url_for=server.url_for
    )
    assert exact["hosts"]["big.test"]["robots_txt"] == BIG  # exactly at the limit: all of it
    assert exact["hosts"]["big.test"]["detail"] == "HTTP 200"


def test_fetch_cache_is_reused_and_errors_are_retried(server, tmp_path):
    cache = tmp_path / "cache"
    hosts = ["ok.test", "gone.test", "broken.test"]
    first = fetch_snapshot(hosts, cache, url_for=server.url_for)
    assert server.total_requests() == 3
    today = datetime.now(UTC).date().isoformat()
    assert (cache / f"ok.test.{today}.json").is_file()

    second = fetch_snapshot(hosts, cache, url_for=server.url_for)
    assert server.requests == {"ok.test": 1, "gone.test": 1, "broken.test": 2}
    assert second["hosts"]["ok.test"] == first["hosts"]["ok.test"]  # same fetch time: from cache
    assert second["hosts"]["gone.test"] == first["hosts"]["gone.test"]

    third = fetch_snapshot(hosts[:2], cache, max_age_days=0, url_for=server.url_for)
    assert server.requests["ok.test"] == 2  # too old for max_age_days=0
    assert third["hosts"]["ok.test"]["robots_txt"] == ROBOTS_OK


def test_fetch_cache_age_and_corrupt_cache_files(server, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    old = {
        "status": "ok",
        "robots_txt": "User-agent: *\nDisallow: /old/\n",
        "fetched": "2020-01-01T00:00:00+00:00",
        "detail": "HTTP 200",
    }
    (cache / "ok.test.2020-01-01.json").write_text(json.dumps(old))
    (cache / "gone.test.2099-01-01.json").write_text("{ not json")
    # A host whose name extends another's must not be taken for it.
    (cache / "ok.test.evil.2099-01-01.json").write_text(json.dumps({**old, "robots_txt": "evil"}))

    reused = fetch_snapshot(["ok.test"], cache, url_for=server.url_for)
    assert reused["hosts"]["ok.test"] == old  # no age limit: the old file still counts
    assert server.total_requests() == 0

    fresh = fetch_snapshot(["ok.test", "gone.test"], cache, max_age_days=30, url_for=server.url_for)
    assert fresh["hosts"]["ok.test"]["robots_txt"] == ROBOTS_OK
    assert fresh["hosts"]["gone.test"]["status"] == "missing"  # corrupt cache file: fetched again
    assert server.requests == {"ok.test": 1, "gone.test": 1}


def test_fetch_respects_the_concurrency_bound(server, tmp_path):
    hosts = [f"pool{i}.test" for i in range(12)]
    snap = fetch_snapshot(
        hosts, tmp_path / "cache", concurrency=3, timeout=5.0, url_for=server.url_for
    )
    assert all(e["status"] == "ok" for e in snap["hosts"].values())
    assert server.total_requests() == 12
    assert server.max_in_flight == 3


def test_fetch_rejects_bad_options(tmp_path):
    with pytest.raises(ApertusError, match="concurrency"):
        fetch_snapshot(["a.org"], tmp_path, concurrency=0)
    with pytest.raises(ApertusError, match="timeout"):
        fetch_snapshot(["a.org"], tmp_path, timeout=0)
    with pytest.raises(ApertusError, match="one string"):
        fetch_snapshot("a.org", tmp_path)


def test_fetched_snapshot_drives_the_filter_end_to_end(server, tmp_path):
    snap = fetch_snapshot(
        ["ok.test", "gone.test", "broken.test"], tmp_path / "cache", url_for=server.url_for
    )
    path = tmp_path / "robots.json"
    write_snapshot(path, snap)
    step = RobotsFilter(path)
    urls = [
        "https://ok.test/no-gpt/page",
        "https://ok.test/fine",
        "https://gone.test/no-gpt/page",
        "https://broken.test/no-gpt/page",
    ]
    assert kept(step, urls) == [False, True, True, True]
    assert disallowed(step) == {"GPTBot": 1}
    assert stats(step)["no_robots"] == 2
    assert os.path.getsize(path) > 0


def test_config_default_agents_are_the_filter_defaults():
    from apertus.core.config import load_config

    assert tuple(load_config()["data"]["robots"]["agents"]) == DEFAULT_AGENTS
