"""Entry points of the evaluation stage, one per rule of workflow/rules/evaluate.smk:

python -m apertus.evaluate.stage STEP --config JSON --manifest M --output DIR [inputs]

tasks  --heldout DIR                      lm-eval task directory from the held-out documents
run    --model DIR [--tasks DIR]          one exported model through the suite (lm-eval 0.4.13)
instruct --model DIR [--tasks DIR]        one chat model through the instruct suite, with its
                                          chat template
table  --results NAME=DIR ... [--memorization NAME=DIR ...] [--instruct NAME=DIR ...]
                                          one table and plot across checkpoints, rows in order

`--config` is the ``evaluate:`` section, or only the part a step reads (the rules pass
``{"tasks": ...}``, ``{"suite": ...}``, ``{"instruct": ...}`` and ``{"table": ...}``, so that
changing the table
options re-runs no evaluation); :class:`EvaluateConfig` lists the keys, the schema their
defaults. Whatever part is given is checked, unknown keys included; missing parts take the
schema's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config
from apertus.evaluate.lmeval import InstructOptions, LmEvalOptions
from apertus.evaluate.memorization import MemorizationConfig
from apertus.evaluate.table import PLOT_METRICS
from apertus.evaluate.tasks import ClozeOptions, PerplexityOptions


@dataclass(frozen=True)
class TableOptions(Config, key="evaluate.table"):
    """metrics: the metrics in the table (names such as acc, bits_per_byte), or None for all.
    plot_metric: the perplexity metric of the plot (bits_per_byte, byte_perplexity or
    word_perplexity)."""

    metrics: tuple[str, ...] | None
    plot_metric: str

    def __post_init__(self) -> None:
        if self.metrics is not None:
            if isinstance(self.metrics, str) or not all(isinstance(m, str) for m in self.metrics):
                raise ApertusError(
                    f"evaluate.table.metrics must be a list of names, got {self.metrics!r}"
                )
            object.__setattr__(self, "metrics", tuple(self.metrics))
        if self.plot_metric not in PLOT_METRICS:
            raise ApertusError(
                f"evaluate.table.plot_metric must be one of {', '.join(PLOT_METRICS)}, "
                f"got {self.plot_metric!r}"
            )


@dataclass(frozen=True)
class TasksConfig(Config, key="evaluate.tasks"):
    """``evaluate.tasks``: the task builder.

    seed: seeds the cloze items and the perplexity sample.
    mc: the continuation cloze (:class:`ClozeOptions`).
    ppl: the perplexity tasks (:class:`PerplexityOptions`).
    """

    seed: int
    mc: ClozeOptions
    ppl: PerplexityOptions

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ApertusError(f"evaluate.tasks.seed must be an integer >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class EvaluateConfig(Config, key="evaluate"):
    """The ``evaluate:`` config section; a step may be given only its own part (the rules pass
    ``{"tasks": ...}``, ``{"suite": ...}`` or ``{"table": ...}``), the rest takes the schema's
    defaults.

    tasks: the task builder (:class:`TasksConfig`).
    suite: the lm-eval run of each checkpoint (:class:`LmEvalOptions`).
    instruct: the lm-eval run of each chat model, through its chat template
        (:class:`InstructOptions`).
    memorization: the memorization measurement (apertus.evaluate.memorization's step).
    table: the table and plot (:class:`TableOptions`).
    """

    tasks: TasksConfig
    suite: LmEvalOptions
    instruct: InstructOptions
    memorization: MemorizationConfig
    table: TableOptions


def tasks(args, cfg: EvaluateConfig) -> None:
    from apertus.evaluate.tasks import build_task_directory

    with StepRun(
        "evaluate",
        "tasks",
        args.config,
        inputs=[args.heldout],
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg.tasks.seed,
    ) as step:
        summary = build_task_directory(
            args.heldout, args.output, mc=cfg.tasks.mc, ppl=cfg.tasks.ppl, seed=cfg.tasks.seed
        )
        step.summary.update(
            groups=summary["groups"],
            mc_tasks=summary["mc"]["tasks"],
            mc_items={k: v["items"] for k, v in summary["mc"]["languages"].items()},
            mc_skipped_languages=summary["mc"]["skipped_languages"],
            ppl_tasks=summary["ppl"]["tasks"],
            ppl_documents={k: v["documents"] for k, v in summary["ppl"]["languages"].items()},
            ppl_skipped_languages=summary["ppl"]["skipped_languages"],
            empty_documents=summary["empty_documents"],
        )


def run(args, cfg: EvaluateConfig) -> None:
    _run_suite(args, "run", cfg.suite)


def instruct(args, cfg: EvaluateConfig) -> None:
    _run_suite(args, "instruct", cfg.instruct)


def _run_suite(args, step_name: str, options: LmEvalOptions) -> None:
    from apertus.evaluate.lmeval import run_suite

    inputs = [args.model] + ([args.tasks] if args.tasks else [])
    with StepRun(
        "evaluate",
        step_name,
        args.config,
        inputs=inputs,
        outputs=[args.output],
        manifest=args.manifest,
        seed=options.seed,
    ) as step:
        outcome = run_suite(args.model, args.tasks, options, args.output)
        step.summary.update(invocations=outcome["invocations"], scores=_scores(outcome))


def _scores(outcome: dict[str, Any]) -> dict[str, dict[str, float]]:
    from apertus.evaluate.table import scores_from_results

    return scores_from_results({"results": outcome["results"]})


def _named_paths(items: list[str], flag: str) -> list[tuple[str, Path]]:
    pairs = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ApertusError(f"{flag} takes NAME=DIR, got {item!r}")
        pairs.append((name, Path(path)))
    return pairs


def table(args, cfg: EvaluateConfig) -> None:
    from apertus.evaluate.table import memorization_scores, read_scores, write_table

    runs = _named_paths(args.results, "--results")
    memorization = dict(_named_paths(args.memorization, "--memorization"))
    instruct = _named_paths(args.instruct, "--instruct")
    if not runs:
        raise ApertusError("--results: name at least one checkpoint NAME=DIR")
    names = [name for name, _ in runs]
    if stray := sorted(set(memorization) - set(names)):
        raise ApertusError(f"--memorization names {', '.join(stray)}, not among --results")
    if stray := sorted({name for name, _ in instruct} - set(names)):
        raise ApertusError(f"--instruct names {', '.join(stray)}, not among --results")
    with StepRun(
        "evaluate",
        "table",
        args.config,
        inputs=[d for _, d in runs] + list(memorization.values()) + [d for _, d in instruct],
        outputs=[args.output],
        manifest=args.manifest,
    ) as step:
        scores = []
        for name, directory in runs:
            checkpoint = read_scores(directory)
            if name in memorization:
                checkpoint.update(memorization_scores(memorization[name]))
            scores.append((name, checkpoint))
        step.summary.update(
            write_table(
                scores,
                args.output,
                instruct=[(name, read_scores(directory)) for name, directory in instruct],
                metrics=cfg.table.metrics,
                plot_metric=cfg.table.plot_metric,
            )
        )


def main(argv=None):
    parser = stage_parser("evaluate", "Steps of the evaluation stage.")
    parser.add_argument("step", choices=["tasks", "run", "instruct", "table"])
    parser.add_argument("--heldout", type=Path, help="tasks: the held-out <lang>.jsonl folder")
    parser.add_argument(
        "--model", type=Path, help="run, instruct: an exported Hugging Face model folder"
    )
    parser.add_argument(
        "--tasks", type=Path, help="run, instruct: the task directory of the tasks step"
    )
    parser.add_argument(
        "--results",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME=DIR",
        help="table: a checkpoint's run output (repeatable; rows in this order)",
    )
    parser.add_argument(
        "--memorization",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME=DIR",
        help="table: a checkpoint's memorization output (memorization.json), optional",
    )
    parser.add_argument(
        "--instruct",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME=DIR",
        help="table: a chat model's instruct-suite output (its own rows), optional",
    )
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = EvaluateConfig.from_dict(args.config)
    needed = {"tasks": ["heldout"], "run": ["model"], "instruct": ["model"], "table": []}[args.step]
    for name in needed:
        if getattr(args, name) is None:
            raise ApertusError(f"evaluate {args.step} needs --{name}")
    {"tasks": tasks, "run": run, "instruct": instruct, "table": table}[args.step](args, cfg)


if __name__ == "__main__":
    run_main(main)
