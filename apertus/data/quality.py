"""Heuristic quality filters per language: datatrove's Gopher, C4 and FineWeb rules (RECIPE.md §5).

FineWeb-2, whose filtered data Apertus inherits, runs FineWeb's heuristic families on every
language with the word tokenizer of that language. `HeuristicQualityFilter` does the same for
one family per instance (the pipeline chains the four, so the funnel shows what each removes):

``gopher_repetition``  `GopherRepetitionFilter`: duplicated lines, paragraphs and n-grams
                       (Gopher, Rae et al. 2021, table A1).
``gopher_quality``     `GopherQualityFilter`: word count, mean word length, ``#``/ellipsis per
                       word, bullet and ellipsis lines, words without letters, stop words.
``c4``                 `C4QualityFilter`: lorem ipsum, curly brackets, fewer than 5 sentences;
                       **edits the text** of documents it keeps (see below).
``fineweb``            `FineWebQualityFilter`: lines ending in punctuation, short lines,
                       duplicated line characters, newlines per word.

Language. Each document's ``metadata["language"]`` (set by `LanguageTagger`) picks the word
tokenizer through datatrove's table (``datatrove/assets/tokenizer_assignment.csv``), which
accepts ft176 labels (``de``) and GlotLID labels (``deu_Latn``). Most languages use
``spacy.blank(<code>)``, which needs no model download; some use a related language as a proxy
(Romansh ``rm``/``roh_Latn`` -> French, Swiss German ``gsw`` -> German, many small languages ->
spaCy's multilingual ``xx``). Some need packages that are not installed here (Japanese:
sudachipy, Korean: kiwipiepy, Thai: pythainlp, Hindi, Maltese, Galician...: stanza); 137 of the
178 two-letter codes in the table work here, including every project language (en de fr it es
pt nl pl sv ru el uk tr rm). A language without a usable tokenizer, or outside `languages`,
passes through unchanged (stat ``skipped_<language>``) instead of being judged with a wrong
tokenizer. All four families need only the word/sentence tokenizer, so they support the same
languages. Caveat: the table sends ft176's ``zh`` to ``xx``, which does not segment Chinese
(whole clauses become "words"), so list the languages to judge in `languages` in real runs.

Defaults that differ from datatrove's, and why:

* ``gopher_quality``: Gopher's stop-word rule ("at least 2 of the, be, to, of, and, that, have,
  with") would drop every non-English document. As FineWeb-2 did, each language gets its own
  list of very frequent function words (`GOPHER_STOP_WORDS`, about ten per language, hand-picked
  in Gopher's spirit); for a language without a list the stop-word rule is switched off
  (stat ``stop_words_unavailable_<language>``) rather than applied with English words. The option
  ``stop_words`` may be a list (all languages) or a mapping language -> list (merged over
  `GOPHER_STOP_WORDS`). The other thresholds are Gopher's: FineWeb-2 tuned them per language from
  corpus statistics that are not reproduced here; override them with `options`.
* ``c4``: ``filter_no_terminal_punct`` is off, as in FineWeb: C4's rule keeps only lines ending
  in ``. ? ! " '`` and would strip lines ending in ``»``, ``“``, ``;`` (Greek question mark) or
  in scripts with other full stops.

What ``c4`` does to the text it keeps (datatrove's C4QualityFilter, kept as is: FineWeb ran its
own filter on the text C4 had edited): it removes lines with fewer than 3 words (headings, menu
items, blank lines, so paragraph breaks collapse to single newlines), lines mentioning
"javascript", lines with English cookie/terms-of-use phrases, lines with a word over 1000
characters, and ``[1]``/``[edit]``-style citation marks; the kept lines are joined with ``\\n``.
Line removals are counted in this block's stats (``line-filter-<reason>``, ``line-kept``).

Drops are counted per reason as ``dropped_<family>:<datatrove reason>`` (e.g.
``dropped_gopher_quality:gopher_short_doc``) and per language (``dropped_language_<language>``);
judged documents as ``checked_<language>``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.filters.base_filter import BaseFilter, get_filter_result
from datatrove.pipeline.writers.disk_base import DiskWriter
from datatrove.utils.word_tokenizers import (
    SpaCyTokenizer,
    WordTokenizer,
    load_tokenizer_assignments,
    load_word_tokenizer,
    strip_strings,
)

from apertus.core import ApertusError

logger = logging.getLogger("apertus.data.quality")

HEURISTIC_FAMILIES = ("gopher_repetition", "gopher_quality", "c4", "fineweb")

_FAMILY_FILTERS: dict[str, type[BaseFilter]] = {
    "gopher_repetition": GopherRepetitionFilter,
    "gopher_quality": GopherQualityFilter,
    "c4": C4QualityFilter,
    "fineweb": FineWebQualityFilter,
}

# Our defaults where they differ from datatrove's (reasons in the module docstring).
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gopher_repetition": {},
    "gopher_quality": {},
    "c4": {"filter_no_terminal_punct": False},
    "fineweb": {},
}

# Set per document by this block, not by the user.
_RESERVED_OPTIONS = frozenset({"self", "exclusion_writer", "language"})

# Gopher's rule needs >= 2 distinct stop words; the lists hold the most frequent function words
# of each language, like Gopher's English list (which is kept verbatim). Keyed by ISO 639-1
# code; ISO 639-3 and GlotLID labels are mapped onto these keys by `_stop_word_key`.
GOPHER_STOP_WORDS: dict[str, tuple[str, ...]] = {
    "en": ("the", "be", "to", "of", "and", "that", "have", "with"),
    "de": ("der", "die", "und", "in", "den", "von", "zu", "das", "mit", "ist"),
    "fr": ("de", "la", "le", "et", "les", "des", "en", "un", "une", "est", "que", "du"),
    "it": ("di", "e", "il", "la", "che", "per", "un", "in", "del", "non", "è"),
    "es": ("de", "la", "que", "el", "en", "y", "los", "del", "se", "las", "por", "un"),
    "pt": ("de", "a", "o", "que", "e", "do", "da", "em", "um", "para", "não", "os"),
    "nl": ("de", "het", "een", "en", "van", "is", "dat", "op", "te", "in", "niet"),
    "pl": ("i", "w", "na", "z", "się", "nie", "do", "to", "że", "jest"),
    "sv": ("och", "i", "att", "det", "som", "en", "på", "är", "av", "för"),
    # Cyrillic and Greek letters that look Latin are meant (RUF001).
    "ru": ("и", "в", "не", "на", "что", "с", "по", "как", "это", "к"),  # noqa: RUF001
    "uk": ("і", "в", "на", "що", "не", "з", "та", "до", "у", "як"),  # noqa: RUF001
    "el": ("και", "το", "να", "η", "της", "του", "την", "σε", "που", "με", "ο", "τα"),  # noqa: RUF001
    "tr": ("ve", "bir", "bu", "da", "de", "için", "ile", "çok", "gibi", "daha"),
    # Rumantsch Grischun.
    "rm": ("da", "il", "la", "e", "en", "ils", "las", "che", "è", "per", "cun", "ina"),
}

_ISO639_3_TO_1 = {
    "eng": "en",
    "deu": "de",
    "fra": "fr",
    "ita": "it",
    "spa": "es",
    "por": "pt",
    "nld": "nl",
    "pol": "pl",
    "swe": "sv",
    "rus": "ru",
    "ukr": "uk",
    "ell": "el",
    "tur": "tr",
    "roh": "rm",
}


def _stop_word_key(language: str) -> str:
    """``deu_Latn`` / ``deu`` / ``de`` -> ``de``."""
    base = language.split("_", 1)[0]
    return _ISO639_3_TO_1.get(base, base)


def family_option_names(family: str) -> frozenset[str]:
    """The constructor options of `family`'s datatrove filter that `options` may set."""
    if family not in _FAMILY_FILTERS:
        raise ValueError(
            f"unknown heuristic family {family!r}; allowed: {', '.join(HEURISTIC_FAMILIES)}"
        )
    params = inspect.signature(_FAMILY_FILTERS[family].__init__).parameters
    return frozenset(params) - _RESERVED_OPTIONS


@functools.cache
def word_tokenizer_available(language: str) -> bool:
    """Whether datatrove can word-tokenize `language` here, offline (probed once per process)."""
    try:
        load_word_tokenizer(language).word_tokenize("probe")
    except (ValueError, ImportError, OSError) as e:
        # ValueError: no tokenizer assigned; ImportError/OSError: its package or data is missing.
        logger.warning("no word tokenizer for language %r here (%s): passed through", language, e)
        return False
    return True


# Word entries (lexemes) a warm spaCy vocabulary may gain before it is rebuilt empty: about 1 KB
# each, so ~100 MB per language and process. Web text brings new strings (numbers, names, typos)
# without end; the bound keeps memory flat, and a rebuild costs ~20-50 ms.
WARM_VOCABULARY_LIMIT = 100_000
# The same bound for all the warm vocabularies of one process together: a data_filter task can
# meet many languages (a source over all of FineWeb-2's folders). Past it, the vocabulary that
# grew most is rebuilt empty.
WARM_TOTAL_LIMIT = 400_000


class WarmSpacyTokenizer(SpaCyTokenizer):
    """datatrove's `SpaCyTokenizer` with the same spaCy calls and results, minus its per-call
    ``memory_zone()``: that zone frees every word entry (lexeme) and every cached split a call
    created, so each token of each call was built again from scratch. Here they stay, so a word
    seen before costs a cache lookup (about 10x faster on the sample corpus).

    Memory stays bounded: a vocabulary that has gained more than `vocabulary_limit` entries is
    rebuilt empty, and so is the one that gained most when all of a process's warm vocabularies
    together have gained more than `total_limit` (both counted in `rebuilds`). Tokenization does
    not depend on what a vocabulary holds, so results never change. One difference: a text
    containing ``IS_ALPHA`` (a spaCy attribute name) gets its real sentences here, where
    datatrove's zone returns other strings.
    """

    _live: ClassVar[weakref.WeakSet] = weakref.WeakSet()  # this process's warm tokenizers
    _gained_total: ClassVar[int] = 0

    def __init__(
        self,
        language: str,
        vocabulary_limit: int = WARM_VOCABULARY_LIMIT,
        total_limit: int = WARM_TOTAL_LIMIT,
    ):
        super().__init__(language)
        self.vocabulary_limit, self.total_limit = vocabulary_limit, total_limit
        self.rebuilds = 0
        self.gained = 0  # entries gained since the vocabulary was (re)built
        self._fresh = 0
        WarmSpacyTokenizer._live.add(self)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the module may be gone
            WarmSpacyTokenizer._gained_total -= getattr(self, "gained", 0)

    def _rebuild(self) -> None:
        WarmSpacyTokenizer._gained_total -= self.gained
        self._tokenizer, self.gained = None, 0
        self.rebuilds += 1

    def _nlp(self, text: str):
        if self.gained > self.vocabulary_limit:
            self._rebuild()
        if WarmSpacyTokenizer._gained_total > self.total_limit:
            max(WarmSpacyTokenizer._live, key=lambda t: t.gained)._rebuild()
        if self._tokenizer is None:  # the `tokenizer` property builds spacy.blank(language)
            self._fresh = len(self.tokenizer.vocab)
        self.tokenizer.max_length = len(text) + 10
        docs = self._do_tokenize(text)
        gained = len(self._tokenizer.vocab) - self._fresh
        WarmSpacyTokenizer._gained_total += gained - self.gained
        self.gained = gained
        return docs

    def word_tokenize(self, text: str) -> list[str]:
        return strip_strings([token.text for doc in self._nlp(text) for token in doc])

    def sent_tokenize(self, text: str) -> list[str]:
        return strip_strings([sent.text for doc in self._nlp(text) for sent in doc.sents])

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for doc in self._nlp(text):
            start = spans[-1][1] if spans else 0
            spans.extend((start + sent.start_char, start + sent.end_char) for sent in doc.sents)
        return spans


@functools.cache
def word_tokenizer(language: str) -> WordTokenizer:
    """datatrove's word tokenizer for `language`, warm (`WarmSpacyTokenizer`) where it is a plain
    ``spacy.blank``; one per language and process, shared by the four heuristic families.
    Japanese, Chinese and Vietnamese (spaCy with an extra segmenter) and the non-spaCy tokenizers
    stay datatrove's own."""
    tokenizer = load_word_tokenizer(language)
    if type(tokenizer) is SpaCyTokenizer and tokenizer.config is None:
        return WarmSpacyTokenizer(tokenizer.language)
    return tokenizer


class HeuristicQualityFilter(BaseFilter):
    """One family of datatrove's heuristic quality rules, applied with each document's language.

    Drops what the chosen family drops (reason ``<family>:<datatrove reason>``, e.g.
    ``c4:curly_bracket``); documents whose text is empty or only whitespace are dropped as
    ``<family>:empty``. Documents in languages that are not enabled (outside `languages`, or
    without a word tokenizer here) pass unchanged, counted as ``skipped_<language>``. The
    ``c4`` family edits the text of the documents it keeps (module docstring).

    Args:
        family: one of `HEURISTIC_FAMILIES`.
        languages: the language labels to judge (in the tagger's label space); None judges every
            language that has a word tokenizer here.
        options: constructor options of the family's datatrove filter, overriding
            `FAMILY_DEFAULTS` for every language; unknown names raise ValueError.
        exempt_kinds: source kinds that pass unjudged (stat ``exempt``): the rules are made for
            prose, and would drop code and formulas for their symbols and short lines.
        exclusion_writer: where dropped documents are written, with their reason.

    A document without ``metadata["language"]`` means `LanguageTagger` did not run upstream, a
    pipeline mistake: it raises `ApertusError`.
    """

    name = "🥇 heuristic quality"

    def __init__(
        self,
        family: str,
        languages: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
        exempt_kinds: Sequence[str] = (),
        exclusion_writer: DiskWriter | None = None,
    ):
        self.exempt_kinds = frozenset(exempt_kinds)
        allowed = family_option_names(family)
        # Set before the base class names the stats, so the chained blocks read apart in logs.
        self.name = f"{type(self).name} ({family})"
        super().__init__(exclusion_writer)
        options = dict(options or {})
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(unknown)} for heuristic family {family!r}; "
                f"allowed: {', '.join(sorted(allowed))}"
            )
        stop_words = options.get("stop_words")
        if stop_words is not None:
            _check_stop_words(stop_words)
        if isinstance(languages, str):
            raise ValueError(f"languages must be a list of labels, not the string {languages!r}")
        if languages is not None:
            if len(languages) == 0:
                raise ValueError("languages is empty; pass None to judge every language")
            known = load_tokenizer_assignments()
            strange = sorted(set(languages) - set(known))
            if strange:
                raise ValueError(
                    f"language label(s) {', '.join(strange)} are unknown to datatrove's tokenizer "
                    "table (datatrove/assets/tokenizer_assignment.csv); use the tagger's labels, "
                    "e.g. 'de' (ft176) or 'deu_Latn' (GlotLID)"
                )
        self.family = family
        self.options = options
        self.languages = frozenset(languages) if languages is not None else None
        self._filters: dict[str, BaseFilter] = {}
        self._without_stop_words: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        # The per-language filters are rebuilt in each worker.
        state = self.__dict__.copy()
        state["_filters"] = {}
        state["_without_stop_words"] = set()
        return state

    def enabled(self, language: str) -> bool:
        """Whether documents in `language` are judged (else they pass through)."""
        if self.languages is not None and language not in self.languages:
            return False
        return word_tokenizer_available(language)

    def family_filter(self, language: str) -> BaseFilter:
        """The family's datatrove filter for `language`, built once per language."""
        inner = self._filters.get(language)
        if inner is None:
            kwargs = {**FAMILY_DEFAULTS[self.family], **self.options}
            if self.family == "gopher_quality":
                kwargs.update(self._stop_word_options(language))
            inner = _FAMILY_FILTERS[self.family](language=word_tokenizer(language), **kwargs)
            # The inner filter's own counters (C4's line removals) belong to this block.
            inner.stat_update = self.stat_update
            self._filters[language] = inner
        return inner

    def _stop_word_options(self, language: str) -> dict[str, Any]:
        chosen = self.options.get("stop_words")
        if isinstance(chosen, Mapping):
            words = chosen.get(language, chosen.get(_stop_word_key(language)))
        else:
            words = chosen
        if words is None:
            words = GOPHER_STOP_WORDS.get(_stop_word_key(language))
        if words is None:
            if self.options.get("min_stop_words", 2):
                logger.warning(
                    "no Gopher stop-word list for language %r: its stop-word rule is off", language
                )
                self._without_stop_words.add(language)
            return {"stop_words": [], "min_stop_words": None}
        return {"stop_words": list(words)}

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        if doc.metadata.get("kind") in self.exempt_kinds:
            self.stat_update("exempt")
            return True
        language = doc.metadata.get("language")
        if not isinstance(language, str) or not language:
            raise ApertusError(
                f"document {doc.id!r} has no language metadata (got {language!r}): put "
                "LanguageTagger before HeuristicQualityFilter"
            )
        if not self.enabled(language):
            self.stat_update(f"skipped_{language}")
            return True
        if not doc.text or not doc.text.strip():
            # Gopher's word-count ratios divide by the number of words.
            return False, f"{self.family}:empty"
        inner = self.family_filter(language)
        self.stat_update(f"checked_{language}")
        if language in self._without_stop_words:
            self.stat_update(f"stop_words_unavailable_{language}")
        kept, reason = get_filter_result(inner.filter(doc))
        if kept:
            return True
        self.stat_update(f"dropped_language_{language}")
        return False, f"{self.family}:{reason or 'dropped'}"


def _check_stop_words(stop_words: Any) -> None:
    lists = stop_words.values() if isinstance(stop_words, Mapping) else [stop_words]
    for words in lists:
        if not isinstance(words, list | tuple | set | frozenset) or not all(
            isinstance(w, str) for w in words
        ):
            raise ValueError(
                "option stop_words must be a list of words, or a mapping language -> list of "
                f"words; got {stop_words!r}"
            )
