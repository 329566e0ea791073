"""Entry point of the QRPO step of post-training: offline alignment of the SFT model on scored
completions (RECIPE.md §7), on the distributed torchtitan trainer of the other training stages.

    python -m apertus.posttrain.qrpo_train --config JSON --manifest M --sft-run DIR
        --completions FILE --output DIR --work-dir DIR

``--sft-run`` is the SFT step's output directory; its ``run.json`` (the format of
``apertus.train.stage``) names the checkpoint the policy starts from, the flavor and the model
overrides. The reference policy is that same model, frozen, and is never loaded here: its
log-probabilities come precomputed in ``--completions``, a JSONL file with one scored
completion per line::

    {"prompt_id": "p17", "completion_id": "p17-3",   # strings or integers; pairs unique
     "input_ids": [1, 523, ...],                     # prompt and completion token ids
     "completion_mask": [0, 0, ..., 1, 1],           # 1 at completion tokens (never the first)
     "reward": 0.42,                                 # R(x, y)
     "reference_rewards": [0.1, 0.5, ...],           # R(x, y_ref_j) of the prompt's n samples
     "reference_logp": -37.2}                        # log pi_ref(y|x), summed over completion

Other keys (the texts, a sampler's metadata) are ignored. Every record is checked before any
training process starts: a completion longer than the model's context, a reward that is not a
finite number (NaN), a prompt without reference samples ... is an ApertusError naming the file,
the line and the prompt id.

The completions, with their quantile rewards, become a QRPO data directory in ``--work-dir``
(`apertus.train.qrpo_loader`), and the run is `apertus.train.stage.train_and_record`'s, as SFT's:
torchrun over `nproc` processes (FSDP over the data-parallel ranks, `tensor_parallel` where
set), each reading its share of every step's completions; QRPO's loss
(`apertus.train.qrpo_loss`) averaged over the step's completions across ranks and
micro-batches; `epochs` passes, each a ``torch.randperm`` of the completions seeded with `seed`
in steps of `batch_size` completions (the last one the rest, filled up with rows of weight 0,
counted as ``filler_rows`` in the manifest); AdEMAMix with the SFT stage's
numbers (RECIPE.md §7: alpha 8, beta3 0.999, T = total steps, no weight decay) at a constant LR
after a linear warmup; gradient clipping; a DCP checkpoint every `checkpoint_interval` steps and
at the end; the SIGTERM / SLURM-deadline early stop and self-requeue of pretraining; a re-run
resumes from the last checkpoint. ``--output`` receives ``run.json`` (the final checkpoint in
the trainer's DCP layout, which the export stage reads; it and the SFT run named relative to
``--output``, as in every run.json), ``metrics.jsonl`` (one line per optimizer step: ``loss``,
``lr``, ``grad_norm``, the step's mean ``quantile_reward``, ``log_ratio``, ``beta``, its
``completions``), ``spec.json`` and ``config.json``.

Config (the ``posttrain.qrpo`` subtree, as JSON; the schema holds the defaults), e.g. with the
recipe's 8B learning rate::

    {"lr": 5e-7,             # RECIPE §7, 8B (70B: 1e-7)
     "warmup_steps": 10,     # linear warmup from 0, then constant
     "epochs": 1,
     "batch_size": 64,       # completions per optimizer step
     "micro_batch": null,    # completions per forward pass and rank; null = batch_size / ranks
     "beta_kl": 5.0,         # RECIPE §7: beta_y = min(beta_kl / |y|, max_beta)
     "max_beta": 0.1,
     "grad_clip": 1.0,       # max global gradient norm
     "weight_decay": 0.0,
     "seed": 0,              # order of the completions, initialisation of torch's RNG
     "device": "auto",       # "auto" (cuda when available), "cpu", "cuda"
     "dtype": "float32",     # or "bfloat16": FSDP's compute dtype (weights stay float32)
     "checkpoint_interval": 50,
     "nproc": 1,             # torchrun processes
     "tensor_parallel": 1,
     "ademamix": {"betas": [0.9, 0.999, 0.999], "alpha": 8.0, "eps": 1e-8,
                  "warmup_steps": null}}   # T_alpha = T_beta3; null = the run's total steps
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from apertus.core import ApertusError
from apertus.core.files import (
    atomic_write_json,
    canonical_json,
    recorded_path,
    sha256_file,
    sha256_text,
)
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config, is_integer, is_number
from apertus.posttrain.qrpo import quantile_rewards
from apertus.posttrain.sft_data import read_sft_record
from apertus.train.qrpo_loader import QRPORow, write_qrpo_data
from apertus.train.run_spec import (
    AdEMAMixSpec,
    CheckpointSpec,
    GoldfishSpec,
    LRSpec,
    QRPOSpec,
    RunSpec,
)

log = logging.getLogger(__name__)

RUN_RECORD = "run.json"
NAME = "qrpo"

# Before the first update the policy is the reference, so the log-ratio of the first batch
# measures how well `reference_logp` matches the SFT checkpoint; more than this many nats per
# completion token (bf16 sampling engines differ by far less) suggests a mismatched file.
REFERENCE_MISMATCH_PER_TOKEN = 0.05


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdemamixOptions(Config, key="posttrain.qrpo.ademamix"):
    """``posttrain.qrpo.ademamix``: AdEMAMix (RECIPE.md §3) as SFT uses it (RECIPE.md §7:
    alpha 8, beta3 0.999, warmups over the whole run)."""

    betas: tuple[float, ...]
    alpha: float
    eps: float
    warmup_steps: int | None

    def __post_init__(self) -> None:
        where = self.config_key
        if len(self.betas) != 3:
            raise ApertusError(f"{where}.betas must be [beta1, beta2, beta3], got {self.betas!r}")
        for beta in self.betas:
            _check_number(beta, f"{where}.betas", low=0.0, high=1.0, high_open=True)
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        _check_number(self.alpha, f"{where}.alpha", low=0.0)
        _check_number(self.eps, f"{where}.eps", low=0.0)
        if self.warmup_steps is not None:
            _check_int(self.warmup_steps, f"{where}.warmup_steps", low=1)


@dataclass(frozen=True)
class QRPOConfig(Config, key="posttrain.qrpo"):
    """The ``posttrain.qrpo`` config subtree, checked key by key (see the module doc)."""

    lr: float
    warmup_steps: int
    epochs: int
    batch_size: int
    micro_batch: int | None
    beta_kl: float
    max_beta: float
    grad_clip: float
    weight_decay: float
    seed: int
    device: str
    dtype: str
    compile: bool
    checkpoint_interval: int
    nproc: int
    nnodes: int
    activation_checkpoint: str
    tensor_parallel: int
    ademamix: AdemamixOptions

    def __post_init__(self) -> None:
        where = self.config_key
        _check_number(self.lr, f"{where}.lr", low=0.0)
        _check_int(self.warmup_steps, f"{where}.warmup_steps", low=0)
        _check_int(self.epochs, f"{where}.epochs", low=1)
        _check_int(self.batch_size, f"{where}.batch_size", low=1)
        if self.micro_batch is not None:
            _check_int(self.micro_batch, f"{where}.micro_batch", low=1)
        _check_number(self.beta_kl, f"{where}.beta_kl", low=0.0, low_open=True)
        _check_number(self.max_beta, f"{where}.max_beta", low=0.0, low_open=True)
        _check_number(self.grad_clip, f"{where}.grad_clip", low=0.0, low_open=True)
        _check_number(self.weight_decay, f"{where}.weight_decay", low=0.0)
        _check_int(self.seed, f"{where}.seed", low=0)
        if self.device not in ("auto", "cpu", "cuda"):
            raise ApertusError(
                f"{where}.device must be 'auto', 'cpu' or 'cuda', got {self.device!r}"
            )
        if self.dtype not in ("float32", "bfloat16"):
            raise ApertusError(f"{where}.dtype must be float32 or bfloat16, got {self.dtype!r}")
        _check_int(self.checkpoint_interval, f"{where}.checkpoint_interval", low=1)
        _check_int(self.nproc, f"{where}.nproc", low=1)
        _check_int(self.nnodes, f"{where}.nnodes", low=1)
        _check_int(self.tensor_parallel, f"{where}.tensor_parallel", low=1)
        if self.activation_checkpoint not in ("none", "full", "selective"):
            raise ApertusError(
                f"{where}.activation_checkpoint must be none, full or selective, got "
                f"{self.activation_checkpoint!r}"
            )
        if self.nproc % self.tensor_parallel:
            raise ApertusError(
                f"{where}.tensor_parallel {self.tensor_parallel} does not divide nproc {self.nproc}"
            )
        ranks = self.data_parallel
        micro = self.micro_batch or self.batch_size // ranks
        if micro < 1 or self.batch_size % (micro * ranks):
            raise ApertusError(
                f"{where}.batch_size {self.batch_size} does not split into micro-batches of "
                f"{micro} completions on {ranks} data-parallel rank(s) (micro_batch x nproc x "
                "nnodes / tensor_parallel must divide it)"
            )

    @property
    def data_parallel(self) -> int:
        """Data-parallel ranks: nproc x nnodes / tensor_parallel."""
        return self.nproc * self.nnodes // self.tensor_parallel

    @property
    def rank_micro_batch(self) -> int:
        """Completions per forward pass and data-parallel rank."""
        return self.micro_batch or self.batch_size // self.data_parallel


def _check_number(
    value: Any,
    where: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    ok = is_number(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"{'<' if high_open else '<='} {high}"
        bounds = " and ".join(b for b in (lo, hi) if b)
        raise ApertusError(f"{where} must be a number {bounds}, got {value!r}")


def _check_int(value: Any, where: str, *, low: int) -> None:
    if not is_integer(value) or value < low:
        raise ApertusError(f"{where} must be an integer >= {low}, got {value!r}")


# --------------------------------------------------------------------------------------------
# Scored completions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoredCompletion:
    """One line of the completions file, with its quantile reward Rq (RECIPE.md §7)."""

    prompt_id: str
    completion_id: str
    input_ids: tuple[int, ...]
    completion_mask: tuple[int, ...]
    reward: float
    reference_rewards: tuple[float, ...]
    reference_logp: float
    quantile_reward: float

    @property
    def completion_tokens(self) -> int:
        return sum(self.completion_mask)


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _parse_completion(raw: Any, vocab_size: int, max_seq_len: int) -> dict[str, Any]:
    """The fields of one record, checked; ValueError says which field is wrong and how.
    Other keys (a sampler's text or metadata) are allowed and ignored."""
    if not isinstance(raw, dict):
        raise ValueError(f"a record must be a JSON object, got {type(raw).__name__}")
    expected = {
        "prompt_id",
        "completion_id",
        "input_ids",
        "completion_mask",
        "reward",
        "reference_rewards",
        "reference_logp",
    }
    missing = sorted(expected - set(raw))
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    for key in ("prompt_id", "completion_id"):
        if not isinstance(raw[key], str | int) or isinstance(raw[key], bool):
            raise ValueError(f"{key} must be a string or an integer, got {raw[key]!r}")
    ids, mask = raw["input_ids"], raw["completion_mask"]
    if not isinstance(ids, list) or not ids:
        raise ValueError("input_ids must be a non-empty list of token ids")
    bad = [
        t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size
    ]
    if bad:
        raise ValueError(
            f"input_ids must be integers in [0, {vocab_size}) (the model's vocabulary), "
            f"got {bad[:5]!r}"
        )
    if len(ids) > max_seq_len:
        raise ValueError(f"{len(ids)} tokens, more than the model's max_seq_len {max_seq_len}")
    if not isinstance(mask, list) or len(mask) != len(ids):
        raise ValueError(
            f"completion_mask must be a list as long as input_ids ({len(ids)}), got "
            f"{len(mask) if isinstance(mask, list) else type(mask).__name__}"
        )
    if any(m not in (0, 1) or isinstance(m, float) for m in mask):
        raise ValueError("completion_mask must hold only 0 and 1 (or false and true)")
    if mask[0]:
        raise ValueError("completion_mask[0] must be 0: the first token has no context")
    if not any(mask):
        raise ValueError("completion_mask marks no completion token")
    if not _finite_number(raw["reward"]):
        raise ValueError(f"reward must be a finite number, got {raw['reward']!r}")
    refs = raw["reference_rewards"]
    if not isinstance(refs, list) or not refs:
        raise ValueError("no reference samples: reference_rewards must be a non-empty list")
    if not all(_finite_number(r) for r in refs):
        raise ValueError("reference_rewards must hold finite numbers only")
    logp = raw["reference_logp"]
    if not _finite_number(logp):
        raise ValueError(f"reference_logp must be a finite number, got {logp!r}")
    if logp > 1e-3:
        # A sum of log-probabilities is <= 0; a positive value is most likely a negated one.
        raise ValueError(
            f"reference_logp must be a log-probability (<= 0), got {logp} (a negative "
            "log-likelihood?)"
        )
    return raw


def _naming(line: str) -> str:
    """`` (prompt 'p17')`` for a record that names its prompt, else nothing."""
    try:
        prompt = json.loads(line).get("prompt_id")
    except (ValueError, AttributeError):
        return ""
    return f" (prompt {prompt!r})" if isinstance(prompt, str | int) else ""


def read_completions(
    path: str | Path, *, vocab_size: int, max_seq_len: int
) -> list[ScoredCompletion]:
    """The scored completions of a JSONL file (format in the module doc), with their quantile
    rewards. Blank lines are skipped; any malformed record, or a (prompt_id, completion_id)
    seen twice, is an ApertusError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ApertusError(f"completions file {path} does not exist")
    records: list[tuple[int, dict[str, Any]]] = []
    seen: dict[tuple[str, str], int] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ApertusError(f"cannot read {path} ({type(e).__name__}: {e})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = _parse_completion(json.loads(line), vocab_size, max_seq_len)
        except json.JSONDecodeError as e:
            raise ApertusError(f"{path}:{number}: not valid JSON ({e})") from None
        except ValueError as e:
            raise ApertusError(f"{path}:{number}: {e}{_naming(line)}") from None
        key = (str(raw["prompt_id"]), str(raw["completion_id"]))
        if key in seen:
            raise ApertusError(
                f"{path}:{number}: completion {key[1]!r} of prompt {key[0]!r} already on line "
                f"{seen[key]}"
            )
        seen[key] = number
        records.append((number, raw))
    if not records:
        raise ApertusError(f"{path} holds no completions")
    # Quantile rewards, one call per number of reference samples (rows must be rectangular).
    by_width: dict[int, list[int]] = {}
    for i, (_, raw) in enumerate(records):
        by_width.setdefault(len(raw["reference_rewards"]), []).append(i)
    rq = [0.0] * len(records)
    for indices in by_width.values():
        rewards = torch.tensor([records[i][1]["reward"] for i in indices], dtype=torch.float64)
        refs = torch.tensor(
            [records[i][1]["reference_rewards"] for i in indices], dtype=torch.float64
        )
        for i, q in zip(indices, quantile_rewards(rewards, refs).tolist(), strict=True):
            rq[i] = q
    return [
        ScoredCompletion(
            prompt_id=str(raw["prompt_id"]),
            completion_id=str(raw["completion_id"]),
            input_ids=tuple(raw["input_ids"]),
            completion_mask=tuple(int(m) for m in raw["completion_mask"]),
            reward=float(raw["reward"]),
            reference_rewards=tuple(float(r) for r in raw["reference_rewards"]),
            reference_logp=float(raw["reference_logp"]),
            quantile_reward=q,
        )
        for (_, raw), q in zip(records, rq, strict=True)
    ]


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def steps_per_epoch(n_completions: int, batch_size: int) -> int:
    """Optimizer steps of one pass: the last step holds the rest (nothing is dropped)."""
    return -(-n_completions // batch_size)


def qrpo_run_spec(cfg: QRPOConfig, data_dir: Path, sft: dict[str, Any]) -> RunSpec:
    """The torchtitan run spec of QRPO: the QRPO data in `data_dir` (`write_data`), from the
    weights of the SFT run whose run.json is `sft` (its ``final_checkpoint`` absolute)."""
    record = read_sft_record(data_dir)
    steps = cfg.epochs * steps_per_epoch(record["examples"], cfg.batch_size)
    horizon = cfg.ademamix.warmup_steps or steps
    return RunSpec(
        flavor=sft["flavor"],
        model_overrides=dict(sft["model_overrides"]),
        sft_data=str(data_dir),
        sft_epochs=cfg.epochs,
        qrpo=QRPOSpec(beta_kl=cfg.beta_kl, max_beta=cfg.max_beta),
        seq_len=record["max_len"],
        micro_batch=cfg.rank_micro_batch,
        global_batch=cfg.batch_size,
        steps=steps,
        lr=LRSpec(kind="constant", peak=cfg.lr, warmup_steps=cfg.warmup_steps),
        # RECIPE §7, as SFT: alpha 8, beta3 0.999, T = total steps, no weight decay (config).
        ademamix=AdEMAMixSpec(
            betas=cfg.ademamix.betas,
            alpha=cfg.ademamix.alpha,
            t_alpha=horizon,
            t_beta3=horizon,
            eps=cfg.ademamix.eps,
            weight_decay=cfg.weight_decay,
        ),
        grad_clip=cfg.grad_clip,
        goldfish=GoldfishSpec(enabled=False),
        seed=cfg.seed,
        dtype=cfg.dtype,
        compile=cfg.compile,
        device=cfg.device,
        tensor_parallel=cfg.tensor_parallel,
        activation_checkpoint=cfg.activation_checkpoint,
        checkpoint=CheckpointSpec(
            interval=cfg.checkpoint_interval,
            initial=sft["final_checkpoint"],
            initial_mode="weights",
        ),
    )


def write_data(
    completions: list[ScoredCompletion],
    work_dir: Path,
    *,
    source_sha256: str,
    max_len: int,
    vocab_size: int,
) -> Path:
    """The QRPO data directory of `completions` (read from a file of digest `source_sha256`) in
    `work_dir` (`apertus.train.qrpo_loader`), rows of at most `max_len` + 1 tokens (the model's
    context), named after the file and the row width; written once, then reused by re-runs."""
    rows = [
        QRPORow(c.input_ids, c.completion_mask, c.reference_logp, c.quantile_reward)
        for c in completions
    ]
    key = sha256_text(canonical_json([source_sha256, max_len, vocab_size]))[:16]
    data_dir = work_dir / f"qrpo_data-{key}"
    if not (data_dir / "sft.json").is_file():
        write_qrpo_data(rows, data_dir, max_len=max_len, vocab_size=vocab_size)
    return data_dir


def main(argv=None):
    from apertus.export.stage import read_run_record
    from apertus.train.metrics import read_metrics
    from apertus.train.stage import final_checkpoint, train_and_record

    parser = stage_parser("posttrain", __doc__.splitlines()[0])
    parser.add_argument("--sft-run", type=Path, required=True, help="the SFT step's output")
    parser.add_argument("--completions", type=Path, required=True, help="scored completions")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--work-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = QRPOConfig.from_dict(args.config)
    sft_record = read_run_record(args.sft_run)
    model_config = sft_record.model_config()
    completions = read_completions(
        args.completions, vocab_size=model_config.vocab_size, max_seq_len=model_config.max_seq_len
    )
    sft = json.loads((args.sft_run / RUN_RECORD).read_text(encoding="utf-8"))
    starting = {**sft, "final_checkpoint": str(final_checkpoint(sft, args.sft_run))}
    with StepRun(
        "posttrain",
        NAME,
        args.config,
        inputs=[args.sft_run, Path(starting["final_checkpoint"]), args.completions],
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        data_dir = write_data(
            completions,
            args.work_dir,
            source_sha256=sha256_file(args.completions),
            max_len=model_config.max_seq_len,
            vocab_size=model_config.vocab_size,
        )
        spec = qrpo_run_spec(cfg, data_dir, starting)
        record = train_and_record(
            step,
            spec,
            name=NAME,
            key_material=[data_dir.name, sft],
            work_root=args.work_dir,
            output=args.output,
            nproc=cfg.nproc,
            nnodes=cfg.nnodes,
        )
        metrics = read_metrics(args.output / "metrics.jsonl")
        first = (
            metrics.get(1, {}) if "initial_abs_log_ratio_per_token" in metrics.get(1, {}) else None
        )
        last = metrics[max(metrics)]
        record.update(
            {
                "seq_len": sft["seq_len"],
                "sft_run": recorded_path(args.sft_run, args.output),
                "completions": len(completions),
                "prompts": len({c.prompt_id for c in completions}),
                "epochs": cfg.epochs,
            }
        )
        atomic_write_json(args.output / "config.json", args.config)
        atomic_write_json(args.output / RUN_RECORD, record)
        summary = {k: v for k, v in record.items() if k != "model_overrides"}
        summary["filler_rows"] = cfg.epochs * steps_per_epoch(
            len(completions), cfg.batch_size
        ) * cfg.batch_size - cfg.epochs * len(completions)
        summary["final_log_ratio"] = last.get("log_ratio")
        summary["final_quantile_reward"] = last.get("quantile_reward")
        if first is not None:
            mismatch = first["initial_abs_log_ratio_per_token"]
            summary["initial_abs_log_ratio_per_token"] = mismatch
            if mismatch > REFERENCE_MISMATCH_PER_TOKEN:
                log.warning(
                    "the untrained policy differs from reference_logp by %.3f nats per "
                    "completion token: were the reference log-probabilities computed with "
                    "this SFT checkpoint?",
                    mismatch,
                )
        step.summary.update(summary)


if __name__ == "__main__":
    run_main(main)
