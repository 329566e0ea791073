"""The torchtitan `ModelSpec` of Apertus: what torchtitan's trainer builds the model from
(torchtitan keeps the same function as ``model_registry`` in ``models/llama3/__init__.py``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torchtitan.protocols.model_spec import ModelSpec

from apertus.model.flavors import flavor
from apertus.model.parallelize import init_weights_world_size_invariant, parallelize_apertus
from apertus.model.state_dict_adapter import ApertusStateDictAdapter

__all__ = ["model_spec"]


def model_spec(name: str, *, seed: int = 0, **overrides: Any) -> ModelSpec:
    """The `ModelSpec` of flavor `name` with its config fields overridden by `overrides`
    (`apertus.model.flavors.flavor`): FSDP/TP by `parallelize_apertus`, no pipelining, and on the
    CPU the same initial weights for any number of ranks, drawn from `seed`. Its state-dict
    adapter reads a Hugging Face checkpoint to start from (`checkpoint.initial_mode: hf`);
    export to that format is a stage of its own (`apertus.export`)."""
    model_config = flavor(name, **overrides)
    return ModelSpec(
        name="apertus",
        flavor=name,
        model=model_config,
        parallelize_fn=parallelize_apertus,
        pipelining_fn=None,
        post_optimizer_build_fn=partial(
            init_weights_world_size_invariant, model_config=model_config, seed=seed
        ),
        state_dict_adapter=ApertusStateDictAdapter,
    )
