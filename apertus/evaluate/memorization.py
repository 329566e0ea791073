"""Memorization of planted probes, per exposure count: does Goldfish loss stop verbatim recall?

    python -m apertus.evaluate.memorization --config JSON --manifest M --model DIR
        --probes FILE --tokenizer DIR (--phases DIR... | --runs DIR...) --output DIR
        [--compare LABEL=MEMORIZATION_JSON ...]

The data stage plants random probe texts a known number of times (apertus.data.probes). Here,
following Hans et al. (2024, "Be like a Goldfish, Don't Memorize!", §4), each probe is cut into
a *prompt*, ``<s>`` and its first `prefix_tokens` tokens, and a *true suffix*, the next
`suffix_tokens` tokens; the model continues the prompt greedily for `suffix_tokens` tokens, and
the continuation is scored against the true suffix by

- Rouge-L F1 (Lin 2004) on tokens: :func:`rouge_l`, from the longest common subsequence;
- the exact-match prefix: how many leading tokens are right before the first mistake
  (:func:`exact_match_prefix`); equal to `suffix_tokens` for a verbatim copy.

Scores are aggregated per exposure count, and the controls (texts made like probes but never
planted, exposure 0) give the baseline of a model that never saw the text. A model that memorizes
moves from the control's level towards Rouge-L 1 as exposures grow; Goldfish should keep the
exact-match prefix short, since about 1 in k tokens of every copy never received a gradient.

Tokenization is the pretraining one (``<s> text </s>``, apertus.tokenize.tokenizer): the text is
encoded without the tokenizer's post-processor, ``<s>`` is put in front here, and the ``</s>``
that ends the document is not part of the prompt. Generation does not stop at ``</s>``
(a model that ends a probe early simply scores those positions as wrong), so every continuation
has exactly `suffix_tokens` tokens.

Exposures are *measured*, not taken on trust: :func:`exposure_counts` finds every copy of each
probe's token sequence in the data phases the model trained on (or in the part of each phase a
pretraining run consumed: :func:`trained_stream`), so a probe dropped from a phase, duplicated,
or cut off by the end of training shows up as a count that differs from the planned one.
Results go to ``memorization.json``; ``memorization.png`` plots the curves (:func:`plot_curves`),
optionally beside other runs' (e.g. the same model trained without Goldfish).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from apertus.core import ApertusError
from apertus.core.device import resolve_device
from apertus.core.files import atomic_write_json, recorded_path
from apertus.core.progress import Progress
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config, is_integer
from apertus.data.probes import Probe, read_probes

RESULT_FILE = "memorization.json"
PLOT_FILE = "memorization.png"
# Plan rows read at once when counting planted documents in a phase.
_ROWS_PER_CHUNK = 1 << 20


@dataclass(frozen=True)
class MemorizationConfig(Config, key="evaluate.memorization"):
    """`evaluate.memorization`: prompt and continuation lengths, batching, device, plot label."""

    prefix_tokens: int
    suffix_tokens: int
    batch_size: int
    device: str
    label: str

    def __post_init__(self) -> None:
        for key in ("prefix_tokens", "suffix_tokens", "batch_size"):
            value = getattr(self, key)
            if not is_integer(value) or value < 1:
                raise ApertusError(
                    f"evaluate.memorization.{key} must be an integer >= 1, got {value!r}"
                )
        if not isinstance(self.device, str) or not self.device:
            raise ApertusError("evaluate.memorization.device must be 'auto', 'cpu' or 'cuda[:N]'")
        if not isinstance(self.label, str) or not self.label:
            raise ApertusError("evaluate.memorization.label must be a non-empty string")


# ---------------------------------------------------------------------------------------------
# Scores


def longest_common_subsequence(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common subsequence of `a` and `b` (dynamic programming, O(len(a) *
    len(b)) time, O(len(b)) memory)."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(candidate: Sequence[int], reference: Sequence[int]) -> float:
    """Rouge-L F1 of `candidate` against `reference` (Lin 2004, "ROUGE", §3.1 with beta = 1):
    P = LCS / len(candidate), R = LCS / len(reference), F = 2PR / (P + R). 0 when either is
    empty or nothing is shared, as in Google's rouge-score package."""
    lcs = longest_common_subsequence(candidate, reference)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(candidate), lcs / len(reference)
    return 2 * precision * recall / (precision + recall)


def exact_match_prefix(candidate: Sequence[int], reference: Sequence[int]) -> int:
    """Number of leading tokens of `candidate` equal to `reference`'s, up to the first mismatch
    (Hans et al. 2024 count a continuation as an exact match when this is the whole suffix)."""
    count = 0
    for x, y in zip(candidate, reference, strict=False):
        if x != y:
            break
        count += 1
    return count


# ---------------------------------------------------------------------------------------------
# Measuring


def _probe_tokens(tokenizer, probes: Sequence[Probe]) -> list[list[int]]:
    """Each probe as the pretraining shards hold it: ``<s> ... </s>``."""
    from apertus.tokenize.tokenizer import encode_documents

    return encode_documents(tokenizer, [p.text for p in probes])


def _summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    rouge = [r["rouge_l"] for r in rows]
    exact = [r["exact_match_prefix"] for r in rows]
    full = [r["exact_match_prefix"] == len(r["reference"]) for r in rows]
    return {
        "probes": len(rows),
        "rouge_l_mean": float(np.mean(rouge)),
        "rouge_l_min": float(np.min(rouge)),
        "rouge_l_max": float(np.max(rouge)),
        "exact_match_prefix_mean": float(np.mean(exact)),
        "exact_match_prefix_max": int(np.max(exact)),
        "verbatim": int(sum(full)),
    }


def measure(
    model_dir: Path,
    probes_jsonl: Path,
    *,
    prefix_tokens: int,
    suffix_tokens: int,
    exposures_by_probe: Mapping[str, int] | None = None,
    tokenizer_dir: Path | None = None,
    batch_size: int = 16,
    device: str = "cpu",
) -> dict[str, Any]:
    """Greedy continuations of every probe and control, scored and aggregated per exposure count.

    `model_dir` is a Hugging Face folder (the export stage's); its tokenizer is used unless
    `tokenizer_dir` is given. With `exposures_by_probe` (from :func:`exposure_counts`), probes are
    grouped by their measured exposures, which must cover every probe; otherwise by the planned
    ones in `probes_jsonl`. A probe with fewer than ``prefix_tokens + suffix_tokens`` tokens is an
    error naming it. Returns::

        {"prefix_tokens", "suffix_tokens", "exposures_from": "measured" | "planned",
         "curve": [{"exposures", "probes", "rouge_l_mean", "rouge_l_min", "rouge_l_max",
                    "exact_match_prefix_mean", "exact_match_prefix_max", "verbatim"}, ...],
         "control": the exposure-0 row (or None), "exposure_mismatches": [...],
         "probes": [{"probe_id", "exposures", "exposures_planned", "rouge_l",
                     "exact_match_prefix", "prompt", "reference", "generated",
                     "reference_text", "generated_text"}, ...]}
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name, value in (
        ("prefix_tokens", prefix_tokens),
        ("suffix_tokens", suffix_tokens),
        ("batch_size", batch_size),
    ):
        if not is_integer(value) or value < 1:
            raise ApertusError(f"{name} must be an integer >= 1, got {value!r}")
    probes = read_probes(Path(probes_jsonl))
    if exposures_by_probe is not None:
        missing = [p.probe_id for p in probes if p.probe_id not in exposures_by_probe]
        if missing:
            raise ApertusError(
                f"no measured exposure count for {len(missing)} probes: {missing[:5]}"
            )
    tokenizer_dir = Path(tokenizer_dir or model_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except Exception as e:
        raise ApertusError(f"cannot load the tokenizer in {tokenizer_dir}: {e}") from e
    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    except Exception as e:
        raise ApertusError(f"cannot load a causal LM from {model_dir}: {e}") from e
    torch_device = resolve_device(device, setting="evaluate.memorization.device")
    model.to(torch_device).eval()

    encoded = _probe_tokens(tokenizer, probes)
    need = prefix_tokens + suffix_tokens
    prompts, references = [], []
    for probe, ids in zip(probes, encoded, strict=True):
        body = ids[1:-1]  # without the <s> and </s> that encode_documents puts around the text
        if len(body) < need:
            raise ApertusError(
                f"{probes_jsonl}: {probe.probe_id} has {len(body)} tokens, fewer than "
                f"prefix_tokens + suffix_tokens = {need}; plant longer probes (data.probes.words)"
                " or shorten the prompt or continuation"
            )
        prompts.append([ids[0], *body[:prefix_tokens]])
        references.append(body[prefix_tokens:need])

    generated: list[list[int]] = []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with (
        torch.inference_mode(),
        Progress(len(prompts), f"memorization {Path(model_dir).name}", unit="probes") as progress,
    ):
        for start in range(0, len(prompts), batch_size):
            # Every prompt has the same length: the batch needs no padding.
            batch = torch.tensor(prompts[start : start + batch_size], device=torch_device)
            out = model.generate(
                input_ids=batch,
                attention_mask=torch.ones_like(batch),
                do_sample=False,
                num_beams=1,
                max_new_tokens=suffix_tokens,
                # None: no end-of-sequence stop, so a continuation is always suffix_tokens long.
                eos_token_id=None,
                pad_token_id=pad,
            )
            new = out[:, batch.shape[1] :]
            if new.shape[1] != suffix_tokens:
                raise ApertusError(
                    f"generate returned {new.shape[1]} new tokens instead of {suffix_tokens}; "
                    "this transformers version stopped early despite eos_token_id=None"
                )
            generated.extend(new.tolist())
            progress.update(len(batch))

    rows = []
    for probe, prompt, reference, candidate in zip(
        probes, prompts, references, generated, strict=True
    ):
        measured = exposures_by_probe[probe.probe_id] if exposures_by_probe is not None else None
        rows.append(
            {
                "probe_id": probe.probe_id,
                "exposures": probe.exposures if measured is None else int(measured),
                "exposures_planned": probe.exposures,
                "rouge_l": rouge_l(candidate, reference),
                "exact_match_prefix": exact_match_prefix(candidate, reference),
                "prompt": prompt,
                "reference": reference,
                "generated": candidate,
                "reference_text": tokenizer.decode(reference),
                "generated_text": tokenizer.decode(candidate),
            }
        )
    by_count: dict[int, list[dict]] = {}
    for row in rows:
        by_count.setdefault(row["exposures"], []).append(row)
    curve = [{"exposures": e, **_summary(by_count[e])} for e in sorted(by_count)]
    return {
        "prefix_tokens": prefix_tokens,
        "suffix_tokens": suffix_tokens,
        "exposures_from": "planned" if exposures_by_probe is None else "measured",
        "curve": curve,
        "control": next((row for row in curve if row["exposures"] == 0), None),
        "exposure_mismatches": [
            {
                "probe_id": r["probe_id"],
                "planned": r["exposures_planned"],
                "measured": r["exposures"],
            }
            for r in rows
            if r["exposures"] != r["exposures_planned"]
        ],
        "probes": rows,
    }


# ---------------------------------------------------------------------------------------------
# Exposures


def trained_stream(run_dir: Path) -> tuple[Path, int]:
    """(phase directory, tokens of its stream the run trained on) of a pretraining run output
    (``pretrain/<name>/`` with its ``spec.json``).

    The loader cuts a phase's stream into windows of ``seq_len + 1`` tokens and step ``s`` of a
    run trains on the global batch's worth of windows after those of the steps before it,
    starting from window 0 of the phase (a run that continues an earlier phase's checkpoint does
    not load its data position; apertus.train.dataloader). So the run consumed the first
    ``sequences(first_step, steps) * (seq_len + 1)`` tokens, where `first_step` is the step of
    the checkpoint a ``continue`` run starts from (0 otherwise) and the batch follows the run's
    ramp (`apertus.train.run_spec.RunSpec.ramp`).
    """
    from apertus.tokenize.phases import PHASE_FILE
    from apertus.train.run_spec import load_run_spec

    spec_path = Path(run_dir) / "spec.json"
    if not spec_path.is_file():
        raise ApertusError(f"{spec_path}: not found; is {run_dir} a pretraining run?")
    spec = load_run_spec(spec_path)
    if spec.phase_dir is None:
        raise ApertusError(f"{spec_path}: not a pretraining run (it trains on {spec.sft_data})")
    # The stage records its paths relative to the run output (apertus.train.stage); a
    # spec.json written before held them as the trainer was given them.
    resolved = spec.resolved(run_dir)
    phase_dir, seq_len = Path(resolved.phase_dir), spec.seq_len
    if not (phase_dir / PHASE_FILE).is_file() and (Path(spec.phase_dir) / PHASE_FILE).is_file():
        phase_dir = Path(spec.phase_dir)
    windows = spec.ramp().sequences(resolved.first_step(), spec.steps)
    return phase_dir, windows * (seq_len + 1)


def goldfish_record(run_dir: Path) -> dict[str, Any]:
    """The Goldfish loss of a pretraining run output (RECIPE §2): its settings and the share of
    labels it dropped, over all the run's steps (the `goldfish_fraction` of its metrics; None
    when the run kept no metrics)."""
    from apertus.train.metrics import read_metrics
    from apertus.train.run_spec import load_run_spec

    spec = load_run_spec(Path(run_dir) / "spec.json")
    metrics = Path(run_dir) / "metrics.jsonl"
    records = read_metrics(metrics).values() if metrics.is_file() else []
    fractions = [m["goldfish_fraction"] for m in records if "goldfish_fraction" in m]
    return {
        "run": Path(run_dir).name,
        "enabled": spec.goldfish.enabled,
        "k": spec.goldfish.k,
        "h": spec.goldfish.h,
        "dropped_fraction": sum(fractions) / len(fractions) if fractions else None,
    }


def exposure_counts(
    phases: Sequence[Path | str | tuple[Path | str, int | None]],
    probes_jsonl: Path,
    tokenizer_dir: Path,
) -> dict[str, int]:
    """How many times each probe's (and control's) token sequence ``<s> ... </s>`` is a whole
    document of the given data phases, added up over the phases.

    Each entry of `phases` is a phase directory (every planned document counts) or a pair
    (phase directory, tokens), counting only documents that end within the first `tokens` tokens
    of the phase's stream (what a run trained on: :func:`trained_stream`; None = all). A phase
    listed twice counts twice (a later stage re-reading a phase trains on its copies again).
    Documents are matched by their exact tokens, read through
    :class:`apertus.tokenize.phases.PhaseDataset`; only documents of a probe's length are read.
    """
    from transformers import AutoTokenizer

    from apertus.tokenize.phases import PhaseDataset

    probes = read_probes(Path(probes_jsonl))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except Exception as e:
        raise ApertusError(f"cannot load the tokenizer in {tokenizer_dir}: {e}") from e
    owner: dict[bytes, str] = {}
    for probe, ids in zip(probes, _probe_tokens(tokenizer, probes), strict=True):
        # Two probes with the same tokens could not be told apart in the data.
        key = np.asarray(ids, dtype=np.int64).tobytes()
        if key in owner:
            raise ApertusError(f"{probe.probe_id} and {owner[key]} tokenize identically")
        owner[key] = probe.probe_id
    lengths = np.array(sorted({len(k) // 8 for k in owner}), dtype=np.int64)
    counts = dict.fromkeys((p.probe_id for p in probes), 0)
    for entry in phases:
        phase_dir, limit = (entry, None) if isinstance(entry, str | Path) else entry
        phase_dir = Path(phase_dir)
        # Opening checks the index against phase.json and the shards; each block it reads is
        # checked against its crc32 (apertus.core.blocks).
        dataset = PhaseDataset(phase_dir)
        before = 0  # tokens of the stream before the chunk
        for start in range(0, len(dataset), _ROWS_PER_CHUNK):  # the plan can be billions of rows
            doc_tokens = dataset.rows(start, start + _ROWS_PER_CHUNK)["tokens"]
            ends = np.cumsum(doc_tokens) + before
            before = int(ends[-1])
            candidates = np.flatnonzero(np.isin(doc_tokens, lengths))
            if limit is not None:
                candidates = candidates[ends[candidates] <= limit]
            for i in candidates:
                document = dataset.document(start + int(i))
                probe_id = owner.get(np.asarray(document, dtype=np.int64).tobytes())
                if probe_id is not None:
                    counts[probe_id] += 1
            if limit is not None and before >= limit:
                break
    return counts


# ---------------------------------------------------------------------------------------------
# Plot


def _read_result(path: Path | str) -> dict[str, Any]:
    """A memorization.json, or an ApertusError naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ApertusError(f"cannot read memorization results {path}: {e}") from None


def plot_curves(results: Mapping[str, dict[str, Any] | Path | str], path: Path) -> Path:
    """Rouge-L (mean, with the min-max range shaded) and mean exact-match prefix against the
    exposure count (log scale), one curve per labelled result (a :func:`measure` dict or the
    path of a memorization.json); each result's control is a dashed line of its colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not results:
        raise ApertusError("plot_curves needs at least one result")
    figure, (ax_rouge, ax_exact) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    suffix = None
    exposures_seen: list[int] = []
    for i, (label, result) in enumerate(results.items()):
        if not isinstance(result, dict):
            result = _read_result(result)
        color = f"C{i}"
        planted = [row for row in result["curve"] if row["exposures"] > 0]
        x = [row["exposures"] for row in planted]
        exposures_seen.extend(x)
        ax_rouge.plot(x, [r["rouge_l_mean"] for r in planted], "o-", color=color, label=label)
        ax_rouge.fill_between(
            x,
            [r["rouge_l_min"] for r in planted],
            [r["rouge_l_max"] for r in planted],
            color=color,
            alpha=0.15,
        )
        ax_exact.plot(
            x, [r["exact_match_prefix_mean"] for r in planted], "o-", color=color, label=label
        )
        control = result.get("control")
        if control:
            ax_rouge.axhline(control["rouge_l_mean"], color=color, ls="--", lw=1)
            ax_exact.axhline(control["exact_match_prefix_mean"], color=color, ls="--", lw=1)
        suffix = result["suffix_tokens"]
    # Fixed limits: a log axis autoscaled over no planted point (every probe measured at 0
    # exposures) has no valid range and matplotlib refuses to draw it.
    xlim = (0.7, 1.4 * max(exposures_seen, default=64))
    ax_rouge.set(xscale="log", xlim=xlim, xlabel="exposures", ylabel="Rouge-L F1", ylim=(0, 1.02))
    ax_exact.set(
        xscale="log",
        xlim=xlim,
        xlabel="exposures",
        ylabel="exact-match prefix (tokens)",
        ylim=(0, (suffix or 1) * 1.02),
    )
    ax_rouge.set_title("greedy continuation vs true suffix (dashed: never-seen controls)")
    ax_exact.set_title(f"leading tokens right, of {suffix}")
    ax_rouge.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


# ---------------------------------------------------------------------------------------------
# Entry point


def main(argv=None):
    parser = stage_parser("evaluate", __doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="exported Hugging Face folder")
    parser.add_argument("--probes", type=Path, required=True, help="probes.jsonl of data.probes")
    parser.add_argument("--tokenizer", type=Path, required=True, help="the training tokenizer")
    parser.add_argument(
        "--phases", type=Path, nargs="*", default=[], help="data phases: all planned documents"
    )
    parser.add_argument(
        "--runs",
        type=Path,
        nargs="*",
        default=[],
        help="pretraining run outputs (pretrain/<name>): the part of their phase they trained on",
    )
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--label", help="this curve's label (default: evaluate.memorization.label)")
    parser.add_argument(
        "--compare",
        nargs="*",
        default=[],
        metavar="LABEL=JSON",
        help="other runs' memorization.json to plot beside this one",
    )
    args = parser.parse_args(argv)
    # The rule passes the evaluate section; a bare evaluate.memorization section is accepted.
    section = args.config.get("memorization", args.config)
    own_keys = {f.name for f in fields(MemorizationConfig)}
    if "memorization" not in args.config and not set(args.config) <= own_keys:
        raise ApertusError("--config has no 'memorization' section (evaluate.memorization)")
    if not isinstance(section, dict):
        raise ApertusError("evaluate.memorization must be a mapping")
    cfg = MemorizationConfig.from_dict(section)
    label = args.label or cfg.label
    if bool(args.phases) == bool(args.runs):
        raise ApertusError("give either --phases (planned data) or --runs (trained data)")
    compare = labelled_paths(args.compare, "--compare", taken=label)
    inputs = [args.model, args.probes, args.tokenizer, *args.phases, *args.runs, *compare.values()]
    with StepRun(
        "evaluate",
        "memorization",
        args.config,
        inputs=inputs,
        outputs=[args.output / RESULT_FILE, args.output / PLOT_FILE],
        manifest=args.manifest,
    ) as step:
        phases = list(args.phases) or [trained_stream(run) for run in args.runs]
        counts = exposure_counts(phases, args.probes, args.tokenizer)
        result = measure(
            args.model,
            args.probes,
            prefix_tokens=cfg.prefix_tokens,
            suffix_tokens=cfg.suffix_tokens,
            exposures_by_probe=counts,
            batch_size=cfg.batch_size,
            device=cfg.device,
        )
        result["label"] = label
        if args.runs:
            result["goldfish"] = goldfish_record(args.runs[-1])
        # The curves plotted beside this one, kept with it (the release card reads them).
        result["compared"] = {name: _read_result(path) for name, path in compare.items()}
        # Relative to the result's folder, as every path in a results folder's records.
        result["phases"] = [
            {"phase": recorded_path(p, args.output), "tokens": None}
            if isinstance(p, Path)
            else {"phase": recorded_path(p[0], args.output), "tokens": p[1]}
            for p in phases
        ]
        args.output.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.output / RESULT_FILE, result)
        plot_curves({label: result, **result["compared"]}, args.output / PLOT_FILE)
        step.summary.update(
            curve=result["curve"], exposure_mismatches=len(result["exposure_mismatches"])
        )


def labelled_paths(items: list[str], flag: str, taken: str | None = None) -> dict[str, Path]:
    """``LABEL=PATH`` arguments of `flag` as {label: path}; a malformed one or a label used
    twice (or equal to `taken`, this run's own) is an ApertusError."""
    out: dict[str, Path] = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise ApertusError(f"{flag} takes LABEL=PATH, got {item!r}")
        if label == taken or label in out:
            raise ApertusError(f"{flag} label {label!r} is used twice")
        out[label] = Path(path)
    return out


def plot_main(argv=None):
    """``python -m apertus.evaluate.memorization plot --curve LABEL=JSON ... --output PNG``:
    the curves of several runs in one plot (e.g. a phase and its Goldfish control),
    and their numbers per exposure count on stdout."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m apertus.evaluate.memorization plot")
    parser.add_argument("--curve", action="append", required=True, metavar="LABEL=JSON")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    curves: dict[str, dict[str, Any]] = {}
    for label, path in labelled_paths(args.curve, "--curve").items():
        try:
            curves[label] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ApertusError(f"cannot read memorization results {path}: {e}") from None
    plot_curves(curves, args.output)
    print("label\texposures\trouge_l_mean\texact_match_prefix_mean")
    for label, result in curves.items():
        for row in sorted(result["curve"], key=lambda r: r["exposures"]):
            print(
                f"{label}\t{row['exposures']}\t{row['rouge_l_mean']:.4f}"
                f"\t{row['exact_match_prefix_mean']:.2f}"
            )
    print(f"plot: {args.output}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["plot"]:
        run_main(plot_main, sys.argv[2:])
    else:
        run_main(main)
