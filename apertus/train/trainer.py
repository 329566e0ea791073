"""The trainer: torchtitan's `Trainer` with the global-batch ramp of RECIPE.md §4, the early stop
of `apertus.train.early_stop` and the hang watchdog of `apertus.train.watchdog`
(`ApertusTrainer`), and its QRPO variant (`QRPOTrainer`, RECIPE.md
§7), whose loss is a mean over completions (`apertus.train.qrpo_loss`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torchtitan.tools.logging import logger
from torchtitan.trainer import Trainer

from apertus.core import ApertusError
from apertus.train.checkpoint import FiniteCheckpointManager
from apertus.train.early_stop import STOPPED_FILE, TIME_LIMIT, StopRequest
from apertus.train.metrics import ApertusMetrics
from apertus.train.qrpo_loss import QRPO_ROW_KEYS, STATISTICS, QRPOLoss
from apertus.train.schedule import BatchRamp
from apertus.train.watchdog import HANG_FOLDER, StepWatchdog, hang_timeout


def _any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank if `flag` is true on any rank."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    value = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


class _NoSleep:
    """The `time` module with a `sleep` that returns at once."""

    @staticmethod
    def sleep(seconds: float) -> None:
        del seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class ApertusTrainer(Trainer):
    """torchtitan's `Trainer` whose global batch follows a `BatchRamp` (RECIPE.md §4: 1024 ->
    2048 sequences for 8B). Before each step the number of accumulated micro-batches is set
    from the step's global batch; the data loader is a stream of micro-batches, the loss is
    normalised by the step's own token count, and the step number is in the checkpoint, so a
    resumed run takes up the ramp where it was. The LR schedule does not change at the switch.
    The step's global batch is logged as ``global_batch``.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        ramp_batch: int = 0
        """Global batch (sequences) after the switch; 0: no ramp."""

        ramp_switch_step: int = 0
        """Optimizer steps (from 0 of the schedule) trained with `training.global_batch_size`."""

    def __init__(self, config: Config) -> None:
        self.stop_request = StopRequest.install()
        self._first_step: int | None = None
        super().__init__(config)
        rank = dist.get_rank() if dist.is_initialized() else 0
        self.watchdog = StepWatchdog(hang_timeout(), Path(config.dump_folder) / HANG_FOLDER, rank)
        start = config.training.global_batch_size
        self._sequences_per_micro_step = start // self.gradient_accumulation_steps
        self.ramp = (
            BatchRamp(start, config.ramp_batch, config.ramp_switch_step)
            if config.ramp_batch
            else BatchRamp.constant(start)
        )
        if self.ramp.batch % self._sequences_per_micro_step:
            raise ApertusError(
                f"batch ramp: global batch {self.ramp.batch} is not a multiple of "
                f"{self._sequences_per_micro_step} sequences per micro-step on all ranks"
            )

    def train(self) -> None:
        """torchtitan's training loop. It ends with rank 0 sleeping 2 s "for other ranks to
        complete"; a one-process run has none, and those 2 s are on the critical path of every
        stage of the tiny default (nine pretraining stages, SFT, QRPO), so it sleeps 0 s there."""
        try:
            if dist.is_initialized() and dist.get_world_size() > 1:
                return super().train()
            torchtitan_trainer = sys.modules[Trainer.__module__]
            torchtitan_trainer.time = _NoSleep()  # its one `sleep` is that one
            try:
                return super().train()
            finally:
                torchtitan_trainer.time = time
        finally:
            self.watchdog.close()

    def should_continue_training(self) -> bool:
        """torchtitan's test before each step, plus an early stop: after a SIGTERM/SIGUSR1 on
        any rank, or once `APERTUS_STOP_AT` has passed (and this process trained a step), every
        rank saves a checkpoint of the last step, rank 0 writes `stopped.txt` in the dump
        folder (the launcher reads it), and training ends normally."""
        if self._first_step is None:  # the first call: the checkpoint, if any, is loaded
            self._first_step = self.step
        if not super().should_continue_training():
            return False
        reason = self.stop_request.reason(trained=self.step > self._first_step)
        if not _any_rank(reason is not None, self.device):
            return True
        if self.step > self._first_step:
            assert isinstance(self.checkpointer, FiniteCheckpointManager)
            self.checkpointer.save_now(self.step)
        if not dist.is_initialized() or dist.get_rank() == 0:
            reason = reason or "another rank received a signal"
            logger.warning(f"Stopping early at step {self.step}: {reason}; checkpoint saved")
            with open(os.path.join(self.config.dump_folder, STOPPED_FILE), "w") as f:
                json.dump(
                    {"step": self.step, "reason": reason, "time_limit": reason == TIME_LIMIT}, f
                )
        return False

    def post_dataloading_process(
        self, input_dict: dict[str, torch.Tensor], labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Under context parallelism (`apertus.model.context_parallel`): the mask rows of this
        rank's tokens, made from the whole sequences' positions, then this rank's tokens,
        labels and positions. The loader hands every rank of a CP group the same sequences;
        their labels were masked (EOD, Goldfish) on the whole sequence, so a Goldfish window
        crossing a chunk boundary drops the same token as without CP."""
        if not self.parallel_dims.cp_enabled:
            return super().post_dataloading_process(input_dict, labels)
        inputs = input_dict["input"]
        positions = input_dict.get("positions")
        if positions is None:
            positions = torch.arange(inputs.shape[1], device=inputs.device).expand_as(inputs)
        model = self.model_parts[0]
        group = model.layers["0"].attention.context
        layout = group.layout(inputs.shape[1], inputs.device)
        extra = {key: value for key, value in input_dict.items() if key != "input"}
        extra["attention_mask"] = model.attention_mask(positions, inputs, queries=layout)
        extra["positions"] = group.shard(positions, layout)
        labels = group.shard(labels, layout)
        self.ntokens_seen += labels.numel()
        return group.shard(inputs, layout), labels, extra

    def train_step(self, data_iterator: Any) -> None:
        # torchtitan counts steps from 1; the ramp indexes updates from 0.
        batch = self.ramp.batch_at(self.step - 1)
        self.gradient_accumulation_steps = batch // self._sequences_per_micro_step
        if isinstance(self.metrics_processor, ApertusMetrics):
            self.metrics_processor.global_batch = batch
        super().train_step(data_iterator)
        self.watchdog.beat(self.step)


class QRPOTrainer(ApertusTrainer):
    """`ApertusTrainer` for QRPO (RECIPE.md §7): the micro-batches of
    `apertus.train.qrpo_loader.QRPODataLoader` carry per-row extras (reference log-prob,
    quantile reward, weight in the step) that are no model inputs; they go to the loss
    (`apertus.train.qrpo_loss.QRPOLoss.set_rows`) instead of the model's forward. Each logged
    step adds the step's mean ``quantile_reward``, ``log_ratio`` and ``beta`` (over its
    completions, all ranks) and its ``completions``; the first step of a run also
    ``initial_abs_log_ratio_per_token``, the untrained policy's mean |log pi - log pi_ref| per
    completion token (a large value means the reference log-probs came from other weights)."""

    @dataclass(kw_only=True, slots=True)
    class Config(ApertusTrainer.Config):
        pass

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        if self.parallel_dims.cp_enabled or self.parallel_dims.pp_enabled:
            raise ApertusError("QRPO runs with data and tensor parallelism only")
        # torchtitan logs from inside train_step; the step's QRPO statistics join its record.
        log = self.metrics_processor.log

        def log_with_statistics(step, loss, max_loss, grad_norm, extra_metrics=None):
            extra = {**(extra_metrics or {}), **self._statistics(step)}
            log(step, loss, max_loss, grad_norm, extra_metrics=extra)

        self.metrics_processor.log = log_with_statistics

    def _statistics(self, step: int) -> dict[str, float]:
        assert isinstance(self.loss_fn, QRPOLoss)
        sums = self.loss_fn.take_statistics().to(self.device)
        if self.parallel_dims.dp_enabled:
            # Summed over the data-parallel ranks only: tensor-parallel ranks share their rows.
            dist.all_reduce(sums, group=self.parallel_dims.get_mesh("batch").get_group())
        totals = dict(zip(STATISTICS, sums.tolist(), strict=True))
        count = max(totals.pop("completions"), 1.0)
        stats = {name: value / count for name, value in totals.items()}
        per_token = stats.pop("abs_log_ratio_per_token")
        stats["completions"] = int(count)
        if step == 1:
            stats["initial_abs_log_ratio_per_token"] = per_token
        return stats

    def post_dataloading_process(
        self, input_dict: dict[str, torch.Tensor], labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        assert isinstance(self.loss_fn, QRPOLoss)
        rows = {key: input_dict.pop(key) for key in QRPO_ROW_KEYS}
        self.loss_fn.set_rows(rows)
        return super().post_dataloading_process(input_dict, labels)
