"""Supervised fine-tuning through torchtitan's trainer (RECIPE.md §7): the SFT data loader, the
run spec's `sft_data`, the "linear" LR schedule, and a real run on CPU from a pretraining
checkpoint.

Independent references: the SFT arrays read with numpy (not `SFTData`), labels built by hand
from the loss mask, the order from the documented per-epoch permutation, transformers'
`get_linear_schedule_with_warmup`, and a plain PyTorch loop (no torchtitan) with the same
weights, rows, masks, AdEMAMix, schedule and clipping.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from apertus.core import ApertusError
from apertus.model.flavors import flavor
from apertus.posttrain.instructions import InstructionConfig, make_instruction_set
from apertus.posttrain.sft_data import build_sft_data
from apertus.tokenize.tokenizer import load_tokenizer, train_tokenizer
from apertus.train.ademamix import AdEMAMix, param_groups
from apertus.train.config_registry import trainer_config
from apertus.train.lr_scheduler import RecipeLRSchedulers
from apertus.train.metrics import read_metrics
from apertus.train.pretokenized import PretokenizedVocabulary, active_loader
from apertus.train.run_spec import load_run_spec
from apertus.train.schedule import linear_lr, warmup_steps_for_ratio
from apertus.train.sft_loader import PAD_MULTIPLE, SFTDataLoader
from tests.train.test_torchtitan import build_phase, load_checkpoint, model_weights, run_ok

IGNORE, PAD = -100, 3
VOCAB = 300  # the test tokenizer's size, and the model's (debug flavor, vocabulary widened)
MAX_LEN = 96
SEED = 3
STEPS, GLOBAL, MICRO = 24, 8, 4
PEAK = 3e-3
WARMUP = warmup_steps_for_ratio(STEPS, 0.03)  # RECIPE.md §7: warmup ratio 0.03 -> 1 step


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory) -> Path:
    """The built-in instruction set tokenized with a 300-token BPE trained on it."""
    root = tmp_path_factory.mktemp("sft")
    config = InstructionConfig.from_dict({"train": 400, "qrpo": 0, "heldout": 0})
    conversations = make_instruction_set(config).train
    texts = [m["content"] for c in conversations for m in c["messages"]]
    train_tokenizer(texts * 3, root / "tokenizer", vocab_size=VOCAB)
    tokenizer = load_tokenizer(str(root / "tokenizer"))
    assert len(tokenizer) == VOCAB
    record = build_sft_data(conversations, tokenizer, root / "data", max_len=MAX_LEN)
    assert record["truncated"] > 0  # some conversations are cut, a few dropped
    return root / "data"


def read_rows(directory: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each row's tokens and loss mask, from the arrays (not through SFTData)."""
    tokens = np.load(directory / "tokens.npy")
    mask = np.load(directory / "loss_mask.npy")
    ends = np.cumsum(np.load(directory / "lengths.npy"))
    starts = np.concatenate([[0], ends[:-1]])
    return (
        [tokens[s:e].astype(np.int64) for s, e in zip(starts, ends, strict=True)],
        [mask[s:e].astype(bool) for s, e in zip(starts, ends, strict=True)],
    )


def expected_batch(directory: Path, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and labels of `rows`, padded to MAX_LEN + 1 by hand: a label is the next token
    where the loss mask marks it, else IGNORE (prompt, chat markers, padding)."""
    tokens, masks = read_rows(directory)
    inputs = torch.full((len(rows), MAX_LEN), PAD, dtype=torch.int64)
    labels = torch.full((len(rows), MAX_LEN), IGNORE, dtype=torch.int64)
    for out, row in enumerate(rows):
        t, m = tokens[row], masks[row]
        inputs[out, : min(len(t), MAX_LEN)] = torch.from_numpy(t[:MAX_LEN])
        for j in range(len(t) - 1):
            if m[j + 1]:
                labels[out, j] = int(t[j + 1])
    return inputs, labels


def stream_rows(rows: int, first: int, count: int, seed: int = SEED) -> list[int]:
    """Samples first .. first + count - 1: epoch e is permutation(rng([seed, e]))."""
    out = []
    for sample in range(first, first + count):
        epoch, within = divmod(sample, rows)
        out.append(int(np.random.default_rng([seed, epoch]).permutation(rows)[within]))
    return out


def loader(sft_dir, *, rank=0, world=1, micro_batch=MICRO, seed=SEED, epochs=1, seq_len=MAX_LEN):
    config = SFTDataLoader.Config(sft_dir=str(sft_dir), seed=seed, epochs=epochs)
    return SFTDataLoader(
        config,
        dp_world_size=world,
        dp_rank=rank,
        tokenizer=PretokenizedVocabulary(tokenizer_path=str(sft_dir)),
        seq_len=seq_len,
        local_batch_size=micro_batch,
    )


def take(data_loader, n):
    """The first `n` micro-batches, padded back to MAX_LEN (as `expected_batch` pads)."""
    iterator = iter(data_loader)
    return [full_width(*next(iterator)) for _ in range(n)]


def full_width(batch, labels):
    """A micro-batch padded on the right to MAX_LEN with PAD (inputs) and IGNORE (labels)."""
    extra = MAX_LEN - labels.shape[1]
    return {"input": F.pad(batch["input"], (0, extra), value=PAD)}, F.pad(
        labels, (0, extra), value=IGNORE
    )


# ---------------------------------------------------------------------------------------------
# The data loader (in process)


def test_batches_are_the_shuffled_rows_with_completion_labels(sft_dir):
    """Each micro-batch is its rows padded to the longest, rounded up to PAD_MULTIPLE: what
    padding to MAX_LEN gives, without the columns that are padding in every row."""
    tokens, _ = read_rows(sft_dir)
    data_loader = loader(sft_dir)
    iterator = iter(data_loader)
    widths = []
    for index in range(4):
        batch, labels = next(iterator)
        rows = stream_rows(len(tokens), index * MICRO, MICRO)
        inputs, expected = expected_batch(sft_dir, rows)
        longest = max(len(tokens[row]) for row in rows)
        width = min(MAX_LEN, math.ceil(longest / PAD_MULTIPLE) * PAD_MULTIPLE)
        assert set(batch) == {"input", "positions"} and labels.shape == (MICRO, width)
        assert torch.equal(batch["input"], inputs[:, :width]) and (inputs[:, width:] == PAD).all()
        assert torch.equal(labels, expected[:, :width]) and (expected[:, width:] == IGNORE).all()
        assert torch.equal(batch["positions"], torch.arange(width).expand(MICRO, -1))
        assert 0 < int((labels != IGNORE).sum()) < labels.numel() // 4  # completions only
        widths.append(width)
    assert min(widths) < MAX_LEN  # the test data has short batches: the trimming is tested
    counts = data_loader.mask_counts
    assert counts.labels == MICRO * sum(widths) and counts.goldfish_dropped == 0
    assert active_loader() is data_loader  # the metrics read its counts


def test_epochs_visit_every_row_once_each_and_stop_at_the_last_round(sft_dir):
    rows = len(read_rows(sft_dir)[0])
    data_loader = loader(sft_dir, micro_batch=8, epochs=2)
    batches = [full_width(*batch) for batch in data_loader]
    assert len(batches) == (2 * rows) // 8
    first_inputs = torch.cat([b["input"] for b, _ in batches])
    every, _ = expected_batch(sft_dir, list(range(rows)))
    # Epoch 0 is a permutation of all rows; epoch 1 another permutation.
    order0 = stream_rows(rows, 0, rows)
    order1 = stream_rows(rows, rows, rows)
    assert sorted(order0) == sorted(order1) == list(range(rows)) and order0 != order1
    assert torch.equal(first_inputs[:rows], every[order0])
    done = (2 * rows) // 8 * 8
    assert torch.equal(first_inputs[rows:done], every[order1[: done - rows]])


def test_ranks_split_each_round_of_the_one_rank_stream(sft_dir):
    whole = take(loader(sft_dir, micro_batch=4), 5)
    rank0 = take(loader(sft_dir, rank=0, world=2, micro_batch=2), 5)
    rank1 = take(loader(sft_dir, rank=1, world=2, micro_batch=2), 5)
    for (full, full_labels), (a, a_labels), (b, b_labels) in zip(whole, rank0, rank1, strict=True):
        assert torch.equal(torch.cat([a["input"], b["input"]]), full["input"])
        assert torch.equal(torch.cat([a_labels, b_labels]), full_labels)


def test_state_resumes_exactly_also_on_other_ranks(sft_dir):
    first = loader(sft_dir)
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    state = first.state_dict()
    assert state["samples_consumed"] == 12
    expected = full_width(*next(iterator))
    again = loader(sft_dir)
    again.load_state_dict(state)
    batch, labels = take(again, 1)[0]
    assert torch.equal(batch["input"], expected[0]["input"]) and torch.equal(labels, expected[1])
    resharded = loader(sft_dir, rank=1, world=2, micro_batch=2)
    resharded.load_state_dict(state)
    batch, _ = take(resharded, 1)[0]
    assert torch.equal(batch["input"], expected[0]["input"][2:])
    with pytest.raises(ApertusError, match="other SFT data"):
        loader(sft_dir).load_state_dict(state | {"sft_data_sha256": "0" * 64})
    with pytest.raises(ApertusError, match="made with seed 3, this run uses 4"):
        loader(sft_dir, seed=4).load_state_dict(state)
    with pytest.raises(ApertusError, match="not a whole number of rounds"):
        loader(sft_dir, micro_batch=5).load_state_dict(state)


def test_loader_refuses_another_sequence_length_or_a_small_tokenizer(sft_dir):
    with pytest.raises(ApertusError, match="max_len 96, the run's seq_len is 64"):
        loader(sft_dir, seq_len=64)
    vocabulary = PretokenizedVocabulary(tokenizer_path=str(sft_dir))
    assert (vocabulary.get_vocab_size(), vocabulary.eos_id, vocabulary.pad_id) == (VOCAB, 2, PAD)
    with pytest.raises(ApertusError, match="token ids only"):
        vocabulary.encode("x")
    vocabulary.vocab_size = 100
    with pytest.raises(ApertusError, match="tokenized with 300 ids, the tokenizer has 100"):
        SFTDataLoader(
            SFTDataLoader.Config(sft_dir=str(sft_dir)),
            dp_world_size=1,
            dp_rank=0,
            tokenizer=vocabulary,
            seq_len=MAX_LEN,
            local_batch_size=1,
        )


# ---------------------------------------------------------------------------------------------
# The linear schedule


def test_linear_schedule_is_transformers_linear_warmup_and_decay():
    from transformers import get_linear_schedule_with_warmup

    for warmup, total in [(0, 1), (0, 10), (3, 100), (7, 7), (1, 24), (30, 1000)]:
        param = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.SGD([param], lr=2e-5)
        reference = get_linear_schedule_with_warmup(optimizer, warmup, total)
        for step in range(total):
            assert linear_lr(step, peak=2e-5, warmup_steps=warmup, total_steps=total) == (
                pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-12, abs=1e-20)
            ), (warmup, total, step)
            optimizer.step()
            reference.step()
    # Hand-checked: warmup 2 of 6 -> 0, 1/2, then 4/4 .. 1/4 of the peak.
    assert [linear_lr(s, peak=8.0, warmup_steps=2, total_steps=6) for s in range(6)] == [
        0.0, 4.0, 8.0, 6.0, 4.0, 2.0,
    ]  # fmt: skip
    assert warmup_steps_for_ratio(3_800_000 // 512, 0.03) == math.ceil(7421 * 0.03) == 223
    with pytest.raises(ValueError, match="outside the schedule"):
        linear_lr(6, peak=1.0, warmup_steps=2, total_steps=6)
    with pytest.raises(ValueError, match="warmup_steps <= total_steps"):
        linear_lr(0, peak=1.0, warmup_steps=7, total_steps=6)


def test_linear_scheduler_container_sets_every_update_and_clamps_after_the_last():
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=1e-3)
    schedulers = RecipeLRSchedulers.Config(kind="linear", warmup_steps=2).build(
        optimizers=[optimizer], training_steps=9
    )
    seen = []
    for _ in range(9):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedulers.step()
    assert seen == [linear_lr(i, peak=1e-3, warmup_steps=2, total_steps=9) for i in range(9)]
    assert optimizer.param_groups[0]["lr"] == seen[-1]
    with pytest.raises(ValueError, match="warmup_steps <= total_steps"):
        RecipeLRSchedulers.Config(kind="linear", warmup_steps=10).build(
            optimizers=[optimizer], training_steps=9
        )


# ---------------------------------------------------------------------------------------------
# Run spec


def sft_spec(directory: Path, sft_dir: Path, initial: Path | None = None, **changes) -> Path:
    import json

    directory.mkdir(parents=True, exist_ok=True)
    spec = {
        "flavor": "debug",
        "model_overrides": {"vocab_size": VOCAB},
        "sft_data": str(sft_dir),
        "seq_len": MAX_LEN,
        "micro_batch": MICRO,
        "global_batch": GLOBAL,
        "steps": STEPS,
        # RECIPE.md §7: linear decay with warmup ratio 0.03, AdEMAMix alpha 8, beta3 0.999,
        # T = total steps, no weight decay, clip 1.0, no Goldfish.
        "lr": {"kind": "linear", "peak": PEAK, "warmup_steps": WARMUP},
        "ademamix": {
            "betas": [0.9, 0.999, 0.999],
            "alpha": 8.0,
            "t_alpha": STEPS,
            "t_beta3": STEPS,
            "weight_decay": 0.0,
        },
        "grad_clip": 1.0,
        "goldfish": {"enabled": False},
        "seed": SEED,
        "device": "cpu",
        "checkpoint": {
            "folder": str(directory / "ckpt"),
            "interval": 12,
            "initial": None if initial is None else str(initial),
            "initial_mode": "weights",
        },
        "metrics_folder": str(directory / "out"),
        **changes,
    }
    path = directory / "spec.json"
    path.write_text(json.dumps(spec, indent=1))
    return path


def test_sft_spec_builds_a_trainer_config_with_the_sft_loader(sft_dir, tmp_path):
    spec = load_run_spec(sft_spec(tmp_path, sft_dir))
    assert spec.ademamix.betas == (0.9, 0.999, 0.999) and spec.ademamix.weight_decay == 0.0
    assert spec.phase_dir is None and spec.sft_epochs == 1
    config = trainer_config(spec)
    assert isinstance(config.dataloader, SFTDataLoader.Config)
    assert config.dataloader.sft_dir == str(sft_dir) and config.dataloader.seed == SEED
    assert isinstance(config.tokenizer, PretokenizedVocabulary.Config)
    assert config.hf_assets_path == str(sft_dir)
    assert config.lr_scheduler.kind == "linear" and config.training.max_norm == 1.0
    assert config.metrics.spike_factor == 0.0  # an SFT step's loss swings past 2x
    groups = [g.optimizer_kwargs for g in config.optimizer.param_groups]
    assert all(g["weight_decay"] == 0.0 and g["alpha"] == 8.0 for g in groups)
    assert all(g["t_beta3"] == STEPS and g["betas"] == (0.9, 0.999, 0.999) for g in groups)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"phase_dir": "somewhere"}, "exactly one of phase_dir"),
        ({"sft_data": None}, "exactly one of phase_dir"),
        ({"goldfish": {"enabled": True}}, "goldfish is not applied to SFT data"),
        ({"sft_epochs": 0}, "sft_epochs must be a positive integer"),
        ({"lr": {"kind": "linear", "peak": 1e-3, "decay_steps": 3}}, "decay_steps applies"),
        ({"lr": {"kind": "linear", "peak": 1e-3, "warmup_steps": 25}}, "exceed the schedule's"),
        ({"lr": {"kind": "cosine", "peak": 1e-3}}, "or 'linear' \\(SFT\\)"),
    ],
)
def test_bad_sft_specs_are_refused_naming_the_field(sft_dir, tmp_path, changes, message):
    with pytest.raises(ApertusError, match=message):
        load_run_spec(sft_spec(tmp_path, sft_dir, **changes))


def test_preflight_counts_rows_times_epochs_and_checks_the_length(sft_dir, tmp_path):
    rows = len(read_rows(sft_dir)[0])
    steps = rows // GLOBAL + 1  # one step more than one epoch holds
    too_long = load_run_spec(sft_spec(tmp_path / "a", sft_dir, steps=steps))
    with pytest.raises(ApertusError, match=rf"{rows} rows x 1 epoch\(s\) = {rows} samples"):
        trainer_config(too_long)
    two_epochs = load_run_spec(sft_spec(tmp_path / "b", sft_dir, steps=steps, sft_epochs=2))
    assert trainer_config(two_epochs).dataloader.epochs == 2
    other_length = load_run_spec(sft_spec(tmp_path / "c", sft_dir, seq_len=64))
    with pytest.raises(ApertusError, match="max_len 96, the run's seq_len is 64"):
        trainer_config(other_length)
    small_model = load_run_spec(sft_spec(tmp_path / "d", sft_dir, model_overrides={}))
    with pytest.raises(ApertusError, match="tokenized with 300 ids, more than the model's"):
        trainer_config(small_model)


# ---------------------------------------------------------------------------------------------
# End to end (torchrun)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A 2-step pretraining run of the debug model (vocabulary widened to the tokenizer's)."""
    from tests.train.test_torchtitan import RUN, write_spec

    root = tmp_path_factory.mktemp("pretrain")
    phase = build_phase(root / "data", n_docs=60)
    spec = write_spec(
        root / "run", phase, steps=2, model_overrides={"vocab_size": VOCAB}, lr={**RUN["lr"],
        "warmup_steps": 1, "decay_steps": 1},
    )  # fmt: skip
    run_ok(spec, 1)
    return root / "run" / "ckpt" / "step-2"


@pytest.fixture(scope="module")
def sft_run(sft_dir, pretrained, tmp_path_factory):
    directory = tmp_path_factory.mktemp("sftrun")
    proc = run_ok(sft_spec(directory, sft_dir, initial=pretrained.parent), 1)
    return directory, proc


def plain_pytorch_losses(sft_dir: Path, weights: dict[str, torch.Tensor]) -> list[float]:
    """The SFT run without torchtitan: the pretrained weights, the stream's rows in
    micro-batches of 4, the loss summed over completion labels / the step's completion labels,
    AdEMAMix (alpha 8, b3 0.999, T = 24, no weight decay), the linear schedule, clip 1.0."""
    model = flavor("debug", attn_backend="sdpa", vocab_size=VOCAB).build()
    model.load_state_dict(weights)
    optimizer = AdEMAMix(
        param_groups(model, weight_decay=0.0),
        lr=PEAK,
        betas=(0.9, 0.999, 0.999),
        alpha=8.0,
        t_alpha=STEPS,
        t_beta3=STEPS,
        eps=1e-8,
    )
    rows = len(read_rows(sft_dir)[0])
    positions = torch.arange(MAX_LEN).expand(MICRO, -1)
    losses = []
    for step in range(STEPS):
        inputs, labels = expected_batch(sft_dir, stream_rows(rows, step * GLOBAL, GLOBAL))
        kept = (labels != IGNORE).sum()
        for group in optimizer.param_groups:
            group["lr"] = linear_lr(step, peak=PEAK, warmup_steps=WARMUP, total_steps=STEPS)
        optimizer.zero_grad()
        total = 0.0
        for start in range(0, GLOBAL, MICRO):
            part = slice(start, start + MICRO)
            logits = model(inputs[part], positions=positions)
            loss = (
                F.cross_entropy(
                    logits.flatten(0, 1),
                    labels[part].flatten(),
                    ignore_index=IGNORE,
                    reduction="sum",
                )
                / kept
            )
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(total)
    return losses


@pytest.mark.slow
def test_sft_run_from_a_checkpoint_learns_the_completions_like_a_plain_loop(
    sft_run, sft_dir, pretrained, tmp_path
):
    """`python -m apertus.train.launch` on the SFT data, starting from the pretraining
    checkpoint's weights: the LR follows the linear schedule, each step's completion-label
    count is the stream's, the loss on completions falls, and every step's loss equals the
    plain PyTorch loop's to float32 rounding."""
    directory, proc = sft_run
    assert f"Loading the checkpoint from {pretrained}" in proc.stdout
    metrics = read_metrics(directory / "out" / "metrics.jsonl")
    assert list(metrics) == list(range(1, STEPS + 1))
    rows = len(read_rows(sft_dir)[0])
    for step, record in metrics.items():
        assert record["lr"] == pytest.approx(
            linear_lr(step - 1, peak=PEAK, warmup_steps=WARMUP, total_steps=STEPS), rel=1e-12
        )
        _, labels = expected_batch(sft_dir, stream_rows(rows, (step - 1) * GLOBAL, GLOBAL))
        assert record["kept_tokens"] == int((labels != IGNORE).sum())
        assert record["goldfish_fraction"] == 0
    losses = [metrics[s]["loss"] for s in metrics]
    weights = model_weights(load_checkpoint(pretrained, tmp_path))
    reference = plain_pytorch_losses(sft_dir, weights)
    differences = [abs(loss - metrics[step]["loss"]) for step, loss in enumerate(reference, 1)]
    assert max(differences) < 2e-5, differences
    # From ln(300) = 5.70 (the 2-step model knows nothing yet); measured: 5.57 -> 4.09.
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 1.0
    final = load_checkpoint(directory / "ckpt" / f"step-{STEPS}", tmp_path)
    assert final["dataloader"]["samples_consumed"] == STEPS * GLOBAL
    steps = {float(v) for k, v in final["optimizer"].items() if k.endswith(".step")}
    assert steps == {float(STEPS)}  # a fresh AdEMAMix (the pretraining run's state not loaded)
    print(
        f"\nSFT run: completion loss {losses[0]:.3f} -> {losses[-1]:.3f} in {STEPS} steps, "
        f"max |loss - plain loop| {max(differences):.1e}, {proc.wall_s:.1f} s wall"
    )


@pytest.mark.slow
def test_stopped_sft_run_resumes_its_data_position(sft_run, sft_dir, pretrained, tmp_path):
    """A run whose folder holds the step-12 checkpoint of the run above (as if stopped there)
    resumes at step 13 with the next rows and ends with the uninterrupted run's losses."""
    import shutil

    shutil.copytree(sft_run[0] / "ckpt" / "step-12", tmp_path / "ckpt" / "step-12")
    spec = sft_spec(tmp_path, sft_dir, initial=pretrained)
    proc = run_ok(spec, 1)
    assert "Training starts at step 13" in proc.stdout
    ours = read_metrics(tmp_path / "out" / "metrics.jsonl")
    theirs = read_metrics(sft_run[0] / "out" / "metrics.jsonl")
    assert list(ours) == list(range(13, STEPS + 1))
    assert [ours[s]["loss"] for s in ours] == [theirs[s]["loss"] for s in ours]
