"""Which torch device a stage runs on, from the ``device`` setting of its config.

torch is imported inside the function: `apertus.core` is imported by the Snakemake side, which
must not pay for (or need) torch.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from apertus.core import ApertusError

if TYPE_CHECKING:
    import torch


def resolve_device(requested: str, *, setting: str = "device") -> torch.device:
    """The device a ``device`` setting names: "auto" is CUDA when torch sees a GPU, else the
    CPU; any other name is taken as torch spells it ("cpu", "cuda", "cuda:1", "mps").

    A name torch does not know, or a CUDA device when torch sees no GPU, is an ApertusError
    naming `setting` (the config key, e.g. "posttrain.qrpo.device"), so the run stops before
    a model is loaded rather than deep inside the first ``.to(device)``.
    """
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as e:
        raise ApertusError(f"{setting} is {requested!r}, not a torch device ({e})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ApertusError(f"{setting} is {requested!r}, but torch sees no CUDA device")
    return device


def load_pretrained(model_class: Any, folder: str, *, dtype: Any, device: torch.device) -> Any:
    """`model_class.from_pretrained(folder)` (a transformers Auto class) in eval mode on
    `device`; on a CUDA device without an index when torch sees more than one GPU (a job given
    several, `resources.<stage>.gpus`), its layers spread over all of them (transformers'
    ``device_map="auto"``, as lm-eval's ``parallelize``): a model larger than one GPU's memory
    is served by the job's GPUs together. Inputs go to `device` (the first GPU holds the
    embedding)."""
    bf16_matmuls_in_fp32(device, dtype)
    placement = spread(device)
    model = model_class.from_pretrained(folder, dtype=dtype, **placement)
    return (model if placement else model.to(device)).eval()


# The matrix products a bf16 model runs (eager, autograd's backward, and the `out=` calls of
# torch.compile's Inductor): each at::native CPU kernel, replaced for bf16 operands by itself on
# their fp32 copies (`bf16_matmuls_in_fp32`).
MATMUL_OPS = ("mm", "mm.out", "addmm", "addmm.out", "bmm", "bmm.out", "baddbmm", "baddbmm.out")
_MATMUL_LIBRARY: list[Any] = []  # the registration, kept alive for the process
_MATMUL_LOCK = threading.Lock()


def bf16_matmuls_in_fp32(device: torch.device | str, dtype: Any) -> bool:
    """On a CPU without bf16 instructions (AVX512-BF16, AMX; oneDNN's check), a bf16 model's
    matrix products go through torch's scalar fallback: a 1024x256 by 256x8192 product took
    7.7 s, its fp32 copy 0.09 s, and a bf16 training step of the `tiny` flavor 6.3 s against
    0.36 s in fp32, 97% of it in `aten::mm` (bench/RESULTS.md). For a model in bf16 (`dtype`)
    on such a CPU, this process's CPU kernels of `MATMUL_OPS` then compute bf16 operands as
    fp32 (exact) and round the result to bf16 once: the products and the fp32 accumulation of
    a bf16 GEMM (on a GPU as in oneDNN), bit for bit the fallback's `mm` on the operands tried,
    with `addmm`'s bias added before the rounding (as a GEMM epilogue does), not after.
    Other dtypes go to the kernels unchanged. Whether it was installed; idempotent."""
    import warnings

    import torch

    if torch.device(device).type != "cpu" or dtype not in (torch.bfloat16, "bfloat16"):
        return False
    if cpu_has_bf16():
        return False  # oneDNN's own bf16 kernels
    with _MATMUL_LOCK:
        if not _MATMUL_LIBRARY:
            library = torch.library.Library("aten", "IMPL")
            with warnings.catch_warnings():  # "Overriding a previously registered kernel"
                warnings.simplefilter("ignore", UserWarning)
                for op in MATMUL_OPS:
                    library.impl(op, _through_fp32(op), "CPU")
            _MATMUL_LIBRARY.append(library)
    return True


def cpu_has_bf16() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU (its own check of the instructions)."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _through_fp32(op: str) -> Any:
    """The CPU kernel of `op` for `bf16_matmuls_in_fp32`: torch's own for other dtypes."""
    import torch

    keys = torch._C._dispatch_keyset_full()
    native = torch._C._dispatch_get_computed_kernel_for_dispatch_key(f"aten::{op}", "CPU")
    bf16 = torch.bfloat16

    def kernel(*args: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if not any(isinstance(a, torch.Tensor) and a.dtype == bf16 for a in args) or (
            out is not None and out.dtype != bf16
        ):
            return native.call_boxed(keys, *args, **kwargs)
        wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype == bf16 else a for a in args]
        if out is None:
            return native.call_boxed(keys, *wide, **kwargs).to(bf16)
        result = native.call_boxed(
            keys, *wide, **{**kwargs, "out": out.new_empty(0, dtype=torch.float32)}
        )
        if out.shape != result.shape:
            out.resize_(result.shape)
        return out.copy_(result)

    return kernel


def spread(device: torch.device) -> dict[str, Any]:
    """`from_pretrained`'s placement arguments for `device` (`load_pretrained`): none (the
    model is moved to `device` whole) unless the layers spread over several GPUs."""
    import torch

    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        return {"device_map": "auto"}
    return {}
