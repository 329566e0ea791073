"""Apertus model flavors (shapes) and their parameter counts.

``8b`` and ``70b`` carry RECIPE §1 exactly: layers, d_model, FFN hidden, q/kv heads, head_dim 128,
vocab 131072, RoPE theta 500,000 with Llama-3.1 scaling (factor 8, low 1, high 4, original 8192),
sequence length 4096, init std 0.008944. Long-context stages (RECIPE §6) change ``rope_theta``
and ``max_seq_len`` through ``flavor(name, **overrides)``.

``1b`` is our own ~1B Apertus-style shape (not from the report): 16 layers, d_model 2048, FFN 8192,
16 q / 8 kv heads, head_dim 128, the Apertus vocabulary: 1.275B parameters in all, 0.74B of them
outside the two untied 131072 x 2048 embedding matrices.

``tiny`` (the CPU default, ~6.6M parameters) and ``debug`` (~0.1M, for tests) keep every
architectural feature (GQA, head_dim independent of dim // n_heads in ``debug``, RoPE scaling)
at toy sizes.
"""

from __future__ import annotations

import dataclasses

from apertus.core import ApertusError
from apertus.model.model import ApertusModel
from apertus.model.shapes import FLAVOR_SHAPES, num_params

__all__ = ["FLAVORS", "flavor", "num_params"]

Config = ApertusModel.Config

FLAVORS: dict[str, Config] = {
    name: Config(**dataclasses.asdict(shape)) for name, shape in FLAVOR_SHAPES.items()
}


def flavor(name: str, **overrides) -> Config:
    """A fresh copy of flavor ``name`` with fields replaced by ``overrides`` (validated)."""
    if name not in FLAVORS:
        raise ApertusError(f"unknown model flavor {name!r}; known flavors: {', '.join(FLAVORS)}")
    known = {f.name for f in dataclasses.fields(Config) if f.init}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ApertusError(
            f"unknown model config field(s) {', '.join(unknown)} for flavor {name!r}; "
            f"fields: {', '.join(sorted(known))}"
        )
    return dataclasses.replace(FLAVORS[name], **overrides)
