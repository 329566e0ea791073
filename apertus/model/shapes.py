"""The shapes of the Apertus flavors as plain numbers, and their parameter counts: no torch, so
the planner (`apertus.sizing`) and the config checks read them without importing the model.

`apertus.model.flavors` builds each flavor's `ApertusModel.Config` from these shapes; a shape
is defined here and only here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLAVOR_SHAPES", "RopeScaling", "Shape", "num_params"]


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1 RoPE frequency scaling; RECIPE §1 uses it from step 0 with these values."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class Shape:
    """What the size of an Apertus model depends on."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab_size: int
    max_seq_len: int
    head_dim: int | None = None
    """None: ``dim // n_heads``."""

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.dim // self.n_heads


FLAVOR_SHAPES: dict[str, Shape] = {
    "debug": Shape(
        dim=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        ffn_hidden=192,
        vocab_size=256,
        max_seq_len=128,
    ),
    "tiny": Shape(
        dim=256,
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        head_dim=64,
        ffn_hidden=768,
        vocab_size=8192,
        max_seq_len=512,
    ),
    "1b": Shape(
        dim=2048,
        n_layers=16,
        n_heads=16,
        n_kv_heads=8,
        head_dim=128,
        ffn_hidden=8192,
        vocab_size=131072,
        max_seq_len=4096,
    ),
    # RECIPE §1 table, 8B row.
    "8b": Shape(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        ffn_hidden=21504,
        vocab_size=131072,
        max_seq_len=4096,
    ),
    # RECIPE §1 table, 70B row (d_model 8192; the report's 4096 is a typo).
    "70b": Shape(
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        head_dim=128,
        ffn_hidden=43008,
        vocab_size=131072,
        max_seq_len=4096,
    ),
}


def num_params(shape) -> int:
    """Number of parameters of a model of this shape (a `Shape` or an `ApertusModel.Config`),
    from the shapes alone (nothing built)."""
    dim, head_dim = shape.dim, shape.attention_head_dim
    attention = (
        dim * shape.n_heads * head_dim  # wq
        + 2 * dim * shape.n_kv_heads * head_dim  # wk, wv
        + shape.n_heads * head_dim * dim  # wo
        + 2 * head_dim  # q_norm, k_norm
    )
    feed_forward = 2 * dim * shape.ffn_hidden + 2  # w_up, w_down, xIELU alpha_p and alpha_n
    block = attention + feed_forward + 2 * dim  # attention_norm, ffn_norm
    embeddings = 2 * shape.vocab_size * dim  # tok_embeddings and the untied lm_head
    return embeddings + shape.n_layers * block + dim  # final norm
