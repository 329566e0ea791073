"""Apertus <-> Hugging Face ``transformers`` (``ApertusForCausalLM``): the one key map between our
state dict and theirs, the ``config.json`` of a model shape, and our state dict under their keys,
as torchtitan keeps it in ``models/llama3/state_dict_adapter.py``. Used by the export stage
(`apertus.export.hf`), by the trainer to start from a Hugging Face checkpoint
(`ApertusStateDictAdapter`, `checkpoint.initial_mode: hf`) and by the tests that compare the
model with transformers'.

Configuration fields of ``transformers.ApertusConfig`` 5.x and what they must say for our model
(``modeling_apertus``): ``hidden_act="xielu"`` (the xIELU init values, beta and eps are not
config fields: they are the ``mlp.act_fn`` tensors of the state dict); ``head_dim`` is not a
declared field but ``ApertusAttention`` reads it with ``getattr`` (our flavors' head_dim differs
from dim // n_heads, so it must be written); QK-norm is always on and MLP biases are always off
in that code; ``attention_bias=False``; ``rms_norm_eps`` = ``norm_eps`` (used for all RMSNorms,
QK-norm included); ``rope_parameters`` carries ``rope_theta`` and the Llama-3.1 scaling;
``tie_word_embeddings=False`` (RECIPE §1: untied lm_head).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torchtitan.protocols.state_dict_adapter import StateDictAdapter

from apertus.core import ApertusError
from apertus.model.model import ApertusModel

__all__ = [
    "EXPORT_DTYPES",
    "HF_KEY_RULES",
    "ApertusStateDictAdapter",
    "apertus_key",
    "export_dtype",
    "hf_config",
    "hf_key",
    "hf_state_dict",
    "rope_parameters",
]

EXPORT_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# (our state-dict key, transformers ApertusForCausalLM key); {i} is the layer index.
HF_KEY_RULES: tuple[tuple[str, str], ...] = (
    ("tok_embeddings.weight", "model.embed_tokens.weight"),
    ("layers.{i}.attention_norm.weight", "model.layers.{i}.attention_layernorm.weight"),
    ("layers.{i}.attention.wq.weight", "model.layers.{i}.self_attn.q_proj.weight"),
    ("layers.{i}.attention.wk.weight", "model.layers.{i}.self_attn.k_proj.weight"),
    ("layers.{i}.attention.wv.weight", "model.layers.{i}.self_attn.v_proj.weight"),
    ("layers.{i}.attention.wo.weight", "model.layers.{i}.self_attn.o_proj.weight"),
    ("layers.{i}.attention.q_norm.weight", "model.layers.{i}.self_attn.q_norm.weight"),
    ("layers.{i}.attention.k_norm.weight", "model.layers.{i}.self_attn.k_norm.weight"),
    ("layers.{i}.ffn_norm.weight", "model.layers.{i}.feedforward_layernorm.weight"),
    ("layers.{i}.feed_forward.w_up.weight", "model.layers.{i}.mlp.up_proj.weight"),
    ("layers.{i}.feed_forward.w_down.weight", "model.layers.{i}.mlp.down_proj.weight"),
    ("layers.{i}.feed_forward.act.alpha_p", "model.layers.{i}.mlp.act_fn.alpha_p"),
    ("layers.{i}.feed_forward.act.alpha_n", "model.layers.{i}.mlp.act_fn.alpha_n"),
    ("layers.{i}.feed_forward.act.beta", "model.layers.{i}.mlp.act_fn.beta"),
    ("layers.{i}.feed_forward.act.eps", "model.layers.{i}.mlp.act_fn.eps"),
    ("norm.weight", "model.norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
)


def _rule_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(pattern).replace(r"\{i\}", r"(?P<i>\d+)") + "$")


_TO_HF = [(_rule_regex(ours), hf) for ours, hf in HF_KEY_RULES]
_FROM_HF = [(_rule_regex(hf), ours) for ours, hf in HF_KEY_RULES]


def _translate(key: str, rules: list[tuple[re.Pattern[str], str]], what: str) -> str:
    for regex, target in rules:
        match = regex.match(key)
        if match:
            return target.format(**match.groupdict())
    raise ApertusError(f"no {what} name for state-dict key {key!r}")


def hf_key(key: str) -> str:
    """Our state-dict key -> the transformers ``ApertusForCausalLM`` key."""
    return _translate(key, _TO_HF, "Hugging Face")


def apertus_key(key: str) -> str:
    """A transformers ``ApertusForCausalLM`` key -> our state-dict key."""
    return _translate(key, _FROM_HF, "Apertus")


def rope_parameters(model_config: ApertusModel.Config) -> dict[str, Any]:
    """transformers' ``rope_parameters`` for our RoPE: theta, and the Llama-3.1 scaling
    (RECIPE §1) when the config has one; ``rope_type`` "default" (plain RoPE) otherwise."""
    scaling = model_config.rope_scaling
    if scaling is None:
        return {"rope_type": "default", "rope_theta": float(model_config.rope_theta)}
    return {
        "rope_type": "llama3",
        "rope_theta": float(model_config.rope_theta),
        "factor": float(scaling.factor),
        "low_freq_factor": float(scaling.low_freq_factor),
        "high_freq_factor": float(scaling.high_freq_factor),
        "original_max_position_embeddings": int(scaling.original_max_position_embeddings),
    }


def hf_config(
    model_config: ApertusModel.Config,
    *,
    dtype: str = "float32",
    bos_token_id: int = 1,
    eos_token_id: int = 2,
    pad_token_id: int = 3,
):
    """The ``transformers.ApertusConfig`` of a model of this shape (see the module doc for
    which field says what). ``max_position_embeddings`` is the config's ``max_seq_len``: the
    context the stage trained at."""
    from transformers import ApertusConfig

    export_dtype(dtype)
    config = ApertusConfig(
        vocab_size=model_config.vocab_size,
        hidden_size=model_config.dim,
        intermediate_size=model_config.ffn_hidden,
        num_hidden_layers=model_config.n_layers,
        num_attention_heads=model_config.n_heads,
        num_key_value_heads=model_config.n_kv_heads,
        head_dim=model_config.attention_head_dim,
        hidden_act="xielu",
        max_position_embeddings=model_config.max_seq_len,
        initializer_range=model_config.init_std,
        rms_norm_eps=model_config.norm_eps,
        rope_parameters=rope_parameters(model_config),
        attention_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        use_cache=True,
        dtype=dtype,
    )
    config.architectures = ["ApertusForCausalLM"]
    return config


def export_dtype(dtype: str) -> torch.dtype:
    if dtype not in EXPORT_DTYPES:
        raise ApertusError(f"export dtype must be one of {', '.join(EXPORT_DTYPES)}, got {dtype!r}")
    return EXPORT_DTYPES[dtype]


def hf_state_dict(
    state: dict[str, torch.Tensor], dtype: str = "float32"
) -> dict[str, torch.Tensor]:
    """Our state dict under transformers' keys, cast to `dtype`, contiguous (safetensors needs
    it); every tensor is its own copy, so no two keys share storage."""
    target = export_dtype(dtype)
    return {hf_key(key): value.to(target).contiguous().clone() for key, value in state.items()}


class ApertusStateDictAdapter(StateDictAdapter):
    """torchtitan's adapter for ``checkpoint.initial_load_in_hf``: the model's state dict under
    transformers' keys and back, the tensors themselves untouched, so that DCP's safetensors
    reader (``get_hf_storage_reader``) fills the model's own tensors, each rank its shards, in
    the dtype they have (a bfloat16 file is read into float32 master weights)."""

    def __init__(self, model_config: ApertusModel.Config, hf_assets_path: str | None):
        # Not torchtitan's: it looks for a safetensors index under `hf_assets_path` (for saving
        # in HF format, which the trainer never does: export is its own stage) and warns in
        # every run that the data folder holds none.
        self.model_config = model_config
        self.hf_assets_path = hf_assets_path
        self.fqn_to_index_mapping = None

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        return {hf_key(key): value for key, value in state_dict.items()}

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        return {apertus_key(key): value for key, value in hf_state_dict.items()}
