"""torchtitan 0.3.0 on the CPU: what this project changes so that the real trainer (FSDP2, TP,
DCP checkpoints) runs on gloo in CPU processes, for the tiny default and the tests
(PLATFORM.md, "torchtitan 0.3.0", CPU blockers). Each workaround and the limitation it answers:

1. `use_cpu_device`: torchtitan picks its device type once at import and falls back to "cuda"
   without an accelerator; every torchtitan module that copied ``device_type`` /
   ``device_module`` gets "cpu" and `_CpuDeviceModule` (torch.cpu plus the `torch.cuda` calls
   torchtitan makes whatever the device; memory peaks are the process's peak RSS).
2. `patch_missing_set_timeout`: torchtitan lowers the process-group timeouts after the first
   step with ``torch.distributed.set_timeout``, which torch 2.13 does not have.
3. Attention: FlexAttention has no CPU backward; `apertus.train.config_registry` selects SDPA
   with a dense block-causal mask on the CPU (``attn_backend="sdpa"``).
4. FSDP reductions: gloo has no PREMUL_SUM; `apertus.model.parallelize.parallelize_apertus`
   forces a plain SUM (the loss is already divided by the global token count).
5. SPMD backend: torchtitan's default ``spmd_types`` wants sharding configs for every new
   module; runs use "partial_dtensor" (DTensor on the tensor-parallel axis only).
6. CUDA graphs are disabled (``training.disable_cuda_graphs``).
7. Context parallelism needs a sharding strategy for the flash-attention op that torch has only
   on GPUs; `parallelize_apertus` refuses it on the CPU with a clear error.
8. Initial weights: DTensor's offset-based RNG shards random init only on CUDA-like devices, so
   `apertus.model.parallelize.init_weights_world_size_invariant` gives every rank its shard of
   one seeded full model (a 2-rank run starts from the 1-rank run's weights).
9. bf16 matrix products: on a CPU without bf16 instructions torch's fallback kernel is ~80x
   slower than fp32; `apertus.core.device.bf16_matmuls_in_fp32` computes them from exact fp32
   copies of the operands with one rounding (as a bf16 GEMM does), for training here and for
   the bf16 models of sampling, scoring and lm-eval.

Items 1 and 2 live here (they patch torchtitan in this process and must run before the trainer
is built; `apertus.train.config_registry` applies them once the run spec is known to be good);
3-8 are settings or code in the files named.
"""

from __future__ import annotations

import os
import resource
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


class _CpuDeviceModule:
    """`torch.cpu` plus the `torch.cuda` calls torchtitan makes whatever the device.

    torchtitan picks its device module once, at import, and falls back to `torch.cuda` when no
    accelerator is present; the trainer then calls `set_device`, the memory monitor calls
    `get_device_name` / `get_device_properties` / `memory_stats`, and the PG-timeout barrier
    passes `current_device()` as a device id (gloo wants an int). Memory "peaks" are the
    process's peak resident set size (it cannot be reset, so it is the peak since start).
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def set_device(device: Any) -> None:
        del device  # one CPU "device" per process

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(device: Any = None) -> Any:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return type("CpuProperties", (), {"total_memory": total, "name": "cpu"})()

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return {"active_bytes.all.peak": peak, "reserved_bytes.all.peak": peak}

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None


# Modules that copy `device_type` / `device_module` out of torchtitan.tools.utils at import.
_DEVICE_MODULES = (
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.distributed.utils",
    "torchtitan.tools.profiler",
    "torchtitan.models.common.token_dispatcher",
)


def use_cpu_device() -> None:
    """Make torchtitan run on the CPU (blocker 1: its device type falls back to "cuda").

    Sets `device_type = "cpu"` and a CPU device module in every torchtitan module that copied
    them at import. Must run before the trainer is built; idempotent.
    """
    import importlib

    cpu_module = _CpuDeviceModule()
    for name in _DEVICE_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "device_type"):
            module.device_type = "cpu"
        if hasattr(module, "device_module"):
            module.device_module = cpu_module
    patch_missing_set_timeout()


def _set_timeout(timeout: timedelta, group: dist.ProcessGroup | None = None) -> None:
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    pg.set_timeout(timeout)


def patch_missing_set_timeout() -> None:
    """Blocker 2: torchtitan lowers the process-group timeouts after the first step with
    `torch.distributed.set_timeout`, which torch 2.13 does not have; map it to the process
    group's own `set_timeout`. No-op where torch has it."""
    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = _set_timeout
