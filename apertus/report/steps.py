"""Steps of the report stage: the figures and tables `snakemake --report` shows.

    python -m apertus.report.steps training --name STAGE --metrics RUN/metrics.jsonl --output PNG
    python -m apertus.report.steps summary --output-dir DIR --funnel ... --phase NAME=DIR ...

Both read only files the other stages wrote (declared as the rules' inputs) and write PNG
figures and self-contained HTML tables; the captions live in workflow/report/.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import atomic_write_text
from apertus.core.manifest import find_step_manifests
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.report import figures, tables
from apertus.report.html import render_page

STAGE = "report"
log = logging.getLogger(__name__)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ApertusError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ApertusError(f"{path}: not valid JSON ({e})") from None


def _named(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ApertusError(f"expected NAME=PATH, got {text!r}")
    return name, Path(path)


def _training(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "Training curves of one stage.")
    parser.add_argument("--name", required=True, help="the training stage (phase1, sft, ...)")
    parser.add_argument("--metrics", type=Path, required=True, help="its metrics.jsonl")
    parser.add_argument("--output", type=Path, required=True, help="the figure (PNG)")
    args = parser.parse_args(argv)
    with StepRun(
        STAGE,
        f"training-{args.name}",
        args.config,
        inputs=[args.metrics],
        outputs=[args.output],
        manifest=args.manifest,
    ) as step:
        records = figures.read_step_metrics(args.metrics)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        drawn = figures.plot_training(
            records,
            f"training stage {args.name}",
            args.output,
            smoothing=args.config["smoothing"],
            dpi=args.config["dpi"],
        )
        last = records[-1] if records else {}
        step.summary.update(
            steps=len(records),
            last_step=last.get("step"),
            last_loss=last.get("loss"),
            points=drawn,
        )


def _write_page(path: Path, title: str, page_tables, intro: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, render_page(title, page_tables, intro))


def _stage_manifests(run_dir: Path, stages: list[str]) -> dict[str, list[tuple[str, dict]]]:
    """The run's step manifests grouped by their stage, in path order."""
    grouped: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for path in find_step_manifests(run_dir):
        manifest = _read_json(path)
        stage = manifest.get("stage")
        if stage not in stages:
            raise ApertusError(
                f"{path}: stage {stage!r} is not one of the report's stages ({', '.join(stages)})"
            )
        grouped[stage].append((path.relative_to(run_dir).as_posix(), manifest))
    return grouped


def _summary(argv: list[str]) -> None:
    parser = stage_parser(STAGE, "The report's tables and summary figures.")
    parser.add_argument("--run-dir", type=Path, required=True, help="results/<run>")
    parser.add_argument("--output-dir", type=Path, required=True)
    # The data and tokenization pages' inputs: none in a post-training-only run.
    parser.add_argument("--funnel", type=Path, help="data/funnel.json")
    parser.add_argument(
        "--filter-manifest", type=_named, action="append", default=[], help="SOURCE=PATH"
    )
    parser.add_argument("--corpus-manifest", type=Path)
    parser.add_argument(
        "--removed", type=Path, action="append", default=[], help="data/removed/<step>"
    )
    parser.add_argument("--phase", type=_named, action="append", default=[], help="NAME=DIR")
    parser.add_argument("--scores", type=Path, required=True, help="evaluate/table/scores.csv")
    parser.add_argument(
        "--memorization", type=_named, action="append", default=[], help="CHECKPOINT=DIR"
    )
    parser.add_argument("--rewards", type=Path, help="posttrain/reward_report.json")
    parser.add_argument(
        "--stage", action="append", required=True, help="a stage with a manifest page"
    )
    parser.add_argument(
        "--run-config", type=json.loads, required=True, help="the run's whole config (JSON)"
    )
    args = parser.parse_args(argv)
    data = [args.funnel, args.corpus_manifest, args.filter_manifest, args.phase]
    if any(data) and not all(data):
        parser.error(
            "--funnel, --corpus-manifest, --filter-manifest and --phase go together (the data "
            "and tokenization pages)"
        )
    out = args.output_dir
    inputs = [
        *([args.funnel, args.corpus_manifest] if args.funnel else []),
        args.scores,
        *(p for _, p in args.filter_manifest),
        *args.removed,
        *(p for _, p in args.phase),
        *(p for _, p in args.memorization),
        *([args.rewards] if args.rewards else []),
    ]
    with StepRun(
        STAGE, "summary", args.config, inputs=inputs, outputs=[out], manifest=args.manifest
    ) as step:
        dpi = args.config["dpi"]
        out.mkdir(parents=True, exist_ok=True)
        if args.funnel:
            step.summary["tokens"] = _data_pages(args, out, dpi)
        _write_page(out / "evaluation.html", "Evaluation", [tables.scores_table(args.scores)])
        if args.memorization:
            from apertus.evaluate.memorization import plot_curves

            plot_curves(
                {name: d / "memorization.json" for name, d in args.memorization},
                out / "memorization.png",
            )
        if args.rewards:
            report = _read_json(args.rewards)
            _write_page(out / "rewards.html", "QRPO: reward before and after",
                        tables.reward_tables(report))  # fmt: skip
            figures.plot_rewards(report, out / "rewards.png", dpi=dpi)
        grouped = _stage_manifests(args.run_dir, args.stage)
        _write_page(
            out / "cost.html",
            "What this run costs",
            tables.cost_tables(
                args.run_config, {rel: m for found in grouped.values() for rel, m in found}
            ),
        )
        for stage in args.stage:
            _write_page(
                out / "manifests" / f"{stage}.html",
                f"Stage {stage}: what ran",
                tables.manifest_tables(stage, grouped.get(stage, [])),
                intro=None if grouped.get(stage) else "no step of this stage has run",
            )
        step.summary["manifests"] = {stage: len(grouped.get(stage, [])) for stage in args.stage}


def _data_pages(args, out: Path, dpi: int) -> dict:
    """The data stage's compliance page and the tokenization stage's tokens page and figure
    (a run with both); returns the figure's summary."""
    funnel = _read_json(args.funnel)
    _write_page(
        out / "compliance.html",
        "Data: robots.txt opt-outs, PII, skipped records and what the filters removed",
        [
            *tables.robots_tables([(s, _read_json(p)) for s, p in args.filter_manifest], funnel),
            tables.pii_table(_read_json(args.corpus_manifest)),
            tables.skipped_table(funnel),
            tables.removed_samples_table(args.removed, funnel, args.run_dir),
        ],
    )
    phases = [(name, _read_json(d / "phase.json")) for name, d in args.phase]
    _write_page(out / "tokens.html", "Tokens per phase", tables.tokens_table(phases))
    return figures.plot_tokens(
        [(name, tables.phase_languages(p, name)) for name, p in phases],
        out / "tokens.png",
        dpi=dpi,
    )


COMMANDS = {"training": _training, "summary": _summary}


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        raise ApertusError(f"usage: python -m apertus.report.steps {{{','.join(COMMANDS)}}} ...")
    COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    run_main(main)
