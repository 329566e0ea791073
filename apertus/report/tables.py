"""The report's tables, read from the other stages' output files (nothing is recomputed).

Each function takes what a stage wrote (a manifest, funnel.json, phase.json, scores.csv, the
reward report) and returns `Table`s; `apertus.report.html` renders them.
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.data.pii import PIIFormatter
from apertus.data.robots import RobotsFilter
from apertus.report.html import Table


class Totals(dict):
    """A dict of numbers that adds up the numbers of the dicts it is updated with."""

    def update(self, other: Mapping[str, Any] = (), **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in {**dict(other), **kwargs}.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self[key] = self.get(key, 0) + value


def step_counters(manifest: Mapping[str, Any], step_name: str) -> dict[str, Any]:
    """The datatrove counters of the pipeline step called `step_name` (its class's `name`) in a
    data step's manifest (`summary.stats`, keyed "<type>: <name>"); {} when it did not run."""
    stats = manifest.get("summary", {}).get("stats", {})
    for key, counters in stats.items():
        if key.endswith(step_name):
            return counters
    return {}


def robots_tables(
    filter_manifests: Sequence[tuple[str, Mapping[str, Any]]], funnel: Mapping[str, Any]
) -> list[Table]:
    """robots.txt opt-outs (RECIPE §5): per source, documents checked / allowed / without a
    robots.txt / removed, and which agents' rules removed them; per language, from the funnel."""
    per_source: dict[str, Totals] = defaultdict(Totals)
    for source, manifest in filter_manifests:
        per_source[source].update(step_counters(manifest, RobotsFilter.name))
    checked = Table(
        "robots.txt opt-out per source",
        ["source", "documents checked", "allowed", "host without robots.txt", "removed"],
        note="A document is removed when its host's robots.txt (the snapshot of the data "
        "stage) disallows its URL for any AI-crawler agent of RECIPE §5.",
    )
    agents: set[str] = set()
    for source, counts in sorted(per_source.items()):
        checked.rows.append(
            [
                source,
                counts.get("total", 0),
                counts.get("allowed", 0),
                counts.get("no_robots", 0),
                counts.get("dropped", 0),
            ]
        )
        agents |= {k.removeprefix("disallowed_") for k in counts if k.startswith("disallowed_")}
    sources = sorted(per_source)
    by_agent = Table(
        "documents whose URL each agent may not fetch",
        ["agent", *sources],
        note="A document counts once for every agent that is disallowed; one agent is enough "
        "to remove it.",
    )
    for agent in sorted(agents):
        by_agent.rows.append(
            [agent, *(per_source[s].get(f"disallowed_{agent}", 0) for s in sources)]
        )
    by_language = Table(
        "robots.txt removals per language (data funnel)",
        ["language", "documents read", "removed by robots.txt", "characters removed"],
    )
    for language, steps in sorted(funnel.get("languages", {}).items()):
        read = next((s for s in steps if s["step"] == "read"), None)
        robots = next((s for s in steps if s["step"] == "robots"), None)
        if read and robots:
            by_language.rows.append(
                [
                    language,
                    read["documents"],
                    robots["removed_documents"],
                    robots["removed_characters"],
                ]
            )
    return [checked, by_agent, by_language]


def skipped_table(funnel: Mapping[str, Any]) -> Table:
    """Records the readers skipped before they became documents (bad JSON, bad UTF-8, empty or
    unreadable files...), per source and reason (funnel.json ``skipped``)."""
    table = Table(
        "records the readers skipped, per source and reason",
        ["source", "reason", "records"],
        note="Never documents, so never in the funnel's removals; the data_filter log names "
        "the first examples (file:line).",
    )
    for source, reasons in sorted(funnel.get("skipped", {}).items()):
        if not reasons:
            table.rows.append([source, "(none)", 0])
        for reason, count in sorted(reasons.items()):
            table.rows.append([source, reason, count])
    return table


def removed_samples_table(
    removed_dirs: Sequence[Path], funnel: Mapping[str, Any], run_dir: Path, per_language: int = 2
) -> Table:
    """What each filter removed, per language: the funnel's count, the file holding the seeded
    sample (`data.removed`) and the first `per_language` of its documents, excerpted."""
    from apertus.data.funnel import FUNNEL_STEPS

    removed: dict[tuple[str, str], int] = {}
    for language, steps in funnel.get("languages", {}).items():
        for row in steps:
            if row.get("removed_documents"):
                removed[row["step"], language] = row["removed_documents"]
    table = Table(
        "what each filter removed: a seeded sample to read",
        ["filter", "language", "removed", "sample file", "document", "reason", "text (start)"],
        note="Each filter keeps a uniform sample of the documents it removed (data.removed); "
        "the files are JSON Lines with the reason in metadata.filter_reason.",
    )
    samples: dict[tuple[str, str], list[tuple[str, dict]]] = defaultdict(list)
    for directory in removed_dirs:
        for path in sorted(Path(directory).glob("*/*/*.jsonl")):
            key = (path.parent.parent.name, path.parent.name)
            with path.open(encoding="utf-8") as f:
                for line in f:
                    if len(samples[key]) >= per_language:
                        break
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    samples[key].append((path.relative_to(run_dir).as_posix(), record))
    order = {step: i for i, step in enumerate(FUNNEL_STEPS)}
    for step, language in sorted(
        set(samples) | set(removed), key=lambda k: (order.get(k[0], len(order)), k[1])
    ):
        count = removed.get((step, language))
        found = samples.get((step, language)) or [("-", {})]
        for where, record in found:
            text = " ".join(str(record.get("text", "")).split())
            table.rows.append(
                [
                    step,
                    language,
                    count,
                    where,
                    record.get("id", "-"),
                    record.get("metadata", {}).get("filter_reason", "-"),
                    text[:160] + ("..." if len(text) > 160 else "") if record else "-",
                ]
            )
    return table


def pii_table(select_manifest: Mapping[str, Any]) -> Table:
    """PII replaced by placeholders in the corpus (data_select), per kind."""
    counts = step_counters(select_manifest, PIIFormatter.name)
    table = Table(
        "PII replaced in the corpus",
        ["what", "count"],
        note="Counted by the data stage's PII step: each match is replaced by its placeholder "
        "(<email-pii>, <ip-pii>, <iban-pii>, <phone-pii>); code and math documents are exempt.",
    )
    table.rows += [
        ["documents written", counts.get("total", 0)],
        ["documents with PII", counts.get("documents_with_pii", 0)],
        ["documents exempt (code, math)", counts.get("exempt", 0)],
    ]
    table.rows += [
        [f"{key.removeprefix('replaced_')} replaced", value]
        for key, value in sorted(counts.items())
        if key.startswith("replaced_")
    ]
    return table


def phase_languages(phase: Mapping[str, Any], where: str) -> dict[str, dict[str, int]]:
    """{language: {"documents_planned", "tokens_planned"}} of a phase.json."""
    languages = phase.get("languages")
    if not isinstance(languages, dict):
        raise ApertusError(
            f"{where}: no per-language token counts; it was written by an older version of "
            "the tokenization stage: re-run it (snakemake --forcerun tokenize_shards)"
        )
    return languages


# The language labels of English in the tagger's label spaces (ft176, ISO 639-3, GlotLID).
ENGLISH = frozenset({"en", "eng", "eng_Latn"})


def non_english_share(phase: Mapping[str, Any], where: str) -> float:
    """The share of a phase's planned tokens in languages other than English."""
    total = int(phase["tokens_planned"])
    english = sum(
        counts.get("tokens_planned", 0)
        for language, counts in phase_languages(phase, where).items()
        if language in ENGLISH
    )
    return (total - english) / total if total else 0.0


def tokens_table(phases: Sequence[tuple[str, Mapping[str, Any]]]) -> list[Table]:
    """Tokens each phase plans to train on, per language and per source."""
    languages = sorted({lang for name, phase in phases for lang in phase_languages(phase, name)})
    per_language = Table(
        "tokens per phase and language",
        ["language", *(name for name, _ in phases)],
        note="Tokens of the documents each phase's plan reads (a document read twice counts "
        "twice), including the <s> and </s> of every document. The recipe aims at about 40% "
        "non-English tokens (RECIPE §5).",
    )
    for language in languages:
        per_language.rows.append(
            [
                language,
                *(
                    phase_languages(phase, name).get(language, {}).get("tokens_planned", 0)
                    for name, phase in phases
                ),
            ]
        )
    per_language.rows.append(["all", *(int(phase["tokens_planned"]) for _, phase in phases)])
    # RECIPE §5 aims at about 40% non-English tokens over the five phases.
    per_language.rows.append(["non-English share", *(non_english_share(p, n) for n, p in phases)])
    per_source = Table(
        "tokens per phase and source",
        ["phase", "source", "weight", "share", "epochs", "documents", "tokens"],
    )
    for name, phase in phases:
        for source in phase["sources"]:
            per_source.rows.append(
                [
                    name,
                    source["name"],
                    "-" if source.get("weight") is None else str(source["weight"]),
                    float(source.get("share", 0.0)),
                    source.get("epochs"),
                    source["documents_planned"],
                    source["tokens_planned"],
                ]
            )
    return [per_language, per_source]


def scores_table(scores_csv: str | os.PathLike) -> Table:
    """The evaluation table across checkpoints (evaluate/table/scores.csv), as it is."""
    path = Path(scores_csv)
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ApertusError(f"{path}: empty evaluation table")
    table = Table(
        "evaluation across checkpoints",
        rows[0],
        note="lm-eval on the project's held-out tasks (bits per byte: lower is better; "
        "cloze accuracy: higher is better), and the memorization probes' Rouge-L when planted.",
    )
    for row in rows[1:]:
        table.rows.append([row[0], *(_number(cell) for cell in row[1:])])
    return table


def _number(cell: str) -> float | str:
    try:
        return float(cell)
    except ValueError:
        return cell


def reward_tables(report: Mapping[str, Any]) -> list[Table]:
    """The QRPO reward report: each model's mean reward, against the baseline (SFT)."""
    tables = []
    for title, part in (
        (
            f"expected reward of the policy ({report['sampled']['n']} samples per prompt at "
            f"temperature {report['sampled']['temperature']})",
            report["sampled"],
        ),
        ("reward of greedy answers", report),
    ):
        table = Table(
            title,
            ["model", "mean reward", f"Δ vs {report['baseline']}", "± s.e.", "win rate"],
            note=f"{report['prompt_count']} held-out prompts, reward {report['reward']['kind']}.",
        )
        for name in report["order"]:
            cmp = part["comparison"].get(name)
            table.rows.append(
                [
                    name,
                    part["models"][name]["mean"],
                    cmp["mean_delta"] if cmp else None,
                    cmp["delta_stderr"] if cmp else None,
                    cmp["win_rate"] if cmp else None,
                ]
            )
        tables.append(table)
    return tables


def _scalars(summary: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """Flattened numbers and short strings of a manifest summary (nested dicts joined with
    dots, two levels deep; lists and long values left out)."""
    out: list[tuple[str, Any]] = []
    if not isinstance(summary, Mapping):
        return out
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and depth < 1:
            out += _scalars(value, name + ".", depth + 1)
        elif isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) < 80):
            out.append((name, value))
    return out


def manifest_tables(
    stage: str, manifests: Sequence[tuple[str, Mapping[str, Any]]], max_facts: int = 12
) -> list[Table]:
    """One stage's steps from their manifests: when and how long, config hash, code, outputs,
    then each step's headline numbers (its summary's first scalars)."""
    steps = Table(
        f"{stage}: steps",
        [
            "step",
            "manifest",
            "started (UTC)",
            "seconds",
            "config sha256",
            "code",
            "inputs",
            "output files",
            "output bytes",
            "SLURM job",
        ],
        note="From each step's manifest.json (`apertus audit` re-checks every hash).",
    )
    facts = []
    for rel, m in manifests:
        outputs = m.get("outputs", [])
        files = sum(len(o.get("files", {})) or 1 for o in outputs)
        code = m.get("code", {})
        commit = (code.get("commit") or "?")[:10] + (" (dirty)" if code.get("dirty") else "")
        steps.rows.append(
            [
                m.get("step", "?"),
                rel,
                str(m.get("started", "?")).replace("T", " ").removesuffix("+00:00"),
                m.get("seconds"),
                str(m.get("config_sha256", ""))[:12],
                commit,
                len(m.get("inputs", [])),
                files,
                sum(int(o.get("size", 0)) for o in outputs),
                m.get("slurm_job_id") or "-",
            ]
        )
        scalars = _scalars(m.get("summary", {}))
        if scalars:
            table = Table(f"{stage}: {rel} summary", ["key", "value"])
            table.rows = [list(kv) for kv in scalars[:max_facts]]
            if len(scalars) > max_facts:
                table.note = f"first {max_facts} of {len(scalars)} values; all in {rel}"
            facts.append(table)
    return [steps, *facts]


def cost_tables(run_config: Mapping[str, Any], manifests: Mapping[str, Mapping[str, Any]]) -> list:
    """What this run costs: `apertus plan` on the run's config (one row per GPU job: layout,
    peak memory per GPU against its limit, throughput, wall-clock, GPU-hours, checkpoints),
    each training job beside the wall-clock its step manifest measured, then the memory at
    each job's peak by part. `manifests` are the run's step manifests by their path."""
    from apertus.sizing.jobs import run_plan
    from apertus.sizing.render import HEADER, job_rows, memory_rows, total_line

    plan = run_plan(run_config)
    jobs = Table(
        "What this run costs: one row per GPU job",
        [*HEADER, "measured wall (s)"],
        note=f"{total_line(plan)}. Planned by `apertus plan` on the run's config (memory "
        "formulas in apertus/sizing/memory.py); 'measured' is the training step's manifest."
        + "".join(f" Note: {n}" for n in plan.notes),
    )
    for job, row in zip(plan.jobs, job_rows(plan), strict=True):
        manifest = (
            manifests.get(f"{job.manifest_key}.manifest.json", {}) if job.manifest_key else {}
        )
        jobs.rows.append([*row, manifest.get("seconds")])
    memory = Table(
        "Memory per GPU at each job's peak, GB",
        ["job", "moment", "parts"],
        [list(row) for row in memory_rows(plan)],
    )
    return [jobs, memory]
