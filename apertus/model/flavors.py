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

Config = ApertusModel.Config

FLAVORS: dict[str, Config] = {
    "debug": Config(
        dim=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        ffn_hidden=192,
        vocab_size=256,
        max_seq_len=128,
    ),
    "tiny": Config(
        dim=256,
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        head_dim=64,
        ffn_hidden=768,
        vocab_size=8192,
        max_seq_len=512,
    ),
    "1b": Config(
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
    "8b": Config(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        ffn_hidden=21504,
        vocab_size=131072,
        rope_theta=500_000.0,
        max_seq_len=4096,
    ),
    # RECIPE §1 table, 70B row (d_model 8192; the report's 4096 is a typo).
    "70b": Config(
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        head_dim=128,
        ffn_hidden=43008,
        vocab_size=131072,
        rope_theta=500_000.0,
        max_seq_len=4096,
    ),
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


def num_params(config: Config) -> int:
    """Number of parameters of a model of this shape, from the shapes alone (nothing built)."""
    dim, head_dim = config.dim, config.attention_head_dim
    attention = (
        dim * config.n_heads * head_dim  # wq
        + 2 * dim * config.n_kv_heads * head_dim  # wk, wv
        + config.n_heads * head_dim * dim  # wo
        + 2 * head_dim  # q_norm, k_norm
    )
    feed_forward = 2 * dim * config.ffn_hidden + 2  # w_up, w_down, xIELU alpha_p and alpha_n
    block = attention + feed_forward + 2 * dim  # attention_norm, ffn_norm
    embeddings = 2 * config.vocab_size * dim  # tok_embeddings and the untied lm_head
    return embeddings + config.n_layers * block + dim  # final norm
