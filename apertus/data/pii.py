"""PII redaction (RECIPE.md §5): emails, IP addresses, IBANs and phone numbers -> placeholders.

The recipe replaces emails with `<email-pii>`, IPv4 addresses with `<ip-pii>` and IBANs with
`<iban-pii>` by regular expression, and leaves code and math sources alone. This module does the
same and adds IPv6 addresses (`<ip-pii>`) and phone numbers (`<phone-pii>`), which the recipe's
list omits but which identify people just as well.

Every pattern errs on the side of keeping text: a web corpus is full of version numbers, dates,
times, ISBNs, prices, MAC addresses and `std::` identifiers that look like PII to a naive regex,
and replacing those would damage exactly the technical text a model should learn from. Each
pattern therefore matches a candidate by shape and, where the shape alone is ambiguous, checks it
(IPv6 with `ipaddress`, IBANs with the ISO 13616 mod-97 checksum, phone numbers by prefix, digit
count and separators). The decisions are commented where they are made.

`redact(text)` is the pure function; `PIIFormatter` is the datatrove block that applies it to the
documents whose `kind` is not exempt and counts what it replaced.
"""

from __future__ import annotations

import collections
import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.formatters.base import BaseFormatter
from datatrove.utils.typeshelper import StatHints

PII_KINDS: tuple[str, ...] = ("email", "ipv4", "ipv6", "iban", "phone")

PLACEHOLDERS: dict[str, str] = {
    "email": "<email-pii>",
    "ipv4": "<ip-pii>",
    "ipv6": "<ip-pii>",
    "iban": "<iban-pii>",
    "phone": "<phone-pii>",
}

# The order the kinds are applied in, whatever order the caller lists them. Placeholders contain
# no digits, '@', ':' or '.', so they never become part of a later match; the order decides which
# kind claims characters that two patterns could both read:
# - email first: an address may hold digits, dots and hyphens ("0791234567@sms.example.ch",
#   "admin.10.0.0.1@example.com") that the phone or IP patterns would otherwise take a piece of;
# - iban before phone: IBAN digit groups are valid phone shapes ("CH93 0076 2011 6238 5295 7"
#   contains "0076 2011 6238 5295 7", a 00-prefixed international number);
# - ipv6 before ipv4: the mixed form "::ffff:192.0.2.1" ends in a dotted quad, and replacing that
#   first would leave "::ffff:<ip-pii>" behind;
# - phone last: it is the loosest pattern, so it only sees digits that no stricter kind claimed.
_ORDER: tuple[str, ...] = ("email", "iban", "ipv6", "ipv4", "phone")

# Letters of the Latin-1/Latin Extended, Greek and Cyrillic blocks, so that "müller@beispiel.de"
# or "иван@пример.рф" are caught whole. CJK and Thai are left out on purpose: those scripts write
# without spaces, and "请联系john@example.com获取" must not swallow the surrounding words.
_INTL_LETTERS = (
    "\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f"  # Latin-1 and Latin Extended letters
    "\u0386\u0388-\u03ff"  # Greek, without the ano teleia (a punctuation mark)
    "\u0400-\u0481\u048a-\u04ff"  # Cyrillic, without the combining marks
)
_LETTER = "A-Za-z" + _INTL_LETTERS
_ALNUM = "A-Za-z0-9" + _INTL_LETTERS


@dataclass(frozen=True)
class _Rule:
    """One kind: a pattern whose group `pii` is the candidate, and a check of the match.

    `accept(match)` returns where the PII ends in the text (usually `match.end("pii")`; earlier
    when only a prefix of the candidate qualifies), or None to leave the text as it is.
    """

    kind: str
    pattern: re.Pattern[str]
    accept: Callable[[re.Match[str]], int | None]
    # A character every match contains: a cheap test that skips the regex on most documents.
    needs: str | None = None


# --- email ---------------------------------------------------------------------------------------

_EMAIL = re.compile(
    # Start only where a local part can begin: not after an address character, nor after one
    # followed by a single dot. This keeps the scan linear (a long run without '@' is read once,
    # not once per starting position), and an ellipsis ("see...john@example.com") is not part
    # of the address: local parts are dot-separated atoms, never two dots in a row.
    rf"(?<![{_ALNUM}_%+\-])(?<![{_ALNUM}_%+\-]\.)"
    rf"(?P<pii>[{_ALNUM}_%+\-]+(?:\.[{_ALNUM}_%+\-]+)*"
    r"@"
    # The domain needs at least one dot: "user@localhost" and shell prompts like
    # "root@server:~$" name an account on one machine, not a routable address of a person.
    rf"(?:[{_ALNUM}](?:[{_ALNUM}\-]*[{_ALNUM}])?\.)+"
    # The TLD is letters (or an IDN in punycode), so "pkg@1.2.3" and "@scope/pkg@2.0" stay, and a
    # sentence's final dot is not taken: "mail john@example.com." keeps its full stop.
    rf"(?:[{_LETTER}]{{2,63}}|xn--[A-Za-z0-9\-]{{1,59}}))"
    rf"(?![{_ALNUM}_\-])"
)

# Retina image names ("logo@2x.png") have the shape of an address; none of these is a TLD.
_FILE_EXTENSIONS = frozenset(
    {"png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "tif", "tiff", "avif", "heic"}
)


def _accept_email(match: re.Match[str]) -> int | None:
    tld = match.group("pii").rsplit(".", 1)[1].lower()
    return None if tld in _FILE_EXTENSIONS else match.end("pii")


# --- IBAN ----------------------------------------------------------------------------------------

# The recipe's IBAN regex. Strings of exactly this shape are replaced without a checksum, as the
# recipe does: the shape (country code, check digits, four groups of four digits, one or two
# characters) is specific enough on its own, and a mistyped account number is still one.
_RECIPE_IBAN = re.compile(r"[A-Z]{2}[0-9]{2}( [0-9]{4}){4} [A-Z0-9]{1,2}")

# ISO 13616 IBAN lengths by country (SWIFT IBAN registry), including the territories that use
# their parent's format (AX: FI; GF, GP, MQ, RE, PF, TF, YT, NC, BL, MF, PM, WF: FR;
# IM, JE, GG: GB). Beyond the recipe's shape a candidate must have its country's length and a
# valid checksum: together they let through about one random upper-case code in several thousand.
_IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
    "AX": 18, "GF": 27, "GP": 27, "MQ": 27, "RE": 27, "PF": 27, "TF": 27, "YT": 27, "NC": 27,
    "BL": 27, "MF": 27, "PM": 27, "WF": 27, "IM": 22, "JE": 22, "GG": 22,
}  # fmt: skip

_IBAN = re.compile(
    r"(?<![A-Za-z0-9])"
    r"(?P<pii>[A-Z]{2}[0-9]{2}"
    # Written unspaced (the electronic form) or in groups of four with a shorter last group
    # (the paper form). Only upper case: lower-case IBANs are rare and "de12abc..." is often a
    # hash or an identifier.
    r"(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?))"
    r"(?![A-Za-z0-9])"
)


def _iban_checksum_ok(iban: str) -> bool:
    """ISO 13616 / ISO 7064 mod 97-10: move the first four characters to the end, read letters
    as 10..35, and the number must be 1 modulo 97."""
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _valid_iban(candidate: str) -> bool:
    if _RECIPE_IBAN.fullmatch(candidate):
        return True
    compact = candidate.replace(" ", "")
    return _IBAN_LENGTHS.get(compact[:2]) == len(compact) and _iban_checksum_ok(compact)


def _accept_iban(match: re.Match[str]) -> int | None:
    candidate = match.group("pii")
    start = match.start("pii")
    if " " not in candidate:
        return match.end("pii") if _valid_iban(candidate) else None
    # A grouped IBAN may run into a following upper-case word or code ("... 1332 SEPA"): the
    # pattern takes it as one more group, so try the candidate and then shorter group prefixes.
    ends = [i for i, c in enumerate(candidate) if c == " "] + [len(candidate)]
    for end in reversed(ends[2:]):
        if _valid_iban(candidate[:end]):
            return start + end
    return None


# --- IPv6 ----------------------------------------------------------------------------------------

_IPV6 = re.compile(
    # Not inside a word or a longer colon/dot sequence: "std::vector", "u8::MAX", "a.b::c".
    r"(?<![\w:.])"
    r"(?P<pii>(?:[0-9A-Fa-f]{1,4})?(?::[0-9A-Fa-f]{0,4}){2,7}"
    # Mixed form: the last hex group is also the first octet of an IPv4 tail (::ffff:192.0.2.1).
    r"(?:(?:\.[0-9]{1,3}){3})?"
    # Zone id (fe80::1%eth0); letters, digits, '_' and '-' only, so a final full stop stays.
    r"(?:%[0-9A-Za-z_\-]{1,32})?)"
    r"(?![\w:])(?!\.[0-9])"
)


def _accept_ipv6(match: re.Match[str]) -> int | None:
    candidate = match.group("pii")
    # The pattern accepts any colon-hex run; `ipaddress` decides. That rejects times (12:30:45),
    # MAC addresses (00:1A:2B:3C:4D:5E: six groups, no "::"), and lone "::" (Haskell, C++).
    # An address also needs a decimal digit: "dead::beef" or "Cafe::Add" are valid IPv6 syntax
    # but in text they are identifiers, and real addresses ("fe80::1", "2001:db8::") have digits.
    if not any(c.isdigit() for c in candidate):
        return None
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return None
    # Every valid address is replaced, loopback and documentation ranges included, as for IPv4.
    return match.end("pii")


# --- IPv4 ----------------------------------------------------------------------------------------

# Private, loopback and documentation addresses (192.168.0.1, 127.0.0.1, 203.0.113.7) are replaced
# like public ones, as the recipe's plain "IPv4 -> <ip-pii>" does; datatrove's own formatter keeps
# non-global addresses. The cost is some networking tutorials losing their example addresses; the
# placeholder still says that an address stood there.

# 0-255 without leading zeros: "010.001.002.003" is how zero-padded dates, serials and versions
# are written, and Python's `ipaddress` rejects leading zeros too (they read as octal elsewhere).
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(
    # Not after a letter, digit or dot: "v1.2.3.4", "build1.2.3.4", or the tail of "1.2.3.4.5".
    r"(?<![\w.])"
    rf"(?P<pii>{_OCTET}(?:\.{_OCTET}){{3}})"
    # Not before a letter/digit or ".digit": "1.2.3.4.5" is a longer dotted sequence, and
    # "10.0.19041.1" fails on the octet > 255 anyway. "1.2.3.4." at a sentence end is kept.
    r"(?!\w)(?!\.[0-9])"
)

# A dotted quad right after one of these words is a version or a section number, not an address
# ("version 1.2.3.4", "v. 2.0.0.1", "Firmware 4.1.2.10", "§ 1.2.3.4"). Case-insensitive; the
# version words of the corpus's main languages are included.
_IPV4_NOT_AFTER = re.compile(
    r"(?:\b(?:v|ver|vers|version|versión|versione|versão|wersja|версия|версии|έκδοση"
    r"|release|build|rev|revision|firmware|fw|update|patch|kernel"
    r"|section|sec|sect|chapter|ch|clause|article|art|figure|fig|table|tab|step|item"
    r"|abschnitt|kapitel|chapitre|capítulo|capitolo|раздел|глава)|§)\.?:?\s*\Z",
    re.IGNORECASE,
)


def _accept_ipv4(match: re.Match[str]) -> int | None:
    start = match.start("pii")
    before = match.string[max(0, start - 16) : start]
    return None if _IPV4_NOT_AFTER.search(before) else match.end("pii")


# --- phone ---------------------------------------------------------------------------------------

# One separator between digit groups: a space (also no-break and thin spaces, as French
# typography writes "06 12 34 56 78"), a hyphen, a dot or a slash ("030/1234567").
_SPACE = "[ \u00a0\u2009\u202f]"
_PHONE_SEP = rf"(?:{_SPACE}|[\-./])"
_PHONE = re.compile(
    # Not inside a word or a number, nor in a URL path or query ("/item/044-668-18-00",
    # "?id=0446681800"), nor after another sign or a decimal point ("+-", "1.044"); after an
    # abbreviation's dot it may start ("Tel.+41 44 668 18 00").
    r"(?<![\w+/=&#%\-])(?<![0-9][.,])"
    r"(?P<pii>"
    # A phone number starts with what only phone numbers start with; this is what keeps dates
    # (2024-03-15, 15.03.2024), year ranges (1990-2000), prices (1'234.50, 1,299.00), postal codes
    # (8001), ISBNs (978-3-16-148410-0, 0-306-40615-2), versions and plain integers out:
    r"(?:"
    r"(?:\+|00)[1-9][0-9]*+"  # international: +41 ..., 0041 ...
    r"|\((?:0[0-9]{1,4}|[2-9][0-9]{2})\)"  # area code in parentheses: (044), (555)
    r"|0[1-9][0-9]*+"  # national trunk prefix 0 and an area code: 044, 030, 06
    r")"
    # Then digit groups, each after one separator ("(0)" and "(555)" may be followed directly);
    # possessive, so a group sequence is never re-split to find a shorter match inside it.
    rf"(?:(?:{_PHONE_SEP}|(?<=\)){_SPACE}?)(?:\([0-9]{{1,5}}\)|[0-9]++)){{0,16}}+"
    # The number ends here: no letter or digit, and no further separated digit group (a long
    # table of numbers is not a phone number; it fails here rather than being cut in pieces).
    rf"(?!\w)(?!{_PHONE_SEP}[0-9])"
    # North American numbers without a country code have no distinctive prefix, so only their
    # exact shape with one kind of separator: 555-123-4567, 555.123.4567, 1-800-555-0199.
    r"|(?:1[\-. ])?[2-9][0-9]{2}(?P<nanp_sep>[\-.])[0-9]{3}(?P=nanp_sep)[0-9]{4}"
    r"(?!\w)(?![\-.][0-9])"
    r")"
)

_PHONE_SEPARATORS = re.compile(rf"{_SPACE}|[\-./]|\)|\(")
# Day/month/year in any order a date is written with one separator repeated: "03/15/2024",
# "15.03.2024", "01 02 2024", "05-06-24".
_DATE = re.compile(r"([0-9]{1,2})([./\- ])([0-9]{1,2})\2([0-9]{4}|[0-9]{2})")


def _looks_like_date(candidate: str) -> bool:
    m = _DATE.fullmatch(candidate)
    if not m:
        return False
    a, b, year = int(m.group(1)), int(m.group(3)), m.group(4)
    plausible_year = len(year) == 2 or 1000 <= int(year) <= 2999
    return plausible_year and 1 <= a <= 31 and 1 <= b <= 31 and min(a, b) <= 12


def _phone_ok(candidate: str) -> bool:
    digits = sum(c.isdigit() for c in candidate)
    separators = [s for s in _PHONE_SEPARATORS.findall(candidate) if s not in "()"]
    international = candidate.startswith(("+", "00"))
    if international:
        # E.164 allows at most 15 digits after the international prefix.
        national = digits - (2 if candidate.startswith("00") else 0)
        # Unspaced, only "+" marks a number; "+1500000" is more often a count than a phone.
        if candidate.startswith("00") and not separators:
            return False
        if not (7 if separators else 9) <= national <= 15:
            return False
    else:
        # Unspaced digit strings starting with 0 are usually IDs, zip+4 codes, article or
        # account numbers; a national number is written with at least one separator.
        if not separators and "(" not in candidate:
            return False
        if not 7 <= digits <= 15:
            return False
    # Dots do not mix with other separators in a phone number; they do in opening hours
    # ("09.00-17.00") and decimal ranges.
    if "." in separators and any(s != "." for s in separators):
        return False
    return not _looks_like_date(candidate)


# The number's last group runs on into another number: "12:30", "1'234.50", "1,299.00".
_RUNS_ON = re.compile(r"[:'\u2019,][0-9]")
_LAST_SPACE = re.compile(rf"{_SPACE}(?=[^ \u00a0\u2009\u202f]*\Z)")


def _split_last_token(candidate: str) -> tuple[str, str] | None:
    m = _LAST_SPACE.search(candidate)
    return None if m is None else (candidate[: m.start()], candidate[m.end() :])


def _accept_phone(match: re.Match[str]) -> int | None:
    if match.group("nanp_sep"):
        return match.end("pii")
    candidate = match.group("pii")
    # A phone number written before another number ("044 668 18 00 15.03.2024", "... 12:30")
    # is read as one long candidate. Its last space-separated token is dropped when that token
    # is a number of its own: it runs on after the candidate, or it has inner separators (a
    # date, a range, a version). Plain trailing groups are never dropped: "02 03 04 05 06 07 08
    # 09" is a table of numbers, not a phone number followed by one.
    if _RUNS_ON.match(match.string, match.end("pii")):
        split = _split_last_token(candidate)
        if split is None:
            return None
        candidate = split[0]
    while not _phone_ok(candidate):
        split = _split_last_token(candidate)
        if split is None or not re.search(r"[\-./]", split[1]):
            return None
        candidate = split[0]
    return match.start("pii") + len(candidate)


_RULES: dict[str, _Rule] = {
    "email": _Rule("email", _EMAIL, _accept_email, needs="@"),
    "iban": _Rule("iban", _IBAN, _accept_iban),
    "ipv6": _Rule("ipv6", _IPV6, _accept_ipv6, needs=":"),
    "ipv4": _Rule("ipv4", _IPV4, _accept_ipv4, needs="."),
    "phone": _Rule("phone", _PHONE, _accept_phone),
}
assert set(_RULES) == set(PII_KINDS) == set(_ORDER) == set(PLACEHOLDERS)


def _check_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    if isinstance(kinds, str):
        raise TypeError(f"kinds must be a sequence of kind names, not the string {kinds!r}")
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in PII_KINDS]
    if unknown:
        raise ValueError(
            f"unknown PII kind(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(PII_KINDS)}"
        )
    return kinds


def _apply(rule: _Rule, text: str, counts: collections.Counter) -> str:
    placeholder = PLACEHOLDERS[rule.kind]

    def replace(match: re.Match[str]) -> str:
        end = rule.accept(match)
        if end is None:
            return match.group(0)
        counts[rule.kind] += 1
        s = match.string
        return s[match.start() : match.start("pii")] + placeholder + s[end : match.end()]

    return rule.pattern.sub(replace, text)


def redact(text: str, kinds: Iterable[str] = PII_KINDS) -> tuple[str, collections.Counter]:
    """Replace the PII of the given kinds in `text` by their placeholders.

    Returns the redacted text and a Counter of replacements per kind (kinds with none are
    absent). Kinds are applied in a fixed order (`_ORDER`) whatever order they are listed in.
    Raises ValueError for an unknown kind.
    """
    wanted = set(_check_kinds(kinds))
    if not isinstance(text, str):
        raise TypeError(f"redact() needs a str, got {type(text).__name__}")
    counts: collections.Counter = collections.Counter()
    # A replacement changes the character next to a neighbouring candidate: in
    # "044 668 18 00+41 44 668 18 00" the second number starts after a digit (not a phone start)
    # until the first becomes "<phone-pii>". Passes repeat until one replaces nothing, so
    # redact(redact(x)) == redact(x). This ends: every match holds a digit or an '@' (the IPv6
    # check demands a digit), placeholders hold neither, so each pass that replaces something
    # lowers their number. Text without PII takes one pass, text with PII usually two.
    while True:
        before = sum(counts.values())
        for kind in _ORDER:
            rule = _RULES[kind]
            if kind in wanted and (rule.needs is None or rule.needs in text):
                text = _apply(rule, text, counts)
        if sum(counts.values()) == before:
            return text, counts


class PIIFormatter(BaseFormatter):
    """Replaces emails, IP addresses, IBANs and phone numbers with placeholders (RECIPE.md §5).

    Documents whose metadata `kind` is exempt (code and math by default, as in the recipe) pass
    untouched: there an "email" is an author line in a license header, an "IP" is a test fixture,
    and a "phone number" is a constant, and rewriting them breaks the program or the formula.

    Args:
        kinds: which PII kinds to replace (subset of `PII_KINDS`).
        exempt_kinds: document kinds (`metadata["kind"]`) that are not redacted.

    Stats: `exempt` (documents passed untouched), `replaced_<kind>` (replacements of that kind),
    `documents_with_pii` (documents with at least one replacement).
    """

    name = "🕵️ PII"

    def __init__(
        self,
        kinds: Sequence[str] = PII_KINDS,
        exempt_kinds: Sequence[str] = ("code", "math"),
    ):
        super().__init__()
        self.kinds = _check_kinds(kinds)
        if isinstance(exempt_kinds, str):
            raise TypeError(
                f"exempt_kinds must be a sequence of document kinds, not the string "
                f"{exempt_kinds!r}"
            )
        self.exempt_kinds = frozenset(exempt_kinds)

    def format(self, text: str) -> str:
        return redact(text, self.kinds)[0]

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            self.stat_update(StatHints.total)
            if doc.metadata.get("kind") in self.exempt_kinds:
                self.stat_update("exempt")
                yield doc
                continue
            with self.track_time():
                doc.text, counts = redact(doc.text, self.kinds)
            for kind, n in counts.items():
                self.stat_update(f"replaced_{kind}", value=n)
            if counts:
                self.stat_update("documents_with_pii")
            yield doc
