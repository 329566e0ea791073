"""Which torch device a stage runs on, from the ``device`` setting of its config.

torch is imported inside the function: `apertus.core` is imported by the Snakemake side, which
must not pay for (or need) torch.
"""

from __future__ import annotations

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
    placement = spread(device)
    model = model_class.from_pretrained(folder, dtype=dtype, **placement)
    return (model if placement else model.to(device)).eval()


def spread(device: torch.device) -> dict[str, Any]:
    """`from_pretrained`'s placement arguments for `device` (`load_pretrained`): none (the
    model is moved to `device` whole) unless the layers spread over several GPUs."""
    import torch

    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        return {"device_map": "auto"}
    return {}
