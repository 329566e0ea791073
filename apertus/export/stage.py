"""Entry point of the export stage: a training stage's final checkpoint (or, with ``--step``,
any checkpoint it kept) as a verified Hugging Face folder.

    python -m apertus.export.stage --config JSON --manifest M --run DIR --tokenizer DIR
        --heldout DIR --output DIR [--step N] [--chat]

``--run`` is a pretraining stage's output directory (its ``run.json`` names the final
checkpoint, the flavor, the model overrides and the sequence length; ``apertus.train.stage``),
``--tokenizer`` the tokenizer directory whose files go into the export, ``--heldout`` the
held-out documents (``<lang>.jsonl``) the verification batch is drawn from. ``--output``
receives the folder (``apertus.export.hf``) with its verification card ``verification.json``
(``apertus.export.verify``); it appears only once the export loaded in transformers and
matched our model within the tolerance. ``--step N`` exports the ``step-N`` checkpoint beside the
final one (an intermediate checkpoint, as OLMo and torchtitan users ask for); a step the run did
not keep is an error naming the steps it has. ``--chat`` marks a chat model (SFT, QRPO): its
``generation_config.json`` ends generation at ``<|assistant_end|>`` as well as at ``</s>``.

Config (the ``export:`` subtree, as JSON)::

    {"dtype": "float32",            # or "bfloat16": the dtype of the exported weights
     "max_shard_size": "5GB",       # larger weights are split into safetensors shards
     "verify": {"tolerance": 1e-4,  # max abs logit difference allowed (fp32 compute)
                "rows": 4,          # rows of the verification batch
                "seq_len": null}}   # tokens per row; null = the run's training seq_len
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apertus.core import ApertusError
from apertus.core.files import resolve_recorded
from apertus.core.stage import StepRun, run_main, stage_parser
from apertus.core.typed import Config
from apertus.model.model import ApertusModel
from apertus.model.state_dict_adapter import EXPORT_DTYPES

RUN_RECORD = "run.json"


@dataclass(frozen=True)
class VerifyConfig(Config, key="export.verify"):
    """``export.verify``: the logits comparison of :func:`apertus.export.verify.verify_export`."""

    tolerance: float
    rows: int
    seq_len: int | None

    def __post_init__(self) -> None:
        if not self.tolerance > 0:
            raise ApertusError(
                f"export.verify.tolerance must be a positive number, got {self.tolerance!r}"
            )
        if self.rows < 1:
            raise ApertusError(f"export.verify.rows must be a positive integer, got {self.rows!r}")
        if self.seq_len is not None and self.seq_len < 1:
            raise ApertusError(
                f"export.verify.seq_len must be a positive integer or null, got {self.seq_len!r}"
            )


@dataclass(frozen=True)
class ExportConfig(Config, key="export"):
    """The ``export:`` config subtree, checked key by key."""

    dtype: str
    max_shard_size: str
    verify: VerifyConfig

    def __post_init__(self) -> None:
        if self.dtype not in EXPORT_DTYPES:
            raise ApertusError(
                f"export.dtype must be one of {', '.join(EXPORT_DTYPES)}, got {self.dtype!r}"
            )


@dataclass(frozen=True)
class RunRecord:
    """What the export (and QRPO) need from a training stage's ``run.json``."""

    name: str
    final_checkpoint: Path
    flavor: str
    model_overrides: dict[str, Any]
    seq_len: int
    source: Path = Path(RUN_RECORD)
    """The run.json it was read from, named in errors."""

    def model_config(self) -> ApertusModel.Config:
        """The model the run trained: its flavor with its overrides, on SDPA attention (the
        backend changes no weight; SDPA runs on CPU). A bad flavor or override is an
        ApertusError naming the run.json."""
        from apertus.model.flavors import flavor

        try:
            return flavor(self.flavor, **{**self.model_overrides, "attn_backend": "sdpa"})
        except ApertusError as e:
            raise ApertusError(f"{self.source}: {e}") from None


def read_run_record(run_dir: Path) -> RunRecord:
    """``run_dir/run.json``, checked: ApertusError naming the file and the bad key. Its
    ``final_checkpoint`` is relative to `run_dir` (absolute in a run.json written before paths
    in records were relative, and read as is)."""
    path = run_dir / RUN_RECORD
    if not path.is_file():
        raise ApertusError(
            f"{path} does not exist: expected a training stage's output (pretrain/<stage>, "
            "posttrain/sft, posttrain/qrpo)"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApertusError(f"cannot read {path} ({type(e).__name__}: {e})") from None
    if not isinstance(raw, dict):
        raise ApertusError(f"{path} must hold a JSON object")
    kinds = {
        "name": str,
        "final_checkpoint": str,
        "flavor": str,
        "model_overrides": dict,
        "seq_len": int,
    }
    for key, kind in kinds.items():
        value = raw.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ApertusError(f"{path}: {key!r} must be a {kind.__name__}, got {value!r}")
    return RunRecord(
        name=raw["name"],
        final_checkpoint=resolve_recorded(raw["final_checkpoint"], run_dir),
        flavor=raw["flavor"],
        model_overrides=dict(raw["model_overrides"]),
        seq_len=raw["seq_len"],
        source=path,
    )


def select_checkpoint(record: RunRecord, step: int | None) -> Path:
    """The checkpoint to export: the run's final one, or the ``step-N`` checkpoint of the same
    checkpoint folder (complete and loadable, `resumable_checkpoints`), its files checked
    against the checksums its save recorded. ApertusError naming the steps there are when
    `step` is not one of them, or what is wrong with the chosen one."""
    from apertus.train.run_spec import checkpoint_problem, resumable_checkpoints

    if step is None:
        chosen = record.final_checkpoint
    else:
        folder = record.final_checkpoint.parent
        steps, unloadable = resumable_checkpoints(folder)
        if step not in steps:
            why = f" ({unloadable[step][1]})" if step in unloadable else ""
            available = ", ".join(map(str, steps)) or "none"
            raise ApertusError(
                f"run {record.name} has no loadable checkpoint at step {step}{why}; steps in "
                f"{folder}: {available}"
            )
        chosen = steps[step]
    problem = checkpoint_problem(chosen) if (chosen / ".metadata").is_file() else None
    if problem is not None:
        raise ApertusError(
            f"checkpoint {chosen} cannot be exported: {problem}; re-run the stage that wrote it"
        )
    return chosen


def main(argv=None):
    from apertus.export.hf import building_directory, load_model_state, write_export
    from apertus.export.verify import verification_batch, verify_export
    from apertus.tokenize.tokenizer import check_special_tokens, load_tokenizer

    parser = stage_parser("export", __doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a pretraining stage's output")
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--step", type=int, help="export the step-N checkpoint of the run (default: the final one)"
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="a chat model (SFT, QRPO): generation also ends at <|assistant_end|>",
    )
    args = parser.parse_args(argv)
    cfg = ExportConfig.from_dict(args.config)
    record = read_run_record(args.run)
    model_config = record.model_config()
    if not (record.final_checkpoint / ".metadata").is_file():
        raise ApertusError(
            f"checkpoint {record.final_checkpoint} named by {args.run / RUN_RECORD} is "
            "missing or incomplete (no .metadata)"
        )
    checkpoint = select_checkpoint(record, args.step)
    # Cheap checks first, before a checkpoint of many GB is read: the tokenizer must load and
    # fit the model's embedding (write_export checks it again on the copy).
    if not args.tokenizer.is_dir():
        raise ApertusError(f"tokenizer directory {args.tokenizer} does not exist")
    facts = check_special_tokens(load_tokenizer(str(args.tokenizer)))
    if facts["vocab_size"] > model_config.vocab_size:
        raise ApertusError(
            f"tokenizer {args.tokenizer} has {facts['vocab_size']} tokens, more than the "
            f"model's vocab_size {model_config.vocab_size} (run {record.name}, flavor "
            f"{record.flavor!r})"
        )
    seq_len = cfg.verify.seq_len or record.seq_len
    if seq_len > model_config.max_seq_len:
        raise ApertusError(
            f"export.verify.seq_len {seq_len} exceeds the model's max_seq_len "
            f"{model_config.max_seq_len} (run {record.name})"
        )
    with StepRun(
        "export",
        "hf",
        args.config,
        inputs=[args.run, checkpoint, args.tokenizer, args.heldout],
        outputs=[args.output],
        manifest=args.manifest,
    ) as step:
        state = load_model_state(checkpoint, model_config)
        with building_directory(args.output) as folder:
            summary = write_export(
                state,
                model_config,
                folder,
                args.tokenizer,
                dtype=cfg.dtype,
                max_shard_size=cfg.max_shard_size,
                chat=args.chat,
            )
            del state
            # The batch is encoded with the exported tokenizer: what a user of the folder gets.
            batch = verification_batch(
                load_tokenizer(str(folder)), args.heldout, cfg.verify.rows, seq_len
            )
            card = verify_export(
                checkpoint,
                model_config,
                folder,
                batch,
                tolerance=cfg.verify.tolerance,
            )
        step.summary.update(
            {
                "run": record.name,
                "checkpoint": str(checkpoint),
                "step": _step_of(checkpoint),
                "eos_token_id": summary["eos_token_id"],
                "dtype": summary["dtype"],
                "parameters": summary["parameters"],
                "max_abs_diff": card["max_abs_diff"],
                "mean_abs_diff": card["mean_abs_diff"],
                "tolerance": card["tolerance"],
                "batch": [card["batch"]["rows"], card["batch"]["seq_len"]],
                "tokens_sha256": card["batch"]["tokens_sha256"],
                "max_position_embeddings": summary["max_position_embeddings"],
                "rope_theta": summary["rope_parameters"]["rope_theta"],
            }
        )


def _step_of(checkpoint: Path) -> int | None:
    name = checkpoint.name
    return int(name.removeprefix("step-")) if name.removeprefix("step-").isdigit() else None


if __name__ == "__main__":
    run_main(main)
