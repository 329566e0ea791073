"""Authored text banks of the sample corpus (apertus.data.sample_corpus).

One module per natural language, named by its fastText lid.176 code, each holding the same names:

  TOPICS       topic -> natural sentences (8 topics x 12 sentences), the material of clean pages
  TITLES       topic -> page titles
  SECTIONS     topic -> ASCII URL path segment of that topic on the made-up sites
  TOXIC        abusive sentences (generic insults, no slurs, nothing about protected groups)
  BOILERPLATE  cookie banner, navigation menu, "read more" and footer strings
  SPAM         shop keywords for keyword-stuffed pages
  PII          sentence templates carrying an email, phone numbers, an IPv4/IPv6 address, an IBAN
  LOOKALIKES   sentence templates carrying versions, dates, prices, ISBNs, times, postal codes
  FOOTER       the one-line footer appended to some near-duplicates
  LOCALE       country, mail names, postal codes and cities, date and price formats, ISBN group

`code` holds the code snippets (templates of a few programming languages).
Everything here was written for this project; nothing is downloaded or copied from a corpus.
"""

from __future__ import annotations

from types import ModuleType

from . import de, el, en, es, fr, it, nl, pl, pt, rm, ru, sv

BANKS: dict[str, ModuleType] = {
    "en": en,
    "de": de,
    "fr": fr,
    "it": it,
    "rm": rm,
    "es": es,
    "pt": pt,
    "nl": nl,
    "pl": pl,
    "sv": sv,
    "ru": ru,
    "el": el,
}

TOPIC_NAMES = (
    "travel",
    "cooking",
    "science",
    "local_news",
    "technology",
    "history",
    "sport",
    "nature",
)

# The classic placeholder text: filler that quality filters should drop (C4 drops any page
# containing "lorem ipsum"). Pages are drawn from these words, so no two are identical.
LOREM_OPENING = "Lorem ipsum dolor sit amet, consectetur adipiscing elit."
LOREM_WORDS = (  # noqa: SIM905 (a paragraph reads better than 90 quoted words)
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris "
    "nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse "
    "cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui "
    "officia deserunt mollit anim id est laborum curabitur pretium tincidunt lacus nulla gravida "
    "orci a odio nullam varius turpis et commodo pharetra"
).split()

# Lines of symbols, the decoration of low-quality pages (Gopher counts "#" and ellipses per word).
SYMBOL_LINES = (
    "##########",
    "# # # # # # # #",
    "* * * * * * * *",
    "==========",
    "~~~~~~~~~~",
    "... ... ... ...",
    "…… …… ……",
    ">>>>>>>>>>",
    "#### #### ####",
    "§§§ ¤¤¤ §§§ ¤¤¤",
)


def check_banks() -> None:
    """Raise ValueError naming the first bank that lacks a name or has too few sentences."""
    required = ("TOPICS", "TITLES", "SECTIONS", "TOXIC", "BOILERPLATE", "SPAM", "PII")
    required += ("LOOKALIKES", "FOOTER", "LOCALE")
    for code, bank in BANKS.items():
        for name in required:
            if not hasattr(bank, name):
                raise ValueError(f"text bank {code!r} has no {name}")
        if set(bank.TOPICS) != set(TOPIC_NAMES) or set(bank.TITLES) != set(TOPIC_NAMES):
            raise ValueError(f"text bank {code!r} does not cover the topics {TOPIC_NAMES}")
        sentences = [s for topic in TOPIC_NAMES for s in bank.TOPICS[topic]]
        if len(set(sentences)) < 80:
            raise ValueError(f"text bank {code!r} has {len(set(sentences))} distinct sentences")
