"""The Apertus dense decoder (RECIPE §1), written against torchtitan's ``Module`` protocol.

``ApertusModel`` subclasses ``torchtitan.protocols.model.BaseModel``, so the torchtitan 0.3 trainer
can build it from ``ApertusModel.Config`` on the meta device, shard it, ``to_empty()`` it and call
``init_weights(buffer_device=...)``. Every submodule is a torchtitan ``Module`` (the trainer's
``verify_module_protocol`` requires it) that initialises its own parameters and buffers.

The model configuration is flat (``dim``, ``n_layers``, ...) rather than torchtitan's tree of
per-submodule configs: a flavor is a handful of numbers, and the tree is derived in ``__init__``.

Module names follow torchtitan; `apertus.model.state_dict_adapter` maps them to and from the
Hugging Face ``ApertusForCausalLM`` state dict. RoPE uses Hugging Face's rotate-half convention,
so export needs no Q/K row permutation.

Document masking: ``forward(tokens, positions)`` takes per-token positions that restart at 0 at
each document start (RECIPE §1: reset-position-ids, reset-attention-mask; torchtitan's loader
convention). A token attends to earlier tokens of its own document only. ``attn_backend="sdpa"``
builds a dense boolean mask for ``F.scaled_dot_product_attention`` (works everywhere, memory
O(B * L^2)); ``"flex"`` builds a FlexAttention block mask (compiled on CUDA; on CPU it runs the
eager reference implementation, which is slow and meant only for checking).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from torchtitan.models.common.embedding import Embedding
from torchtitan.models.common.linear import Linear
from torchtitan.models.utils import get_dense_model_nparams_and_flops
from torchtitan.protocols.model import BaseModel
from torchtitan.protocols.module import Module, ModuleDict

from apertus.core import ApertusError
from apertus.core.typed import is_integer, is_number
from apertus.model.shapes import RopeScaling

if TYPE_CHECKING:
    from apertus.model.context_parallel import ContextGroup

AttentionBackend = Literal["sdpa", "flex"]
# An attention mask as the blocks receive it: None (plain causal), a dense boolean mask
# [B, 1, L, L] (True = may attend) for SDPA, or a FlexAttention BlockMask.
AttentionMask = torch.Tensor | BlockMask | None


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def validate_config(config: ApertusModel.Config) -> None:
    """Raise ``ApertusError`` naming the field and its value when shapes cannot fit together.

    Runs when a Config is created (and again on every ``dataclasses.replace``), so a bad
    shape is reported before any tensor is allocated.
    """
    for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "vocab_size"):
        value = getattr(config, name)
        if not is_integer(value) or value <= 0:
            raise ApertusError(f"model config: {name} must be a positive integer, got {value!r}")
    if not is_integer(config.max_seq_len) or config.max_seq_len <= 0:
        raise ApertusError(
            f"model config: max_seq_len must be a positive integer, got {config.max_seq_len!r}"
        )
    if config.head_dim is None:
        if config.dim % config.n_heads != 0:
            raise ApertusError(
                f"model config: n_heads={config.n_heads} does not divide dim={config.dim} "
                "(head_dim is derived as dim // n_heads when not given)"
            )
    elif not is_integer(config.head_dim) or config.head_dim <= 0:
        raise ApertusError(
            f"model config: head_dim must be a positive integer or None, got {config.head_dim!r}"
        )
    if config.n_heads % config.n_kv_heads != 0:
        raise ApertusError(
            f"model config: n_kv_heads={config.n_kv_heads} does not divide "
            f"n_heads={config.n_heads} (grouped-query attention shares each kv head "
            "across a whole number of query heads)"
        )
    if config.attention_head_dim % 2 != 0:
        raise ApertusError(
            f"model config: head_dim={config.attention_head_dim} must be even "
            "(rotary embedding rotates pairs of channels)"
        )
    for name in ("norm_eps", "rope_theta", "init_std"):
        value = getattr(config, name)
        if not is_number(value) or not value > 0:
            raise ApertusError(f"model config: {name} must be a positive number, got {value!r}")
    scaling = config.rope_scaling
    if scaling is not None:
        if not isinstance(scaling, RopeScaling):
            raise ApertusError(
                f"model config: rope_scaling must be a RopeScaling or None, got {scaling!r}"
            )
        if not scaling.factor > 0:
            raise ApertusError(
                f"model config: rope_scaling.factor must be positive, got {scaling.factor!r}"
            )
        if not scaling.high_freq_factor > scaling.low_freq_factor:
            raise ApertusError(
                "model config: rope_scaling.high_freq_factor must exceed low_freq_factor, got "
                f"high_freq_factor={scaling.high_freq_factor!r}, "
                f"low_freq_factor={scaling.low_freq_factor!r}"
            )
        if not scaling.low_freq_factor > 0:
            raise ApertusError(
                "model config: rope_scaling.low_freq_factor must be positive, got "
                f"{scaling.low_freq_factor!r}"
            )
        if not scaling.original_max_position_embeddings > 0:
            raise ApertusError(
                "model config: rope_scaling.original_max_position_embeddings must be positive, "
                f"got {scaling.original_max_position_embeddings!r}"
            )
    if config.attn_backend not in ("sdpa", "flex"):
        raise ApertusError(
            f"model config: attn_backend must be 'sdpa' or 'flex', got {config.attn_backend!r}"
        )


# --------------------------------------------------------------------------------------------
# Formulas (each one function, RECIPE §1)
# --------------------------------------------------------------------------------------------


def _scalar_tensor(value: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    """A Python number as a 0-dim tensor of x's dtype and device (0-dim: it does not take part
    in type promotion); a tensor as it is."""
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype=x.dtype, device=x.device)


def xielu(
    x: torch.Tensor,
    alpha_p_raw: torch.Tensor,
    alpha_n_raw: torch.Tensor,
    beta: torch.Tensor | float = 0.5,
    eps: torch.Tensor | float = -1e-6,
) -> torch.Tensor:
    """xIELU activation (RECIPE §1; xIELU paper, arXiv 2411.13010).

    ``alpha_p = softplus(a_p)``, ``alpha_n = beta + softplus(a_n)``;
    ``x > 0``: ``alpha_p * x^2 + beta * x``;
    ``x <= 0``: ``alpha_n * expm1(min(x, eps)) - alpha_n * x + beta * x``.

    The negative branch is evaluated as ``(expm1(min(x, eps)) - x) * alpha_n + beta * x``, the
    same grouping as ``transformers.activations.XIELUActivation``, so the two agree bit for bit.
    Like transformers, there is no upcast: the arithmetic runs in the promoted dtype of ``x`` and
    the scalars (bf16 under bf16 mixed precision). The result is returned in ``x.dtype``.
    """
    beta, eps = _scalar_tensor(beta, x), _scalar_tensor(eps, x)
    alpha_p = F.softplus(alpha_p_raw)
    alpha_n = beta + F.softplus(alpha_n_raw)
    out = torch.where(
        x > 0,
        alpha_p * x * x + beta * x,
        (torch.expm1(torch.minimum(x, eps)) - x) * alpha_n + beta * x,
    )
    return out.to(x.dtype)


def _xielu_where(
    x: torch.Tensor,
    alpha_p: torch.Tensor,
    alpha_n: torch.Tensor,
    beta: torch.Tensor,
    eps: torch.Tensor,
) -> torch.Tensor:
    """``xielu`` on effective alphas, ``beta * x`` taken out of both branches: the same ops on
    the selected branch, so bit for bit the reference. The form for compiled code and GPUs."""
    negative = (torch.expm1(torch.minimum(x, eps)) - x) * alpha_n
    return (torch.where(x > 0, alpha_p * x * x, negative) + beta * x).to(x.dtype)


def _xielu_masked(
    x: torch.Tensor,
    alpha_p: torch.Tensor,
    alpha_n: torch.Tensor,
    beta: torch.Tensor,
    eps: torch.Tensor,
) -> torch.Tensor:
    """``_xielu_where`` without ``torch.where``, which is scalar code on CPU (about ten times a
    vectorised multiply): the form for eager CPU.

    Bit for bit the reference, ±0, ±inf and NaN included: the positive branch is evaluated on
    ``relu(x)`` (exactly +0 where x <= 0), the negative one on ``min(x, 0)`` times
    ``1 - sign(relu(x))`` (exactly 0 where x > 0, where that branch is finite), and adding a
    zero leaves the other branch unchanged. Ops that can promote (a shape-(1,) alpha has its
    say, the 0-dim beta and eps do not) run out of place as in the reference; the in-place
    ones keep the dtype they start from.
    """
    x_pos = torch.relu(x)
    x_neg = torch.clamp(x, max=0)
    is_neg = torch.sign(x_pos).neg_().add_(1)  # sign(NaN) is 0: NaN flows through x_pos
    positive = (alpha_p * x_pos).mul_(x_pos)
    negative = torch.minimum(x_neg, eps).expm1_().sub_(x_neg)
    negative = (negative * alpha_n).mul_(is_neg)
    return negative.add_(positive).add_(beta * x).to(x.dtype)


def _sum_as(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The sum of t, accumulated in at least float32, in the dtype and shape of ``like``."""
    total = t.sum(dtype=torch.promote_types(t.dtype, torch.float32))
    return total.reshape(like.shape).to(like.dtype)


def _xielu_gradients_where(
    grad: torch.Tensor,
    x: torch.Tensor,
    alpha_p: torch.Tensor,
    alpha_n: torch.Tensor,
    beta: torch.Tensor,
    eps: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of xIELU w.r.t. x and the effective alpha_p, alpha_n, from x alone.

    ``d/dx``: ``2 alpha_p x + beta`` (x > 0), ``alpha_n expm1(x) + beta`` (x < eps),
    ``beta - alpha_n`` (eps < x <= 0); at x == eps the exp term counts half, as autograd's
    ``torch.minimum`` splits a tie. ``d/d alpha_p = sum(grad * x^2)`` over x > 0,
    ``d/d alpha_n = sum(grad * (expm1(min(x, eps)) - x))`` over x <= 0, each reduced in at
    least float32 and returned in its alpha's dtype and shape. The branch not taken is
    selected away, not multiplied by 0, so an infinite x cannot make the other alpha's
    gradient NaN (in the reference, ``0 * inf`` does).
    """
    positive = x > 0
    expm1_min = torch.expm1(torch.minimum(x, eps))
    d_expm1_min = torch.where(
        x < eps, expm1_min, torch.where(x == eps, 0.5 * expm1_min - 0.5, -1.0)
    )  # d(expm1(min(x, eps)) - x)/dx
    slope = torch.where(positive, 2 * alpha_p * x, alpha_n * d_expm1_min) + beta
    return (
        (grad * slope).to(x.dtype),
        _sum_as(torch.where(positive, grad * x * x, 0), alpha_p),
        _sum_as(torch.where(positive, 0, grad * (expm1_min - x)), alpha_n),
    )


def _xielu_gradients_masked(
    grad: torch.Tensor,
    x: torch.Tensor,
    alpha_p: torch.Tensor,
    alpha_n: torch.Tensor,
    beta: torch.Tensor,
    eps: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_xielu_gradients_where`` with 0/1 (and 1/2) masks instead of ``torch.where``, for
    eager CPU; the branch not taken is evaluated on ``relu(x)`` / ``min(x, 0)``, finite."""
    x_pos = torch.relu(x)
    x_neg = torch.clamp(x, max=0)
    is_neg = torch.sign(x_pos).neg_().add_(1)
    expm1_min = torch.minimum(x_neg, eps).expm1_()
    # 1 below eps, 1/2 at eps, 0 above, and 0 where x > 0 (whatever the sign of eps).
    below_eps = torch.sub(x, eps).sign_().mul_(-0.5).add_(0.5).mul_(is_neg)
    d_expm1_min = expm1_min * below_eps  # d(expm1(min(x, eps)) - x)/dx, x <= 0; 0 for x > 0
    d_expm1_min.add_(below_eps.sub_(is_neg))
    slope = torch.mul(d_expm1_min, alpha_n).addcmul_(x_pos, 2 * alpha_p).add_(beta)
    return (
        slope.mul_(grad).to(x.dtype),
        _sum_as((grad * x_pos).mul_(x_pos), alpha_p),
        _sum_as(expm1_min.sub_(x_neg).mul_(is_neg).mul_(grad), alpha_n),
    )


def _masked_form(x: torch.Tensor) -> bool:
    """Whether to use the where-free form: in eager mode on CPU, where ``torch.where`` is slow.
    Compiled code fuses either form into one kernel, and the ``where`` one has fewer ops."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


class _XIELUFunction(torch.autograd.Function):
    """xIELU on effective alphas with a hand-written backward that saves only x.

    Autograd through the reference keeps the mask, ``alpha_p * x`` and the ``expm1`` result
    besides x, and replays several masked ops in the backward; here the backward recomputes
    what it needs from x. torch.compile traces both passes (one fused kernel each); a DTensor
    x works as any tensor, and the alphas' gradients come out as the sum's placement
    (Partial over a sharded x), as through the reference.
    """

    @staticmethod
    def forward(ctx, x, alpha_p, alpha_n, beta, eps):
        ctx.save_for_backward(x, alpha_p, alpha_n, beta, eps)
        formula = _xielu_masked if _masked_form(x) else _xielu_where
        return formula(x, alpha_p, alpha_n, beta, eps)

    @staticmethod
    def backward(ctx, grad):
        # Read once: under activation checkpointing each read of `saved_tensors` unpacks the
        # recomputed tensors, and a second read raises "already unpacked once".
        saved = ctx.saved_tensors
        gradients = _xielu_gradients_masked if _masked_form(saved[0]) else _xielu_gradients_where
        grad_x, grad_alpha_p, grad_alpha_n = gradients(grad, *saved)
        wanted = ctx.needs_input_grad
        return (
            grad_x if wanted[0] else None,
            grad_alpha_p if wanted[1] else None,
            grad_alpha_n if wanted[2] else None,
            None,
            None,
        )


def xielu_fused(
    x: torch.Tensor,
    alpha_p_raw: torch.Tensor,
    alpha_n_raw: torch.Tensor,
    beta: torch.Tensor | float = 0.5,
    eps: torch.Tensor | float = -1e-6,
) -> torch.Tensor:
    """``xielu`` with the same result bit for bit, and a backward that is cheaper in time and
    saved memory (``_XIELUFunction``). The softplus of the raw alphas stays in autograd (two
    one-element ops); beta and eps are constants and cannot take a gradient."""
    beta, eps = _scalar_tensor(beta, x), _scalar_tensor(eps, x)
    for name, value in (("beta", beta), ("eps", eps)):
        if value.requires_grad:
            raise ApertusError(
                f"xielu_fused: {name} requires grad, but it is a fixed constant here "
                "(use the reference xielu to learn it)"
            )
    alpha_p = F.softplus(alpha_p_raw)
    alpha_n = beta + F.softplus(alpha_n_raw)
    return _XIELUFunction.apply(x, alpha_p, alpha_n, beta, eps)


def softplus_inverse(y: float) -> torch.Tensor:
    """``log(expm1(y))`` in float32 (the raw xIELU parameter whose softplus is ``y``)."""
    return torch.log(torch.expm1(torch.tensor(y, dtype=torch.float32)))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in float32 (RECIPE §1), weight only; same op order as transformers'
    ``ApertusRMSNorm`` (normalise in fp32, cast back, then scale). Returns ``x.dtype``."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h.to(dtype)).to(dtype)


def rope_inverse_frequencies(
    head_dim: int,
    theta: float,
    scaling: RopeScaling | None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """RoPE inverse frequencies with Llama-3.1 scaling (RECIPE §1), float32, shape [head_dim/2].

    Long wavelengths (> original_max / low_freq_factor) are slowed down by ``factor``, short ones
    (< original_max / high_freq_factor) are kept, and the band between is interpolated. Same
    operations in the same order as transformers' ``_compute_llama3_parameters``.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(torch.float32)
    inv_freq = 1.0 / (theta ** (exponents / head_dim))
    if scaling is None:
        return inv_freq
    old_context_len = scaling.original_max_position_embeddings
    low_freq_wavelen = old_context_len / scaling.low_freq_factor
    high_freq_wavelen = old_context_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (
        1 - smooth_factor
    ) * inv_freq_llama / scaling.factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed, inv_freq_llama)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [B, L, head_dim] for the rotate-half convention (angles in fp32)."""
    freqs = positions[..., None].to(torch.float32) * inv_freq.to(torch.float32)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension (HF convention)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_embedding(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [B, L, Hq, D] and k [B, L, Hkv, D] by per-token angles (cos/sin [B, L, D])."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def document_ids(positions: torch.Tensor) -> torch.Tensor:
    """Per-token document index [B, L]: a new document starts wherever the position is 0
    (RECIPE §1 reset-position-ids; the same convention as torchtitan's document masks).
    Tokens before the first 0 of a row (a document continued from a previous row) get -1."""
    return torch.cumsum((positions == 0).to(torch.int32), dim=1) - 1


def block_causal_mask(positions: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Dense boolean mask [B, 1, Q, L], True where query i may attend to key j: j <= i and both
    in the same document (RECIPE §1 reset-attention-mask). `queries`: the sequence positions of
    the Q queries (a context-parallel rank's tokens, `apertus.model.context_parallel`); None:
    all L."""
    doc = document_ids(positions)
    seq_len = positions.shape[1]
    keys = torch.arange(seq_len, device=positions.device)
    queries = keys if queries is None else queries
    causal = queries[:, None] >= keys[None, :]
    same_document = doc[:, queries, None] == doc[:, None, :]
    return (same_document & causal)[:, None]


_compiled_flex: dict[str, object] = {}


def _flex_functions(device: torch.device):
    """flex_attention / create_block_mask, compiled on CUDA (as torchtitan does) and eager
    elsewhere: the eager path is a dense reference implementation, fine for small checks."""
    if device.type != "cuda":
        return flex_attention, create_block_mask
    if not _compiled_flex:
        _compiled_flex["attention"] = torch.compile(flex_attention)
        _compiled_flex["block_mask"] = torch.compile(create_block_mask)
    return _compiled_flex["attention"], _compiled_flex["block_mask"]


def block_causal_block_mask(
    positions: torch.Tensor, queries: torch.Tensor | None = None
) -> BlockMask:
    """FlexAttention block mask with the same pattern as ``block_causal_mask``."""
    doc = document_ids(positions)
    batch, seq_len = positions.shape
    if queries is None:

        def same_document_causal(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (doc[b, q_idx] == doc[b, kv_idx])

    else:

        def same_document_causal(b, h, q_idx, kv_idx):
            query = queries[q_idx]
            return (query >= kv_idx) & (doc[b, query] == doc[b, kv_idx])

    query_len = seq_len if queries is None else queries.shape[0]
    _, make_block_mask = _flex_functions(positions.device)
    return make_block_mask(
        same_document_causal, batch, None, query_len, seq_len, device=positions.device
    )


# --------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------


def _normal_init(std: float):
    """Plain (untruncated) normal init, as Megatron's init_method_normal (RECIPE §1)."""
    return {"weight": partial(nn.init.normal_, mean=0.0, std=std)}


def _linear(in_features: int, out_features: int, std: float) -> Linear:
    return Linear.Config(
        in_features=in_features, out_features=out_features, bias=False, param_init=_normal_init(std)
    ).build()


class RMSNorm(Module):
    """RMSNorm, eps 1e-5, computed in fp32, weight only (RECIPE §1). Weight init: ones."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class XIELU(Module):
    """xIELU with learnable ``alpha_p`` / ``alpha_n`` (RECIPE §1), one instance per layer.

    Like transformers, the parameters hold the RAW values (before softplus), shape (1,):
    ``alpha_p = log(expm1(0.8))``, ``alpha_n = log(expm1(0.8 - beta))`` so that the effective
    alpha_p and alpha_n both start at 0.8. ``beta`` = 0.5 and ``eps`` = -1e-6 are fixed 0-dim
    buffers (persistent, as in the HF state dict). Runs ``xielu_fused``: the reference's
    result bit for bit, with a cheaper backward that saves only the input.
    """

    def __init__(
        self,
        alpha_p_init: float = 0.8,
        alpha_n_init: float = 0.8,
        beta: float = 0.5,
        eps: float = -1e-6,
    ) -> None:
        super().__init__()
        self.alpha_p_init = alpha_p_init
        self.alpha_n_init = alpha_n_init
        self.beta_value = beta
        self.eps_value = eps
        self.alpha_p = nn.Parameter(torch.empty(1))
        self.alpha_n = nn.Parameter(torch.empty(1))
        self.register_buffer("beta", torch.empty(()))
        self.register_buffer("eps", torch.empty(()))
        self.reset_parameters()
        self._init_self_buffers()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.alpha_p.copy_(softplus_inverse(self.alpha_p_init))
            self.alpha_n.copy_(softplus_inverse(self.alpha_n_init - self.beta_value))

    def _init_self_buffers(self, *, buffer_device: torch.device | None = None) -> None:
        device = buffer_device if buffer_device is not None else self.beta.device
        self.beta = torch.tensor(self.beta_value, dtype=self.beta.dtype, device=device)
        self.eps = torch.tensor(self.eps_value, dtype=self.eps.dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return xielu_fused(x, self.alpha_p, self.alpha_n, self.beta, self.eps)


class RotaryEmbedding(Module):
    """Holds the (scaled) RoPE inverse frequencies as a non-persistent fp32 buffer, recomputed
    by ``init_weights`` after ``to_empty()``; cos/sin are computed per call from positions."""

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling | None) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta
        self.scaling = scaling
        self.register_buffer(
            "inv_freq", rope_inverse_frequencies(head_dim, theta, scaling), persistent=False
        )

    def _init_self_buffers(self, *, buffer_device: torch.device | None = None) -> None:
        device = buffer_device if buffer_device is not None else self.inv_freq.device
        self.inv_freq = rope_inverse_frequencies(self.head_dim, self.theta, self.scaling, device)

    def forward(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_cos_sin(positions, self.inv_freq, dtype)


class Attention(Module):
    """Grouped-query attention with QK-norm before RoPE, scale 1/sqrt(head_dim), no bias
    (RECIPE §1). ``wo`` is an output projection: init std scaled by 1/sqrt(2 * n_layers)."""

    def __init__(self, config: ApertusModel.Config) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.attention_head_dim
        self.backend = config.attn_backend
        std, out_std = config.init_std, config.output_projection_std
        self.wq = _linear(config.dim, self.n_heads * self.head_dim, std)
        self.wk = _linear(config.dim, self.n_kv_heads * self.head_dim, std)
        self.wv = _linear(config.dim, self.n_kv_heads * self.head_dim, std)
        self.wo = _linear(self.n_heads * self.head_dim, config.dim, out_std)
        self.q_norm = RMSNorm(self.head_dim, config.norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.norm_eps)
        # Set by apertus.model.parallelize under context parallelism: keys and values are
        # gathered over the group, queries stay this rank's (apertus.model.context_parallel).
        self.context: ContextGroup | None = None

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: AttentionMask
    ) -> torch.Tensor:
        batch, seq_len, _ = x.shape
        # Head counts come from the projections' outputs, not the config: under tensor
        # parallelism wq/wk/wv are column-sharded and each rank holds whole heads only.
        q = self.wq(x).view(batch, seq_len, -1, self.head_dim)
        k = self.wk(x).view(batch, seq_len, -1, self.head_dim)
        v = self.wv(x).view(batch, seq_len, -1, self.head_dim)
        # RECIPE §1: QK-norm over head_dim, applied before RoPE.
        q, k = apply_rotary_embedding(self.q_norm(q), self.k_norm(k), cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, D]
        if self.context is not None:
            k, v = self.context.gather(k), self.context.gather(v)
        scale = 1.0 / math.sqrt(self.head_dim)
        gqa = self.n_kv_heads != self.n_heads
        if isinstance(mask, BlockMask):
            if q.device.type == "cpu" and q.requires_grad:
                # torch's FlexAttention has no CPU backward (PLATFORM.md, CPU blocker 3).
                raise ApertusError(
                    "attn_backend='flex' cannot train on CPU (FlexAttention has no CPU "
                    "backward); use attn_backend='sdpa' on CPU"
                )
            flex, _ = _flex_functions(q.device)
            out = flex(q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=gqa
            )
        out = out.transpose(1, 2).reshape(batch, seq_len, -1)
        return self.wo(out)


class FeedForward(Module):
    """Non-gated MLP ``down(xIELU(up(x)))`` (RECIPE §1); ``w_down`` is an output projection."""

    def __init__(self, config: ApertusModel.Config) -> None:
        super().__init__()
        self.w_up = _linear(config.dim, config.ffn_hidden, config.init_std)
        self.act = XIELU()
        self.w_down = _linear(config.ffn_hidden, config.dim, config.output_projection_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(self.act(self.w_up(x)))


class TransformerBlock(Module):
    """Pre-norm block (RECIPE §1): ``h = x + Attn(RMSNorm(x))``, ``out = h + MLP(RMSNorm(h))``."""

    def __init__(self, config: ApertusModel.Config) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: AttentionMask
    ) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class ApertusModel(BaseModel):
    """The Apertus decoder: token embedding, ``n_layers`` blocks, final RMSNorm, untied
    ``lm_head``; no bias anywhere (RECIPE §1).

    ``forward(tokens [B, L], positions [B, L] | None) -> logits [B, L, vocab]``; ``positions=None``
    means one document per row (0..L-1). Construction already applies the recipe init, so a model
    built on a real device is ready to use; under ``torch.device("meta")`` call ``to_empty()`` and
    then ``init_weights()`` (what the torchtitan trainer does after sharding).

    Init (RECIPE §1, Megatron's scheme): every weight matrix, the embedding and the untied
    ``lm_head`` included, ~ N(0, init_std); the blocks' output projections (``attention.wo`` and
    ``feed_forward.w_down``) ~ N(0, init_std / sqrt(2 * n_layers)); norm weights 1; xIELU
    alpha_p = alpha_n = 0.8 (effective).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseModel.Config):
        """Shape and init of an Apertus model; validated on creation (``ApertusError``).

        ``head_dim=None`` derives it as ``dim // n_heads``; ``rope_scaling=None`` turns the
        Llama-3.1 frequency scaling off. ``max_seq_len`` bounds the input length (RoPE is
        computed from positions, so it only guards against silently running past the context
        the flavor was made for). ``attn_backend``: "sdpa" (dense mask, any device, the CPU
        default) or "flex" (FlexAttention block mask, compiled on CUDA).
        """

        dim: int
        n_layers: int
        n_heads: int
        n_kv_heads: int
        ffn_hidden: int
        vocab_size: int
        head_dim: int | None = None
        norm_eps: float = 1e-5
        rope_theta: float = 500_000.0
        rope_scaling: RopeScaling | None = field(default_factory=RopeScaling)
        max_seq_len: int = 4096
        init_std: float = 0.008944
        attn_backend: AttentionBackend = "sdpa"

        def __post_init__(self) -> None:
            validate_config(self)

        @property
        def attention_head_dim(self) -> int:
            """``head_dim``, or ``dim // n_heads`` when it is not given."""
            return self.head_dim if self.head_dim is not None else self.dim // self.n_heads

        @property
        def output_projection_std(self) -> float:
            """Init std of the blocks' output projections: init_std / sqrt(2 * n_layers)."""
            return self.init_std / math.sqrt(2 * self.n_layers)

        def update_from_config(self, *, config, **kwargs) -> None:
            """Check the trainer's settings against this shape (torchtitan calls this before
            building): the training sequence length must fit ``max_seq_len``, and a tensor
            parallel degree must divide both head counts."""
            training = getattr(config, "training", None)
            seq_len = getattr(training, "seq_len", None)
            if seq_len is not None and seq_len > self.max_seq_len:
                raise ApertusError(
                    f"training.seq_len={seq_len} exceeds the model's max_seq_len="
                    f"{self.max_seq_len}; raise max_seq_len in the flavor overrides"
                )
            parallelism = getattr(config, "parallelism", None)
            tp = getattr(parallelism, "tensor_parallel_degree", 1) or 1
            for name in ("n_heads", "n_kv_heads"):
                if getattr(self, name) % tp != 0:
                    raise ApertusError(
                        f"parallelism.tensor_parallel_degree={tp} does not divide "
                        f"{name}={getattr(self, name)}"
                    )

        def get_nparams_and_flops(self, model: nn.Module, seq_len: int) -> tuple[int, int]:
            """Parameter count and training FLOPs per token (torchtitan's dense formula:
            6 * non-embedding params + 6 * layers * heads * (qk + v head dims) * seq_len)."""
            return get_dense_model_nparams_and_flops(
                model,
                n_layers=self.n_layers,
                n_heads=self.n_heads,
                head_dims=2 * self.attention_head_dim,
                seq_len=seq_len,
            )

    # Set by torchtitan's trainer when ChunkedLossWrapper applies lm_head chunk by chunk.
    _skip_lm_head: bool = False

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = Embedding.Config(
            num_embeddings=config.vocab_size,
            embedding_dim=config.dim,
            param_init=_normal_init(config.init_std),
        ).build()
        self.rope = RotaryEmbedding(
            config.attention_head_dim, config.rope_theta, config.rope_scaling
        )
        # A ModuleDict keyed by layer index, as torchtitan does, so pipeline stages can drop
        # layers while the remaining ones keep their checkpoint names.
        self.layers = ModuleDict({str(i): TransformerBlock(config) for i in range(config.n_layers)})
        self.norm = RMSNorm(config.dim, config.norm_eps)
        # RECIPE §1: untied lm_head; initialised like every other matrix, N(0, init_std)
        # (Megatron's init_method_normal for an untied output layer), not depth-scaled.
        self.lm_head = _linear(config.dim, config.vocab_size, config.init_std)
        # nn.Linear / nn.Embedding constructors apply their own default init; replace it with
        # the recipe's so that build() alone yields a correctly initialised model.
        with torch.no_grad():
            self.init_weights()

    def attention_mask(
        self,
        positions: torch.Tensor | None,
        tokens: torch.Tensor,
        queries: torch.Tensor | None = None,
    ) -> AttentionMask:
        """The mask the blocks get for these positions, in the configured backend's form;
        with `queries` (the sequence positions a context-parallel rank holds), only their rows
        (`apertus.model.context_parallel`)."""
        if positions is None:
            if self.config.attn_backend == "sdpa" and queries is None:
                return None  # plain causal: SDPA's is_causal path, no dense mask needed
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        if self.config.attn_backend == "flex":
            return block_causal_block_mask(positions, queries)
        return block_causal_mask(positions, queries)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        attention_mask: AttentionMask = None,
    ) -> torch.Tensor:
        """Logits [B, L, vocab] (or the final hidden states while torchtitan chunks the loss).
        `attention_mask`: a mask made by `attention_mask` beforehand (context parallelism: the
        rows of this rank's tokens, from the whole sequence's positions); None: made here from
        `positions`."""
        if tokens.dim() != 2:
            raise ApertusError(f"tokens must be [batch, seq_len], got shape {tuple(tokens.shape)}")
        batch, seq_len = tokens.shape
        if seq_len > self.config.max_seq_len:
            raise ApertusError(
                f"sequence length {seq_len} exceeds the model's max_seq_len="
                f"{self.config.max_seq_len}"
            )
        if positions is not None:
            if positions.shape != tokens.shape:
                raise ApertusError(
                    f"positions must have the shape of tokens {tuple(tokens.shape)}, "
                    f"got {tuple(positions.shape)}"
                )
            if positions.dtype.is_floating_point or positions.dtype == torch.bool:
                raise ApertusError(f"positions must be integers, got dtype {positions.dtype}")
        mask = self.attention_mask(positions, tokens) if attention_mask is None else attention_mask
        if positions is None:
            positions = torch.arange(seq_len, device=tokens.device).expand(batch, seq_len)

        h = self.tok_embeddings(tokens)
        cos, sin = self.rope(positions, h.dtype)
        for layer in self.layers.values():
            h = layer(h, cos, sin, mask)
        h = self.norm(h)
        if self._skip_lm_head:
            return h
        return self.lm_head(h)
