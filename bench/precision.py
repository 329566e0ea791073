r"""bf16 against fp32 on the tiny default (issue 43): the default run's first phase trained in
float32 and in bfloat16 from the same start, with a second float32 run from another seed as the
yardstick; then the bf16 run exported in bfloat16 and checked against its checkpoint in
transformers.

    python -m bench.precision [--quick] [--steps 200] [--results results] [--out DIR]
        [--device cpu|cuda] [--threads N]

The runs are the default's `phase1` stage as `apertus.train.stage` builds it from the default
config (tiny flavor, its batch, WSD schedule, AdEMAMix, Goldfish), cut to `--steps` steps on the
default run's tokenized phases (made first with `snakemake` when `--results` has none):

* `fp32`: the stage as the default runs it (`pretrain.dtype: float32`);
* `bf16`: the same spec with `dtype: bfloat16`, the presets' policy (FSDP2 mixed precision: bf16
  parameters and compute, fp32 master weights and gradient reduction), same seed, same data;
* `fp32, seed + 1`: another initialisation, same data: seed-to-seed noise.

With `--device cuda` the bf16 run is on the GPU and both fp32 runs on the CPU (the CPU curve the
issue compares the GPU against). The three runs train at once, sharing `--threads`.

Curves are compared as means over windows of 10 steps, from the second half of the run on (the
first steps of two seeds differ by their init alone): the mean absolute difference of the window
means, bf16 against fp32, over the same figure between the two fp32 seeds, should be <= 1: bf16
moves the curve less than a change of seed does. The last window's gap is reported beside it,
without a tolerance: one window is one sample, and two seeds' curves cross now and then. The
export is `apertus.export.hf.export_checkpoint` in bfloat16 and
`apertus.export.verify.verify_export`, as the export stage runs them: transformers' logits of the
bf16 folder against our model with the same bf16 weights, on four rows of held-out text.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import Ratio, main

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 10
PHASE = "phase1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=200, help="steps of each run")
    parser.add_argument("--results", type=Path, default=ROOT / "results", help="results_dir")
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: in results)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="of the bf16 run")
    parser.add_argument("--threads", type=int, default=2, help="shared by the three runs")


def default_config(results: Path) -> dict:
    from apertus.core.config import load_config

    return load_config(overrides=[f"results_dir={results}"], directory=ROOT)


def ensure_phases(config: dict, cores: int) -> Path:
    """The default run's tokenize folder, its phases made with Snakemake when missing."""
    tokenize = Path(config["results_dir"]) / config["run"] / "tokenize"
    phases = config["pretrain"]["phases"]
    targets = [tokenize / "phases" / f"{p}.manifest.json" for p in phases]
    targets += [tokenize / "heldout.manifest.json"]
    if not all(t.is_file() for t in targets):
        command = [
            str(Path(sys.executable).with_name("snakemake")),
            "--cores",
            str(cores),
            "--config",
            f"results_dir={config['results_dir']}",
            "--",
            *map(str, targets),
        ]
        print("making the default run's phases:", " ".join(command), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    return tokenize


def phase_spec(config: dict, tokenize: Path, steps: int):
    """The default's `phase1` run spec (`apertus.train.stage.run_spec`), cut to `steps`."""
    from apertus.train.config import PretrainConfig
    from apertus.train.stage import run_spec

    cfg = PretrainConfig.from_dict({"long_context": [], "goldfish_control": None,
                                    **config["pretrain"]})  # fmt: skip
    spec = run_spec(cfg, PHASE, tokenize / "phases", None)
    if steps > spec.steps:
        raise SystemExit(f"error: --steps {steps}: the default's {PHASE} has {spec.steps} steps")
    # The WSD schedule keeps its length: these are the first `steps` steps of the stage.
    return dataclasses.replace(spec, steps=steps, checkpoint=dataclasses.replace(
        spec.checkpoint, interval=steps))  # fmt: skip


def train(runs: dict, out: Path, steps: int, threads: int) -> dict[str, dict[int, float]]:
    """Each run spec of `runs` in its folder `out/<name>-<steps>` (resumed if it is there), all
    at once with `threads` shared out: the loss per step of each."""
    from apertus.train.metrics import read_metrics
    from apertus.train.run_spec import write_run_spec

    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // len(runs)))}
    started = {}
    for name, spec in runs.items():
        work = out / f"{name}-{steps}"
        spec = spec.placed(work)
        write_run_spec(work / "spec.json", spec)
        command = [sys.executable, "-m", "apertus.train.launch", "--spec", str(work / "spec.json")]
        print(
            f"training {work.name}: {spec.steps} steps, {spec.dtype} on {spec.device}", flush=True
        )
        log = (work / "train.log").open("w")
        started[name] = (work, subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                                stderr=subprocess.STDOUT))  # fmt: skip
    failed = [name for name, (_, proc) in started.items() if proc.wait() != 0]
    if failed:
        raise SystemExit(f"error: training {', '.join(failed)} failed; see train.log in {out}")
    return {
        name: {s: r["loss"] for s, r in read_metrics(work / "out" / "metrics.jsonl").items()}
        for name, (work, _) in started.items()
    }


def window_means(losses: dict[int, float]) -> list[float]:
    steps = sorted(losses)
    return [
        sum(losses[s] for s in steps[i : i + WINDOW]) / WINDOW
        for i in range(0, len(steps) - WINDOW + 1, WINDOW)
    ]


def curve_gap(a: dict[int, float], b: dict[int, float]) -> tuple[float, float]:
    """(mean |a - b| of the window means from the second half on, |a - b| of the last window)."""
    wa, wb = window_means(a), window_means(b)
    late = range(len(wa) // 2, len(wa))
    mean_gap = sum(abs(wa[i] - wb[i]) for i in late) / len(late)
    return mean_gap, abs(wa[-1] - wb[-1])


def export_and_verify(spec, work: Path, tokenize: Path) -> dict:
    from apertus.export.hf import export_checkpoint
    from apertus.export.stage import RunRecord
    from apertus.export.verify import verification_batch, verify_export
    from apertus.tokenize.tokenizer import load_tokenizer

    checkpoint = work / "ckpt" / f"step-{spec.steps}"
    # The model as the export stage reads it from a run's record.
    record = RunRecord(work.name, checkpoint, spec.flavor, spec.model_overrides, spec.seq_len)
    model_config = record.model_config()
    folder = work / "export-bf16"
    if not (folder / "config.json").is_file():
        export_checkpoint(
            checkpoint, model_config, folder, tokenize / "tokenizer", dtype="bfloat16"
        )
    batch = verification_batch(load_tokenizer(str(folder)), tokenize / "heldout", 4, spec.seq_len)
    return verify_export(checkpoint, model_config, folder, batch)


def measure(args: argparse.Namespace) -> list[Ratio]:
    if args.quick:
        args.steps = 40
    if args.steps < 4 * WINDOW:
        raise SystemExit(f"error: --steps {args.steps}: at least {4 * WINDOW} for the windows")
    config = default_config(args.results.absolute())
    tokenize = ensure_phases(config, args.threads)
    out = (args.out or Path(config["results_dir"]) / "bench-precision").absolute()
    base = dataclasses.replace(phase_spec(config, tokenize, args.steps), device="cpu")
    runs = {
        "fp32": base,
        "bf16": dataclasses.replace(base, dtype="bfloat16", device=args.device),
        "fp32-seed+1": dataclasses.replace(base, seed=base.seed + 1),
    }
    losses = train(runs, out, args.steps, args.threads)
    bf16_gap, bf16_final = curve_gap(losses["bf16"], losses["fp32"])
    seed_gap, seed_final = curve_gap(losses["fp32-seed+1"], losses["fp32"])
    card = export_and_verify(runs["bf16"], out / f"bf16-{args.steps}", tokenize)
    (out / f"curves-{args.steps}.json").write_text(json.dumps(losses, indent=1))
    where = (
        f"the default's {PHASE}, first {args.steps} of {base.lr.total_steps} steps, "
        f"{base.global_batch} x {base.seq_len} tokens a step; bf16 on {args.device}; "
        f"windows of {WINDOW} steps from step {args.steps // 2}; curves in "
        f"{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}"
    )
    return [
        Ratio("bf16 - fp32 loss, mean |gap| (2nd half)", bf16_gap, seed_gap, "loss",
              "fp32 seed - seed", goal=1.0, note=where),
        Ratio("bf16 - fp32 last-window loss |gap|", bf16_final, seed_final, "loss",
              "fp32 seed - seed",
              note=f"one window of {WINDOW} steps, no tolerance (a single sample: the two fp32 "
              f"seeds' curves cross now and then); last-window losses: fp32 "
              f"{window_means(losses['fp32'])[-1]:.4f}, bf16 "
              f"{window_means(losses['bf16'])[-1]:.4f}, fp32 seed+1 "
              f"{window_means(losses['fp32-seed+1'])[-1]:.4f}"),
        Ratio("bf16 export: max |logit diff|", card["max_abs_diff"], card["tolerance"], "logit",
              "the export stage's tolerance", goal=1.0,
              note=f"transformers on the bf16 folder against our model with its bf16 weights "
              f"(both computed in float32), {card['batch']['rows']} x {card['batch']['seq_len']} "
              f"held-out tokens; mean |diff| {card['mean_abs_diff']:.2e}"),
    ]  # fmt: skip


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
