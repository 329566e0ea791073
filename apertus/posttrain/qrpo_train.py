"""Entry point of the QRPO step of post-training: offline alignment of the SFT model on scored
completions (RECIPE.md §7).

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

Other keys (the texts, a sampler's metadata) are ignored.

QRPO (``apertus.posttrain.qrpo``) then regresses beta * log(pi / pi_ref) on the quantile reward
for `epochs` passes over the completions, shuffled with `seed`, in mini-batches of
`batch_size` completions, with AdEMAMix at a constant LR after a linear warmup and gradient
clipping. ``--output`` receives ``run.json`` (the final checkpoint, in the trainer's DCP layout,
so the export stage takes it unchanged; it and the SFT run are named relative to ``--output``,
as in every run.json), ``metrics.jsonl`` (one line per optimizer step) and
``config.json``. Checkpoints live in ``--work-dir`` under a name derived from the config, the
SFT run and the completions' hash; a re-run trains afresh.

Config (the ``posttrain.qrpo`` subtree, as JSON; the schema holds the defaults), e.g. with the
recipe's 8B learning rate::

    {"lr": 5e-7,             # RECIPE §7, 8B (70B: 1e-7)
     "warmup_steps": 10,     # linear warmup from 0, then constant
     "epochs": 1,
     "batch_size": 64,       # completions per optimizer step
     "micro_batch": null,    # completions per forward pass (gradient accumulation); null = all
     "beta_kl": 5.0,         # RECIPE §7: beta_y = min(beta_kl / |y|, max_beta)
     "max_beta": 0.1,
     "grad_clip": 1.0,       # max global gradient norm
     "weight_decay": 0.0,
     "seed": 0,              # shuffling and torch's RNG
     "device": "auto",       # "auto" (cuda when available), "cpu", "cuda", "cuda:N"
     "dtype": "float32",     # or "bfloat16": autocast of the forward (weights stay float32)
     "ademamix": {"betas": [0.9, 0.999, 0.999], "alpha": 8.0, "eps": 1e-8,
                  "warmup_steps": null}}   # T_alpha = T_beta3; null = the run's total steps
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from apertus.core import ApertusError
from apertus.core.device import resolve_device
from apertus.core.files import (
    atomic_write_json,
    building_directory,
    canonical_json,
    recorded_path,
    sha256_file,
    sha256_text,
)
from apertus.core.progress import Progress
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config, is_integer, is_number
from apertus.posttrain.qrpo import (
    length_normalised_beta,
    qrpo_loss,
    quantile_rewards,
    sequence_logprobs,
)

log = logging.getLogger(__name__)

RUN_RECORD = "run.json"

# The token that fills rows of a mini-batch up to its longest row. Its value is irrelevant:
# padding sits after every real token (causal attention never looks at it) and is masked out
# of the log-probabilities.
PAD_ID = 0

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
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ApertusError(
                f"{where}.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}"
            )
        if self.dtype not in AUTOCAST_DTYPES:
            raise ApertusError(
                f"{where}.dtype must be one of {', '.join(AUTOCAST_DTYPES)}, got {self.dtype!r}"
            )


AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16}


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
    if not isinstance(refs, list) or not refs or not all(_finite_number(r) for r in refs):
        raise ValueError("reference_rewards must be a non-empty list of finite numbers")
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
            raise ApertusError(f"{path}:{number}: {e}") from None
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


@dataclass
class CompletionBatch:
    """Completions as tensors: ``input_ids`` / ``completion_mask`` [B, L] right-padded with
    `PAD_ID` (mask 0); ``reference_logps``, ``quantile_rewards`` (float64), ``lengths`` [B]."""

    input_ids: torch.Tensor
    completion_mask: torch.Tensor
    reference_logps: torch.Tensor
    quantile_rewards: torch.Tensor
    lengths: torch.Tensor


def collate(completions: Sequence[ScoredCompletion], device: torch.device | str) -> CompletionBatch:
    width = max(len(c.input_ids) for c in completions)
    ids = torch.full((len(completions), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(completions), width), dtype=torch.bool)
    for row, c in enumerate(completions):
        ids[row, : len(c.input_ids)] = torch.tensor(c.input_ids)
        mask[row, : len(c.input_ids)] = torch.tensor(c.completion_mask, dtype=torch.bool)
    return CompletionBatch(
        input_ids=ids.to(device),
        completion_mask=mask.to(device),
        reference_logps=torch.tensor(
            [c.reference_logp for c in completions], dtype=torch.float64, device=device
        ),
        quantile_rewards=torch.tensor(
            [c.quantile_reward for c in completions], dtype=torch.float64, device=device
        ),
        lengths=mask.sum(dim=-1).to(device),
    )


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def steps_per_epoch(n_completions: int, batch_size: int) -> int:
    """Optimizer steps of one pass: the last mini-batch may be smaller (nothing is dropped)."""
    return -(-n_completions // batch_size)


def train_qrpo(
    model: torch.nn.Module,
    completions: Sequence[ScoredCompletion],
    config: QRPOConfig,
    *,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Train `model` (the policy, initialised as the reference) with the QRPO loss on
    `completions` for `config.epochs` epochs; returns one metrics dict per optimizer step
    (also given to `on_step` as it is made).

    Metrics: ``step`` (1-based), ``epoch``, ``lr``, ``loss`` (the mini-batch's QRPO loss),
    ``quantile_reward`` / ``log_ratio`` / ``beta`` (their means over the mini-batch, the
    log-ratio of the policy before this step's update), ``grad_norm`` (before clipping),
    ``completions``. A non-finite loss or gradient norm stops training with ApertusError.
    """
    from apertus.train.ademamix import AdEMAMix, param_groups
    from apertus.train.schedule import constant_lr_with_warmup

    if not completions:
        raise ApertusError("QRPO needs at least one completion")
    device = next(model.parameters()).device
    per_epoch = steps_per_epoch(len(completions), config.batch_size)
    total = per_epoch * config.epochs
    warmup = config.ademamix.warmup_steps or total
    optimizer = AdEMAMix(
        param_groups(model, config.weight_decay),
        lr=config.lr,
        betas=config.ademamix.betas,
        alpha=config.ademamix.alpha,
        t_alpha=warmup,
        t_beta3=warmup,
        eps=config.ademamix.eps,
        weight_decay=config.weight_decay,
    )
    autocast_dtype = AUTOCAST_DTYPES[config.dtype]
    micro = config.micro_batch or config.batch_size
    order = torch.Generator().manual_seed(config.seed)
    model.train()
    history: list[dict[str, Any]] = []
    step = 0
    for epoch in range(config.epochs):
        permutation = torch.randperm(len(completions), generator=order).tolist()
        for first in range(0, len(permutation), config.batch_size):
            batch = [completions[i] for i in permutation[first : first + config.batch_size]]
            lr = constant_lr_with_warmup(step, lr=config.lr, warmup_steps=config.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            sums = {"loss": 0.0, "quantile_reward": 0.0, "log_ratio": 0.0, "beta": 0.0}
            abs_log_ratio_per_token = 0.0
            for start in range(0, len(batch), micro):
                part = collate(batch[start : start + micro], device)
                with _autocast(device, autocast_dtype):
                    logps = sequence_logprobs(model, part.input_ids, part.completion_mask)
                loss = qrpo_loss(
                    logps,
                    part.reference_logps,
                    part.quantile_rewards,
                    part.lengths,
                    beta_kl=config.beta_kl,
                    max_beta=config.max_beta,
                )
                # The mini-batch loss is the mean over its completions: weight each part by its
                # share, so accumulating parts gives the same gradient as one pass.
                (loss * (part.lengths.numel() / len(batch))).backward()
                with torch.no_grad():
                    log_ratio = logps.double() - part.reference_logps
                    beta = length_normalised_beta(part.lengths, config.beta_kl, config.max_beta)
                    sums["loss"] += loss.item() * part.lengths.numel()
                    sums["quantile_reward"] += part.quantile_rewards.sum().item()
                    sums["log_ratio"] += log_ratio.sum().item()
                    sums["beta"] += beta.sum().item()
                    abs_log_ratio_per_token += (log_ratio.abs() / part.lengths).sum().item()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            metrics = {
                "step": step + 1,
                "epoch": epoch + 1,
                "lr": lr,
                **{k: v / len(batch) for k, v in sums.items()},
                "grad_norm": float(grad_norm),
                "completions": len(batch),
            }
            if not (math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])):
                raise ApertusError(
                    f"QRPO diverged at step {step + 1}: loss {metrics['loss']}, gradient norm "
                    f"{metrics['grad_norm']} (lower posttrain.qrpo.lr or check the rewards)"
                )
            if step == 0:
                metrics["initial_abs_log_ratio_per_token"] = abs_log_ratio_per_token / len(batch)
                if metrics["initial_abs_log_ratio_per_token"] > REFERENCE_MISMATCH_PER_TOKEN:
                    log.warning(
                        "the untrained policy differs from reference_logp by %.3f nats per "
                        "completion token: were the reference log-probabilities computed with "
                        "this SFT checkpoint?",
                        metrics["initial_abs_log_ratio_per_token"],
                    )
            optimizer.step()
            step += 1
            history.append(metrics)
            if on_step is not None:
                on_step(metrics)
    return history


# --------------------------------------------------------------------------------------------
# Checkpoint and run record
# --------------------------------------------------------------------------------------------


def save_checkpoint(model: torch.nn.Module, step_dir: Path) -> Path:
    """The model's state dict as a DCP checkpoint with the keys at the top level, as our
    torchtitan trainer lays them out (`apertus.export.hf.load_model_state` reads it). Written
    beside `step_dir` and renamed into place, so a killed run leaves no partial checkpoint."""
    from torch.distributed.checkpoint import save as dcp_save

    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    with building_directory(step_dir) as building, warnings.catch_warnings():
        # "torch.distributed is disabled ... assuming the intent is to save in a single
        # process": exactly the intent here.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp_save(state, checkpoint_id=str(building))
    return step_dir


def main(argv=None):
    from apertus.export.hf import load_model_state
    from apertus.export.stage import read_run_record

    parser = stage_parser("posttrain", __doc__.splitlines()[0])
    parser.add_argument("--sft-run", type=Path, required=True, help="the SFT step's output")
    parser.add_argument("--completions", type=Path, required=True, help="scored completions")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--work-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = QRPOConfig.from_dict(args.config)
    sft = read_run_record(args.sft_run)
    model_config = sft.model_config()
    device = resolve_device(cfg.device, setting="posttrain.qrpo.device")
    completions = read_completions(
        args.completions, vocab_size=model_config.vocab_size, max_seq_len=model_config.max_seq_len
    )
    key = sha256_text(
        canonical_json(
            [
                args.config,
                (args.sft_run / RUN_RECORD).read_text(encoding="utf-8"),
                sha256_file(args.completions),
            ]
        )
    )[:16]
    work = args.work_dir / f"qrpo-{key}"
    with StepRun(
        "posttrain",
        "qrpo",
        args.config,
        inputs=[args.sft_run, sft.final_checkpoint, args.completions],
        outputs=[args.output],
        manifest=args.manifest,
        seed=cfg.seed,
    ) as step:
        torch.manual_seed(cfg.seed)
        state = load_model_state(sft.final_checkpoint, model_config)
        with torch.device(device):
            model = model_config.build()
        model.load_state_dict(state, strict=True)
        del state
        work.mkdir(parents=True, exist_ok=True)
        metrics_path = work / "metrics.jsonl"
        total_steps = cfg.epochs * steps_per_epoch(len(completions), cfg.batch_size)
        with (
            metrics_path.open("w", encoding="utf-8") as metrics_file,
            Progress(total_steps, "training qrpo", unit="steps") as progress,
        ):

            def write(metrics: dict[str, Any]) -> None:
                metrics_file.write(json.dumps(metrics) + "\n")
                metrics_file.flush()
                progress.update(loss=metrics["loss"], epoch=metrics["epoch"])
                log.info(
                    "step %d: loss %.5f, Rq %.3f, log-ratio %.3f, beta %.4f",
                    metrics["step"],
                    metrics["loss"],
                    metrics["quantile_reward"],
                    metrics["log_ratio"],
                    metrics["beta"],
                )

            history = train_qrpo(model, completions, cfg, on_step=write)
        final_step = history[-1]["step"]
        checkpoint = save_checkpoint(model, work / "ckpt" / f"step-{final_step}")
        record = {
            "name": "qrpo",
            "final_checkpoint": recorded_path(checkpoint, args.output),
            "final_step": final_step,
            "final_loss": history[-1]["loss"],
            "flavor": sft.flavor,
            "model_overrides": sft.model_overrides,
            "seq_len": sft.seq_len,
            "sft_run": recorded_path(args.sft_run, args.output),
            "completions": len(completions),
            "prompts": len({c.prompt_id for c in completions}),
            "epochs": cfg.epochs,
        }
        step.outputs.append(checkpoint)  # hashed into the manifest
        args.output.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(metrics_path, args.output / "metrics.jsonl")
        atomic_write_json(args.output / "config.json", args.config)
        atomic_write_json(args.output / RUN_RECORD, record)
        step.summary.update(
            {
                **{k: v for k, v in record.items() if k != "model_overrides"},
                "initial_abs_log_ratio_per_token": history[0]["initial_abs_log_ratio_per_token"],
                "final_log_ratio": history[-1]["log_ratio"],
                "final_quantile_reward": history[-1]["quantile_reward"],
            }
        )


if __name__ == "__main__":
    run_main(main)
