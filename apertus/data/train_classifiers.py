"""Step `data_classifiers`: train the quality and toxicity classifiers the filter step loads.

    python -m apertus.data.train_classifiers --config JSON --manifest M --output-dir DIR ...

Each enabled filter whose model the pipeline trains (``ClassifierFilter.trained``) is trained on
its labelled data into ``DIR/<task>/``: the `ngram` backend on its labelled JSONL (`text`,
`label`), the `xlmr` backend's MLP heads (RECIPE.md §5, when `head` is null) on a labelled JSONL
(`text`, `label`, `language`) or a Hub dataset (`labels: hf://datasets/<id>`, or a local folder
in a Hub dataset's layout, read as `hub_labels` says). `labels: sample` means the labels made
with the sample corpus. The held-out accuracies go into the manifest's summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig, HubLabels
from apertus.data.steps import data_parser

HUB_PREFIX = "hf://datasets/"
# Tokens per chunk of the xlmr backend (RECIPE.md §5), as XLMRClassifier scores.
XLMR_CHUNK_TOKENS = 512


def trained_tasks(cfg: DataConfig) -> list:
    return [spec for spec in (cfg.quality, cfg.toxicity) if spec.trained]


def hub_dataset(labels: str) -> str | None:
    """The dataset id of `hf://datasets/<id>`, None for a local file."""
    if not labels.startswith(HUB_PREFIX):
        return None
    dataset = labels.removeprefix(HUB_PREFIX).strip("/")
    if not dataset:
        raise ApertusError(f"labels {labels!r} names no dataset")
    return dataset


def labels_path(spec, sample_dir: Path | None) -> Path:
    if spec.labels == "sample":
        if sample_dir is None:
            raise ApertusError(f"{spec.task}.labels is `sample` but no sample corpus was given")
        return sample_dir / "labels" / f"{spec.task}.jsonl"
    return Path(spec.labels)


def _label(value: Any, positive_above: float | None, where: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if positive_above is not None:
        try:
            return int(float(value) > positive_above)
        except (TypeError, ValueError):
            raise ApertusError(f"{where}: label {value!r} is not a number") from None
    if value in (0, 1) or value in ("0", "1"):
        return int(value)
    raise ApertusError(f"{where}: label {value!r} is not 0/1 (set positive_above for scores)")


def read_labelled(path: Path) -> tuple[list[str], list[int], list[str | None]]:
    """Labelled examples (texts, 0/1 labels, languages or None); a bad line is an error naming
    the file and line (training data is small and hand-made, so a silent skip would hide a
    mistake)."""
    texts, labels, languages = [], [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ApertusError(f"cannot read labelled data {path}: {e}") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            text, label = record["text"], int(record["label"])
            language = record.get("language")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise ApertusError(
                f"{path}:{lineno}: expected a JSON object with `text` and `label` 0/1 ({e})"
            ) from None
        if label not in (0, 1) or not isinstance(text, str):
            raise ApertusError(f"{path}:{lineno}: `label` must be 0 or 1 and `text` a string")
        texts.append(text)
        labels.append(label)
        languages.append(None if language is None else str(language))
    return texts, labels, languages


def read_labels(path: Path) -> tuple[list[str], list[int]]:
    """The texts and labels of :func:`read_labelled`."""
    texts, labels, _ = read_labelled(path)
    return texts, labels


def read_hub_labels(
    dataset: str, columns: HubLabels
) -> tuple[list[str], list[int], list[str | None]]:
    """Labelled examples from a Hugging Face dataset: `dataset` is a hub id (or a local directory
    in the same format: tests), streamed split `columns.split`; text, label and language come
    from the columns `columns` names (several label columns: label 1 when any is positive).
    With `columns.limit` >= 0 at most that many examples of each class per language are kept,
    the first in the dataset's order (the whole split is still read: a language may first
    appear late)."""
    from datasets import load_dataset

    try:
        rows = load_dataset(dataset, split=columns.split, streaming=True)
    except Exception as e:  # datasets raises many error types (missing, offline, bad split)
        raise ApertusError(f"cannot read labelled dataset {dataset!r}: {e}") from e
    texts, labels, languages = [], [], []
    kept: dict[tuple[str | None, int], int] = {}
    for n, row in enumerate(rows):
        where = f"{dataset} ({columns.split}) row {n}"
        label_fields = (
            (columns.label_field,) if isinstance(columns.label_field, str) else columns.label_field
        )
        missing = [
            c
            for c in (columns.text_field, *label_fields, columns.language_field)
            if c is not None and c not in row
        ]
        if missing:
            raise ApertusError(f"{where}: no column(s) {missing}; has {sorted(row)}")
        text = row[columns.text_field]
        if not isinstance(text, str):
            raise ApertusError(f"{where}: `{columns.text_field}` is not a string")
        label = max(_label(row[field], columns.positive_above, where) for field in label_fields)
        language = row[columns.language_field] if columns.language_field else None
        language = None if language is None else str(language)
        if columns.limit >= 0:
            if kept.get((language, label), 0) >= columns.limit:
                continue
            kept[(language, label)] = kept.get((language, label), 0) + 1
        texts.append(text)
        labels.append(label)
        languages.append(language)
    return texts, labels, languages


def main(argv=None):
    from apertus.data.classifiers import train_ngram_classifier, train_xlmr_heads

    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    tasks = trained_tasks(cfg)
    sources = {
        spec.task: hub_dataset(spec.labels) or labels_path(spec, args.sample_dir) for spec in tasks
    }
    inputs = [s for s in sources.values() if isinstance(s, Path)]
    outputs = [args.output_dir / spec.task for spec in tasks]
    with StepRun(
        "data", "classifiers", args.config, inputs=inputs, outputs=outputs, manifest=args.manifest
    ) as step:
        for spec, out in zip(tasks, outputs, strict=True):
            source = sources[spec.task]
            if spec.backend == "ngram":
                if source.is_dir():
                    raise ApertusError(
                        f"data.{spec.task}.labels {source} is a folder: the ngram backend reads "
                        "a JSONL file (a folder in a Hub dataset's layout is for xlmr heads)"
                    )
                texts, labels = read_labels(source)
                step.summary[spec.task] = train_ngram_classifier(
                    texts, labels, out, seed=spec.seed, epochs=spec.epochs, task=spec.task
                )
                continue
            if isinstance(source, Path) and not source.is_dir():
                texts, labels, languages = read_labelled(source)
            else:  # a Hub id, or a local folder in a Hub dataset's layout (the rehearsal's)
                texts, labels, languages = read_hub_labels(str(source), spec.hub_labels)
            metrics = train_xlmr_heads(
                texts,
                labels,
                out,
                encoder=spec.encoder,
                task=spec.task,
                seed=spec.seed,
                languages=languages,
                epochs=spec.epochs,
                max_tokens=XLMR_CHUNK_TOKENS,
            )
            step.summary[spec.task] = {
                "backend": "xlmr",
                "labels": spec.labels,
                "encoder": spec.encoder,
                "val_accuracy": {k: m["val_accuracy"] for k, m in metrics["heads"].items()},
                **metrics,
            }


if __name__ == "__main__":
    run_main(main)
