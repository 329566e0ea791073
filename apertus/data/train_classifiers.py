"""Step `data_classifiers`: train the offline (ngram) quality and toxicity classifiers.

    python -m apertus.data.train_classifiers --config JSON --manifest M --output-dir DIR ...

Each enabled filter with the `ngram` backend is trained on its labelled JSONL (`text`, `label`);
`labels: sample` means the labels made with the sample corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig
from apertus.data.steps import data_parser


def ngram_tasks(cfg: DataConfig) -> list:
    return [
        spec for spec in (cfg.quality, cfg.toxicity) if spec.enabled and spec.backend == "ngram"
    ]


def labels_path(spec, sample_dir: Path | None) -> Path:
    if spec.labels == "sample":
        if sample_dir is None:
            raise ApertusError(f"{spec.task}.labels is `sample` but no sample corpus was given")
        return sample_dir / "labels" / f"{spec.task}.jsonl"
    return Path(spec.labels)


def read_labels(path: Path) -> tuple[list[str], list[int]]:
    """Labelled examples; a bad line is an error naming the file and line (training data is small
    and hand-made, so a silent skip would hide a mistake)."""
    texts, labels = [], []
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
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ApertusError(
                f"{path}:{lineno}: expected a JSON object with `text` and `label` 0/1 ({e})"
            ) from None
        if label not in (0, 1) or not isinstance(text, str):
            raise ApertusError(f"{path}:{lineno}: `label` must be 0 or 1 and `text` a string")
        texts.append(text)
        labels.append(label)
    return texts, labels


def main(argv=None):
    from apertus.data.classifiers import train_ngram_classifier

    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    tasks = ngram_tasks(cfg)
    inputs = [labels_path(spec, args.sample_dir) for spec in tasks]
    outputs = [args.output_dir / spec.task for spec in tasks]
    with StepRun(
        "data", "classifiers", args.config, inputs=inputs, outputs=outputs, manifest=args.manifest
    ) as step:
        for spec, path, out in zip(tasks, inputs, outputs, strict=True):
            texts, labels = read_labels(path)
            step.summary[spec.task] = train_ngram_classifier(
                texts, labels, out, seed=spec.seed, epochs=spec.epochs, task=spec.task
            )


if __name__ == "__main__":
    run_main(main)
