"""The trainer: torchtitan's `Trainer` with the global-batch ramp of RECIPE.md §4 and the early stop
of `apertus.train.early_stop` (`ApertusTrainer`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torchtitan.tools.logging import logger
from torchtitan.trainer import Trainer

from apertus.core import ApertusError
from apertus.train.checkpoint import FiniteCheckpointManager
from apertus.train.early_stop import STOPPED_FILE, TIME_LIMIT, StopRequest
from apertus.train.metrics import ApertusMetrics
from apertus.train.schedule import BatchRamp


def _any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank if `flag` is true on any rank."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    value = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


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
