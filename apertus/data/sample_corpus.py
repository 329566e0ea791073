"""The sample corpus of the embedded default run: multilingual web-like pages the project writes.

`make_sample_corpus(out_dir, seed)` writes, from the authored text banks in
`apertus.data.sample_text` and nothing else (no downloads):

  web.jsonl.gz    pages of made-up sites in 12 languages; most are clean, some carry planted
                  problems for each filter of RECIPE.md §5 (see below)
  edu.jsonl.gz    clean, longer educational pages (three sections each)
  code.jsonl.gz   short code snippets (Python, JavaScript, Bash, SQL, YAML, C, Go) whose settings
                  hold emails, IP addresses and phone numbers: code is exempt from PII removal
  labels/quality.jsonl, labels/toxicity.jsonl
                  labelled examples to train the offline quality and toxicity classifiers
                  ({"text", "label", "language"}; quality 1 = high quality, toxicity 1 = toxic),
                  drawn from their own random stream, so they are not copies of corpus pages
  planted.json    the ground truth: which documents carry what (described in `_planted`)

Every line of the three corpus files is {"id", "text", "url", "language"}, `language` being the
fastText lid.176 code ("en" for code). Pages are a title line and paragraphs of bank sentences in
seeded random choice and order. Planted, per language:

* PII: emails, IPv4, IPv6 (full and compressed), IBANs with valid mod-97 check digits, spaced
  ("CH93 0076 2011 6238 5295 7") and unspaced ("DE89370400440532013000"), phone numbers in
  national and international form; and look-alikes that must survive (versions, Windows-style
  builds such as 10.0.19045.3803, ISO and local dates, prices, ISBN-13s, times, postal codes).
* toxic pages (insults in the page's language), boilerplate (cookie banners, navigation menus,
  "read more" lists) and low quality (keyword spam, very short lines, repeated lines, lorem
  ipsum, lines of symbols, very short pages, all-caps shouting).
* exact duplicates (same text, other id and URL) and near duplicates (a long page with at most
  2.5% of its words replaced and/or a one-line footer added).
* robots.txt: pages on hosts whose shipped robots.txt (config/robots/<host>.txt) disallows an
  AI crawler of RECIPE.md §5 for the page's URL, pages on those hosts that stay allowed (paths
  outside the rule, Allow overriding Disallow, wildcard and `$` rules that do not match), and
  pages on hosts without a robots.txt (kept: "no robots.txt available -> keep").

The same seed gives byte-identical files; only `random.Random` instances seeded from `seed` are
used (never `hash()`, the global random state or the clock), and gzip headers carry no name and
mtime 0.
"""

from __future__ import annotations

import gzip
import ipaddress
import itertools
import json
import random
import re
import string
import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import atomic_write_bytes
from apertus.data.sample_text import (
    BANKS,
    LOREM_OPENING,
    LOREM_WORDS,
    SYMBOL_LINES,
    TOPIC_NAMES,
    check_banks,
)
from apertus.data.sample_text import code as code_bank

LANGUAGES: tuple[str, ...] = tuple(BANKS)
DEFAULT_TARGET_BYTES = 2_400_000

# Shares of the target (UTF-8 bytes of all `text` fields) by file.
WEB_SHARE, EDU_SHARE, CODE_SHARE = 0.70, 0.24, 0.06
# Floors that keep every planted category present in every language even for a tiny target.
MIN_WEB_PER_LANGUAGE = 40
MIN_EDU_PER_LANGUAGE = 3
MIN_CODE = 14
LABELS_PER_CLASS_PER_LANGUAGE = 25

PII_TYPES = ("email", "ipv4", "ipv6", "iban_spaced", "iban_unspaced", "phone")
BOILERPLATE_KINDS = ("cookie_banner", "navigation", "read_more")
LOW_QUALITY_KINDS = (
    "keyword_spam",
    "short_lines",
    "repeated_lines",
    "lorem_ipsum",
    "symbol_lines",
    "very_short",
    "all_caps",
)
NEAR_DUPLICATE_EDITS = ("words", "footer", "words+footer")


# --- sites and their robots.txt ----------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """A made-up host (with a real public suffix) and what its shipped robots.txt says.

    robots:
      none            no robots.txt file (documents are kept)
      open            a robots.txt that lets every crawler fetch everything
      other_bots      /search/ disallowed for Googlebot and Bingbot only (not AI crawlers: kept)
      block:A,B       `User-agent: A` (and B...) `Disallow: /`; "block:*" disallows everyone
                      except search engines
      private         `User-agent: *` `Disallow: /private/`
      allow_override  GPTBot: `Disallow: /archive/` with `Allow: /archive/public/`
      wildcard        CCBot: `Disallow: /*?page=` and `Disallow: /*.pdf$`
    """

    host: str
    language: str
    kind: str
    robots: str


def _sites() -> tuple[Site, ...]:
    # Per language: two normal hosts with and two without robots.txt (one of them only shutting
    # out search engines from /search/ in half of the languages), one host blocking AI crawlers
    # completely and one blocking them on some paths; and an educational host.
    table = {
        "en": [
            ("www.kitchen-notebook.com", "open"),
            ("www.harbourtown-gazette.co.uk", "none"),
            ("www.northshire-history.org.uk", "other_bots"),
            ("www.trackside-sports.net", "none"),
            ("www.peakandvalley-travel.com", "block:GPTBot"),
            ("blog.openfield-science.org", "private"),
            ("learn.brightpath-academy.org", "open"),
        ],
        "de": [
            ("www.kuechenfreunde.de", "open"),
            ("www.stadtanzeiger-winterthur.ch", "none"),
            ("www.technik-ratgeber.de", "open"),
            ("www.sportblatt-hannover.de", "none"),
            ("www.alpenblick-reisen.ch", "block:CCBot"),
            ("www.bergwelt-tirol.at", "allow_override"),
            ("www.lernwerkstatt-online.de", "none"),
        ],
        "fr": [
            ("www.cuisine-de-grand-mere.fr", "open"),
            ("www.journal-du-jura.ch", "none"),
            ("www.patrimoine-liegeois.be", "other_bots"),
            ("www.sport-romand.ch", "none"),
            ("www.carnets-de-voyage.fr", "block:Google-Extended"),
            ("www.science-et-curiosite.fr", "wildcard"),
            ("www.cours-savoirs.fr", "open"),
        ],
        "it": [
            ("www.ricette-della-nonna.it", "open"),
            ("www.cronaca-ticinese.ch", "none"),
            ("www.scienza-quotidiana.it", "open"),
            ("www.sport-in-valle.it", "none"),
            (
                "www.viaggiare-lento.it",
                "block:ClaudeBot,Bytespider,PanguBot,Meta-ExternalAgent,cohere-training-data-crawler",
            ),
            ("www.storia-di-bergamo.it", "private"),
            ("www.scuola-aperta.it", "none"),
        ],
        "rm": [
            ("www.cuschina-rumantscha.ch", "open"),
            ("www.novitads-engiadina.ch", "none"),
            ("www.istorgia-surselva.ch", "other_bots"),
            ("www.sport-grischun.ch", "none"),
            ("www.viadis-grischun.ch", "block:*"),
            ("www.tecnologia-per-tuts.ch", "allow_override"),
            ("www.emprender-rumantsch.ch", "open"),
        ],
        "es": [
            ("www.recetas-de-casa.es", "open"),
            ("www.diario-leon-local.es", "none"),
            ("www.ciencia-cercana.com.mx", "open"),
            ("www.deportes-al-dia.es", "none"),
            ("www.rutas-por-espana.es", "block:CCBot/2.0"),
            ("www.historia-de-cordoba.com.ar", "wildcard"),
            ("www.aula-abierta.es", "none"),
        ],
        "pt": [
            ("www.receitas-da-avo.com.br", "open"),
            ("www.jornal-de-braga.pt", "none"),
            ("www.historia-de-lisboa.pt", "other_bots"),
            ("www.esporte-total.com.br", "none"),
            ("www.viagens-do-norte.pt", "block:GPTBot"),
            ("www.tecnologia-facil.com.br", "private"),
            ("www.escola-aberta.com.br", "open"),
        ],
        "nl": [
            ("www.kookboek-online.nl", "open"),
            ("www.nieuws-uit-zwolle.nl", "none"),
            ("www.techniek-vandaag.nl", "open"),
            ("www.sportnieuws-utrecht.nl", "none"),
            ("www.fietsroutes-holland.nl", "block:CCBot"),
            ("www.geschiedenis-van-gent.be", "allow_override"),
            ("www.leren-thuis.nl", "none"),
        ],
        "pl": [
            ("www.przepisy-babci.pl", "open"),
            ("www.gazeta-krakowska-lokalna.pl", "none"),
            ("www.historia-gdanska.pl", "other_bots"),
            ("www.sport-slask.pl", "none"),
            ("www.podroze-po-polsce.pl", "block:Google-Extended"),
            ("www.technologia-na-co-dzien.com.pl", "wildcard"),
            ("www.szkola-online.edu.pl", "open"),
        ],
        "sv": [
            ("www.mormors-recept.se", "open"),
            ("www.lokaltidningen-umea.se", "none"),
            ("www.teknik-for-alla.se", "open"),
            ("www.sportbladet-vasteras.se", "none"),
            ("www.resa-i-norrland.se", "block:AI2Bot,Applebot-Extended,Diffbot,FacebookBot"),
            ("www.historia-i-uppland.se", "private"),
            ("www.larportalen.se", "none"),
        ],
        "ru": [
            ("www.domashnie-recepty.ru", "open"),
            ("www.gorodskie-novosti-tver.ru", "none"),
            ("www.istoriya-kraya.ru", "other_bots"),
            ("www.sport-kazan.ru", "none"),
            ("www.puteshestviya-po-rossii.ru", "block:*"),
            ("www.nauka-prosto.ru", "allow_override"),
            ("www.otkrytyi-urok.ru", "open"),
        ],
        "el": [
            ("www.syntages-tis-giagias.gr", "open"),
            ("www.eidiseis-patras.gr", "none"),
            ("www.texnologia-simera.gr", "open"),
            ("www.athlitika-nea.com.gr", "none"),
            ("www.taxidia-stin-ellada.gr", "block:CCBot/2.0"),
            ("www.istoria-tis-kritis.gr", "wildcard"),
            ("www.anoixto-mathima.gr", "none"),
        ],
    }
    sites = []
    for language, hosts in table.items():
        *web, edu = hosts
        sites += [Site(host, language, "web", robots) for host, robots in web]
        sites.append(Site(edu[0], language, "edu", edu[1]))
    sites += [
        Site("git.codewerk.io", "en", "code", "open"),
        Site("snippets.devhafen.de", "en", "code", "none"),
        Site("gist.bitforge.net", "en", "code", "none"),
    ]
    return tuple(sites)


SITES: tuple[Site, ...] = _sites()
NORMAL_ROBOTS = ("open", "none", "other_bots")
PARTIAL_ROBOTS = ("private", "allow_override", "wildcard")


# --- countries: phone numbers, IBANs ------------------------------------------------------------

SUFFIX_COUNTRY = {
    "co.uk": "GB",
    "org.uk": "GB",
    "ch": "CH",
    "de": "DE",
    "at": "AT",
    "fr": "FR",
    "be": "BE",
    "it": "IT",
    "es": "ES",
    "com.mx": "MX",
    "com.ar": "AR",
    "pt": "PT",
    "com.br": "BR",
    "nl": "NL",
    "pl": "PL",
    "com.pl": "PL",
    "edu.pl": "PL",
    "se": "SE",
    "ru": "RU",
    "gr": "GR",
    "com.gr": "GR",
}

# Area codes, national form, international form; "#" is one subscriber digit, the same digits in
# both forms.
PHONE_FORMATS = {
    "GB": (("20", "29"), "0{area} #### ####", "+44 {area} #### ####"),
    "CH": (("44", "31", "81", "61", "91"), "0{area} ### ## ##", "+41 {area} ### ## ##"),
    "DE": (("30", "40", "89", "221"), "0{area} #######", "+49 {area} #######"),
    "AT": (("1", "512", "662"), "0{area} ######", "+43 {area} ######"),
    "FR": (("1", "4", "5"), "0{area} ## ## ## ##", "+33 {area} ## ## ## ##"),
    "BE": (("2", "9", "4"), "0{area} ### ## ##", "+32 {area} ### ## ##"),
    "IT": (("06", "02", "011", "035"), "{area} #######", "+39 {area} #######"),
    "ES": (("91", "93", "98"), "{area}# ### ###", "+34 {area}# ### ###"),
    "MX": (("55", "33"), "{area} #### ####", "+52 {area} #### ####"),
    "AR": (("11",), "0{area} ####-####", "+54 {area} ####-####"),
    "PT": (("21", "22"), "{area}# ### ###", "+351 {area}# ### ###"),
    "BR": (("11", "21", "31"), "({area}) 9####-####", "+55 {area} 9####-####"),
    "NL": (("20", "10", "30", "38"), "0{area} ### ####", "+31 {area} ### ####"),
    "PL": (("22", "12", "58", "32"), "{area} ### ## ##", "+48 {area} ### ## ##"),
    "SE": (("8", "90", "18"), "0{area}-### ## ##", "+46 {area} ### ## ##"),
    "RU": (("495", "482", "843", "812"), "8 ({area}) ###-##-##", "+7 {area} ###-##-##"),
    "GR": (("210",), "{area} ### ####", "+30 {area} ### ####"),
}

# BBAN layout per country (ISO 13616): n digit, a capital letter, c digit or capital letter.
IBAN_BBAN = {
    "CH": "n" * 17,
    "DE": "n" * 18,
    "AT": "n" * 16,
    "FR": "n" * 10 + "c" * 11 + "n" * 2,
    "BE": "n" * 12,
    "IT": "a" + "n" * 10 + "c" * 12,
    "ES": "n" * 20,
    "PT": "n" * 21,
    "NL": "a" * 4 + "n" * 10,
    "PL": "n" * 24,
    "SE": "n" * 20,
    "GR": "n" * 7 + "c" * 16,
    "GB": "a" * 4 + "n" * 14,
    "BR": "n" * 23 + "a" + "c",
}
# Countries without IBANs: the planted account is one of a neighbouring association.
IBAN_FALLBACK = {"RU": "DE", "MX": "ES", "AR": "ES"}

_TRANSLIT = {
    **dict(zip("абвгдезийклмнопрстуфыэ", "abvgdeziyklmnoprstufye", strict=True)),
    "ё": "e",
    "ж": "zh",
    "х": "kh",  # noqa: RUF001 (Cyrillic kha)
    "ц": "ts",
    "ч": "ch",
    "ш": "sh",
    "щ": "shch",
    "ъ": "",
    "ь": "",
    "ю": "yu",
    "я": "ya",
    **dict(zip("αβγδεζηικλμνξοπρστυφω", "avgdeziiklmnxoprstyfo", strict=True)),
    "ς": "s",
    "θ": "th",
    "χ": "ch",
    "ψ": "ps",
    "ł": "l",
    "ß": "ss",
    "æ": "ae",
    "ø": "o",
}


def slugify(text: str) -> str:
    """ASCII URL slug of a title, transliterating Cyrillic and Greek."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = "".join(_TRANSLIT.get(c, c) for c in text)
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return slug[:60].rstrip("-")


def _country(host: str, default: str) -> str:
    labels = host.split(".")
    for i in range(1, len(labels)):
        suffix = ".".join(labels[i:])
        if suffix in SUFFIX_COUNTRY:
            return SUFFIX_COUNTRY[suffix]
    return default


def _domain(host: str) -> str:
    return host[4:] if host.startswith("www.") else host


# --- documents -----------------------------------------------------------------------------------


@dataclass(eq=False)
class _Doc:
    kind: str
    language: str
    host: str
    path: str
    text: str
    plants: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    @property
    def url(self) -> str:
        return f"https://{self.host}{self.path}"

    def record(self) -> dict[str, str]:
        return {"id": self.id, "text": self.text, "url": self.url, "language": self.language}


def _paragraphs(rng: random.Random, sentences: list[str]) -> list[str]:
    paragraphs: list[list[str]] = []
    i = 0
    while i < len(sentences):
        size = rng.randint(3, 5)
        paragraphs.append(sentences[i : i + size])
        i += size
    if len(paragraphs) > 1 and len(paragraphs[-1]) < 2:
        paragraphs[-2].extend(paragraphs.pop())
    return [" ".join(p) for p in paragraphs]


def _page(title: str, paragraphs: list[str]) -> str:
    return "\n\n".join([title, *paragraphs])


def _fill(template: str, values: dict[str, str]) -> str:
    return template.format(**values)


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


class _Writer:
    """Builds the pages of one language from its bank with one random stream."""

    def __init__(self, rng: random.Random, language: str, counter: list[int]):
        self.rng = rng
        self.language = language
        self.bank: ModuleType = BANKS[language]
        self.counter = counter  # shared across writers, so URLs are unique corpus-wide
        self.others = {
            t: [s for u in TOPIC_NAMES if u != t for s in self.bank.TOPICS[u]] for t in TOPIC_NAMES
        }
        self.all_sentences = [s for t in TOPIC_NAMES for s in self.bank.TOPICS[t]]
        self.vocabulary = sorted(
            {w for s in self.all_sentences for w in re.findall(r"[^\W\d_]{4,}", s.lower())}
        )
        sites = [s for s in SITES if s.language == language and s.kind == "web"]
        self.normal_hosts = [s.host for s in sites if s.robots in NORMAL_ROBOTS]
        self.block_site = next(s for s in sites if s.robots.startswith("block:"))
        self.partial_site = next(s for s in sites if s.robots in PARTIAL_ROBOTS)
        self.other_bots_site = next((s for s in sites if s.robots == "other_bots"), None)
        self.edu_host = next(s.host for s in SITES if s.language == language and s.kind == "edu")

    # -- text pieces --

    def title(self, topic: str) -> str:
        return self.rng.choice(self.bank.TITLES[topic])

    def clean_sentences(self, topic: str, n: int) -> list[str]:
        """n sentences: 4-6 of the page's topic (three of them first), the rest from others."""
        rng = self.rng
        main = rng.sample(self.bank.TOPICS[topic], min(n, rng.randint(4, 6)))
        rest = main[3:] + rng.sample(self.others[topic], n - len(main))
        rng.shuffle(rest)
        return main[:3] + rest

    def clean_page(self, topic: str, n: int) -> tuple[str, str]:
        title = self.title(topic)
        return title, _page(title, _paragraphs(self.rng, self.clean_sentences(topic, n)))

    def insert(self, sentences: list[str], extra: list[str]) -> None:
        for sentence in extra:
            sentences.insert(self.rng.randint(1, len(sentences)), sentence)

    # -- URLs --

    def slug(self, title: str) -> str:
        self.counter[0] += 1
        return f"{slugify(title)}-{self.counter[0]}"

    def page_path(self, topic: str, title: str) -> str:
        rng = self.rng
        section, slug = self.bank.SECTIONS[topic], self.slug(title)
        y, m, d = rng.randint(2019, 2025), rng.randint(1, 12), rng.randint(1, 28)
        return rng.choice(
            [
                f"/{section}/{y}/{m:02d}/{slug}",
                f"/{section}/{slug}.html",
                f"/blog/{y}/{m:02d}/{d:02d}/{slug}/",
                f"/{section}/{slug}?page={rng.randint(2, 9)}",
                f"/{section}/{slug}/",
            ]
        )

    def robots_path(self, site: Site, topic: str, title: str, blocked: bool) -> tuple[str, dict]:
        """A path on `site` that its robots.txt disallows (blocked) or allows, and why."""
        rng, section, slug = self.rng, self.bank.SECTIONS[topic], self.slug(title)
        policy = site.robots
        if policy.startswith("block:"):
            if not blocked:
                raise ValueError(f"{site.host} disallows every path")
            path = self.page_path(topic, title)
            return path, {"agents": policy[len("block:") :].split(","), "rule": "Disallow: /"}
        if policy == "private":
            if blocked:
                path = f"/private/{section}/{slug}"
                return path, {"agents": ["*"], "rule": "Disallow: /private/"}
            path, reason = rng.choice(
                [
                    (f"/{section}/{slug}", "outside the disallowed /private/"),
                    (f"/private-{section}/{slug}", "/private-... does not start with /private/"),
                ]
            )
            return path, {"reason": reason}
        if policy == "allow_override":
            if blocked:
                year = rng.randint(2015, 2022)
                return f"/archive/{year}/{slug}", {
                    "agents": ["GPTBot"],
                    "rule": "Disallow: /archive/",
                }
            return f"/archive/public/{slug}", {
                "reason": "Allow: /archive/public/ is longer than Disallow: /archive/"
            }
        if policy == "wildcard":
            page = rng.randint(2, 9)
            if blocked:
                path, rule = rng.choice(
                    [
                        (f"/{section}/{slug}?page={page}", "Disallow: /*?page="),
                        (f"/downloads/{slug}.pdf", "Disallow: /*.pdf$"),
                    ]
                )
                return path, {"agents": ["CCBot"], "rule": rule}
            path, reason = rng.choice(
                [
                    (f"/downloads/{slug}.pdf?view=1", "$ anchors the .pdf rule at the URL's end"),
                    (f"/{section}/{slug}?sort=new&page={page}", "page= follows &, not ?"),
                ]
            )
            return path, {"reason": reason}
        if policy == "other_bots":
            return f"/search/{slug}", {
                "reason": "/search/ is disallowed for Googlebot and Bingbot only"
            }
        raise ValueError(f"no robots path for policy {policy!r}")

    # -- PII and look-alikes --

    def phone_pair(self, country: str) -> tuple[str, str]:
        areas, national, international = PHONE_FORMATS[country]
        area = self.rng.choice(areas)
        digits = [str(self.rng.randint(0, 9)) for _ in range(national.count("#"))]
        digits[0] = str(self.rng.randint(2, 9))  # subscriber numbers do not start with 0 or 1

        def fill(template: str) -> str:
            it = iter(digits)
            return re.sub("#", lambda _: next(it), template.format(area=area))

        return fill(national), fill(international)

    def iban(self, country: str) -> str:
        country = IBAN_FALLBACK.get(country, country)
        rng = self.rng
        chars = []
        for kind in IBAN_BBAN[country]:
            if kind == "n" or (kind == "c" and rng.random() < 0.85):
                chars.append(str(rng.randint(0, 9)))
            else:
                chars.append(rng.choice(string.ascii_uppercase))
        bban = "".join(chars)
        digits = "".join(str(int(c, 36)) for c in bban + country + "00")
        return f"{country}{98 - int(digits) % 97:02d}{bban}"

    def ipv4(self) -> str:
        rng = self.rng
        first = rng.choice([31, 46, 62, 77, 81, 85, 91, 109, 141, 176, 185, 193, 195, 212, 217])
        return f"{first}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"

    def ipv6(self, full: bool) -> str:
        rng = self.rng
        prefix = rng.choice(
            [(0x2001, 0x0DB8), (0x2A02, 0x1210), (0x2A00, 0x1450), (0x2001, 0x0620)]
        )
        groups = [*prefix, *(rng.randint(1, 0xFFFF) for _ in range(6))]
        start = rng.randint(3, 5)
        for i in range(start, start + rng.randint(2, 3)):
            groups[i] = 0  # a run of zero groups, which the compressed form writes as "::"
        address = ipaddress.IPv6Address(b"".join(g.to_bytes(2, "big") for g in groups))
        return address.exploded if full else address.compressed

    def isbn(self) -> str:
        rng = self.rng
        group = self.bank.LOCALE["isbn_group"]
        publisher = "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(2, 4)))
        title = "".join(str(rng.randint(0, 9)) for _ in range(9 - len(group) - len(publisher)))
        digits = "978" + group + publisher + title
        check = (10 - sum(int(d) * (3 if i % 2 else 1) for i, d in enumerate(digits)) % 10) % 10
        return f"978-{group}-{publisher}-{title}-{check}"

    def lookalike_values(self) -> dict[str, str]:
        rng, locale = self.rng, self.bank.LOCALE
        y, m, d = rng.randint(2019, 2025), rng.randint(1, 12), rng.randint(1, 28)
        y2, m2, d2 = rng.randint(2019, 2025), rng.randint(1, 12), rng.randint(13, 28)
        a, b, c = rng.randint(1, 12), rng.randint(0, 24), rng.randint(0, 40)
        postcode, city = rng.choice(locale["cities"])
        return {
            "version": rng.choice([f"v{a}.{b}.{c}", f"{a}.{b}.{c}"]),
            # Four dotted numbers like an IPv4 address, but the third is far above 255.
            "build": f"10.0.{rng.randint(19041, 26100)}.{rng.randint(1, 4000)}",
            "date_iso": f"{y}-{m:02d}-{d:02d}",
            "date_local": locale["date_local"].format(d=d2, m=m2, y=y2),
            "price": locale["price"].format(
                units=rng.randint(5, 89), cents=rng.choice([0, 50, 90, 95, 99])
            ),
            "isbn": self.isbn(),
            "time_open": f"{rng.randint(7, 10):02d}:{rng.choice(['00', '30'])}",
            "time_close": f"{rng.randint(16, 19)}:{rng.choice(['00', '30'])}",
            "postcode": postcode,
            "city": city,
        }

    def lookalike_sentences(self, k: int) -> tuple[list[str], list[str]]:
        values = self.lookalike_values()
        templates = self.rng.sample(sorted(self.bank.LOOKALIKES), k)
        sentences, kept = [], []
        for name in templates:
            template = self.bank.LOOKALIKES[name]
            sentences.append(_fill(template, values))
            kept += [values[f] for f in _fields(template) if f != "city"]
        return sentences, kept

    def pii_sentence(self, pii_type: str, host: str, ipv6_full: bool) -> tuple[str, list[str]]:
        country = _country(host, self.bank.LOCALE["country"])
        pii = self.bank.PII
        if pii_type == "email":
            value = f"{self.rng.choice(self.bank.LOCALE['mail_names'])}@{_domain(host)}"
            return _fill(pii["email"], {"email": value}), [value]
        if pii_type == "phone":
            national, international = self.phone_pair(country)
            sentence = _fill(
                pii["phone"], {"phone_national": national, "phone_international": international}
            )
            return sentence, [national, international]
        if pii_type == "ipv4":
            value = self.ipv4()
            return _fill(pii["ipv4"], {"ipv4": value}), [value]
        if pii_type == "ipv6":
            value = self.ipv6(full=ipv6_full)
            return _fill(pii["ipv6"], {"ipv6": value}), [value]
        compact = self.iban(country)
        value = compact if pii_type == "iban_unspaced" else _spaced(compact)
        return _fill(pii["iban"], {"iban": value}), [value]

    # -- planted pages --

    def toxic_page(self, topic: str) -> tuple[str, str]:
        """A page opening on its topic, then comments full of insults (4-6 toxic sentences)."""
        rng = self.rng
        toxic = rng.sample(self.bank.TOXIC, rng.randint(4, 6))
        half = len(toxic) // 2
        opening = " ".join(rng.sample(self.bank.TOPICS[topic], rng.randint(2, 3)))
        title = self.title(topic)
        return title, _page(title, [opening, " ".join(toxic[:half]), " ".join(toxic[half:])])

    def boilerplate_page(self, kind: str, topic: str, host: str) -> tuple[str, str]:
        """A page that is mostly menus, banners and link lists around one or two sentences."""
        rng, bp = self.rng, self.bank.BOILERPLATE
        title = self.title(topic)
        copyright_line = f"© {rng.randint(2015, 2025)} {_domain(host)}. {bp['rights']}"
        others = [t for u in TOPIC_NAMES for t in self.bank.TITLES[u] if t != title]
        text_lines = rng.sample(self.bank.TOPICS[topic], 2)
        if kind == "cookie_banner":
            lines = [bp["cookie"], *bp["cookie_buttons"], *bp["nav"], title, " ".join(text_lines)]
            lines += [f"{bp['read_more']} »", bp["related"], *rng.sample(others, 3)]
            lines += [bp["share"], bp["newsletter"], copyright_line]
        elif kind == "navigation":
            lines = [
                *bp["nav"],
                title,
                text_lines[0],
                *bp["nav"],
                bp["back_to_top"],
                copyright_line,
            ]
        elif kind == "read_more":
            lines = [*bp["nav"][:5], title]
            lines += [f"{t} … {bp['read_more']} »" for t in rng.sample(others, rng.randint(6, 10))]
            lines += ["« 1 2 3 4 5 »", bp["newsletter"], copyright_line]
        else:
            raise ValueError(f"unknown boilerplate kind {kind!r}")
        return title, "\n".join(lines)

    def low_quality_page(self, kind: str, topic: str) -> tuple[str, str]:
        """A page that heuristic quality filters should drop, of the given kind."""
        rng, bank = self.rng, self.bank
        title = self.title(topic)
        if kind == "keyword_spam":
            spam = bank.SPAM
            head = " ".join(rng.sample(spam, 3)).upper()
            lines = [
                " ".join(rng.choice(spam) for _ in range(rng.randint(25, 50))) for _ in range(3)
            ]
            return head, "\n".join([head, *lines])
        if kind == "short_lines":
            lines = []
            for _ in range(rng.randint(30, 50)):
                words = re.findall(r"[^\W\d_]+", rng.choice(self.all_sentences))
                start = rng.randrange(len(words))
                lines.append(" ".join(words[start : start + rng.randint(1, 3)]))
            return title, "\n".join([title, *lines])
        if kind == "repeated_lines":
            first, second = rng.sample(bank.TOPICS[topic], 2)
            return title, "\n".join([title] + [first, second] * rng.randint(8, 14))
        if kind == "lorem_ipsum":
            paragraphs = []
            for p in range(rng.randint(3, 4)):
                sentences = [LOREM_OPENING] if p == 0 else []
                for _ in range(rng.randint(3, 5)):
                    words = [rng.choice(LOREM_WORDS) for _ in range(rng.randint(6, 14))]
                    sentences.append(" ".join(words).capitalize() + ".")
                paragraphs.append(" ".join(sentences))
            return title, _page(title, paragraphs)
        if kind == "symbol_lines":
            lines = [title]
            for i in range(rng.randint(10, 16)):
                lines.append(
                    rng.choice(bank.TOPICS[topic]) if i % 4 == 3 else rng.choice(SYMBOL_LINES)
                )
            return title, "\n".join(lines)
        if kind == "very_short":
            return title, _page(title, [rng.choice(bank.TOPICS[topic])])
        if kind == "all_caps":
            sentences = [
                s.rstrip(".") + "!!!" for s in self.clean_sentences(topic, rng.randint(4, 7))
            ]
            return title, _page(title.upper() + "!!!", _paragraphs(rng, sentences)).upper()
        raise ValueError(f"unknown low-quality kind {kind!r}")

    def near_copy(self, text: str, edit: str) -> tuple[str, dict]:
        """A near duplicate: at most 2.5% of the words replaced and/or the footer appended."""
        rng = self.rng
        changed = 0
        if "words" in edit:
            title, body = text.split("\n\n", 1)
            matches = list(re.finditer(r"[^\W\d_]{4,}", body))
            n_words = len(body.split())
            k = max(1, min(round(n_words * rng.uniform(0.008, 0.02)), int(n_words * 0.025)))
            chosen = sorted(rng.sample(range(len(matches)), k))
            pieces, last = [], 0
            for i in chosen:
                m = matches[i]
                old = m.group()
                new = rng.choice([w for w in self.vocabulary if w != old.lower()])
                if old[0].isupper():
                    new = new[0].upper() + new[1:]
                pieces += [body[last : m.start()], new]
                last = m.end()
            pieces.append(body[last:])
            text = title + "\n\n" + "".join(pieces)
            changed = k
        if "footer" in edit:
            text = text + "\n\n" + self.bank.FOOTER
        return text, {"edit": edit, "changed_words": changed}

    def edu_page(self) -> tuple[str, str]:
        rng, bank = self.rng, self.bank
        topics = rng.sample(TOPIC_NAMES, 3)
        title = self.title(topics[0])
        parts = [title]
        for topic in topics:
            parts.append(rng.choice([t for t in bank.TITLES[topic] if t != title]))
            parts += _paragraphs(rng, rng.sample(bank.TOPICS[topic], rng.randint(5, 7)))
        return topics[0], "\n\n".join(parts)


def _spaced(iban: str) -> str:
    return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))


# --- the corpus ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """How many pages of each kind one language gets, out of n web pages."""

    n: int
    toxic: int
    boilerplate: int
    low_quality: int
    pii: int
    lookalike: int
    exact_copies: int
    near_copies: int
    robots_blocked: int
    robots_allowed: int

    @classmethod
    def for_pages(cls, n: int) -> _Plan:
        return cls(
            n=n,
            toxic=max(2, round(0.03 * n)),
            boilerplate=max(2, round(0.025 * n)),
            low_quality=max(4, round(0.045 * n)),
            pii=max(len(PII_TYPES), round(0.10 * n)),
            lookalike=max(3, round(0.05 * n)),
            exact_copies=max(2, round(0.03 * n)),
            near_copies=max(2, round(0.03 * n)),
            robots_blocked=max(4, round(0.08 * n)),
            robots_allowed=max(3, round(0.04 * n)),
        )

    @property
    def clean(self) -> int:
        planted = self.toxic + self.boilerplate + self.low_quality + self.pii + self.lookalike
        planted += self.exact_copies + self.near_copies + self.robots_blocked + self.robots_allowed
        return self.n - planted


def _mean_sentence_bytes(language: str) -> float:
    sentences = [s for t in TOPIC_NAMES for s in BANKS[language].TOPICS[t]]
    return sum(len(s.encode("utf-8")) + 1 for s in sentences) / len(sentences)


def _group_sizes(rng: random.Random, copies: int) -> list[int]:
    sizes = []
    while copies > 0:
        size = min(copies, rng.choice([1, 1, 2]))
        sizes.append(size)
        copies -= size
    return sizes


def _web_pages(rng: random.Random, plan: _Plan, language: str, index: int, counter: list[int]):
    """The web pages of one language, and its duplicate groups (lists of _Doc).

    Planted kinds rotate with the language's index (boilerplate and low-quality kinds, PII types,
    near-duplicate edits), so every kind occurs in many languages whatever the seed.
    """
    w = _Writer(rng, language, counter)
    docs: list[_Doc] = []

    def add(topic: str, title: str, text: str, host: str | None = None, **plants: Any) -> _Doc:
        host = host or rng.choice(w.normal_hosts)
        doc = _Doc("web", language, host, w.page_path(topic, title), text, dict(plants))
        docs.append(doc)
        return doc

    for _ in range(plan.toxic):
        topic = rng.choice(TOPIC_NAMES)
        add(topic, *w.toxic_page(topic), toxic=True)
    for j in range(plan.boilerplate):
        kind, topic = (
            BOILERPLATE_KINDS[(index + j) % len(BOILERPLATE_KINDS)],
            rng.choice(TOPIC_NAMES),
        )
        host = rng.choice(w.normal_hosts)
        add(topic, *w.boilerplate_page(kind, topic, host), host=host, boilerplate=kind)
    for j in range(plan.low_quality):
        kind = LOW_QUALITY_KINDS[(index * 4 + j) % len(LOW_QUALITY_KINDS)]
        topic = rng.choice(TOPIC_NAMES)
        add(topic, *w.low_quality_page(kind, topic), low_quality=kind)

    ipv6_full = index % 2 == 0  # flips at every IPv6 address: both forms in most languages
    for j in range(plan.pii):
        topic = rng.choice(TOPIC_NAMES)
        types = [PII_TYPES[(index + j) % len(PII_TYPES)]]
        if rng.random() < 0.35:
            types.append(rng.choice([t for t in PII_TYPES if t != types[0]]))
        host = rng.choice(w.normal_hosts)
        sentences = w.clean_sentences(topic, rng.randint(8, 12))
        values: dict[str, list[str]] = {}
        extra = []
        for pii_type in types:
            if pii_type == "ipv6":
                ipv6_full = not ipv6_full
            sentence, found = w.pii_sentence(pii_type, host, ipv6_full)
            extra.append(sentence)
            values[pii_type] = found
        plants: dict[str, Any] = {"pii": values}
        if rng.random() < 0.5:
            look, kept = w.lookalike_sentences(1)
            extra += look
            plants["lookalikes"] = kept
        w.insert(sentences, extra)
        title = w.title(topic)
        add(topic, title, _page(title, _paragraphs(rng, sentences)), host=host, **plants)
    for _ in range(plan.lookalike):
        topic = rng.choice(TOPIC_NAMES)
        sentences = w.clean_sentences(topic, rng.randint(8, 12))
        look, kept = w.lookalike_sentences(rng.randint(1, 2))
        w.insert(sentences, look)
        title = w.title(topic)
        add(topic, title, _page(title, _paragraphs(rng, sentences)), lookalikes=kept)

    # A third of the blocked pages sit on the host that blocks some paths, the rest on the host
    # that blocks everything; allowed pages sit on the partly blocking host and under /search/.
    blocked_on_partial = plan.robots_blocked // 3
    for j in range(plan.robots_blocked):
        site = w.partial_site if j < blocked_on_partial else w.block_site
        topic = rng.choice(TOPIC_NAMES)
        title, text = w.clean_page(topic, rng.randint(8, 14))
        path, why = w.robots_path(site, topic, title, blocked=True)
        docs.append(_Doc("web", language, site.host, path, text, {"robots_blocked": why}))
    for j in range(plan.robots_allowed):
        site = w.other_bots_site if (j == 0 and w.other_bots_site) else w.partial_site
        topic = rng.choice(TOPIC_NAMES)
        title, text = w.clean_page(topic, rng.randint(8, 14))
        path, why = w.robots_path(site, topic, title, blocked=False)
        docs.append(_Doc("web", language, site.host, path, text, {"robots_allowed": why}))

    exact_sizes = _group_sizes(rng, plan.exact_copies)
    near_sizes = _group_sizes(rng, plan.near_copies)
    clean: list[tuple[_Doc, str, str]] = []
    for j in range(plan.clean):
        topic = rng.choice(TOPIC_NAMES)
        # Originals of near duplicates are long (>= 12 sentences), so that MinHash on 5-gram
        # shingles still sees them as near-identical after a few word changes.
        n = rng.randint(12, 14) if j < len(near_sizes) else rng.randint(8, 14)
        title, text = w.clean_page(topic, n)
        clean.append((add(topic, title, text), topic, title))

    exact_groups, near_groups = [], []
    originals = iter(clean)
    edits = 0
    for size in near_sizes:
        original, topic, title = next(originals)
        copies = []
        for _ in range(size):
            edit = NEAR_DUPLICATE_EDITS[(index + edits) % len(NEAR_DUPLICATE_EDITS)]
            edits += 1
            text, info = w.near_copy(original.text, edit)
            copies.append((add(topic, title, text), info))
        near_groups.append((original, copies))
    for size in exact_sizes:
        original, topic, title = next(originals)
        exact_groups.append([original, *(add(topic, title, original.text) for _ in range(size))])
    return docs, exact_groups, near_groups


def _code_pages(rng: random.Random, count: int) -> list[_Doc]:
    """Snippets of two blocks of one programming language and a settings block.

    Every pair of blocks of a language is used once before any is used again, each time with
    another entity and freshly drawn local names; the settings (random keys, order and values)
    differ as well. So no two snippets are near duplicates (checked in the tests).
    """
    hosts = [s.host for s in SITES if s.kind == "code"]
    queues: dict[str, list] = {}
    for prog, blocks in sorted(code_bank.BLOCKS.items()):
        options = []
        for pair in itertools.combinations(range(len(blocks)), 2):
            entities = rng.sample(code_bank.ENTITIES, len(code_bank.ENTITIES))
            options += [(rounds, pair, entity) for rounds, entity in enumerate(entities)]
        rng.shuffle(options)
        options.sort(key=lambda option: option[0])  # stable: all pairs once, then again...
        queues[prog] = options[::-1]
    capacity = sum(len(q) for q in queues.values())
    if count > capacity:
        raise ApertusError(f"at most {capacity} distinct code snippets can be made, not {count}")
    languages = sorted(queues)
    docs = []
    j = 0
    while len(docs) < count:
        prog = languages[j % len(languages)]
        j += 1
        if not queues[prog]:
            continue
        _, pair, entity = queues[prog].pop()
        fills = {name: rng.choice(choices) for name, choices in code_bank.LOCAL_NAMES.items()}
        fills |= {
            "entity": entity,
            "Entity": entity.capitalize(),
            "singular": entity[:-1],
            "Singular": entity[:-1].capitalize(),
            "Verb": fills["verb"].capitalize(),
            "field": rng.choice(code_bank.FIELDS),
            "n": str(rng.randint(3, 50)),
            "timeout": str(rng.randint(2, 30)),
            "host": f"api.{_domain(rng.choice(hosts))}",
            "port": str(rng.randint(1024, 65535)),
            "threshold": str(rng.randint(60, 95)),
            "major": str(rng.randint(1, 4)),
            "hour": str(rng.randint(0, 5)),
            "currency": rng.choice(["CHF", "EUR", "SEK", "PLN"]),
            "locale": rng.choice(["de-CH", "fr-FR", "it-IT", "sv-SE", "pl-PL"]),
        }
        blocks = [code_bank.BLOCKS[prog][i] for i in pair]
        rng.shuffle(blocks)
        parts = [re.sub(r"%%(\w+)%%", lambda m, f=fills: f[m.group(1)], b) for b in blocks]
        settings, pii = _settings_block(rng, prog, entity, hosts)
        parts.insert(rng.randint(0, len(parts)), settings)
        author, repo = rng.choice(code_bank.CODE_AUTHORS), rng.choice(code_bank.CODE_REPOS)
        ext = code_bank.FILE_EXTENSIONS[prog]
        path = f"/{author}/{repo}/blob/main/{entity}/{prog}_{len(docs)}.{ext}"
        plants: dict[str, Any] = {"code_language": prog}
        if pii:
            plants["code_pii"] = pii
        docs.append(_Doc("code", "en", rng.choice(hosts), path, "\n\n".join(parts), plants))
    return docs


def _settings_block(
    rng: random.Random, prog: str, entity: str, hosts: list[str]
) -> tuple[str, dict[str, list[str]]]:
    syntax = code_bank.SETTINGS_SYNTAX[prog]
    chosen = rng.sample(code_bank.PLAIN_SETTINGS, rng.randint(4, 7))
    if rng.random() < 0.5:
        chosen += rng.sample(code_bank.PII_SETTINGS, rng.randint(1, 3))
    rng.shuffle(chosen)
    domain = _domain(rng.choice(hosts))
    helper = _Writer(rng, "en", [0])
    pii: dict[str, list[str]] = {}
    lines = []
    for name, kind in chosen:
        value: str | int
        if kind == "port":
            value = rng.randint(1024, 65535)
        elif kind == "small_int":
            value = rng.randint(5, 120)
        elif kind == "tiny_int":
            value = rng.randint(1, 9)
        elif kind == "power_of_two":
            value = 2 ** rng.randint(4, 12)
        elif kind == "int":
            value = rng.randint(10, 500)
        elif kind == "log_level":
            value = rng.choice(["debug", "info", "warning"])
        elif kind == "path":
            value = rng.choice([f"/var/cache/{entity}", f"/srv/{entity}/data", f"/tmp/{entity}"])
        elif kind == "region":
            value = rng.choice(["eu-central-2", "eu-west-1", "ch-gva-2", "eu-north-1"])
        elif kind == "url":
            value = f"https://api.{domain}/v{rng.randint(1, 4)}/{entity}"
        elif kind == "version":
            value = f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 40)}"
        elif kind == "queue":
            value = f"{entity}-{rng.choice(['import', 'export', 'sync', 'reports'])}"
        elif kind == "email":
            value = f"{rng.choice(code_bank.CODE_AUTHORS)}@{domain}"
            pii.setdefault("email", []).append(value)
        elif kind == "ipv4":
            value = helper.ipv4()
            pii.setdefault("ipv4", []).append(value)
        elif kind == "ipv6":
            value = helper.ipv6(full=rng.random() < 0.5)
            pii.setdefault("ipv6", []).append(value)
        elif kind == "phone":
            value = helper.phone_pair(rng.choice(sorted(PHONE_FORMATS)))[1]
            pii.setdefault("phone", []).append(value)
        else:
            raise ValueError(f"unknown setting kind {kind!r}")
        quoted = str(value) if isinstance(value, int) else json.dumps(value, ensure_ascii=False)
        camel = "".join(part.capitalize() for part in name.split("_"))
        lines.append(
            syntax["line"].format(
                NAME=name.upper(), name=name, Name=camel, value=quoted, raw=str(value)
            )
        )
    comment_text = re.sub("%%entity%%", entity, rng.choice(code_bank.SETTINGS_COMMENTS))
    block = syntax["open"] + syntax["sep"].join(lines) + syntax["close"]
    return syntax["comment"] % comment_text + "\n" + block, pii


def _labels(rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Labelled examples for the quality and toxicity classifiers, per language and class."""
    quality, toxicity = [], []
    kinds = [("boilerplate", k) for k in BOILERPLATE_KINDS]
    kinds += [("low_quality", k) for k in LOW_QUALITY_KINDS]
    for language in LANGUAGES:
        w = _Writer(rng, language, [0])
        k = LABELS_PER_CLASS_PER_LANGUAGE
        for j in range(k):
            topic = rng.choice(TOPIC_NAMES)
            quality.append(_label(w.clean_page(topic, rng.randint(5, 9))[1], 1, language))
            group, kind = kinds[j % len(kinds)]
            topic = rng.choice(TOPIC_NAMES)
            if group == "boilerplate":
                _, bad = w.boilerplate_page(kind, topic, rng.choice(w.normal_hosts))
            else:
                _, bad = w.low_quality_page(kind, topic)
            quality.append(_label(bad, 0, language))
        for _ in range(k):
            topic = rng.choice(TOPIC_NAMES)
            toxic = rng.sample(w.bank.TOXIC, rng.randint(2, 4))
            toxic += rng.sample(w.bank.TOPICS[topic], rng.randint(0, 1))
            rng.shuffle(toxic)
            toxicity.append(_label(" ".join(toxic), 1, language))
            clean = rng.sample(w.bank.TOPICS[topic], rng.randint(2, 5))
            toxicity.append(_label(" ".join(clean), 0, language))
    rng.shuffle(quality)
    rng.shuffle(toxicity)
    return quality, toxicity


def _label(text: str, label: int, language: str) -> dict:
    return {"text": text, "label": label, "language": language}


def _by_language(entries: list[tuple[str, Any]]) -> dict[str, list]:
    out: dict[str, list] = {lang: [] for lang in LANGUAGES}
    for language, item in entries:
        out[language].append(item)
    return out


def _planted(web, edu, code, exact_groups, near_groups, seed, target_bytes) -> dict:
    """The ground truth of planted.json.

    pii                 type -> language -> ids of web pages carrying that PII type
                        (types: email, ipv4, ipv6, iban_spaced, iban_unspaced, phone)
    pii_values          id -> type -> the exact strings planted (must be replaced)
    lookalikes          language -> ids; lookalike_values: id -> strings that must survive PII
    code_pii            id -> type -> strings in code settings (must survive: code is exempt)
    toxic               language -> ids
    boilerplate         kind -> language -> ids (cookie_banner, navigation, read_more)
    low_quality         kind -> language -> ids (keyword_spam, short_lines, repeated_lines,
                        lorem_ipsum, symbol_lines, very_short, all_caps)
    exact_duplicates    language -> groups [original id, copy ids...] (same text)
    near_duplicates     language -> [{"original", "copies": [{"id", "edit", "changed_words"}]}]
    robots_blocked      language -> [{"id", "url", "host", "agents", "rule"}]: the agents named
                        in the robots.txt group that disallows the URL ("*" = every agent)
    robots_allowed      language -> [{"id", "url", "host", "reason"}]: on a host with a
                        restrictive robots.txt, but allowed for every AI crawler
    no_robots_file      language -> ids of web and edu pages on hosts without robots.txt
                        (plus "code" -> ids of code snippets)
    clean               language -> ids of web pages with nothing planted
    hosts               host -> {"language", "kind", "robots", "robots_file"}
    counts              totals of the above
    """
    site_of = {s.host: s for s in SITES}
    pii: dict[str, list] = {t: [] for t in PII_TYPES}
    pii_values, lookalike_values, code_pii = {}, {}, {}
    toxic, lookalikes, clean, blocked, allowed = [], [], [], [], []
    boilerplate: dict[str, list] = {k: [] for k in BOILERPLATE_KINDS}
    low_quality: dict[str, list] = {k: [] for k in LOW_QUALITY_KINDS}
    grouped = {id(d) for g in exact_groups for d in g}
    for original, copies in near_groups:
        grouped |= {id(original), *(id(c) for c, _ in copies)}
    for d in web:
        p, lang = d.plants, d.language
        for pii_type, values in p.get("pii", {}).items():
            pii[pii_type].append((lang, d.id))
            pii_values.setdefault(d.id, {})[pii_type] = values
        if "lookalikes" in p:
            lookalikes.append((lang, d.id))
            lookalike_values[d.id] = p["lookalikes"]
        if p.get("toxic"):
            toxic.append((lang, d.id))
        if "boilerplate" in p:
            boilerplate[p["boilerplate"]].append((lang, d.id))
        if "low_quality" in p:
            low_quality[p["low_quality"]].append((lang, d.id))
        if "robots_blocked" in p:
            entry = {"id": d.id, "url": d.url, "host": d.host, **p["robots_blocked"]}
            blocked.append((lang, entry))
        if "robots_allowed" in p:
            allowed.append(
                (lang, {"id": d.id, "url": d.url, "host": d.host, **p["robots_allowed"]})
            )
        if not p and id(d) not in grouped:
            clean.append((lang, d.id))
    for d in code:
        if "code_pii" in d.plants:
            code_pii[d.id] = d.plants["code_pii"]
    no_robots = _by_language(
        [(d.language, d.id) for d in [*web, *edu] if site_of[d.host].robots == "none"]
    )
    no_robots["code"] = [d.id for d in code if site_of[d.host].robots == "none"]
    exact = _by_language([(g[0].language, [d.id for d in g]) for g in exact_groups])
    near = _by_language(
        [
            (
                o.language,
                {"original": o.id, "copies": [{"id": c.id, **info} for c, info in copies]},
            )
            for o, copies in near_groups
        ]
    )
    planted = {
        "seed": seed,
        "target_bytes": target_bytes,
        "languages": list(LANGUAGES),
        "pii": {t: _by_language(pii[t]) for t in PII_TYPES},
        "pii_values": pii_values,
        "lookalikes": _by_language(lookalikes),
        "lookalike_values": lookalike_values,
        "code_pii": code_pii,
        "toxic": _by_language(toxic),
        "boilerplate": {k: _by_language(v) for k, v in boilerplate.items()},
        "low_quality": {k: _by_language(v) for k, v in low_quality.items()},
        "exact_duplicates": exact,
        "near_duplicates": near,
        "robots_blocked": _by_language(blocked),
        "robots_allowed": _by_language(allowed),
        "no_robots_file": no_robots,
        "clean": _by_language(clean),
        "hosts": {
            s.host: {
                "language": s.language,
                "kind": s.kind,
                "robots": s.robots,
                "robots_file": s.robots != "none",
            }
            for s in SITES
        },
    }
    planted["counts"] = {
        "pii_documents": len(pii_values),
        "pii": {t: len(pii[t]) for t in PII_TYPES},
        "lookalike_documents": len(lookalike_values),
        "code_pii_documents": len(code_pii),
        "toxic": len(toxic),
        "boilerplate": {k: len(v) for k, v in boilerplate.items()},
        "low_quality": {k: len(v) for k, v in low_quality.items()},
        "exact_duplicate_groups": len(exact_groups),
        "exact_duplicate_copies": sum(len(g) - 1 for g in exact_groups),
        "near_duplicate_groups": len(near_groups),
        "near_duplicate_copies": sum(len(c) for _, c in near_groups),
        "robots_blocked": len(blocked),
        "robots_allowed": len(allowed),
        "no_robots_file": sum(len(v) for v in no_robots.values()),
        "clean": len(clean),
    }
    return planted


def _gzip_jsonl(records: list[dict]) -> bytes:
    raw = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    # filename="" and mtime=0: the header names no file and no time, so the bytes depend only on
    # the records.
    out = _BytesSink()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(raw)
    return out.getvalue()


class _BytesSink:
    """A write-only buffer without a `name`, so gzip cannot take a file name from it."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def getvalue(self) -> bytes:
        return b"".join(self._chunks)


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def make_sample_corpus(out_dir: Path, seed: int, target_bytes: int = DEFAULT_TARGET_BYTES) -> dict:
    """Write the sample corpus under out_dir; return a summary dict (documents and bytes per file,
    per language, and the planted counts).

    `target_bytes` is the approximate total of UTF-8 bytes of all `text` fields (web 70%, edu 24%,
    code 6%); small targets are raised to floors that keep every planted category in every
    language. Raises ApertusError for a seed or target that is not a non-negative integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ApertusError(f"sample corpus seed must be a non-negative integer, got {seed!r}")
    if isinstance(target_bytes, bool) or not isinstance(target_bytes, int) or target_bytes <= 0:
        raise ApertusError(
            f"sample corpus target_bytes must be a positive integer, got {target_bytes!r}"
        )
    check_banks()
    out_dir = Path(out_dir)

    # Independent streams: changing how many labels are drawn never changes the corpus.
    corpus_rng = random.Random(seed)
    code_rng = random.Random(f"apertus-sample-code-{seed}")
    label_rng = random.Random(f"apertus-sample-labels-{seed}")

    # Estimated bytes of an average page: web ~11 sentences and a title, edu ~18 sentences and
    # four headings. The same number of pages for every language.
    web_page = {lang: 11 * _mean_sentence_bytes(lang) + 40 for lang in LANGUAGES}
    edu_page = {lang: 18 * _mean_sentence_bytes(lang) + 120 for lang in LANGUAGES}
    n_web = max(MIN_WEB_PER_LANGUAGE, round(WEB_SHARE * target_bytes / sum(web_page.values())))
    n_edu = max(MIN_EDU_PER_LANGUAGE, round(EDU_SHARE * target_bytes / sum(edu_page.values())))
    n_code = max(MIN_CODE, round(CODE_SHARE * target_bytes / 1000))
    plan = _Plan.for_pages(n_web)

    counter = [0]
    web: list[_Doc] = []
    exact_groups: list[list[_Doc]] = []
    near_groups: list = []
    for index, language in enumerate(LANGUAGES):
        docs, exact, near = _web_pages(corpus_rng, plan, language, index, counter)
        web += docs
        exact_groups += exact
        near_groups += near
    edu: list[_Doc] = []
    for language in LANGUAGES:
        w = _Writer(corpus_rng, language, counter)
        for _ in range(n_edu):
            topic, text = w.edu_page()
            edu.append(
                _Doc("edu", language, w.edu_host, w.page_path(topic, text.split("\n", 1)[0]), text)
            )
    code = _code_pages(code_rng, n_code)

    for kind, docs in (("web", web), ("edu", edu), ("code", code)):
        corpus_rng.shuffle(docs)
        for i, d in enumerate(docs):
            d.id = f"{kind}-{i:06d}"

    quality, toxicity = _labels(label_rng)
    planted = _planted(web, edu, code, exact_groups, near_groups, seed, target_bytes)

    summary: dict[str, Any] = {"files": {}, "languages": {}}
    by_language: dict[str, dict[str, int]] = defaultdict(lambda: {"documents": 0, "text_bytes": 0})
    for kind, docs in (("web", web), ("edu", edu), ("code", code)):
        data = _gzip_jsonl([d.record() for d in docs])
        atomic_write_bytes(out_dir / f"{kind}.jsonl.gz", data)
        text_bytes = sum(len(d.text.encode("utf-8")) for d in docs)
        summary["files"][kind] = {
            "documents": len(docs),
            "text_bytes": text_bytes,
            "gzip_bytes": len(data),
        }
        if kind == "code":
            continue  # code is "en" by convention; the per-language sums are of web and edu
        for d in docs:
            entry = by_language[d.language]
            entry["documents"] += 1
            entry["text_bytes"] += len(d.text.encode("utf-8"))
    atomic_write_bytes(out_dir / "labels" / "quality.jsonl", _jsonl(quality))
    atomic_write_bytes(out_dir / "labels" / "toxicity.jsonl", _jsonl(toxicity))
    planted_text = json.dumps(planted, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(out_dir / "planted.json", planted_text.encode("utf-8"))

    summary["languages"] = {lang: by_language[lang] for lang in sorted(by_language)}
    summary["total_text_bytes"] = sum(f["text_bytes"] for f in summary["files"].values())
    summary["labels"] = {
        name: {str(c): sum(r["label"] == c for r in rows) for c in (0, 1)}
        for name, rows in (("quality", quality), ("toxicity", toxicity))
    }
    summary["planted"] = planted["counts"]
    return summary
