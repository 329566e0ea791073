"""Model-based document scores and the per-language thresholds that turn them into filters.

RECIPE.md §5 uses two classifiers on XLM-R embeddings:

* quality (FineWeb-HQ / FineWeb-2-HQ): the mean-pooled embedding of a document's FIRST chunk of
  <= 512 tokens goes through an MLP 768 -> 256 -> ReLU -> 1 and a sigmoid; the top 33% (or 10%) of
  each language by score is kept;
* toxicity (9 languages): the mean-pooled embedding of EVERY chunk of <= 512 tokens goes through the
  language's MLP 768 -> 768 -> ReLU -> (dropout 0.2 at train time) -> 2; the softmax probability of
  class 1 ("toxic") is a chunk's score and the document's score is the max over its chunks; the top
  5% of each language is dropped. Not applied to edu/code/math sources.

Both are split into a scorer (:class:`ClassifierScorer`, writes ``quality_score`` /
``toxicity_score`` into the metadata) and a filter (:class:`ThresholdFilter`), because the cut is a
per-language quantile of the scores: :func:`compute_thresholds` turns a sample of scores into one
threshold per language in between.

Two backends score a document:

``xlmr``  the recipe's model (:class:`XLMRClassifier`): a Hugging Face encoder plus safetensors
          heads, given or trained in the pipeline on labelled data by :func:`train_xlmr_heads`.
``ngram`` the offline default (:class:`NgramClassifier`): logistic regression on hashed character
          and word n-grams, trained in the pipeline on labelled sample data by
          :func:`train_ngram_classifier` (CPU, seconds, no download). It follows the recipe's chunk
          rules on characters: quality scores the first ``chunk_chars`` characters, toxicity takes
          the max over all ``chunk_chars`` windows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from datatrove.data import Document, DocumentsPipeline
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.utils.typeshelper import StatHints

from apertus.core import ApertusError
from apertus.core.files import atomic_path, atomic_write_json

TASKS = ("quality", "toxicity")
BACKENDS = ("ngram", "xlmr")
KEEP_SIDES = ("top", "bottom")

# What label 1 means for each task; the classifiers return P(label 1).
LABEL_MEANING = {
    "quality": {"0": "low quality", "1": "high quality"},
    "toxicity": {"0": "non-toxic", "1": "toxic"},
    None: {"0": "negative", "1": "positive"},
}
# How a document's score is made from its chunks' scores (RECIPE.md §5): quality looks at the first
# chunk only, toxicity at the worst chunk.
AGGREGATE = {"quality": "first", "toxicity": "max", None: "first"}


def _check_task(task: str | None, *, allow_none: bool = False) -> None:
    if task is None and allow_none:
        return
    if task not in TASKS:
        raise ValueError(f"unknown classifier task {task!r}; allowed: {', '.join(TASKS)}")


class Classifier(Protocol):
    """What :class:`ClassifierScorer` needs from a backend."""

    def supports_language(self, language: str | None) -> bool: ...

    def score(
        self, texts: Sequence[str], languages: Sequence[str] | None = None
    ) -> list[float]: ...


# --------------------------------------------------------------------------------------------------
# Offline backend: hashed n-grams + logistic regression
# --------------------------------------------------------------------------------------------------

CHAR_NGRAMS = (1, 4)  # inclusive range of character n-gram lengths
WORD_NGRAMS = (1, 1)  # word unigrams
FEATURE_HASH = "poly64-splitmix64"
_WORD_RE = re.compile(r"\w+")
NGRAM_FORMAT_VERSION = 2
# The feature hash (see `feature_rows`): a polynomial hash of the code points modulo 2**64, so any
# substring's hash comes from two prefix sums, then splitmix64's finaliser to spread the bits.
_BASE = 1_000_003
_BASE_INVERSE = pow(_BASE, -1, 2**64)  # the base is odd, so it has an inverse modulo 2**64
_WORD_TAG = np.uint64(0x5851F42D4C957F2D)  # xor-ed into word hashes: a word is not a char n-gram
_U64 = np.uint64


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _powers(base: int, n: int) -> np.ndarray:
    """base**0 .. base**(n-1) modulo 2**64."""
    powers = np.full(n, base, dtype=np.uint64)
    powers[0] = 1
    return np.cumprod(powers, dtype=np.uint64)


def feature_rows(texts: Sequence[str], dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hashed n-gram features of each text as (row, column, value) arrays, rows sorted.

    Features: character 1..4-grams of the lower-cased text with whitespace collapsed to single
    spaces and one space added at each end, plus the text's words (``\\w+``). A feature's column
    is ``splitmix64(h) % dim`` with ``h = sum(code_point[j] * 1000003**j)`` over its characters
    modulo 2**64, xor-ed with a fixed tag for words; colliding features add up and each row is
    L2-normalised. Stable across processes (unlike Python's ``hash()``), so a saved model scores
    the same everywhere. All texts are hashed together in a handful of numpy passes: the hash of
    the substring ``[a, b)`` is ``(S[b] - S[a]) * 1000003**-a`` from the prefix sums ``S``.
    """
    if dim < 1:
        raise ValueError(f"dim must be positive, got {dim}")
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise ApertusError(f"text {row} is {type(text).__name__}, expected str")
    padded = [f" {' '.join(text.lower().split())} " for text in texts]
    joined = "".join(padded)
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    n = len(codes)
    lengths = np.fromiter(map(len, padded), dtype=np.int64, count=len(padded))
    ends = np.cumsum(lengths)
    text_of = np.repeat(np.arange(len(padded)), lengths)
    with np.errstate(over="ignore"):  # the arithmetic is modulo 2**64 on purpose
        inverse = _powers(_BASE_INVERSE, n + 1)
        prefix = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(codes.astype(np.uint64) * _powers(_BASE, n), out=prefix[1:])
        hashes, rows = [], []
        for size in range(CHAR_NGRAMS[0], CHAR_NGRAMS[1] + 1):
            starts = np.arange(max(n - size + 1, 0))
            starts = starts[starts + size <= ends[text_of[starts]]]  # not across two texts
            hashes.append((prefix[starts + size] - prefix[starts]) * inverse[starts])
            rows.append(text_of[starts])
        spans = [m.span() for m in _WORD_RE.finditer(joined)]
        words = np.array(spans, dtype=np.int64).reshape(-1, 2)
        starts, stops = words[:, 0], words[:, 1]
        hashes.append(((prefix[stops] - prefix[starts]) * inverse[starts]) ^ _WORD_TAG)
        rows.append(text_of[starts])
        columns = (_splitmix64(np.concatenate(hashes)) % _U64(dim)).astype(np.int64)
    keys, counts = np.unique(np.concatenate(rows) * dim + columns, return_counts=True)
    row, column = keys // dim, keys % dim
    norm = np.sqrt(np.bincount(row, weights=counts.astype(np.float64) ** 2, minlength=len(texts)))
    return row, column, counts / norm[row]


def featurize(texts: Sequence[str], dim: int = 2**18) -> torch.Tensor:
    """`feature_rows` as a coalesced sparse COO float32 tensor of shape ``(len(texts), dim)``."""
    row, column, value = feature_rows(texts, dim)
    indices = torch.from_numpy(np.stack([row, column]))
    values = torch.from_numpy(value.astype(np.float32))
    return torch.sparse_coo_tensor(
        indices, values, (len(texts), dim), check_invariants=True
    ).coalesce()


class _FeatureMemo:
    """The features of the last texts scored, so the quality and the toxicity scorer of one
    pipeline featurize each chunk once (the scorers run one after the other on the same
    documents). Bounded to `size` texts, oldest dropped first."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._rows: OrderedDict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def rows(self, texts: Sequence[str], dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(columns, values) of each text."""
        missing = list(dict.fromkeys(t for t in texts if (dim, t) not in self._rows))
        if missing:
            row, column, value = feature_rows(missing, dim)
            cuts = np.searchsorted(row, np.arange(1, len(missing)))
            for text, cols, vals in zip(
                missing, np.split(column, cuts), np.split(value, cuts), strict=True
            ):
                self._rows[(dim, text)] = (cols, vals)
        found = []
        for text in texts:
            self._rows.move_to_end((dim, text))
            found.append(self._rows[(dim, text)])
        while len(self._rows) > max(self.size, len(texts)):
            self._rows.popitem(last=False)
        return found


_FEATURES = _FeatureMemo()


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    # One thread makes the float reductions in training happen in one order: same seed, same bytes.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _stratified_split(
    labels: torch.Tensor, val_fraction: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffle each class and hold out `val_fraction` of it, keeping >= 1 of each class to train."""
    train_parts, val_parts = [], []
    for cls in (0, 1):
        idx = torch.nonzero(labels == cls).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_val = min(round(len(idx) * val_fraction), len(idx) - 1)
        if val_fraction > 0 and n_val == 0 and len(idx) > 1:
            n_val = 1
        val_parts.append(idx[:n_val])
        train_parts.append(idx[n_val:])
    return torch.cat(train_parts).sort().values, torch.cat(val_parts).sort().values


def _accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float(((logits > 0).float() == labels).float().mean())


def _check_examples(texts: Sequence[str], labels: Sequence[int], val_fraction: float) -> None:
    if len(texts) == 0:
        raise ApertusError("cannot train a classifier on no examples")
    if len(texts) != len(labels):
        raise ApertusError(f"{len(texts)} texts but {len(labels)} labels")
    bad = [label for label in labels if label not in (0, 1) or isinstance(label, bool)]
    if bad:
        raise ApertusError(f"labels must be 0 or 1, got {bad[0]!r}")
    classes = set(labels)
    if len(classes) < 2:
        raise ApertusError(f"need examples of both classes 0 and 1, got only class {classes.pop()}")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")


def train_ngram_classifier(
    texts: Sequence[str],
    labels: Sequence[int],
    out_dir: Path,
    *,
    seed: int,
    epochs: int = 20,
    dim: int = 2**18,
    val_fraction: float = 0.2,
    lr: float = 0.05,
    batch_size: int = 32,
    task: str | None = None,
    chunk_chars: int = 2000,
) -> dict[str, Any]:
    """Train the offline classifier: logistic regression on :func:`featurize` features.

    Labels are 0/1 (see ``LABEL_MEANING``: 1 = high quality / toxic). A stratified ``val_fraction``
    of each class is held out; the rest is trained with Adam on minibatches of ``batch_size``,
    reshuffled each epoch. Deterministic: the weights start at zero, the split and the shuffles
    use one ``torch.Generator`` seeded with ``seed``, and training runs on one thread, so the same
    inputs and seed write byte-identical weights.

    Writes ``out_dir/model.safetensors`` (``weight`` [dim], ``bias`` [1]) and
    ``out_dir/config.json`` (backend, features, task, chunk rule, metrics); returns the metrics.
    ``chunk_chars`` and ``task`` only affect scoring (see :class:`NgramClassifier`).
    """
    from safetensors.torch import save_file

    _check_task(task, allow_none=True)
    _check_examples(texts, labels, val_fraction)
    if epochs < 1 or batch_size < 1 or chunk_chars < 1:
        raise ValueError("epochs, batch_size and chunk_chars must be positive")

    with _single_thread():
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        x = featurize(texts, dim)
        y = torch.tensor(list(labels), dtype=torch.float32)
        train_idx, val_idx = _stratified_split(y, val_fraction, generator)
        x_train, y_train = x.index_select(0, train_idx), y[train_idx]

        weight = torch.zeros(dim, 1, requires_grad=True)
        bias = torch.zeros(1, requires_grad=True)
        optimizer = torch.optim.Adam([weight, bias], lr=lr)
        loss = torch.tensor(float("nan"))
        for _ in range(epochs):
            order = torch.randperm(len(train_idx), generator=generator)
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                logits = torch.sparse.mm(x_train.index_select(0, batch), weight).flatten() + bias
                loss = F.binary_cross_entropy_with_logits(logits, y_train[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        with torch.no_grad():
            train_logits = torch.sparse.mm(x_train, weight).flatten() + bias
            val_logits = torch.sparse.mm(x.index_select(0, val_idx), weight).flatten() + bias
    metrics = {
        "examples": len(texts),
        "train_examples": len(train_idx),
        "val_examples": len(val_idx),
        "positive_fraction": float(y.mean()),
        "train_accuracy": _accuracy(train_logits, y_train),
        "val_accuracy": _accuracy(val_logits, y[val_idx]) if len(val_idx) else None,
        "final_batch_loss": float(loss.detach()),
        "epochs": epochs,
        "seed": seed,
    }
    config = {
        "backend": "ngram",
        "format_version": NGRAM_FORMAT_VERSION,
        "dim": dim,
        "char_ngrams": list(CHAR_NGRAMS),
        "word_ngrams": list(WORD_NGRAMS),
        "hash": FEATURE_HASH,
        "normalisation": "l2",
        "task": task,
        "label_meaning": LABEL_MEANING[task],
        "chunk_chars": chunk_chars,
        "aggregate": AGGREGATE[task],
        "metrics": metrics,
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {"weight": weight.detach().flatten().contiguous(), "bias": bias.detach().clone()}
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_file(tensors, tmp, metadata={"backend": "ngram"})
    atomic_write_json(out_dir / "config.json", config)
    return metrics


class NgramClassifier:
    """The offline backend: P(label 1) from a logistic regression on hashed n-grams.

    A text is cut into windows of ``chunk_chars`` characters; with ``aggregate="first"`` (quality)
    only the first window is scored, with ``"max"`` (toxicity) the text's score is the highest
    window score, mirroring the XLM-R chunk rules. One model serves every language.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor,
        *,
        task: str | None,
        chunk_chars: int,
        aggregate: str,
    ) -> None:
        if aggregate not in ("first", "max"):
            raise ApertusError(f"unknown aggregate {aggregate!r}; allowed: first, max")
        self.weight = weight.reshape(-1, 1).float()
        self.bias = bias.reshape(1).float()
        self.dim = self.weight.shape[0]
        self._weight_array = self.weight.flatten().double().numpy()
        self._bias = float(self.bias)
        self.task = task
        self.chunk_chars = chunk_chars
        self.aggregate = aggregate

    @classmethod
    def load(cls, model_dir: str | Path, *, task: str | None = None) -> NgramClassifier:
        """Load what :func:`train_ngram_classifier` wrote; `task`, if given, must be the model's."""
        from safetensors.torch import load_file

        model_dir = Path(model_dir)
        config_path, weights_path = model_dir / "config.json", model_dir / "model.safetensors"
        for path in (config_path, weights_path):
            if not path.is_file():
                raise ApertusError(f"n-gram classifier file missing: {path}")
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ApertusError(f"{config_path} is not valid JSON: {e}") from e
        if config.get("backend") != "ngram":
            raise ApertusError(f"{config_path}: backend is {config.get('backend')!r}, not 'ngram'")
        if config.get("format_version") != NGRAM_FORMAT_VERSION or (
            tuple(config.get("char_ngrams", ())) != CHAR_NGRAMS
            or tuple(config.get("word_ngrams", ())) != WORD_NGRAMS
            or config.get("hash") != FEATURE_HASH
        ):
            raise ApertusError(
                f"{config_path}: features differ from this code's; retrain the model"
            )
        if task is not None and config.get("task") not in (None, task):
            raise ApertusError(
                f"{model_dir} is a {config['task']!r} classifier, asked to score {task!r}"
            )
        tensors = load_file(str(weights_path))
        if set(tensors) != {"weight", "bias"} or tensors["weight"].numel() != config["dim"]:
            raise ApertusError(
                f"{weights_path}: expected tensors weight [{config['dim']}] and bias [1], "
                f"got { ({k: list(v.shape) for k, v in tensors.items()}) }"
            )
        own_task = config.get("task")
        return cls(
            tensors["weight"],
            tensors["bias"],
            task=own_task if own_task is not None else task,
            chunk_chars=int(config["chunk_chars"]),
            aggregate=config["aggregate"],
        )

    def supports_language(self, language: str | None) -> bool:
        return True

    def _chunks(self, text: str) -> list[str]:
        size = self.chunk_chars
        if self.aggregate == "first" or len(text) <= size:
            return [text[:size]]
        return [text[i : i + size] for i in range(0, len(text), size)]

    def score(self, texts: Sequence[str], languages: Sequence[str] | None = None) -> list[float]:
        """P(label 1) for each text (`languages` is accepted for a common interface, unused)."""
        chunks: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            for chunk in self._chunks(text):
                chunks.append(chunk)
                owners.append(i)
        if not chunks:
            return []
        weight = self._weight_array
        logits = [float(vals @ weight[cols]) for cols, vals in _FEATURES.rows(chunks, self.dim)]
        probs = 1.0 / (1.0 + np.exp(-(np.asarray(logits) + self._bias)))
        scores = [-math.inf] * len(texts)
        for owner, p in zip(owners, probs.tolist(), strict=True):
            scores[owner] = max(scores[owner], p)
        return scores


# --------------------------------------------------------------------------------------------------
# Recipe backend: XLM-R embeddings + MLP heads
# --------------------------------------------------------------------------------------------------

# Tensor names of a head file: the state_dict of
#   torch.nn.Sequential(Linear(hidden, inner), ReLU(), Dropout(p), Linear(inner, out))
# which is how the Apertus data scripts define both heads (swiss-ai/pretrain-data:
# toxic_filter.RobertaClassifier.classifier, embeddings_filter.BinaryClassifier.classifier). A
# leading "classifier." (BinaryClassifier.state_dict()) is accepted too.
HEAD_TENSORS = ("0.weight", "0.bias", "3.weight", "3.bias")
HEAD_OUTPUTS = {"quality": 1, "toxicity": 2}


@dataclass(frozen=True)
class MLPHead:
    """Linear -> ReLU -> Linear; the training-time dropout is the identity at inference."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor

    @classmethod
    def load(cls, path: Path, *, hidden_size: int, outputs: int) -> MLPHead:
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(path))
        except Exception as e:  # safetensors raises its own error types for corrupt files
            raise ApertusError(f"cannot read classifier head {path}: {e}") from e
        tensors = {k.removeprefix("classifier."): v.float() for k, v in tensors.items()}
        missing = [name for name in HEAD_TENSORS if name not in tensors]
        if missing:
            raise ApertusError(
                f"classifier head {path} lacks tensors {missing}; expected {list(HEAD_TENSORS)}, "
                f"found {sorted(tensors)}"
            )
        w1, b1, w2, b2 = (tensors[name] for name in HEAD_TENSORS)
        inner = w1.shape[0]
        expected = {
            "0.weight": (inner, hidden_size),
            "0.bias": (inner,),
            "3.weight": (outputs, inner),
            "3.bias": (outputs,),
        }
        for name, tensor in zip(HEAD_TENSORS, (w1, b1, w2, b2), strict=True):
            if tuple(tensor.shape) != expected[name]:
                raise ApertusError(
                    f"classifier head {path}: {name} has shape {tuple(tensor.shape)}, expected "
                    f"{expected[name]} (encoder hidden size {hidden_size}, {outputs} output(s))"
                )
        return cls(w1, b1, w2, b2)

    def to(self, device: str) -> MLPHead:
        return MLPHead(*(t.to(device) for t in (self.w1, self.b1, self.w2, self.b2)))

    def __call__(self, embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(F.relu(F.linear(embeddings, self.w1, self.b1)), self.w2, self.b2)


def mean_pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token embeddings over non-padding positions (special tokens <s>, </s> included),
    as in the Apertus embedding annotator (sentence-transformers' mean pooling)."""
    mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
    return (hidden_states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class XLMREmbedder:
    """XLM-R chunk embeddings as the recipe's classifiers see them (RECIPE.md §5).

    A text is tokenized into chunks of at most ``max_tokens`` tokens INCLUDING the ``<s>`` and
    ``</s>`` that the tokenizer adds to each chunk (Hugging Face ``truncation`` with
    ``return_overflowing_tokens``, stride 0; the Apertus annotator's chunking). A chunk's embedding
    is the encoder's last hidden state mean-pooled over its non-padding tokens (:func:`mean_pool`).
    Task "quality" uses the first chunk only, "toxicity" every chunk. :class:`XLMRClassifier`
    scores these embeddings and :func:`train_xlmr_heads` trains its heads on them.

    ``encoder`` is a hub id (e.g. ``FacebookAI/xlm-roberta-base``; downloads) or a local directory
    (offline).
    """

    def __init__(
        self,
        encoder: str,
        task: str,
        *,
        max_tokens: int = 512,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        _check_task(task)
        if max_tokens < 3:
            raise ValueError(
                f"max_tokens must leave room for <s>, </s> and a token, got {max_tokens}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.task = task
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.device = device
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(encoder)
            self.encoder = AutoModel.from_pretrained(encoder).to(device).eval()
        except (OSError, ValueError) as e:
            raise ApertusError(f"cannot load encoder {encoder!r}: {e}") from e
        if not getattr(self.tokenizer, "is_fast", False):
            raise ApertusError(f"encoder {encoder!r} needs a fast tokenizer (tokenizer.json)")
        if self.tokenizer.pad_token_id is None:
            raise ApertusError(f"tokenizer of {encoder!r} has no pad token")

    @property
    def hidden_size(self) -> int:
        return int(self.encoder.config.hidden_size)

    def _chunk_ids(self, texts: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        first_only = self.task == "quality"
        encoded = self.tokenizer(
            list(texts),
            max_length=self.max_tokens,
            truncation=True,
            return_overflowing_tokens=not first_only,
        )
        ids = encoded["input_ids"]
        if first_only:
            return ids, list(range(len(texts)))
        if "overflow_to_sample_mapping" not in encoded:
            raise ApertusError("the tokenizer did not return overflow chunks")
        return ids, list(encoded["overflow_to_sample_mapping"])

    def embed_chunks(self, texts: Sequence[str]) -> tuple[torch.Tensor, list[int]]:
        """Mean-pooled embedding of each chunk the task uses, and the text each chunk belongs to."""
        ids, owners = self._chunk_ids(texts)
        hidden_size = self.encoder.config.hidden_size
        embeddings = torch.empty(len(ids), hidden_size)
        # Similar lengths together: less padding, and padding does not change a chunk's embedding.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        pad = self.tokenizer.pad_token_id
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                width = max(len(ids[i]) for i in batch)
                input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
                attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                    attention_mask[row, : len(ids[i])] = 1
                input_ids, attention_mask = (
                    input_ids.to(self.device),
                    attention_mask.to(self.device),
                )
                out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
                pooled = mean_pool(out.last_hidden_state.float(), attention_mask)
                embeddings[batch] = pooled.cpu()
        return embeddings, owners


class XLMRClassifier(XLMREmbedder):
    """The recipe's classifiers: XLM-R chunk embeddings (:class:`XLMREmbedder`) and an MLP head.

    task "quality": first chunk only; score = sigmoid(head(embedding)), head hidden -> 256 -> 1.
    task "toxicity": every chunk; chunk score = softmax(head(embedding))[1] ("toxic"), head
    hidden -> hidden -> 2; document score = max over its chunks.

    ``head`` is one safetensors file used for every language, or a directory of
    ``<language>.safetensors`` files (per-language heads, as for toxicity), named with the codes
    in ``doc.metadata["language"]``. Tensor names: see ``HEAD_TENSORS``.
    """

    def __init__(
        self,
        encoder: str,
        head: str | Path,
        task: str,
        *,
        max_tokens: int = 512,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        super().__init__(encoder, task, max_tokens=max_tokens, batch_size=batch_size, device=device)
        hidden_size = self.hidden_size
        outputs = HEAD_OUTPUTS[task]
        head = Path(head)
        if head.is_dir():
            files = sorted(head.glob("*.safetensors"))
            if not files:
                raise ApertusError(f"no <language>.safetensors heads in {head}")
            self.heads: dict[str | None, MLPHead] = {
                f.stem: MLPHead.load(f, hidden_size=hidden_size, outputs=outputs).to(device)
                for f in files
            }
            self.per_language = True
        elif head.is_file():
            shared = MLPHead.load(head, hidden_size=hidden_size, outputs=outputs)
            self.heads = {None: shared.to(device)}
            self.per_language = False
        else:
            raise ApertusError(f"classifier head not found: {head}")

    @property
    def languages(self) -> tuple[str, ...] | None:
        """Languages with their own head, or None when one head serves every language."""
        return tuple(k for k in self.heads if k is not None) if self.per_language else None

    def supports_language(self, language: str | None) -> bool:
        return not self.per_language or language in self.heads

    def score(self, texts: Sequence[str], languages: Sequence[str] | None = None) -> list[float]:
        """Quality: P(high quality) of the first chunk. Toxicity: max over chunks of P(toxic).

        With per-language heads, `languages` is required and each must have a head
        (check :meth:`supports_language` first).
        """
        if not texts:
            return []
        if self.per_language:
            if languages is None or len(languages) != len(texts):
                raise ApertusError("per-language heads need one language per text")
            unknown = sorted({str(lang) for lang in languages if lang not in self.heads})
            if unknown:
                raise ApertusError(
                    f"no {self.task} head for language(s) {unknown}; have {list(self.languages)}"
                )
        embeddings, owners = self.embed_chunks(texts)
        chunk_heads = [languages[o] if self.per_language else None for o in owners]
        chunk_scores = torch.empty(len(owners))
        with torch.inference_mode():
            for key in set(chunk_heads):
                rows = [i for i, k in enumerate(chunk_heads) if k == key]
                logits = self.heads[key](embeddings[rows].to(self.device)).float().cpu()
                chunk_scores[rows] = head_probability(self.task, logits)
        return document_scores(chunk_scores.tolist(), owners, len(texts))


def head_probability(task: str, logits: torch.Tensor) -> torch.Tensor:
    """A chunk's score from its head's logits: quality sigmoid(logit), toxicity P(class 1)."""
    if task == "quality":
        return torch.sigmoid(logits[:, 0])
    return torch.softmax(logits, dim=-1)[:, 1]


def document_scores(chunk_scores: Sequence[float], owners: Sequence[int], n: int) -> list[float]:
    """A text's score: the max over its chunks (quality has one chunk per text)."""
    scores = [-math.inf] * n
    for owner, s in zip(owners, chunk_scores, strict=True):
        scores[owner] = max(scores[owner], s)
    return scores


# Training the heads (RECIPE.md §5), as the Apertus data scripts define them: the encoder is frozen,
# only Sequential(Linear(hidden, inner), ReLU(), Dropout(0.2), Linear(inner, outputs)) is trained.
QUALITY_INNER = 256  # quality: hidden -> 256 -> 1; toxicity: hidden -> hidden -> 2
HEAD_DROPOUT = 0.2
QUALITY_HEAD_FILE = "head.safetensors"
ALL_LANGUAGES = "all"  # the metrics key of a head shared by every language (quality)


def trained_head(task: str, model_dir: str | Path) -> Path:
    """The `head` of :class:`XLMRClassifier` that :func:`train_xlmr_heads` wrote to `model_dir`:
    quality one file, toxicity the directory of ``<language>.safetensors``."""
    _check_task(task)
    model_dir = Path(model_dir)
    return model_dir / QUALITY_HEAD_FILE if task == "quality" else model_dir


def _head_module(task: str, hidden_size: int) -> torch.nn.Sequential:
    inner = QUALITY_INNER if task == "quality" else hidden_size
    return torch.nn.Sequential(
        torch.nn.Linear(hidden_size, inner),
        torch.nn.ReLU(),
        torch.nn.Dropout(HEAD_DROPOUT),
        torch.nn.Linear(inner, HEAD_OUTPUTS[task]),
    )


def _document_accuracy(
    task: str,
    head: MLPHead,
    embeddings: torch.Tensor,
    owners: Sequence[int],
    docs: torch.Tensor,
    labels: torch.Tensor,
) -> float | None:
    """Accuracy of the documents `docs` scored as :class:`XLMRClassifier` scores them (max over
    chunks of the chunk probability), a document counting as label 1 when its score is > 0.5."""
    if len(docs) == 0:
        return None
    wanted = {int(d): row for row, d in enumerate(docs.tolist())}
    rows = [i for i, o in enumerate(owners) if o in wanted]
    with torch.no_grad():
        probs = head_probability(task, head(embeddings[rows])).tolist()
    scores = document_scores(probs, [wanted[owners[i]] for i in rows], len(docs))
    predicted = torch.tensor([float(s > 0.5) for s in scores])
    return float((predicted == labels[docs]).float().mean())


def _train_head(
    task: str,
    embeddings: torch.Tensor,
    owners: Sequence[int],
    labels: torch.Tensor,
    docs: torch.Tensor,
    *,
    seed: int,
    epochs: int,
    val_fraction: float,
    lr: float,
    batch_size: int,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One head on the documents `docs` (indices into `labels`): a stratified `val_fraction` of
    the documents is held out; the examples are every chunk of a label-0 training document and
    the first chunk of a label-1 one (see :func:`train_xlmr_heads`)."""
    torch.manual_seed(seed)  # the initial weights and the dropout masks
    generator = torch.Generator().manual_seed(seed)
    local_train, local_val = _stratified_split(labels[docs], val_fraction, generator)
    train_docs, val_docs = docs[local_train], docs[local_val]
    in_train = set(train_docs.tolist())
    first_chunk: dict[int, int] = {}
    for i, owner in enumerate(owners):
        first_chunk.setdefault(owner, i)
    rows = torch.tensor(
        [
            i
            for i, o in enumerate(owners)
            if o in in_train and (labels[o] == 0 or i == first_chunk[o])
        ],
        dtype=torch.long,
    )
    x = embeddings[rows]
    y = labels[torch.tensor([owners[i] for i in rows.tolist()], dtype=torch.long)]
    module = _head_module(task, embeddings.shape[1])
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    loss = torch.tensor(float("nan"))
    module.train()
    for _ in range(epochs):
        order = torch.randperm(len(rows), generator=generator)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            logits = module(x[batch])
            if task == "quality":
                loss = F.binary_cross_entropy_with_logits(logits[:, 0], y[batch])
            else:
                loss = F.cross_entropy(logits, y[batch].long())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    module.eval()
    state = {name: t.detach().clone().contiguous() for name, t in module.state_dict().items()}
    head = MLPHead(*(state[name] for name in HEAD_TENSORS))
    metrics = {
        "documents": len(docs),
        "train_documents": len(train_docs),
        "val_documents": len(val_docs),
        "train_chunks": len(rows),
        "positive_fraction": float(labels[docs].mean()),
        "train_accuracy": _document_accuracy(task, head, embeddings, owners, train_docs, labels),
        "val_accuracy": _document_accuracy(task, head, embeddings, owners, val_docs, labels),
        "final_batch_loss": float(loss.detach()),
    }
    return state, metrics


def train_xlmr_heads(
    texts: Sequence[str],
    labels: Sequence[int],
    out_dir: Path,
    *,
    encoder: str,
    task: str,
    seed: int,
    languages: Sequence[str | None] | None = None,
    epochs: int = 20,
    val_fraction: float = 0.2,
    lr: float = 1e-3,
    batch_size: int = 32,
    min_per_class: int = 10,
    max_tokens: int = 512,
    embed_batch_size: int = 16,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train the MLP head(s) of the xlmr backend on frozen :class:`XLMREmbedder` embeddings.

    The texts are embedded exactly as :class:`XLMRClassifier` scores them (chunks of
    ``max_tokens`` tokens), and chunk embeddings are the examples, labelled 0/1 as
    ``LABEL_MEANING`` says. Quality: the first (only scored) chunk of each document. Toxicity:
    EVERY chunk of a non-toxic document is a non-toxic example (none of it is toxic), but only the
    FIRST chunk of a toxic document is a toxic example: its label says that some part is toxic,
    not every chunk, and labelling its clean chunks toxic would teach the head that clean text is
    toxic, which the max over chunks then turns into flagged clean documents (the first chunk is
    what a training truncated to 512 tokens sees; ToxicCommons' texts are mostly one chunk).
    The held-out accuracy scores the held-out documents as the filter does: toxicity takes the
    max over ALL their chunks. Quality trains one head for every language
    (hidden -> 256 -> 1, sigmoid, binary cross-entropy); toxicity one head per language of
    `languages` (hidden -> hidden -> 2, cross-entropy), a language with fewer than
    `min_per_class` examples of either class gets no head (listed under ``skipped``; the scorer
    then passes its documents unscored). Both heads use ReLU and dropout 0.2.

    Per head, a stratified ``val_fraction`` of the DOCUMENTS is held out (no chunk of a held-out
    document is trained on) and the accuracies are the documents' (score > 0.5 against the label,
    the score made as the classifier makes it). Deterministic: the split, shuffles, initial weights
    and dropout come from ``seed`` and training runs on one thread, so the same inputs, seed and
    torch thread count write byte-identical heads (the embedding runs on the caller's threads,
    and the last bits of a float reduction in the encoder depend on their number).

    Writes the heads with the tensor names of ``HEAD_TENSORS`` where :func:`trained_head` says
    (``out_dir/head.safetensors``, or ``out_dir/<language>.safetensors``) and
    ``out_dir/config.json`` (task, encoder, chunking, architecture, metrics); returns the metrics.
    """
    from safetensors.torch import save_file

    _check_task(task)
    _check_examples(texts, labels, val_fraction)
    if languages is not None and len(languages) != len(texts):
        raise ApertusError(f"{len(texts)} texts but {len(languages)} languages")
    if task == "toxicity" and (languages is None or any(not lang for lang in languages)):
        raise ApertusError(
            "toxicity heads are trained per language: every example needs a `language`"
        )
    if epochs < 1 or batch_size < 1 or min_per_class < 1:
        raise ValueError("epochs, batch_size and min_per_class must be positive")

    embedder = XLMREmbedder(
        encoder, task, max_tokens=max_tokens, batch_size=embed_batch_size, device=device
    )
    embeddings, owners = embedder.embed_chunks(texts)
    y = torch.tensor(list(labels), dtype=torch.float32)
    if task == "quality":
        groups = {ALL_LANGUAGES: list(range(len(texts)))}
    else:
        groups = {}
        for i, lang in enumerate(languages or ()):
            groups.setdefault(str(lang), []).append(i)
    heads: dict[str, dict[str, torch.Tensor]] = {}
    head_metrics: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    with _single_thread():
        for key in sorted(groups):
            docs = torch.tensor(groups[key], dtype=torch.long)
            counts = [int((y[docs] == cls).sum()) for cls in (0, 1)]
            if min(counts) < min_per_class:
                skipped[key] = (
                    f"{counts[0]} examples of class 0 and {counts[1]} of class 1; "
                    f"needs {min_per_class} of each"
                )
                continue
            heads[key], head_metrics[key] = _train_head(
                task,
                embeddings,
                owners,
                y,
                docs,
                seed=seed,
                epochs=epochs,
                val_fraction=val_fraction,
                lr=lr,
                batch_size=batch_size,
            )
    if not heads:
        raise ApertusError(f"no {task} head trained: {skipped}")
    metrics = {
        "examples": len(texts),
        "chunks": len(owners),
        "heads": head_metrics,
        "skipped": skipped,
        "epochs": epochs,
        "seed": seed,
    }
    config = {
        "backend": "xlmr",
        "task": task,
        "encoder": encoder,
        "max_tokens": max_tokens,
        "chunks": "first" if task == "quality" else "all",
        "aggregate": AGGREGATE[task],
        "label_meaning": LABEL_MEANING[task],
        "head": {
            "hidden": embedder.hidden_size,
            "inner": QUALITY_INNER if task == "quality" else embedder.hidden_size,
            "outputs": HEAD_OUTPUTS[task],
            "activation": "relu",
            "dropout": HEAD_DROPOUT,
            "tensors": list(HEAD_TENSORS),
        },
        "training": {
            "examples": "every chunk of a label-0 document, the first chunk of a label-1 one",
            "optimizer": "adam",
            "lr": lr,
            "batch_size": batch_size,
            "val_fraction": val_fraction,
            "min_per_class": min_per_class,
        },
        "metrics": metrics,
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.safetensors"):  # a language no longer in the labels
        stale.unlink()
    for key, state in heads.items():
        path = trained_head(task, out_dir)
        if task == "toxicity":
            path = path / f"{key}.safetensors"
        with atomic_path(path) as tmp:
            # One metadata key: safetensors writes several in a random order (not reproducible).
            save_file(state, tmp, metadata={"backend": "xlmr"})
    atomic_write_json(out_dir / "config.json", config)
    return metrics


def load_classifier(backend: str, **kwargs: Any) -> Classifier:
    """Build a backend: "ngram" -> ``NgramClassifier.load(model_dir, task=...)``,
    "xlmr" -> ``XLMRClassifier(encoder, head, task, ...)``."""
    if backend == "ngram":
        return NgramClassifier.load(**kwargs)
    if backend == "xlmr":
        return XLMRClassifier(**kwargs)
    raise ValueError(f"unknown classifier backend {backend!r}; allowed: {', '.join(BACKENDS)}")


# --------------------------------------------------------------------------------------------------
# Pipeline blocks
# --------------------------------------------------------------------------------------------------


class ClassifierScorer(PipelineStep):
    """Writes ``metadata[f"{task}_score"]`` (quality or toxicity, RECIPE.md §5); removes nothing.

    Only documents whose ``metadata["kind"]`` is in ``apply_to_kinds`` are scored (None = all): the
    recipe does not run toxicity on edu/code/math sources. Others pass unscored (stat ``exempt``),
    as do documents whose language has no head (stat ``no_model_<lang>``), so the threshold filter
    lets them through. With `languages`, documents of the scored kinds in other languages are not
    scored but marked ``metadata[f"{task}_sampled"]`` (stat ``sampled``): the threshold filter
    keeps a seeded random share of them (RECIPE §5: the quality classifier judges 20 languages,
    the others are randomly sampled). The model is loaded lazily in the worker (datatrove
    pickles the steps) and documents are scored in batches of ``batch_size``; output order
    equals input order.
    ``model`` holds the backend's options (``load_classifier``), without ``task``.
    """

    type = "🧮 - SCORER"
    name = "🧮 {task} scorer"

    def __init__(
        self,
        task: str,
        backend: str,
        model: Mapping[str, Any],
        apply_to_kinds: Sequence[str] | None,
        batch_size: int = 64,
        languages: Sequence[str] | None = None,
    ) -> None:
        _check_task(task)
        if backend not in BACKENDS:
            raise ValueError(
                f"unknown classifier backend {backend!r}; allowed: {', '.join(BACKENDS)}"
            )
        if "task" in model:
            raise ValueError("model options must not set 'task'; the scorer's task is used")
        if isinstance(apply_to_kinds, str):
            raise ValueError(
                f"apply_to_kinds must be a list of kinds, got the string {apply_to_kinds!r}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.name = f"🧮 {task} scorer"
        super().__init__()
        self.task = task
        self.score_key = f"{task}_score"
        self.backend = backend
        self.model = dict(model)
        self.apply_to_kinds = None if apply_to_kinds is None else tuple(apply_to_kinds)
        if isinstance(languages, str):
            raise ValueError(f"languages must be a list of labels, got the string {languages!r}")
        self.languages = None if languages is None else frozenset(languages)
        self.sampled_key = f"{task}_sampled"
        self.batch_size = batch_size
        self._classifier: Classifier | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Ship the recipe for the model, not the model: each worker loads its own copy.
        state = self.__dict__.copy()
        state["_classifier"] = None
        return state

    @property
    def classifier(self) -> Classifier:
        if self._classifier is None:
            self._classifier = load_classifier(self.backend, task=self.task, **self.model)
        return self._classifier

    def _score_batch(self, docs: list[Document]) -> None:
        if not docs:
            return
        with self.track_time("batch"):
            scores = self.classifier.score(
                [doc.text for doc in docs], [doc.metadata.get("language") for doc in docs]
            )
        for doc, score in zip(docs, scores, strict=True):
            doc.metadata[self.score_key] = score
            self.stat_update("scored")
            self.stat_update(self.score_key, value=score)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if data is None:
            return
        pending: list[Document] = []  # every document since the last flush, in input order
        to_score: list[Document] = []
        for doc in data:
            self.stat_update(StatHints.total)
            pending.append(doc)
            language = doc.metadata.get("language")
            if (
                self.apply_to_kinds is not None
                and doc.metadata.get("kind") not in self.apply_to_kinds
            ):
                self.stat_update("exempt")
            elif self.languages is not None and language not in self.languages:
                # RECIPE §5: languages without a classifier are sampled at random instead.
                doc.metadata[self.sampled_key] = True
                self.stat_update("sampled")
            elif not self.classifier.supports_language(language):
                self.stat_update(f"no_model_{language}")
            else:
                to_score.append(doc)
            if len(to_score) >= self.batch_size:
                self._score_batch(to_score)
                yield from pending
                pending, to_score = [], []
        self._score_batch(to_score)
        yield from pending


def compute_thresholds(
    scores: Mapping[str, Sequence[float]],
    fraction: float,
    *,
    keep: str,
    min_documents: int = 1,
) -> dict[str, float]:
    """Per-language score thresholds from a sample of scores.

    keep="top" (quality: keep the best `fraction`): threshold = the (1 - fraction) quantile, docs
    with score >= threshold are kept. keep="bottom" (toxicity: drop the worst `fraction`):
    threshold = the (1 - fraction) quantile as an upper bound, docs with score <= threshold are
    kept. The quantile is ``numpy.quantile(..., method="linear")`` (interpolating between the two
    nearest order statistics). Scores equal to the threshold are kept, so ties at the cut keep
    slightly more than `fraction` (top) or drop slightly less (bottom). Languages with fewer than
    ``min_documents`` scores (or none) get no threshold, and the filter passes them.
    """
    if keep not in KEEP_SIDES:
        raise ValueError(f"keep must be one of {KEEP_SIDES}, got {keep!r}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    thresholds: dict[str, float] = {}
    for language, values in scores.items():
        array = np.asarray(values, dtype=np.float64)
        if len(array) < max(1, min_documents):
            continue
        if not np.all(np.isfinite(array)):
            raise ApertusError(f"non-finite scores for language {language!r}")
        thresholds[language] = float(np.quantile(array, 1 - fraction, method="linear"))
    return thresholds


def sample_draw(seed: int, doc_id: str) -> float:
    """A document's seeded uniform draw in [0, 1), from its id: the same in every run and task."""
    digest = hashlib.blake2b(f"{seed}\0{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class ThresholdFilter(BaseFilter):
    """Drops documents on the wrong side of their language's score threshold (RECIPE.md §5).

    keep="top" keeps score >= threshold (quality: the rest is dropped as `reason`, e.g.
    "low_quality"); keep="bottom" keeps score <= threshold (toxicity: the top is dropped as
    "toxic").
    Documents without the score (exempt kinds, languages without a model) pass (stat ``no_score``);
    languages without a threshold pass (stat ``no_threshold_<lang>``): the recipe filters only the
    languages it has classifiers and thresholds for. A score that is not a finite number is dropped
    as ``invalid_score`` rather than silently compared. With `sample_fraction`, documents the
    scorer marked for sampling are kept when `sample_draw(seed, id)` falls below it, else dropped
    as ``sampled_out``.
    """

    name = "🎚️ threshold"

    def __init__(
        self,
        score_key: str,
        thresholds: Mapping[str, float],
        keep: str,
        reason: str,
        exclusion_writer=None,
        sample_fraction: float | None = None,
        seed: int = 0,
    ) -> None:
        if keep not in KEEP_SIDES:
            raise ValueError(f"keep must be one of {KEEP_SIDES}, got {keep!r}")
        if sample_fraction is not None and not 0 <= sample_fraction <= 1:
            raise ValueError(f"sample_fraction must be in [0, 1], got {sample_fraction}")
        super().__init__(exclusion_writer)
        self.score_key = score_key
        self.sampled_key = score_key.removesuffix("_score") + "_sampled"
        self.thresholds = {lang: float(t) for lang, t in thresholds.items()}
        self.keep = keep
        self.reason = reason
        self.sample_fraction, self.seed = sample_fraction, seed

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        if self.sample_fraction is not None and doc.metadata.get(self.sampled_key):
            if sample_draw(self.seed, doc.id) < self.sample_fraction:
                self.stat_update("sampled_kept")
                return True
            return False, "sampled_out"
        score = doc.metadata.get(self.score_key)
        if score is None:
            self.stat_update("no_score")
            return True
        language = doc.metadata.get("language")
        threshold = self.thresholds.get(language)
        if threshold is None:
            self.stat_update(f"no_threshold_{language}")
            return True
        if isinstance(score, bool) or not isinstance(score, Real) or not math.isfinite(score):
            return False, "invalid_score"
        kept = score >= threshold if self.keep == "top" else score <= threshold
        return True if kept else (False, self.reason)
