"""One table across checkpoints from lm-eval results: CSV, Markdown and a plot.

Rows are checkpoints in the order given, columns are ``task/metric`` (tasks in name order, so a
group such as ``apertus_mc`` comes right before its languages ``apertus_mc_de``...; metrics in
the order of :data:`METRIC_ORDER`, then by name). A cell is empty where a checkpoint has no
such result (in the CSV and the Markdown alike). Standard errors are left out; lm-eval's filter
suffix ``,none`` is dropped and any other filter is kept as ``metric[filter]``.

Memorization results (``memorization.json`` of apertus.evaluate.memorization) join the table as
task ``memorization`` with ``rouge_l@N`` and ``exact_match_prefix@N`` per exposure count N.

The instruct suite (the chat models through their chat template, ``evaluate.instruct``) has rows
of its own, ``<checkpoint> (instruct)``, after the checkpoints' rows: in the CSV its columns
follow the base suite's (a cell is empty where a row has no such result), and the Markdown
shows the two suites as two tables under their own headings. A checkpoint's own row is the
base suite alone whether or not it also has instruct rows, so readers that look a checkpoint up
by name (the release card) get the same numbers as before.

The plot (matplotlib, Agg backend, PNG) has two panels: per-language perplexity of the held-out
documents (``bits_per_byte`` by default) and per-language accuracy of the continuation cloze,
each across checkpoints, with the group mean drawn thick.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import atomic_path, atomic_write_text
from apertus.evaluate.lmeval import RESULTS_DIR
from apertus.evaluate.tasks import MC_GROUP, PPL_GROUP

Scores = dict[str, dict[str, float]]  # task -> metric -> value

METRIC_ORDER = (
    "acc",
    "acc_norm",
    "word_perplexity",
    "byte_perplexity",
    "bits_per_byte",
    "rouge_l",
    "exact_match_prefix",
)
MEMORIZATION_FILE = "memorization.json"  # apertus.evaluate.memorization.RESULT_FILE
PLOT_METRICS = ("bits_per_byte", "byte_perplexity", "word_perplexity")
INSTRUCT_ROW = "{} (instruct)"  # the row of a chat model's instruct-suite results


def scores_from_results(results: Mapping[str, Any], where: str = "results") -> Scores:
    """Numeric metrics of one lm-eval results dict (its ``"results"`` section)."""
    section = results.get("results")
    if not isinstance(section, Mapping):
        raise ApertusError(f"{where}: no 'results' section (not an lm-eval results JSON)")
    scores: Scores = {}
    for task, metrics in section.items():
        if not isinstance(metrics, Mapping):
            continue
        for key, value in metrics.items():
            name, _, filt = key.partition(",")
            if not filt or "_stderr" in name:
                continue  # alias, name, sample_len... carry no filter; stderrs are left out
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            metric = name if filt == "none" else f"{name}[{filt}]"
            scores.setdefault(task, {})[metric] = float(value)
    return scores


def read_scores(path: str | os.PathLike) -> Scores:
    """Scores of one checkpoint: a results JSON, a directory of them (what ``lm_eval
    --output_path`` writes), or an evaluation run's output (its ``lm_eval/results-*.json``).
    A task found in two files is refused (which one would count?)."""
    path = Path(path)
    if path.is_file():
        files = [path]
    elif (path / RESULTS_DIR).is_dir():
        files = sorted((path / RESULTS_DIR).glob("results*.json"))
    elif path.is_dir():
        files = sorted(path.glob("**/results*.json"))
    else:
        raise ApertusError(f"results {path} do not exist")
    if not files:
        raise ApertusError(f"no lm-eval results JSON (results*.json) in {path}")
    scores: Scores = {}
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ApertusError(f"{file}: cannot read lm-eval results ({e})") from None
        if not isinstance(data, Mapping):
            raise ApertusError(f"{file}: not an lm-eval results JSON")
        for task, metrics in scores_from_results(data, str(file)).items():
            if task in scores:
                raise ApertusError(f"{path}: task {task} appears in more than one results file")
            scores[task] = metrics
    return scores


def memorization_scores(path: str | os.PathLike) -> Scores:
    """``{"memorization": {"rouge_l@N": mean Rouge-L, "exact_match_prefix@N": mean prefix}}``
    for every exposure count N of a memorization.json (apertus.evaluate.memorization; N = 0 is
    the never-seen control), from the file or the directory holding it."""
    path = Path(path)
    file = path / MEMORIZATION_FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        rows = list(data["curve"]) + ([data["control"]] if data.get("control") else [])
        metrics = {}
        for row in rows:
            n = int(row["exposures"])
            metrics[f"rouge_l@{n}"] = float(row["rouge_l_mean"])
            metrics[f"exact_match_prefix@{n}"] = float(row["exact_match_prefix_mean"])
    except (OSError, json.JSONDecodeError) as e:
        raise ApertusError(f"{file}: cannot read memorization results ({e})") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ApertusError(f"{file}: not a memorization.json (bad or missing {e})") from None
    return {"memorization": metrics}


@dataclass(frozen=True)
class ScoreTable:
    checkpoints: list[str]
    columns: list[tuple[str, str]]  # (task, metric)
    rows: list[list[float | None]]  # rows[i][j]: checkpoints[i], columns[j]

    def value(self, checkpoint: str, task: str, metric: str) -> float | None:
        return self.rows[self.checkpoints.index(checkpoint)][self.columns.index((task, metric))]


def _metric_key(metric: str) -> tuple[int, str, float, str]:
    base = metric.split("[")[0]
    name, _, at = base.partition("@")  # memorization metrics: by exposure count, numerically
    order = METRIC_ORDER.index(name) if name in METRIC_ORDER else len(METRIC_ORDER)
    return (order, name, float(at) if at else -1.0, metric)


def score_table(
    runs: Sequence[tuple[str, Scores]], metrics: Sequence[str] | None = None
) -> ScoreTable:
    """The table of `runs` ((checkpoint name, scores) in row order); `metrics` keeps only those
    metrics (by name: ``acc`` keeps ``acc[filter]``, ``rouge_l`` keeps every ``rouge_l@N``)."""
    names = [name for name, _ in runs]
    if not names:
        raise ApertusError("no checkpoint to tabulate")
    if len(set(names)) != len(names):
        raise ApertusError(f"checkpoint names must be unique, got {names}")
    columns = sorted(
        {
            (task, metric)
            for _, scores in runs
            for task, values in scores.items()
            for metric in values
            if metrics is None or metric.split("[")[0].split("@")[0] in metrics
        },
        key=lambda c: (c[0], _metric_key(c[1])),
    )
    if not columns:
        which = f" for metrics {list(metrics)}" if metrics else ""
        raise ApertusError(f"no scores to tabulate{which}")
    rows = [[scores.get(task, {}).get(metric) for task, metric in columns] for _, scores in runs]
    return ScoreTable(names, columns, rows)


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    if math.isinf(value) or math.isnan(value):
        return str(value)
    return f"{value:.6g}"


def table_csv(table: ScoreTable) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["checkpoint", *(f"{t}/{m}" for t, m in table.columns)])
    for name, row in zip(table.checkpoints, table.rows, strict=True):
        writer.writerow([name, *(repr(v) if v is not None else "" for v in row)])
    return out.getvalue()


def table_markdown(table: ScoreTable) -> str:
    header = ["checkpoint", *(f"{t}/{m}" for t, m in table.columns)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(table.columns)) + "|",
    ]
    for name, row in zip(table.checkpoints, table.rows, strict=True):
        cells = [name.replace("|", "\\|"), *(_cell(v) for v in row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _series(table: ScoreTable, prefix: str, metric: str) -> dict[str, list[float | None]]:
    """Per-language series ``{language: [value per checkpoint]}`` of tasks ``<prefix>_<lang>``,
    plus ``"mean"`` from the group task ``<prefix>`` when present."""
    series = {}
    for j, (task, m) in enumerate(table.columns):
        if m != metric:
            continue
        if task == prefix:
            series["mean"] = [row[j] for row in table.rows]
        elif task.startswith(prefix + "_"):
            series[task.removeprefix(prefix + "_")] = [row[j] for row in table.rows]
    return series


def plot_scores(
    table: ScoreTable, path: str | os.PathLike, ppl_metric: str = "bits_per_byte"
) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """PNG with per-language `ppl_metric` and cloze accuracy across checkpoints. Returns what
    was drawn: {panel metric: {language or "mean": [(checkpoint index, value)]}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(len(table.checkpoints)))
    drawn: dict[str, dict[str, list[tuple[int, float]]]] = {}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    panels = (
        (axes[0], PPL_GROUP, ppl_metric, f"held-out {ppl_metric} (lower is better)"),
        (axes[1], MC_GROUP, "acc", "continuation cloze accuracy (higher is better)"),
    )
    for ax, prefix, metric, title in panels:
        series = _series(table, prefix, metric)
        drawn[metric] = {}
        colors = plt.get_cmap("tab20").colors  # 20 distinct colours: one per language
        for n, (language, values) in enumerate(sorted(series.items())):
            points = [(i, v) for i, v in zip(x, values, strict=True) if v is not None]
            if not points:
                continue
            drawn[metric][language] = points
            mean = language == "mean"
            ax.plot(
                [i for i, _ in points],
                [v for _, v in points],
                marker="o",
                linewidth=3 if mean else 1,
                color="black" if mean else colors[n % len(colors)],
                label=language,
                zorder=3 if mean else 2,
            )
        if not series:
            ax.text(0.5, 0.5, f"no {prefix}_* {metric}", ha="center", transform=ax.transAxes)
        ax.set_title(title)
        ax.set_xticks(x, table.checkpoints, rotation=30, ha="right")
        ax.set_xlabel("checkpoint")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=7, ncol=2)
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return drawn


def joined_table(base: ScoreTable, extra: ScoreTable) -> ScoreTable:
    """`base`'s rows, then `extra`'s, over `base`'s columns and then `extra`'s new ones."""
    columns = base.columns + [c for c in extra.columns if c not in base.columns]
    rows = [
        [dict(zip(table.columns, row, strict=True)).get(c) for c in columns]
        for table in (base, extra)
        for row in table.rows
    ]
    names = base.checkpoints + extra.checkpoints
    if len(set(names)) != len(names):
        raise ApertusError(f"checkpoint names must be unique, got {names}")
    return ScoreTable(names, columns, rows)


def write_table(
    runs: Sequence[tuple[str, Scores]],
    out_dir: str | os.PathLike,
    *,
    instruct: Sequence[tuple[str, Scores]] = (),
    metrics: Sequence[str] | None = None,
    plot_metric: str = "bits_per_byte",
) -> dict[str, Any]:
    """Write ``scores.csv``, ``scores.md`` (the columns of `metrics`, or all) and
    ``scores.png`` (`plot_metric` of the perplexity tasks, ``acc`` of the cloze, the base
    suite's rows) into `out_dir`. `instruct`: (checkpoint, scores) of the instruct suite, rows
    ``<checkpoint> (instruct)`` of their own."""
    if plot_metric not in PLOT_METRICS:
        raise ApertusError(f"plot metric must be one of {', '.join(PLOT_METRICS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = score_table(runs, metrics)
    markdown = table_markdown(table)
    everything = table
    if instruct:
        chat = score_table([(INSTRUCT_ROW.format(name), s) for name, s in instruct], metrics)
        everything = joined_table(table, chat)
        markdown = (
            "## Base suite\n\n"
            + markdown
            + "\n## Instruct suite (chat models, through their chat template)\n\n"
            + table_markdown(chat)
        )
    atomic_write_text(out_dir / "scores.csv", table_csv(everything))
    atomic_write_text(out_dir / "scores.md", markdown)
    with atomic_path(out_dir / "scores.png") as tmp:
        drawn = plot_scores(score_table(runs), tmp, plot_metric)  # whatever `metrics` kept
    return {
        "checkpoints": table.checkpoints,
        "instruct_rows": everything.checkpoints[len(table.checkpoints) :],
        "columns": [f"{t}/{m}" for t, m in everything.columns],
        "plotted": {metric: sorted(lines) for metric, lines in drawn.items()},
        "files": ["scores.csv", "scores.md", "scores.png"],
    }
