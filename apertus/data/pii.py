"""PII redaction (RECIPE.md §5): emails, IP addresses, IBANs and phone numbers -> placeholders.

The recipe replaces emails with `<email-pii>`, IPv4 addresses with `<ip-pii>` and IBANs with
`<iban-pii>` by regular expression, and leaves code and math sources alone. This module does the
same and adds IPv6 addresses (`<ip-pii>`) and phone numbers (`<phone-pii>`), which the recipe's
list omits but which identify people just as well.

Every pattern errs on the side of keeping text: a web corpus is full of version numbers, dates,
times, ISBNs, prices, MAC addresses and `std::` identifiers that look like PII to a naive regex,
and replacing those would damage exactly the technical text a model should learn from. Each
pattern therefore matches a candidate by shape and, where the shape alone is ambiguous, checks it
(IPv6 with `ipaddress`, IBANs with the ISO 13616 mod-97 checksum, emails by a TLD whitelist,
phone numbers by prefix, digit count, separators, and a phone word before a number with no
distinctive prefix). Addresses are read in any script: letters of scripts written with spaces
may form an address, and Han, kana or Thai text may touch one without becoming part of it. The
decisions are commented where they are made; `tests/data/pii_adversarial.py` is the adversarial
set they are measured on.

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

# Letters (and the combining marks that Indic, Thai and Arabic words need) of the scripts written
# with spaces between words: Latin, Greek, Cyrillic, Armenian, Hebrew, Arabic, the Indic scripts,
# Georgian, Ethiopic, Hangul. Their punctuation (Arabic comma, Devanagari danda, ...) is left out.
_SPACED_LETTERS = (
    "\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f"  # Latin-1 and Latin Extended letters
    "\u0300-\u036f"  # combining diacritics
    "\u0386\u0388-\u03ff"  # Greek, without the ano teleia (a punctuation mark)
    "\u0400-\u0481\u048a-\u052f"  # Cyrillic, without the combining marks
    "\u0531-\u0556\u0561-\u0587"  # Armenian
    "\u05d0-\u05ea"  # Hebrew
    "\u0620-\u064a\u0660-\u0669\u066e-\u06d3\u06d5\u06f0-\u06ff"  # Arabic, Persian
    "\u064b-\u065f"  # Arabic vowel marks
    "\u0900-\u0963\u0966-\u0dff"  # Devanagari to Sinhala, without the dandas
    "\u10a0-\u10ff"  # Georgian
    "\u1200-\u1360\u1369-\u137f"  # Ethiopic, without its punctuation
    "\u1100-\u11ff\u3131-\u318e\uac00-\ud7a3"  # Hangul
    "\u1e00-\u1fff"  # Latin Extended Additional (Vietnamese), Greek Extended
)
# Scripts written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar). A word of these runs into
# its neighbours, so an address is either all of such letters or has none: in
# "请联系john@example.com获取" the address is "john@example.com", and "ユーザー@例え.テスト" is one.
_UNSPACED_LETTERS = (
    "\u0e01-\u0e3a\u0e40-\u0e4e\u0e81-\u0edf"  # Thai, Lao
    "\u1000-\u103f\u1780-\u17d3"  # Myanmar, Khmer
    "\u3005\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff"  # kana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
)
_INTL_LETTERS = _SPACED_LETTERS
_LETTER = "A-Za-z" + _SPACED_LETTERS
_ALNUM = "A-Za-z0-9" + _SPACED_LETTERS
_CJK = _UNSPACED_LETTERS
# What a number or an address must not touch: a letter or digit of a spaced script, or '_'.
# Han, kana and Thai may touch: "服务器地址是203.0.114.9" ends in an address.
_WORD = "0-9A-Za-z_" + _SPACED_LETTERS


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
    # of the address: local parts are dot-separated atoms, never two dots in a row. An apostrophe
    # joins two atoms ("o'brien@example.ie") but never starts or ends one (quoted addresses).
    r"(?P<pii>"
    rf"(?:(?<![{_ALNUM}_%+\-])(?<![{_ALNUM}_%+\-][.'\u2019])"
    rf"[{_ALNUM}_%+\-]+(?:['\u2019][{_ALNUM}_%+\-]+)*(?:\.[{_ALNUM}_%+\-]+(?:['\u2019][{_ALNUM}_%+\-]+)*)*"
    # A local part of an unspaced script is the whole run of its letters before the '@'.
    rf"|(?<![{_CJK}])[{_CJK}]+(?:\.[{_CJK}]+)*)"
    r"@"
    # The domain needs at least one dot: "user@localhost" and shell prompts like
    # "root@server:~$" name an account on one machine, not a routable address of a person.
    rf"(?:[{_ALNUM}{_CJK}](?:[{_ALNUM}{_CJK}\-]*[{_ALNUM}{_CJK}])?\.)+"
    # The TLD is letters of one script (or an IDN in punycode), so "pkg@1.2.3" and "@scope/pkg@2.0"
    # stay, a sentence's final dot is not taken ("mail john@example.com."), and an ASCII TLD ends
    # where an unspaced script begins ("john@example.com获取").
    r"(?:(?P<ascii_tld>[A-Za-z]{2,63})(?![A-Za-z0-9_\-])"
    r"|xn--[A-Za-z0-9\-]{1,59}(?![A-Za-z0-9_\-])"
    rf"|[{_SPACED_LETTERS}]{{2,63}}(?![{_ALNUM}_\-])"
    rf"|(?P<cjk_tld>[{_CJK}]{{1,63}})))"
)

# ASCII TLDs: every country code and the generic TLDs that people's addresses use. A whitelist, so
# that code with an '@' operator or decorator ("inputs@model.weight", "report@v2.pdf",
# "this@MainActivity.startActivity") is not read as an address. Left out on purpose: the gTLDs
# that are also file extensions or attribute names in code (zip, mov, cat, name, int, email,
# style, run, ...); "py" stays as Paraguay's code.
_COUNTRY_TLDS = frozenset(
    {
        "ac", "ad", "ae", "af", "ag", "ai", "al", "am", "ao", "aq", "ar", "as", "at", "au", "aw",
        "ax", "az", "ba", "bb", "bd", "be", "bf", "bg", "bh", "bi", "bj", "bm", "bn", "bo", "br",
        "bs", "bt", "bw", "by", "bz", "ca", "cc", "cd", "cf", "cg", "ch", "ci", "ck", "cl", "cm",
        "cn", "co", "cr", "cu", "cv", "cw", "cx", "cy", "cz", "de", "dj", "dk", "dm", "do", "dz",
        "ec", "ee", "eg", "er", "es", "et", "eu", "fi", "fj", "fk", "fm", "fo", "fr", "ga", "gd",
        "ge", "gf", "gg", "gh", "gi", "gl", "gm", "gn", "gp", "gq", "gr", "gs", "gt", "gu", "gw",
        "gy", "hk", "hm", "hn", "hr", "ht", "hu", "id", "ie", "il", "im", "in", "io", "iq", "ir",
        "is", "it", "je", "jm", "jo", "jp", "ke", "kg", "kh", "ki", "km", "kn", "kp", "kr", "kw",
        "ky", "kz", "la", "lb", "lc", "li", "lk", "lr", "ls", "lt", "lu", "lv", "ly", "ma", "mc",
        "md", "me", "mg", "mh", "mk", "ml", "mm", "mn", "mo", "mp", "mq", "mr", "ms", "mt", "mu",
        "mv", "mw", "mx", "my", "mz", "na", "nc", "ne", "nf", "ng", "ni", "nl", "no", "np", "nr",
        "nu", "nz", "om", "pa", "pe", "pf", "pg", "ph", "pk", "pl", "pm", "pn", "pr", "ps", "pt",
        "pw", "py", "qa", "re", "ro", "rs", "ru", "rw", "sa", "sb", "sc", "sd", "se", "sg", "sh",
        "si", "sk", "sl", "sm", "sn", "so", "sr", "ss", "st", "su", "sv", "sx", "sy", "sz", "tc",
        "td", "tf", "tg", "th", "tj", "tk", "tl", "tm", "tn", "to", "tr", "tt", "tv", "tw", "tz",
        "ua", "ug", "uk", "us", "uy", "uz", "va", "vc", "ve", "vg", "vi", "vn", "vu", "wf", "ws",
        "ye", "yt", "za", "zm", "zw"
    }
)  # fmt: skip
# With the names reserved for documentation and tests (RFC 2606), used in examples as such.
_GENERIC_TLDS = frozenset(
    {
        "com", "net", "org", "edu", "gov", "mil", "info", "biz", "pro", "aero", "coop", "museum",
        "mobi", "asia", "tel", "travel", "jobs", "arpa", "app", "dev", "blog", "shop", "store",
        "online", "site", "website", "web", "tech", "xyz", "top", "club", "live", "news",
        "digital", "agency", "company", "solutions", "services", "network", "systems", "media",
        "group", "global", "world", "art", "design", "studio", "space", "life", "today", "center",
        "centre", "cloud", "link", "hosting", "academy", "science", "university", "school",
        "education", "college", "law", "legal", "consulting", "finance", "financial", "bank",
        "insurance", "health", "care", "clinic", "dental", "hospital", "church", "photography",
        "photos", "gallery", "music", "film", "social", "community", "family", "love", "fashion",
        "luxury", "wine", "beer", "pizza", "restaurant", "cafe", "coffee", "bar", "pub", "kitchen",
        "recipes", "food", "farm", "garden", "house", "home", "homes", "properties", "realty",
        "estate", "apartments", "land", "city", "town", "events", "expert", "guru", "ninja",
        "rocks", "team", "support", "help", "tips", "guide", "press", "foundation", "charity",
        "ngo", "ong", "gmbh", "ltd", "llc", "inc", "co", "swiss", "berlin", "hamburg", "koeln",
        "bayern", "nrw", "ruhr", "wien", "tirol", "zuerich", "paris", "london", "nyc", "tokyo",
        "moscow", "amsterdam", "brussels", "vlaanderen", "madrid", "barcelona", "istanbul",
        "dubai", "africa", "lat", "eus", "cymru", "wales", "scot", "bzh", "quebec", "kiwi",
        "sydney", "melbourne", "energy", "solar", "green", "eco", "earth", "partners", "ventures",
        "capital", "fund", "investments", "money", "exchange", "market", "markets", "trade",
        "trading", "mba", "phd", "doctor", "lawyer", "attorney", "engineer", "engineering",
        "software", "technology", "computer", "domains", "vip", "fyi", "wiki", "io", "ai", "me",
        "tv", "fm", "am", "sh", "ly", "gg", "example", "test"
    }
)  # fmt: skip
# CJK and Thai TLDs, to know where a TLD ends that touches the next word ("例え.テストです").
_UNSPACED_TLDS = frozenset(
    {
        "中国", "中國", "公司", "网络", "網絡", "香港", "台灣", "台湾", "新加坡",
        "澳門", "澳门", "みんな", "コム", "世界", "游戏", "企业", "商城", "在线",
        "中文网", "网址", "网店", "手机", "信息", "健康", "商店", "娱乐", "我爱你",
        "移动", "时尚", "微博", "集团", "购物", "政务", "公益", "慈善", "机构",
        "组织机构", "書籍", "招聘", "广东", "政府", "テスト", "测试", "測試",
        "日本", "ไทย"
    }
)  # fmt: skip


def _accept_email(match: re.Match[str]) -> int | None:
    end = match.end("pii")
    # A call or an index after it ("q@k.transpose(-2, -1)"): matrix products and decorators.
    if match.string[end : end + 1] in ("(", "["):
        return None
    tld = match.group("ascii_tld")
    if tld is not None:
        # camelCase is an identifier ("startActivity"); a TLD is one case.
        if not (tld.islower() or tld.isupper() or tld.istitle()):
            return None
        tld = tld.lower()
        return end if tld in _COUNTRY_TLDS or tld in _GENERIC_TLDS else None
    cjk_tld = match.group("cjk_tld")
    if cjk_tld is not None:
        # The TLD runs on into the words after it: end it after the longest known TLD.
        for n in range(min(len(cjk_tld), 4), 0, -1):
            if cjk_tld[:n] in _UNSPACED_TLDS:
                return match.start("cjk_tld") + n
        return end if len(cjk_tld) >= 2 else None
    return end


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
    # (the paper form), separated by spaces (also the no-break spaces of typeset text) or by
    # hyphens, one kind throughout. Only upper case: lower-case IBANs are rare and "de12abc..."
    # is often a hash or an identifier.
    r"(?:[A-Z0-9]{11,30}"
    r"|(?P<sep>[ \u00a0\u2009\u202f\-])[A-Z0-9]{4}(?:(?P=sep)[A-Z0-9]{4}){1,6}"
    r"(?:(?P=sep)[A-Z0-9]{1,3})?))"
    r"(?![A-Za-z0-9])"
)


def _iban_checksum_ok(iban: str) -> bool:
    """ISO 13616 / ISO 7064 mod 97-10: move the first four characters to the end, read letters
    as 10..35, and the number must be 1 modulo 97."""
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


_IBAN_SEPARATORS = re.compile(r"[ \u00a0\u2009\u202f\-]")


def _valid_iban(candidate: str) -> bool:
    if _RECIPE_IBAN.fullmatch(candidate):
        return True
    compact = _IBAN_SEPARATORS.sub("", candidate)
    return _IBAN_LENGTHS.get(compact[:2]) == len(compact) and _iban_checksum_ok(compact)


def _accept_iban(match: re.Match[str]) -> int | None:
    candidate = match.group("pii")
    start = match.start("pii")
    sep = match.group("sep")
    if sep is None:
        return match.end("pii") if _valid_iban(candidate) else None
    # A grouped IBAN may run into a following upper-case word or code ("... 1332 SEPA"): the
    # pattern takes it as one more group, so try the candidate and then shorter group prefixes.
    ends = [i for i, c in enumerate(candidate) if c == sep] + [len(candidate)]
    for end in reversed(ends[2:]):
        if _valid_iban(candidate[:end]):
            return start + end
    return None


# --- IPv6 ----------------------------------------------------------------------------------------

_IPV6 = re.compile(
    # Not inside a word or a longer colon/dot sequence: "std::vector", "u8::MAX", "a.b::c"; but
    # after the tag of an address literal ("[IPv6:2001:db8::1]") or ifconfig's "addr:".
    rf"(?:(?<=[Ii][Pp][Vv]6:)|(?<=addr:)|(?<![{_WORD}:.]))"
    r"(?P<pii>(?:[0-9A-Fa-f]{1,4})?(?::[0-9A-Fa-f]{0,4}){2,7}"
    # Mixed form: the last hex group is also the first octet of an IPv4 tail (::ffff:192.0.2.1).
    r"(?:(?:\.[0-9]{1,3}){3})?"
    # Zone id (fe80::1%eth0); letters, digits, '_' and '-' only, so a final full stop stays.
    r"(?:%[0-9A-Za-z_\-]{1,32})?)"
    rf"(?![{_WORD}:])(?!\.[0-9])"
)

# Slices and proportions ("a[1::2]", "2:3::4:6") are valid compressed IPv6 by syntax. Real
# addresses have a hex letter or a group of three or more digits ("2001:db8::1", "fe80::1",
# "64:ff9b::"); the loopback "::1" is the exception. Decimal-only colon runs that index something
# ("x[::1]", "a[100::200]") are slices; an address in brackets follows "//", "@" or a space.
_DECIMAL_AND_COLONS = re.compile(r"[0-9:]*")
_SLICE_BEFORE = re.compile(r"[\w)\]]\[\Z")


def _accept_ipv6(match: re.Match[str]) -> int | None:
    candidate = match.group("pii")
    # The pattern accepts any colon-hex run; `ipaddress` decides. That rejects times (12:30:45),
    # MAC addresses (00:1A:2B:3C:4D:5E: six groups, no "::"), and lone "::" (Haskell, C++).
    # An address also needs a decimal digit: "dead::beef" or "Cafe::Add" are valid IPv6 syntax
    # but in text they are identifiers, and real addresses ("fe80::1", "2001:db8::") have digits.
    if not any(c.isdigit() for c in candidate):
        return None
    if _DECIMAL_AND_COLONS.fullmatch(candidate):
        start = match.start("pii")
        if _SLICE_BEFORE.search(match.string, max(0, start - 2), start):
            return None
        if candidate != "::1" and all(len(g) <= 2 for g in candidate.split(":")):
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
    rf"(?<![{_WORD}.])"
    rf"(?P<pii>{_OCTET}(?:\.{_OCTET}){{3}})"
    # Not before a letter/digit or ".digit": "1.2.3.4.5" is a longer dotted sequence, and
    # "10.0.19041.1" fails on the octet > 255 anyway. "1.2.3.4." at a sentence end is kept.
    rf"(?![{_WORD}])(?!\.[0-9])"
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
# Words that announce a phone number, in the corpus's languages. After one of them a number may
# have no distinctive prefix ("Teléfono: 612 345 678", "Tel. 44 668 18 00", "电话 138 0013 8000").
_PHONE_WORDS = (
    r"(?i:\b(?:tel|tél|tele?fon[eo]?|telephone|téléphone|teléfono|telemóvel|telefonnummer"
    r"|phone|ph|mobile?|mob|cell|call|fax|whatsapp|handy|natel|tlf|puh|gsm|kom|hotline"
    r"|тел|телефон|моб|τηλ|τηλέφωνο|điện thoại|sđt|telp|हाटफ|फ़ोन|फोन|मोबाइल|هاتف|جوال"
    r"|전화)\.?|电话|電話|手机|携帯|โทร)"
)
# An extension after the number: "212.555.0199x123", "212-555-0199 ext. 42".
_EXTENSION = rf"(?:{_SPACE}?(?:[xX]|[eE]xt\.?|#){_SPACE}?[0-9]{{1,6}})"
# The word, then at most a few spaces or punctuation marks, then the number.
_ANNOUNCED = re.compile(rf"{_PHONE_WORDS}[^\w\n]{{0,4}}\Z")
_PHONE = re.compile(
    # Not inside a word or a number, nor in a URL path or query ("/item/044-668-18-00",
    # "?id=0446681800"), nor after another sign or a decimal point ("+-", "1.044"); after an
    # abbreviation's dot it may start ("Tel.+41 44 668 18 00"), and after Han or kana too.
    rf"(?<![{_WORD}+/=&#%\-])(?<![0-9][.,])"
    r"(?P<pii>"
    # A phone number starts with what only phone numbers start with; this is what keeps dates
    # (2024-03-15, 15.03.2024), year ranges (1990-2000), prices (1'234.50, 1,299.00), postal codes
    # (8001), ISBNs (978-3-16-148410-0, 0-306-40615-2), versions and plain integers out:
    r"(?:"
    r"(?:\+|00)[1-9][0-9]*+"  # international: +41 ..., 0041 ...
    r"|\(\+[1-9][0-9]{0,2}\)"  # country code in parentheses: (+41) 44 ...
    r"|\((?:0[0-9]{1,4}|[1-9][0-9]{1,2})\)"  # area code in parentheses: (044), (555), (11)
    r"|0[1-9][0-9]*+"  # national trunk prefix 0 and an area code: 044, 030, 06
    # The Russian trunk prefix 8 and the North American 1 before an area code: 8 (495) ...,
    # 1 (800) ...
    rf"|[18]{_SPACE}?\([0-9]{{3,5}}\)"
    r")"
    # Then digit groups, each after one separator ("(0)" and "(555)" may be followed directly,
    # "(0)" may follow directly: "+44(0)20"); possessive, so a group sequence is never re-split
    # to find a shorter match inside it.
    rf"(?:(?:{_PHONE_SEP}|(?<=\)){_SPACE}?|(?=\())(?:\([0-9]{{1,5}}\)|[0-9]++)){{0,16}}+"
    rf"{_EXTENSION}?"
    # The number ends here: no letter or digit, and no further separated digit group (a long
    # table of numbers is not a phone number; it fails here rather than being cut in pieces).
    rf"(?![{_WORD}])(?!{_PHONE_SEP}[0-9])"
    # North American numbers without a country code have no distinctive prefix, so only their
    # exact shape with one kind of separator: 555-123-4567, 555.123.4567, 555 123 4567,
    # 1-800-555-0199.
    r"|(?:1[\-. ])?[2-9][0-9]{2}(?P<nanp_sep>[\-. ])[0-9]{3}(?P=nanp_sep)[0-9]{4}"
    rf"{_EXTENSION}?"
    rf"(?![{_WORD}])(?![\-.][0-9])"
    # Any other number of a phone number's shape is one only when a phone word announces it
    # ("Teléfono: 612 345 678", "Tel. 44 668 18 00"): checked by `_accept_phone`.
    # Not after a thousands mark, and with spaces or hyphens only: a rejected candidate hides
    # what it covers, and "1'234.50 044 668 18 00" holds a number of the first branch.
    rf"|(?<!['\u2019])"
    r"(?P<bare>[1-9][0-9]{0,4}(?:[ \u00a0\-][0-9]{2,5}){1,5}+|[1-9][0-9]{7,11})"
    rf"{_EXTENSION}?"
    rf"(?![{_WORD}])(?!{_PHONE_SEP}[0-9])"
    r")"
)

_PHONE_SEPARATORS = re.compile(rf"{_SPACE}|[\-./]|\)|\(")
_EXTENSION_AT_END = re.compile(rf"{_EXTENSION}\Z")
# Day/month/year in any order a date is written with one separator repeated: "03/15/2024",
# "15.03.2024", "01 02 2024", "05-06-24".
_DATE = re.compile(r"([0-9]{1,2})([./\- ])([0-9]{1,2})\2([0-9]{4}|[0-9]{2})")
# Numbers of other kinds with a phone number's digits, separators and prefixes:
# US ZIP+4 codes (02139-4307), ISSNs (0317-8471, 2049-363X), MAC addresses written with
# hyphens (08-00-27-12-34-56). After a phone word they are read as phone numbers.
_NOT_PHONE_SHAPES = re.compile(
    r"[0-9]{5}-[0-9]{4}|[0-9]{4}-[0-9]{3}[0-9Xx]|[0-9]{2}([\-:. ])[0-9]{2}(?:\1[0-9]{2}){4}"
)
# Year ranges are never phone numbers, whatever word precedes them ("Tel Aviv 2019-2023").
_YEAR_RANGE = re.compile(r"(?:1[89]|20)[0-9]{2}[\-/](?:(?:1[89]|20)?[0-9]{2})")
# An amount or a count follows: "+12 345 678 €", "+1 234 567 USD", "+3 120 000 people".
_AMOUNT_AFTER = re.compile(
    rf"{_SPACE}?(?:[€$£¥₽₹₩%‰]|[A-Z]{{3}}(?![A-Za-z])"
    r"|(?:k?m[²2]?|kg|t|mi|ft|people|persons|inhabitants|Einwohner|habitants|habitantes"
    r"|euros?|Euro|dollars?|francs?|rubles?|yuan|yen|users|views|votes|tonnes|tons)\b)"
)


def _looks_like_date(candidate: str) -> bool:
    m = _DATE.fullmatch(candidate)
    if not m:
        return False
    a, b, year = int(m.group(1)), int(m.group(3)), m.group(4)
    plausible_year = len(year) == 2 or 1000 <= int(year) <= 2999
    return plausible_year and 1 <= a <= 31 and 1 <= b <= 31 and min(a, b) <= 12


def _phone_ok(candidate: str, announced: bool = False) -> bool:
    if candidate.startswith("(+"):
        candidate = candidate[1:].replace(")", "", 1)
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
        # North America (+1) has ten digits after the country code, always.
        if candidate.lstrip("+0").startswith("1") and national != 11:
            return False
        # A signed number grouped in thousands: "+12 345 678", "+3 120 000".
        groups = re.split(r"[^0-9]+", candidate.lstrip("+"))
        if 2 <= len(groups) <= 3 and all(len(g) == 3 for g in groups[1:]):
            return False
    elif candidate[0] in "123456789" and not announced:
        # Only "8 (495) ..." and "1 (800) ...": other bare starts need a phone word.
        if candidate[0] not in "18" or "(" not in candidate[:3]:
            return False
        if not (10 if candidate[0] == "8" else 11) <= digits <= 11:
            return False
    else:
        # Unspaced digit strings are usually IDs, zip+4 codes, article or account numbers; a
        # national number is written with at least one separator, unless a phone word says so.
        if not separators and "(" not in candidate and not (announced and digits >= 8):
            return False
        if not (6 if announced else 7) <= digits <= 15:
            return False
    # Dots do not mix with other separators in a phone number; they do in opening hours
    # ("09.00-17.00") and decimal ranges.
    if "." in separators and any(s != "." for s in separators):
        return False
    # Nor do slashes with hyphens: "555-123-4567 24/7" is a number and a time of service.
    if "/" in separators and "-" in separators:
        return False
    if _YEAR_RANGE.fullmatch(candidate):
        return False
    if _NOT_PHONE_SHAPES.fullmatch(candidate) and not announced:
        return False
    return not _looks_like_date(candidate)


# The number's last group runs on into another number: "12:30", "1'234.50", "1,299.00".
_RUNS_ON = re.compile(r"[:'\u2019,][0-9]")
_LAST_SPACE = re.compile(rf"{_SPACE}(?=[^ \u00a0\u2009\u202f]*\Z)")


def _split_last_token(candidate: str) -> tuple[str, str] | None:
    m = _LAST_SPACE.search(candidate)
    return None if m is None else (candidate[: m.start()], candidate[m.end() :])


def _accept_phone(match: re.Match[str]) -> int | None:
    end = match.end("pii")
    candidate = match.group("pii")
    # Only a signed or an unprefixed number can be an amount; "044 668 18 00 CHF" is a number
    # and a word that follows it.
    if candidate[0] in "+123456789" and _AMOUNT_AFTER.match(match.string, end):
        return None
    extension = _EXTENSION_AT_END.search(candidate)
    if extension:
        # The extension is part of the span; the checks read the number before it.
        candidate = candidate[: extension.start()]
    if match.group("nanp_sep"):
        return end
    start = match.start("pii")
    announced = _ANNOUNCED.search(match.string, max(0, start - 24), start) is not None
    if match.group("bare") and not announced:
        return None
    # A phone number written before another number ("044 668 18 00 15.03.2024", "... 12:30")
    # is read as one long candidate. Its last space-separated token is dropped when that token
    # is a number of its own: it runs on after the candidate, or it has inner separators (a
    # date, a range, a version). Plain trailing groups are never dropped: "02 03 04 05 06 07 08
    # 09" is a table of numbers, not a phone number followed by one.
    if not extension and _RUNS_ON.match(match.string, end):
        split = _split_last_token(candidate)
        if split is None:
            return None
        candidate = split[0]
    elif extension:
        return end if _phone_ok(candidate, announced) else None
    while not _phone_ok(candidate, announced):
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
