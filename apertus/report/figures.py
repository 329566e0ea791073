"""The report's figures (PNG, matplotlib's Agg backend), drawn from the stages' output files."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from apertus.core import ApertusError

# The fourth panel of a training figure: what the loss was computed on. Pretraining and SFT
# log the Goldfish and end-of-document masked fractions; QRPO its quantile reward and log-ratio.
MASK_PANELS = (
    (("goldfish_fraction", "eod_fraction"), "masked fraction of the targets"),
    (("quantile_reward", "log_ratio"), "QRPO: quantile reward, log(pi/pi_ref)"),
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_step_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A run's metrics.jsonl as one record per step, in step order; a step logged twice (steps
    redone after a resume) keeps its last record. A malformed line is an error naming it."""
    by_step: dict[int, dict[str, Any]] = {}
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                by_step[int(record["step"])] = record
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise ApertusError(f"{path}:{number}: not a metrics record ({e})") from None
    return [by_step[s] for s in sorted(by_step)]


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            steps.append(int(r["step"]))
            values.append(float(v))
    return steps, values


def plot_training(
    records: Sequence[Mapping[str, Any]],
    title: str,
    path: str | os.PathLike,
    *,
    smoothing: int = 1,
    dpi: int = 100,
) -> dict[str, int]:
    """Loss, learning rate, gradient norm and the masked fraction (or QRPO's reward) against
    the step. Returns the number of points drawn per metric."""
    if not records:
        raise ApertusError(f"{title}: no metrics to plot")
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    drawn: dict[str, int] = {}
    panels = [
        (axes[0][0], ("loss",), "training loss", False),
        (axes[0][1], ("lr",), "learning rate", False),
        (axes[1][0], ("grad_norm",), "gradient norm (before clipping)", True),
    ]
    keys, label = next(
        ((k, t) for k, t in MASK_PANELS if any(_series(records, key)[0] for key in k)),
        MASK_PANELS[0],
    )
    panels.append((axes[1][1], keys, label, False))
    for ax, keys, label, log_scale in panels:
        any_drawn = False
        for n, key in enumerate(keys):
            steps, values = _series(records, key)
            if not steps:
                continue
            any_drawn = True
            drawn[key] = len(steps)
            color = f"C{n}"
            if smoothing > 1 and key != "lr":
                ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(steps, moving_average(values, smoothing), color=color, label=key)
            else:
                ax.plot(steps, values, color=color, label=key)
        if not any_drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        elif log_scale and all(v > 0 for k in keys for v in _series(records, k)[1]):
            ax.set_yscale("log")
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if any_drawn and len(keys) > 1:
            ax.legend(fontsize=8)
    note = f" (thin: raw; thick: mean of {smoothing} steps)" if smoothing > 1 else ""
    fig.suptitle(f"{title}: {len(records)} steps{note}")
    fig.savefig(path, dpi=dpi, format="png")
    plt.close(fig)
    return drawn


def plot_tokens(
    phases: Sequence[tuple[str, Mapping[str, Mapping[str, int]]]],
    path: str | os.PathLike,
    *,
    dpi: int = 100,
) -> dict[str, dict[str, int]]:
    """Stacked bars: tokens of each phase per language. `phases`: (name, {language:
    {"tokens_planned", ...}}). Returns {phase: {language: tokens}} as drawn."""
    plt = _pyplot()
    languages = sorted({lang for _, langs in phases for lang in langs})
    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    bottoms = [0] * len(phases)
    colors = plt.get_cmap("tab20").colors
    drawn: dict[str, dict[str, int]] = {name: {} for name, _ in phases}
    for n, language in enumerate(languages):
        values = [int(langs.get(language, {}).get("tokens_planned", 0)) for _, langs in phases]
        ax.bar(
            [name for name, _ in phases],
            values,
            bottom=bottoms,
            label=language,
            color=colors[n % len(colors)],
        )
        for (name, _), v in zip(phases, values, strict=True):
            drawn[name][language] = v
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel("tokens planned")
    ax.set_title("tokens per phase and language")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.savefig(path, dpi=dpi, format="png")
    plt.close(fig)
    return drawn


def plot_rewards(report: Mapping[str, Any], path: str | os.PathLike, *, dpi: int = 100) -> None:
    """The reward report as bars: each model's mean reward (expected reward of the policy and
    greedy answers), overall and per language, with the paired standard error of the
    difference to the baseline on the overall bars."""
    plt = _pyplot()
    order = list(report["order"])
    parts = (
        ("expected reward (sampled)", report["sampled"]),
        ("greedy answers", report),
    )
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    for ax, (title, part) in zip(axes, parts, strict=True):
        models = part["models"]
        languages = sorted({lang for name in order for lang in models[name]["per_language"]})
        groups = ["all", *languages]
        width = 0.8 / len(order)
        for n, name in enumerate(order):
            values = [models[name]["mean"]] + [
                models[name]["per_language"].get(lang, {}).get("mean", float("nan"))
                for lang in languages
            ]
            x = [i + n * width for i in range(len(groups))]
            ax.bar(x, values, width=width, label=name, color=f"C{n}")
            cmp = part["comparison"].get(name)
            if cmp:  # on the overall bar: the paired standard error of the difference
                ax.errorbar(x[0], values[0], yerr=cmp["delta_stderr"], fmt="none",
                            capsize=4, color="black")  # fmt: skip
        ax.set_xticks([i + width * (len(order) - 1) / 2 for i in range(len(groups))], groups)
        ax.set_title(f"{title}, {report['prompt_count']} held-out prompts")
        ax.set_ylabel(f"mean reward ({report['reward']['kind']})")
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    fig.savefig(path, dpi=dpi, format="png")
    plt.close(fig)
