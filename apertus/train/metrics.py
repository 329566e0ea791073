"""Training metrics: torchtitan's `MetricsProcessor` (console, TensorBoard) plus a JSON Lines
file (`JsonlMetricsLogger`, read back with `read_metrics`), Weights & Biases (`WandbLogger`, when
the run spec's `wandb` is on), the loss-mask fractions of the data loader, the progress line with
ETA, and a stop on a non-finite gradient norm (`ApertusMetrics`).
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torchtitan.components.metrics import BaseLogger, LoggerContainer, MetricsProcessor

from apertus.core.progress import Progress
from apertus.train.pretokenized import LossMaskCounts, active_loader
from apertus.train.run_spec import wandb_run_id

# torchtitan metric names -> the short names of the JSON Lines file.
_JSONL_NAMES = {
    "loss_metrics/global_avg_loss": "loss",
    "loss_metrics/global_max_loss": "max_loss",
    "grad_norm": "grad_norm",
    "throughput(tps)": "tokens_per_s",
    "n_tokens_seen": "tokens_seen",
    "loss_mask/goldfish_fraction": "goldfish_fraction",
    "loss_mask/eod_fraction": "eod_fraction",
    "loss_mask/kept_tokens": "kept_tokens",
    "compile/graphs": "compiled_graphs",
    "time_metrics/end_to_end(s)": "step_time_s",
}


class JsonlMetricsLogger(BaseLogger):
    """One JSON object per logged step, appended and flushed line by line (a killed run leaves
    whole lines). Keys: ``step``, ``time``, the short names of `_JSONL_NAMES`, ``lr`` (the first
    group's; all groups share the schedule) and every other torchtitan metric under its own name.
    A resumed run appends: steps redone after a resume appear again, and `read_metrics` keeps
    the last record of each step."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def log(self, metrics: dict[str, Any], step: int) -> None:
        record: dict[str, Any] = {"step": step, "time": time.time()}
        lr_keys = sorted(k for k in metrics if k.startswith("lr/"))
        if lr_keys:
            record["lr"] = metrics[lr_keys[0]]
        for key, value in metrics.items():
            record[_JSONL_NAMES.get(key, key)] = value
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def run_name(dump_folder: str | os.PathLike[str]) -> str:
    """The training run a dump folder belongs to, for the progress line: `train_and_record`
    puts it in ``<work>/<name>-<16 hex key>/out``; any other layout gives the folder's parent."""
    parent = Path(dump_folder).absolute().parent.name
    match = re.fullmatch(r"(.+)-[0-9a-f]{16}", parent)
    return match.group(1) if match else parent


class WandbLogger(BaseLogger):
    """Weights & Biases, on rank 0: torchtitan's metric names (as in TensorBoard) at each logged
    step, in the W&B run of this training run (`apertus.train.run_spec.wandb_run_id`), which
    every start of the run resumes (``resume="allow"``). Its files go to
    ``<dump folder>/wandb``; offline, each start writes an ``offline-run-*`` folder there, and
    ``wandb sync`` of them all uploads one run. Named after the stage, grouped by the results
    folder's run. W&B wants increasing steps: the steps a resume redoes (those after the
    checkpoint that a killed start had logged) may keep their first record there, where
    metrics.jsonl keeps the last; a resume recomputes them on the same data and weights."""

    def __init__(
        self,
        dump_folder: str,
        *,
        project: str,
        entity: str | None,
        mode: str,
        config: dict[str, Any] | None = None,
    ) -> None:
        import wandb

        work = Path(dump_folder).absolute().parent
        # `train_and_record` puts a stage's run in <results>/<run>/<stage>/_work/<name>-<key>.
        group = work.parents[2].name if work.parent.name == "_work" else None
        self.wandb = wandb
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=mode,
            id=wandb_run_id(dump_folder),
            resume="allow",
            name=run_name(dump_folder),
            group=group,
            dir=dump_folder,
            config=config,
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()
        # Ends wandb's service process now rather than at interpreter exit.
        self.wandb.teardown()


def compiled_graphs() -> int:
    """The graphs torch.compile has made in this process so far (Dynamo's count, on every
    rank): logged each step, so that a count still rising after the first steps shows a
    recompilation (TORCH_LOGS=recompiles says why)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def read_metrics(path: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """The JSON Lines metrics of a run: step -> its last record (a resumed run re-logs the
    steps after its checkpoint). A truncated last line (killed mid-write) is skipped."""
    records: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            records[int(record["step"])] = record
    return dict(sorted(records.items()))


SANE_MARGIN = 0.10
"""How far above the running median of the sane losses before it a logged loss may be and still
count as sane (`SaneLosses`): the step-to-step noise of a healthy run's loss stays well inside
10%, a loss climbing towards NaN leaves it."""

SPIKE_FACTOR = 2.0
SPIKE_STEPS = 3
"""A loss spike stops a pretraining or long-context run (`ApertusMetrics`): a loss above
`SPIKE_FACTOR` times the running median of the sane losses (`SaneLosses`), then no sane loss for
the steps after it, `SPIKE_STEPS` in all. Twice the median is 0.69 nats above it, several times
a healthy run's step-to-step noise and more than a data phase's new mixture adds; a falling
loss, as in warmup, never is. A single bad batch that the run recovers from passes. What it
catches: a loss that leaps and stays up, even where it never becomes NaN (a saturated model
gives ln V at every step with a gradient norm of 0). Not in SFT, whose steps of a few
conversations swing further (the default run's: 6.7, then 13 at its fourth step)."""


class SaneLosses:
    """The running median of a run's sane losses, fed one logged loss at a time (`judge`). A loss
    is sane when it is finite and at most `SANE_MARGIN` above the median of the sane losses
    before it (the first finite one is). Only sane losses enter the median, so neither a spike
    nor a dead model's flat loss after it raises the bar; a run that recovers is sane again."""

    def __init__(self) -> None:
        # A max-heap of the lower half (negated), a min-heap of the upper half; the lower one
        # as long or one longer.
        self._lower: list[float] = []
        self._upper: list[float] = []

    @property
    def median(self) -> float | None:
        if not self._lower:
            return None
        if len(self._lower) > len(self._upper):
            return -self._lower[0]
        return (self._upper[0] - self._lower[0]) / 2

    def judge(self, loss: float) -> tuple[bool, float | None]:
        """Whether `loss` is sane, and the median it was held to (None for the first)."""
        median = self.median
        sane = math.isfinite(loss) and (median is None or loss <= (1 + SANE_MARGIN) * median)
        if sane:
            heapq.heappush(self._lower, -heapq.heappushpop(self._upper, loss))
            if len(self._lower) > len(self._upper) + 1:
                heapq.heappush(self._upper, -heapq.heappop(self._lower))
        return sane, median


class ApertusMetrics(MetricsProcessor):
    """torchtitan's `MetricsProcessor` plus:

    - `jsonl_file`: per-step metrics as JSON Lines (rank 0), next to TensorBoard if enabled;
    - ``enable_wandb``: Weights & Biases with the `wandb_*` settings (rank 0, `WandbLogger`)
      instead of torchtitan's logger, which reads its settings from ``WANDB_*`` variables,
      starts a new run under a new timestamped folder each time, and only logs an error when
      W&B fails to start;
    - the data loader's loss-mask counts since the last log, summed over all ranks: Goldfish's
      dropped fraction (~1/k), the EOD-masked fraction and the kept tokens;
    - progress (rank 0): an `apertus.core.progress` line ``training <run> N/total steps`` with
      the ETA from the mean step time since this process's first logged step (so neither a
      resume nor the first step's warm-up skews it), the loss and tokens/s, and the ETA as
      ``eta_s`` in the metrics (from the second logged step on);
    - a stop on a non-finite gradient norm. torchtitan already stops on a non-finite loss; a
      finite loss with NaN/inf gradients would otherwise poison the weights silently. Both
      checks run before the step's checkpoint is written, on every rank (the values are
      global), so no checkpoint holds the result of a bad step. With ``log_freq=1`` (what
      `apertus.train.config_registry` sets) every step is checked;
    - with ``spike_factor`` (pretraining and long context), a stop on a loss spike
      (`SPIKE_FACTOR`), after the step is logged and before its checkpoint.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(MetricsProcessor.Config):
        jsonl_file: str = ""
        """JSON Lines metrics file; relative paths are under the dump folder. Empty: none."""

        total_steps: int = 0
        """The run's last step, for the progress line and ETA (0: no progress line)."""

        wandb_project: str = "apertus"
        """W&B project (with ``enable_wandb``)."""

        wandb_entity: str = ""
        """W&B user or team; empty: the login's default."""

        wandb_mode: str = "offline"
        """W&B mode: "offline" (files under the dump folder, for ``wandb sync``) or "online"."""

        spike_factor: float = 0.0
        """Stop when the loss is above this times the running median of the sane losses for
        `SPIKE_STEPS` steps in a row (`SPIKE_FACTOR`); 0: no such stop (SFT, QRPO)."""

    def _build_metric_logger(self, *, config: Config, dump_folder: str, **kwargs: Any):
        self.run_name = run_name(dump_folder)
        base = super()._build_metric_logger(
            config=replace(config, enable_wandb=False), dump_folder=dump_folder, **kwargs
        )
        rank = dist.get_rank() if dist.is_initialized() else 0
        if rank != 0:
            return base
        loggers = LoggerContainer()
        loggers.add_logger(base)
        if config.jsonl_file:
            loggers.add_logger(JsonlMetricsLogger(os.path.join(dump_folder, config.jsonl_file)))
        if config.enable_wandb:
            loggers.add_logger(
                WandbLogger(
                    dump_folder,
                    project=config.wandb_project,
                    entity=config.wandb_entity or None,
                    mode=config.wandb_mode,
                    config=kwargs.get("config_dict"),
                )
            )
        return loggers

    def _progress(self, step: int, loss: float) -> dict[str, float]:
        """Update the progress line (rank 0) and return ``eta_s`` once there is a rate.

        The count starts at the first logged step, so the rate is the mean time per step of
        the steps after it in this process."""
        total = getattr(self.config, "total_steps", 0)
        if not total or (dist.is_initialized() and dist.get_rank() != 0):
            return {}
        fields: dict[str, float] = {"loss": loss}
        started = getattr(self, "time_last_log", None)
        if started is not None and self.ntokens_since_last_log:
            # torchtitan's tokens/s per device, computed as its `log` does.
            elapsed = max(time.perf_counter() - started, 1e-9)
            dims = getattr(self, "parallel_dims", None)
            per_device = dims.non_data_parallel_size if dims is not None else 1
            fields["tokens_per_s"] = self.ntokens_since_last_log / (elapsed * per_device)
        progress: Progress | None = getattr(self, "progress_line", None)
        if progress is None:
            name = getattr(self, "run_name", "") or "run"
            self.progress_line = Progress(total, f"training {name}", unit="steps", initial=step)
            self.progress_line.update(0, **fields)
            return {}
        progress.update(step - progress.done, **fields)
        eta = progress.eta_s
        return {} if eta is None else {"eta_s": eta}

    def close(self) -> None:
        progress: Progress | None = getattr(self, "progress_line", None)
        if progress is not None:
            progress.close()
        super().close()

    def _global_mask_counts(self) -> LossMaskCounts | None:
        loader = active_loader()
        if loader is None:
            return None
        counts = loader.mask_counts.as_tensor()
        loader.mask_counts = LossMaskCounts()
        dims = getattr(self, "parallel_dims", None)
        if dist.is_initialized() and dims is not None and dims.dp_enabled:
            from torchtitan.tools import utils

            # Summed over the data-parallel ranks only: tensor-parallel ranks read the same
            # batch and would count it once per rank.
            on_device = counts.to(torch.device(utils.device_type))
            dist.all_reduce(on_device, group=dims.get_mesh("batch").get_group())
            counts = on_device.cpu()
        return LossMaskCounts.from_tensor(counts)

    def log(
        self,
        step: int,
        global_avg_loss: float,
        global_max_loss: float,
        grad_norm: float,
        extra_metrics: dict[str, Any] | None = None,
    ) -> None:
        if not math.isfinite(grad_norm):
            raise RuntimeError(
                f"Gradient norm is not finite (grad_norm={grad_norm}) at step {step}. "
                "Stopping training; no checkpoint is written for this step."
            )
        extra = dict(extra_metrics or {})
        extra.update(self._progress(step, global_avg_loss))
        if getattr(self, "global_batch", None) is not None:
            extra["global_batch"] = self.global_batch
        graphs = compiled_graphs()
        if graphs:
            extra["compile/graphs"] = graphs
        counts = self._global_mask_counts()
        if counts is not None:
            extra["loss_mask/goldfish_fraction"] = counts.goldfish_fraction
            extra["loss_mask/eod_fraction"] = counts.eod_fraction
            extra["loss_mask/kept_tokens"] = counts.kept
        super().log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra)
        if self.config.spike_factor:
            self._watch_for_spikes(step, global_avg_loss)

    def _watch_for_spikes(self, step: int, loss: float) -> None:
        if not hasattr(self, "sane_losses"):
            self.sane_losses, self.spike = SaneLosses(), None
        factor = self.config.spike_factor
        sane, median = self.sane_losses.judge(loss)
        if sane:
            self.spike = None
        elif self.spike is None and median and loss > factor * median:
            self.spike = (step, median)
        if self.spike is not None and step - self.spike[0] + 1 >= SPIKE_STEPS:
            started, held_to = self.spike
            raise RuntimeError(
                f"Loss spike at step {step}: the loss leapt above {factor:g}x the running median "
                f"of the sane losses ({held_to:.4g}) at step {started} and has not come back "
                f"within {SANE_MARGIN:.0%} of it since ({loss:.4g} at this step). Stopping "
                "training; no checkpoint is written for this step."
            )
