"""QRPO training (apertus.posttrain.qrpo_train) on the torchtitan trainer: the completions file,
the config, the QRPO data loader and loss (apertus.train.qrpo_loader, apertus.train.qrpo_loss),
and the step's entry point end to end under torchrun.

The reference for the trainer is `reference_qrpo`, a plain PyTorch loop over the same formulas
(the single-process trainer this step had before it moved onto torchtitan): the same
completion order, steps, AdEMAMix, constant LR after warmup and clipping.

Measured here (2 cores, float32, debug flavor, 8 completions, 16 steps): the torchtitan run on
1 process equals the reference loop exactly (losses, gradient norms, weights; the same shapes and
the same operations); 2 gloo processes (FSDP) against 1: losses within 7.3e-7, weights within
1.2e-4; tensor_parallel 2 against 1 process: losses within 6.6e-6, weights within 1.2e-5; a job
SIGKILLed after its step-10 checkpoint, stopped by SIGTERM, or `scontrol requeue`d on the local
SLURM cluster, and re-run (requeued) ends with bit-identical weights. The tolerances are the
tensor-parallel test's (tests/train/test_tensor_parallel.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from apertus.core import ApertusError
from apertus.model.flavors import flavor
from apertus.posttrain.qrpo import qrpo_loss, sequence_logprobs
from apertus.posttrain.qrpo_train import (
    QRPOConfig,
    main,
    qrpo_run_spec,
    read_completions,
    steps_per_epoch,
    write_data,
)
from apertus.train.qrpo_loader import QRPODataLoader, qrpo_epoch_order
from tests.conftest import process_tree

DEBUG = flavor("debug")
REPO = Path(__file__).resolve().parents[2]
LOSS_TOLERANCE = 2e-5
WEIGHT_TOLERANCE = 1e-3


def completion_record(prompt, completion, *, reward, refs, logp=-10.0, prompt_id="p0", cid="c0"):
    return {
        "prompt_id": prompt_id,
        "completion_id": cid,
        "input_ids": list(prompt) + list(completion),
        "completion_mask": [0] * len(prompt) + [1] * len(completion),
        "reward": reward,
        "reference_rewards": refs,
        "reference_logp": logp,
    }


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read(path: Path):
    return read_completions(path, vocab_size=DEBUG.vocab_size, max_seq_len=DEBUG.max_seq_len)


@torch.no_grad()
def add_reference_logps(model, records) -> None:
    for r in records:
        ids, mask = torch.tensor([r["input_ids"]]), torch.tensor([r["completion_mask"]])
        r["reference_logp"] = sequence_logprobs(model, ids, mask).item()


def save_checkpoint(model: torch.nn.Module, step_dir: Path) -> Path:
    """The model's weights as a DCP checkpoint, keys at the top level (the trainer's layout)."""
    from torch.distributed.checkpoint import save as dcp_save

    from apertus.train.checkpoint import seal_checkpoint

    step_dir.mkdir(parents=True)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    dcp_save(state, checkpoint_id=str(step_dir))
    seal_checkpoint(step_dir)  # as the trainer's checkpoint manager does
    return step_dir


def toy_records(model, *, prompts=4, per_prompt=2, seed=11):
    """`prompts` prompts with `per_prompt` completions of two lengths (beta 0.1 and 5/|y|),
    rewards 0, 1, ...; the reference log-probs are `model`'s own."""
    gen = torch.Generator().manual_seed(seed)
    records = []
    for p in range(prompts):
        prompt = [1, *torch.randint(4, 256, (2 + p % 3,), generator=gen).tolist()]
        for k in range(per_prompt):
            length = 3 if k % 2 == 0 else 50 - len(prompt) - p
            completion = torch.randint(4, 256, (length,), generator=gen).tolist()
            records.append(
                completion_record(
                    prompt,
                    completion,
                    reward=float(k),
                    refs=[0.0, 0.5, 1.0][: 2 + p % 2],
                    prompt_id=f"p{p}",
                    cid=f"c{k}",
                )
            )
    add_reference_logps(model, records)
    return records


# --------------------------------------------------------------------------------------------
# The completions file
# --------------------------------------------------------------------------------------------


def test_read_completions_computes_quantile_rewards(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            completion_record([1, 5], [6, 7], reward=2.0, refs=[0.0, 1.0, 2.0, 3.0], cid="a"),
            completion_record([1, 5], [8], reward=-1.0, refs=[0.0, 1.0, 2.0, 3.0], cid="b"),
            # Another number of reference samples, and integer ids.
            completion_record([1], [9, 9, 9], reward=0.5, refs=[0.5, 1.0], prompt_id=4, cid=7),
        ],
    )
    (tmp_path / "c.jsonl").write_text(
        (tmp_path / "c.jsonl").read_text() + "\n   \n", encoding="utf-8"
    )  # blank lines are skipped
    got = read(path)
    # 2.0 among [0, 1, 2, 3]: 3 of 4 at or below; -1.0: none; 0.5 among [0.5, 1.0]: the tie.
    assert [c.quantile_reward for c in got] == [0.75, 0.0, 0.5]
    assert [c.completion_tokens for c in got] == [2, 1, 3]
    assert (got[2].prompt_id, got[2].completion_id) == ("4", "7")


BAD_RECORDS = {
    "missing key": ({"reward": None}, "missing key\\(s\\) reward"),
    "mask length": ({"completion_mask": [0, 1]}, "as long as input_ids"),
    "mask first token": ({"completion_mask": [1, 1, 1, 1]}, "completion_mask\\[0\\]"),
    "mask values": ({"completion_mask": [0, 2, 1, 1]}, "only 0 and 1"),
    "empty completion": ({"completion_mask": [0, 0, 0, 0]}, "no completion token"),
    "token out of vocabulary": ({"input_ids": [1, 5, 256, 7]}, "in \\[0, 256\\)"),
    "non-finite reward": ({"reward": float("nan")}, "reward must be a finite number"),
    "empty references": ({"reference_rewards": []}, "no reference samples"),
    "string reward in references": ({"reference_rewards": [1.0, "2"]}, "reference_rewards"),
    "positive logp": ({"reference_logp": 12.5}, "negative log-likelihood"),
    "too long": ({"input_ids": [1] * 129, "completion_mask": [0] + [1] * 128}, "max_seq_len 128"),
    "bool id": ({"prompt_id": True}, "prompt_id must be"),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_read_completions_names_file_and_line_of_a_bad_record(tmp_path, name):
    change, message = BAD_RECORDS[name]
    good = completion_record([1, 5], [6, 7], reward=1.0, refs=[0.0, 2.0], cid="good")
    bad = {**completion_record([1, 5], [6, 7], reward=1.0, refs=[0.0, 2.0], cid="bad"), **change}
    bad = {k: v for k, v in bad.items() if v is not None}
    path = write_jsonl(tmp_path / "c.jsonl", [good, bad])
    with pytest.raises(ApertusError, match=f"c.jsonl:2: .*{message}") as error:
        read(path)
    if name != "bool id":
        assert str(error.value).endswith("(prompt 'p0')")  # the prompt the record belongs to


def test_read_completions_rejects_invalid_json_duplicates_and_empty_files(tmp_path):
    good = completion_record([1, 5], [6, 7], reward=1.0, refs=[0.0])
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(ApertusError, match=re.escape("c.jsonl:2: not valid JSON")):
        read(path)
    write_jsonl(path, [good, good])
    with pytest.raises(
        ApertusError, match=re.escape("c.jsonl:2: completion 'c0' of prompt 'p0' already on line 1")
    ):
        read(path)
    path.write_text("\n")
    with pytest.raises(ApertusError, match="holds no completions"):
        read(path)
    with pytest.raises(ApertusError, match="does not exist"):
        read(tmp_path / "missing.jsonl")


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def test_config_defaults_and_errors():
    cfg = QRPOConfig.from_dict({})
    assert (cfg.lr, cfg.beta_kl, cfg.max_beta, cfg.epochs) == (3e-4, 5.0, 0.1, 1)
    assert cfg.ademamix.betas == (0.9, 0.999, 0.999) and cfg.ademamix.warmup_steps is None
    cases = [
        ({"learning_rate": 1e-6}, "unknown key 'posttrain.qrpo.learning_rate'"),
        ({"lr": -1.0}, "posttrain.qrpo.lr must be a number >= 0.0"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"epochs": 1.5}, "epochs must be an integer"),
        ({"max_beta": 0}, "max_beta must be a number > 0"),
        ({"ademamix": {"betas": [0.9, 0.999]}}, "betas must be \\[beta1, beta2, beta3\\]"),
        ({"ademamix": {"betas": [0.9, 0.999, 1.0]}}, "betas must be a number >= 0.0 and < 1.0"),
        ({"ademamix": {"t_alpha": 3}}, "unknown key 'posttrain.qrpo.ademamix.t_alpha'"),
        ({"device": "tpu"}, "device must be"),
        ({"dtype": "float16"}, "dtype must be float32 or bfloat16"),
        ({"device": "cuda:1"}, "device must be 'auto', 'cpu' or 'cuda'"),
        ({"nproc": 2, "tensor_parallel": 4}, "tensor_parallel 4 does not divide nproc 2"),
        ({"nproc": 3}, "batch_size 64 does not split into micro-batches of 21"),
        ({"micro_batch": 5}, "batch_size 64 does not split"),
    ]
    for raw, message in cases:
        with pytest.raises(ApertusError, match=message):
            QRPOConfig.from_dict(raw)


def test_micro_batch_defaults_to_one_forward_per_rank_and_step():
    assert QRPOConfig.from_dict({}).rank_micro_batch == 64
    assert QRPOConfig.from_dict({"nproc": 2}).rank_micro_batch == 32
    assert QRPOConfig.from_dict({"nproc": 4, "tensor_parallel": 2}).rank_micro_batch == 32
    assert QRPOConfig.from_dict({"nproc": 2, "micro_batch": 8}).rank_micro_batch == 8


def test_steps_per_epoch_keeps_the_last_partial_batch():
    assert [steps_per_epoch(n, 4) for n in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]


# --------------------------------------------------------------------------------------------
# The data loader and the loss
# --------------------------------------------------------------------------------------------


@pytest.fixture
def qrpo_data(tmp_path):
    """Seven completions as a QRPO data directory (rows of 64 tokens at most)."""
    torch.manual_seed(0)
    model = flavor("debug", max_seq_len=64).build()
    records = toy_records(model, prompts=7, per_prompt=1)
    completions = read(write_jsonl(tmp_path / "c.jsonl", records))
    data_dir = write_data(
        completions, tmp_path / "work", source_sha256="0" * 64, max_len=64, vocab_size=256
    )
    return data_dir, completions


def loader(data_dir, *, rank=0, ranks=1, micro=2, step_completions=4, epochs=2, seed=5):
    config = QRPODataLoader.Config(
        sft_dir=str(data_dir), seed=seed, epochs=epochs, step_completions=step_completions
    )
    return QRPODataLoader(
        config,
        dp_world_size=ranks,
        dp_rank=rank,
        tokenizer=None,
        seq_len=64,
        local_batch_size=micro,
    )


def test_loader_deals_the_old_order_in_steps_and_fills_the_last_one(qrpo_data):
    data_dir, completions = qrpo_data
    batches = list(loader(data_dir))
    # 7 completions in steps of 4: 2 steps per epoch, the second with 3 completions and one
    # filler of weight 0; 2 epochs of 8 rows = 8 micro-batches of 2.
    assert len(batches) == 8
    weights = torch.cat([b["weight"] for b, _ in batches]).tolist()
    assert weights == ([0.25] * 4 + [1 / 3] * 3 + [0.0]) * 2
    rq = torch.cat([b["quantile_reward"] for b, _ in batches])
    logp = torch.cat([b["reference_logp"] for b, _ in batches])
    for epoch in range(2):
        order = qrpo_epoch_order(7, 5, epoch).tolist()
        assert order == torch.randperm(7, generator=gen_after(5, epoch)).tolist()
        rows = slice(epoch * 8, epoch * 8 + 7)
        assert rq[rows].tolist() == [completions[i].quantile_reward for i in order]
        assert logp[rows].tolist() == [completions[i].reference_logp for i in order]
    inputs, labels = batches[0][0]["input"], batches[0][1]
    first = completions[qrpo_epoch_order(7, 5, 0)[0]]
    width = len(first.input_ids)
    assert inputs[0, : width - 1].tolist() == list(first.input_ids[:-1])
    expected = [
        t if m else -100
        for t, m in zip(first.input_ids[1:], first.completion_mask[1:], strict=False)
    ]
    assert labels[0, : width - 1].tolist() == expected
    assert (labels[0, width - 1 :] == -100).all()


def gen_after(seed: int, epochs: int) -> torch.Generator:
    """A generator seeded with `seed` after `epochs` permutations of 7 (the old trainer's)."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        torch.randperm(7, generator=generator)
    return generator


def test_ranks_share_each_step_and_resume_mid_stream(qrpo_data):
    data_dir, _ = qrpo_data
    whole = [b["weight"].tolist() + b["quantile_reward"].tolist() for b, _ in loader(data_dir)]
    ranks = [loader(data_dir, rank=r, ranks=2) for r in (0, 1)]
    # Rank k takes the micro-batch from k * micro in each round of micro x ranks rows.
    merged = []
    for a, b in zip(*[list(r) for r in ranks], strict=True):
        merged += [a[0]["weight"].tolist() + a[0]["quantile_reward"].tolist()]
        merged += [b[0]["weight"].tolist() + b[0]["quantile_reward"].tolist()]
    assert merged == whole
    resumed = loader(data_dir)
    resumed.load_state_dict({**loader(data_dir).state_dict(), "samples_consumed": 6})
    assert [b["weight"].tolist() for b, _ in resumed] == [
        b["weight"].tolist() for b, _ in list(loader(data_dir))[3:]
    ]
    with pytest.raises(ApertusError, match="do not split into micro-batches of 2 on 3"):
        loader(data_dir, ranks=3)


def test_loss_of_a_step_is_qrpo_loss_over_its_completions(qrpo_data):
    """QRPOLoss summed over a step's micro-batches = qrpo_loss of its completions at once."""
    from apertus.train.qrpo_loss import QRPOLoss

    data_dir, completions = qrpo_data
    torch.manual_seed(1)
    model = flavor("debug", max_seq_len=64).build()
    loss_fn = QRPOLoss(QRPOLoss.Config())
    total = 0.0
    batches = list(loader(data_dir, epochs=1))
    for batch, labels in batches[2:4]:  # the second step: 3 completions and a filler
        loss_fn.set_rows({k: batch[k] for k in ("reference_logp", "quantile_reward", "weight")})
        logits = model(batch["input"])
        total += loss_fn(logits, labels, torch.tensor(999))[0].item()
    order = qrpo_epoch_order(7, 5, 0)[4:]
    step = [completions[i] for i in order]
    width = max(len(c.input_ids) for c in step)
    ids = torch.tensor([list(c.input_ids) + [0] * (width - len(c.input_ids)) for c in step])
    mask = torch.tensor([list(c.completion_mask) + [0] * (width - len(c.input_ids)) for c in step])
    expected = qrpo_loss(
        sequence_logprobs(model, ids, mask),
        torch.tensor([c.reference_logp for c in step], dtype=torch.float64),
        torch.tensor([c.quantile_reward for c in step], dtype=torch.float64),
        mask.sum(-1),
    ).item()
    assert total == pytest.approx(expected, rel=1e-6)
    stats = loss_fn.take_statistics().tolist()
    assert stats[-1] == 3  # completions: the filler counts nothing
    assert stats[0] == pytest.approx(sum(c.quantile_reward for c in step))


def test_run_spec_is_sfts_trainer_with_the_qrpo_loader_and_loss(qrpo_data, tmp_path):
    from apertus.train.config_registry import trainer_config
    from apertus.train.qrpo_loss import QRPOLoss
    from apertus.train.trainer import QRPOTrainer

    data_dir, _ = qrpo_data
    cfg = QRPOConfig.from_dict({"batch_size": 4, "epochs": 3, "lr": 1e-4, "device": "cpu"})
    sft = {
        "flavor": "debug",
        "model_overrides": {"max_seq_len": 64},
        "final_checkpoint": str(
            save_checkpoint(flavor("debug").build(), tmp_path / "s" / "step-1")
        ),
    }
    spec = qrpo_run_spec(cfg, data_dir, sft).placed(tmp_path / "run")
    assert (spec.steps, spec.global_batch, spec.micro_batch, spec.seq_len) == (6, 4, 4, 64)
    assert (spec.ademamix.alpha, spec.ademamix.betas[2], spec.ademamix.t_alpha) == (8.0, 0.999, 6)
    assert spec.ademamix.weight_decay == 0.0 and spec.lr.kind == "constant"
    config = trainer_config(spec)
    assert isinstance(config, QRPOTrainer.Config)
    assert isinstance(config.loss, QRPOLoss.Config) and config.loss.beta_kl == 5.0
    assert isinstance(config.dataloader, QRPODataLoader.Config)
    assert config.dataloader.step_completions == 4 and config.checkpoint.interval == 50


# --------------------------------------------------------------------------------------------
# The step's entry point, under torchrun
# --------------------------------------------------------------------------------------------

RUN_CONFIG = {
    "lr": 1e-3,
    "warmup_steps": 2,
    "epochs": 8,
    "batch_size": 4,
    "device": "cpu",
    "checkpoint_interval": 10,
    "seed": 2,
}


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """An SFT run directory as the SFT step leaves it (run.json, a DCP checkpoint), and eight
    scored completions of its model (8 epochs of 2 steps: 16 steps)."""
    root = tmp_path_factory.mktemp("qrpo")
    torch.manual_seed(3)
    model = flavor("debug", rope_theta=10_000.0, max_seq_len=64).build()
    checkpoint = save_checkpoint(model, root / "sft-work" / "ckpt" / "step-9")
    run = root / "sft"
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps(
            {
                "name": "sft",
                "final_checkpoint": os.path.relpath(checkpoint, run),
                "final_step": 9,
                "final_loss": 3.2,
                "flavor": "debug",
                "model_overrides": {"rope_theta": 10_000.0, "max_seq_len": 64},
                "seq_len": 48,
            }
        )
    )
    completions = write_jsonl(root / "scored.jsonl", toy_records(model))
    return run, model, completions


def qrpo_command(sft_run, directory: Path, config=RUN_CONFIG) -> list[str]:
    run, _, completions = sft_run
    return [
        *("--config", json.dumps(config)),
        *("--manifest", str(directory / "out" / "manifest.json")),
        *("--sft-run", str(run), "--completions", str(completions)),
        *("--output", str(directory / "out"), "--work-dir", str(directory / "work")),
    ]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from apertus.export.hf import load_model_state
    from apertus.export.stage import read_run_record

    record = read_run_record(out)
    return load_model_state(record.final_checkpoint, record.model_config())


def metrics_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def one_process(sft_run, tmp_path_factory):
    directory = tmp_path_factory.mktemp("one")
    main(qrpo_command(sft_run, directory))
    return directory


def reference_qrpo(model, completions, cfg: QRPOConfig):
    """The single-process QRPO loop this step had before torchtitan: per step the mean QRPO
    loss over `batch_size` completions (the last step of an epoch the rest) in the order of one
    generator seeded with `seed`, AdEMAMix, a constant LR after a linear warmup, clipping.
    Returns the losses and gradient norms."""
    from apertus.train.ademamix import AdEMAMix, param_groups
    from apertus.train.schedule import constant_lr_with_warmup

    total = cfg.epochs * steps_per_epoch(len(completions), cfg.batch_size)
    optimizer = AdEMAMix(
        param_groups(model, 0.0),
        lr=cfg.lr,
        betas=cfg.ademamix.betas,
        alpha=cfg.ademamix.alpha,
        t_alpha=total,
        t_beta3=total,
        eps=cfg.ademamix.eps,
        weight_decay=0.0,
    )
    order = torch.Generator().manual_seed(cfg.seed)
    losses, norms, step = [], [], 0
    for _ in range(cfg.epochs):
        permutation = torch.randperm(len(completions), generator=order).tolist()
        for first in range(0, len(permutation), cfg.batch_size):
            batch = [completions[i] for i in permutation[first : first + cfg.batch_size]]
            lr = constant_lr_with_warmup(step, lr=cfg.lr, warmup_steps=cfg.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            width = max(len(c.input_ids) for c in batch)
            ids = torch.tensor(
                [list(c.input_ids) + [0] * (width - len(c.input_ids)) for c in batch]
            )
            mask = torch.tensor(
                [list(c.completion_mask) + [0] * (width - len(c.input_ids)) for c in batch]
            )
            loss = qrpo_loss(
                sequence_logprobs(model, ids, mask),
                torch.tensor([c.reference_logp for c in batch], dtype=torch.float64),
                torch.tensor([c.quantile_reward for c in batch], dtype=torch.float64),
                mask.sum(-1),
            )
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)))
            losses.append(loss.item())
            optimizer.step()
            step += 1
    return losses, norms


@pytest.mark.slow
def test_entry_point_trains_like_the_single_process_loop_and_export_reads_it(sft_run, one_process):
    _run, sft_model, completions = sft_run
    out = one_process / "out"
    record = json.loads((out / "run.json").read_text())
    assert record["final_step"] == 16  # 8 epochs of ceil(8 / 4) steps
    assert (record["flavor"], record["model_overrides"], record["seq_len"]) == (
        "debug",
        {"rope_theta": 10_000.0, "max_seq_len": 64},
        48,
    )
    assert (record["completions"], record["prompts"], record["epochs"]) == (8, 4, 8)
    # Paths relative to the run.json's folder, so a results folder moves whole.
    assert record["sft_run"] == "../../sft" or record["sft_run"].endswith("/sft")
    assert record["final_checkpoint"].startswith("../work/qrpo-")
    metrics = metrics_of(out)
    assert [m["step"] for m in metrics] == list(range(1, 17))
    assert record["final_loss"] == metrics[-1]["loss"]
    assert all(0.0 < m["beta"] <= 0.1 and m["completions"] == 4 for m in metrics)
    assert json.loads((out / "config.json").read_text()) == RUN_CONFIG
    step = json.loads((out / "manifest.json").read_text())
    assert step["stage"] == "posttrain" and step["step"] == "qrpo"
    assert step["summary"]["initial_abs_log_ratio_per_token"] < 1e-4
    assert step["summary"]["filler_rows"] == 0

    # The reference loop on the same completions from the same weights.
    model = flavor("debug", rope_theta=10_000.0, max_seq_len=64).build()
    model.load_state_dict(sft_model.state_dict())
    losses, norms = reference_qrpo(model, read(completions), QRPOConfig.from_dict(RUN_CONFIG))
    got = [m["loss"] for m in metrics]
    loss_difference = max(abs(a - b) for a, b in zip(got, losses, strict=True))
    assert loss_difference < LOSS_TOLERANCE
    for ours, theirs in zip([m["grad_norm"] for m in metrics], norms, strict=True):
        assert ours == pytest.approx(theirs, rel=5e-4)
    trained = final_weights(out)
    weight_difference = max(
        (trained[n] - v).abs().max().item() for n, v in model.state_dict().items()
    )
    assert weight_difference < WEIGHT_TOLERANCE
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    print(f"\nvs the reference loop: losses {loss_difference:.1e}, weights {weight_difference:.1e}")


@pytest.mark.slow
def test_two_processes_train_like_one(sft_run, one_process, tmp_path):
    main(qrpo_command(sft_run, tmp_path, {**RUN_CONFIG, "nproc": 2}))
    ours, theirs = metrics_of(tmp_path / "out"), metrics_of(one_process / "out")
    for a, b in zip(ours, theirs, strict=True):
        assert a["quantile_reward"] == pytest.approx(b["quantile_reward"])
        assert a["completions"] == b["completions"] == 4
    loss_difference = max(abs(a["loss"] - b["loss"]) for a, b in zip(ours, theirs, strict=True))
    assert loss_difference < LOSS_TOLERANCE
    two, one = final_weights(tmp_path / "out"), final_weights(one_process / "out")
    weight_difference = max((two[n] - v).abs().max().item() for n, v in one.items())
    assert weight_difference < WEIGHT_TOLERANCE
    print(f"\n2 vs 1 process: losses {loss_difference:.1e}, weights {weight_difference:.1e}")


@pytest.mark.slow
def test_tensor_parallel_trains_like_one_process(sft_run, one_process, tmp_path):
    main(qrpo_command(sft_run, tmp_path, {**RUN_CONFIG, "nproc": 2, "tensor_parallel": 2}))
    ours, theirs = metrics_of(tmp_path / "out"), metrics_of(one_process / "out")
    loss_difference = max(abs(a["loss"] - b["loss"]) for a, b in zip(ours, theirs, strict=True))
    assert loss_difference < LOSS_TOLERANCE
    tp, one = final_weights(tmp_path / "out"), final_weights(one_process / "out")
    weight_difference = max((tp[n] - v).abs().max().item() for n, v in one.items())
    assert weight_difference < WEIGHT_TOLERANCE
    print(f"\nTP 2 vs 1 process: losses {loss_difference:.1e}, weights {weight_difference:.1e}")


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _run_until(command, log: Path, step: int, stop) -> int | None:
    """Start the QRPO job in a session of its own, and `stop(process)` once its metrics log a
    step at or past `step`; the step logged then (None if the job ended first)."""
    from apertus.train.metrics import read_metrics

    work = log.parent / "work"
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline, stopped_after = time.monotonic() + 240, None
        while time.monotonic() < deadline and process.poll() is None:
            found = list(work.glob("qrpo-*/out/metrics.jsonl"))
            if found and (logged := read_metrics(found[0])) and max(logged) >= step:
                stopped_after = max(logged)
                stop(process)
                break
            time.sleep(0.01)
        process.wait(timeout=300)
    assert stopped_after is not None, log.read_text()[-4000:]
    return stopped_after


@pytest.mark.slow
def test_sigterm_then_sigkill_and_the_reruns_resume_to_the_uninterrupted_weights(
    sft_run, one_process, tmp_path
):
    """SIGTERM, what SLURM sends before a requeue or at the time limit: every rank saves the
    step it is at and the step fails naming the checkpoint. The re-run resumes there; SIGKILL
    of its process group (as Snakemake's kill) after its step-10 checkpoint leaves no process.
    The next re-run resumes from step 10 and ends with the uninterrupted run's weights."""
    from apertus.train.run_spec import checkpoint_steps

    command = [sys.executable, "-m", "apertus.posttrain.qrpo_train"]
    command += qrpo_command(sft_run, tmp_path)
    # The launcher passes SIGTERM on to the ranks.
    _run_until(command, tmp_path / "stopped.log", 3, lambda p: p.send_signal(signal.SIGTERM))
    text = (tmp_path / "stopped.log").read_text()
    assert "stopped early with a checkpoint" in text, text[-4000:]
    work = next((tmp_path / "work").glob("qrpo-*"))
    stopped_at = max(checkpoint_steps(work / "ckpt"))
    assert 3 <= stopped_at < 14  # room for the next attempt to train before its kill

    tree: list[int] = []

    def kill(process) -> None:
        tree.extend(process_tree(process.pid))
        os.killpg(process.pid, signal.SIGKILL)

    metrics = work / "out" / "metrics.jsonl"
    before = len(metrics.read_text().splitlines())  # appended to by each run
    # Two steps on, and not while the step-10 checkpoint is written (logged, then saved).
    kill_at = stopped_at + 2 if stopped_at + 2 < 10 else max(stopped_at + 2, 12)
    killed_after = _run_until(command, tmp_path / "killed.log", kill_at, kill)
    appended = metrics.read_text().splitlines()[before:]
    assert json.loads(appended[0])["step"] == stopped_at + 1  # resumed from SIGTERM's checkpoint
    deadline = time.monotonic() + 20
    while any(map(running, tree)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in tree if running(pid)]
    left = checkpoint_steps(work / "ckpt")
    assert stopped_at in left and 16 not in left  # its step-10 one too, if it got there
    main(qrpo_command(sft_run, tmp_path))
    step = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert step["summary"]["resumed_from_step"] == max(left)
    ours, theirs = final_weights(tmp_path / "out"), final_weights(one_process / "out")
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    print(f"\nstopped at {stopped_at}, killed after {killed_after}, resumed from {max(left)}")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"input_ids": [1] * 65, "completion_mask": [0] + [1] * 64}, "65 tokens, more than"),
        ({"reward": float("nan")}, "reward must be a finite number, got nan"),
        ({"reference_rewards": []}, "no reference samples"),
    ],
)
def test_bad_completions_are_refused_naming_the_prompt_before_training(
    sft_run, tmp_path, change, message
):
    run, _, _ = sft_run
    good = completion_record([1, 2], [5, 6], reward=1.0, refs=[0.0], prompt_id="p1", cid="a")
    bad = {**completion_record([1, 2], [7], reward=1.0, refs=[0.0], prompt_id="p9"), **change}
    completions = write_jsonl(tmp_path / "scored.jsonl", [good, bad])
    args = qrpo_command((run, None, completions), tmp_path)
    with pytest.raises(ApertusError, match=f"scored.jsonl:2: {re.escape(message)}.*prompt 'p9'"):
        main(args)
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not (tmp_path / "work").exists()  # nothing written, no trainer started


@pytest.mark.slow
@pytest.mark.slurm
def test_requeued_slurm_job_resumes_to_the_uninterrupted_weights(
    slurm_cluster, sft_run, one_process, tmp_path
):
    """The QRPO job as a SLURM batch job, `scontrol requeue`d after its step-10 checkpoint (as
    the pretraining requeue test in tests/slurm/test_local_cluster.py): SLURM's SIGTERM stops
    it with a checkpoint, the requeued job resumes from it and ends with the weights of the
    uninterrupted run."""
    import shlex

    from apertus.train.metrics import read_metrics
    from tests.slurm.test_local_cluster import _start_when_pending

    log = tmp_path / "job.log"
    command = [sys.executable, "-m", "apertus.posttrain.qrpo_train"]
    command += qrpo_command(sft_run, tmp_path)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\ncd {shlex.quote(str(REPO))}\nexec {shlex.join(command)}\n")
    sbatch = ["sbatch", "--parsable", "--requeue", "--open-mode=append", "-o", str(log)]
    submitted = subprocess.run(
        [*sbatch, "-n1", "-c1", "-J", "qrpo-requeue", str(script)],
        capture_output=True,
        text=True,
        check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        deadline, requeued_after = time.monotonic() + 300, None
        while time.monotonic() < deadline:
            found = list((tmp_path / "work").glob("qrpo-*/out/metrics.jsonl"))
            if found and (logged := read_metrics(found[0])) and max(logged) >= 11:
                subprocess.run(["scontrol", "requeue", job_id], check=True)
                requeued_after, requeued_at = max(logged), time.monotonic()
                break
            time.sleep(0.05)
        assert requeued_after is not None, log.read_text()[-4000:] if log.exists() else ""
        _start_when_pending(job_id, requeued_at)
        # The step's manifest is written last, after run.json: waiting for run.json and then
        # cancelling the job could kill it between the two.
        manifest, deadline = tmp_path / "out" / "manifest.json", time.monotonic() + 600
        while time.monotonic() < deadline and not manifest.exists():
            time.sleep(1)
        assert manifest.exists(), log.read_text()[-4000:]
    finally:
        subprocess.run(["scancel", job_id], check=False)
    step = json.loads(manifest.read_text())
    assert step["summary"]["resumed_from_step"] >= 10
    ours, theirs = final_weights(tmp_path / "out"), final_weights(one_process / "out")
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    resumed = step["summary"]["resumed_from_step"]
    print(f"\nrequeued after step {requeued_after}, resumed from step {resumed}")
