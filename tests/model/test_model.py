"""The Apertus model against transformers' reference implementation, and its own contracts.

Reference: ``transformers.models.apertus.modeling_apertus`` (eager attention), with our weights
copied through ``hf_key``. Weights are re-drawn at a large scale before comparing, because the
recipe init (std 0.009) makes every output so small that a wrong RoPE or mask would still pass a
1e-4 tolerance.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from transformers import ApertusConfig
from transformers.activations import XIELUActivation
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.apertus import modeling_apertus as hf

from apertus.core import ApertusError
from apertus.model import model as model_module
from apertus.model.flavors import FLAVORS, flavor, num_params
from apertus.model.model import (
    XIELU,
    ApertusModel,
    RopeScaling,
    TransformerBlock,
    block_causal_mask,
    rope_inverse_frequencies,
    xielu,
    xielu_fused,
)
from apertus.model.state_dict_adapter import apertus_key, hf_key

# A small shape that still exercises GQA (4 q / 2 kv heads), a head_dim unrelated to
# dim // n_heads (32 vs 16), and all three bands of the Llama-3.1 RoPE scaling (see
# test_rope_frequencies_match_transformers).
SMALL = dict(
    dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, ffn_hidden=96, vocab_size=101
)


def small_config(**overrides) -> ApertusModel.Config:
    return ApertusModel.Config(**{**SMALL, **overrides})


def hf_config(cfg: ApertusModel.Config, rope_type: str = "llama3") -> ApertusConfig:
    """An ApertusConfig of the same shape, RoPE as in RECIPE §1, eager attention, fp32."""
    rope = {"rope_type": rope_type, "rope_theta": cfg.rope_theta}
    if rope_type == "llama3":
        rope.update(
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        )
    config = ApertusConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        intermediate_size=cfg.ffn_hidden,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.attention_head_dim,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps,
        rope_parameters=rope,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "eager"
    return config


@torch.no_grad()
def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter at a scale where mistakes show: matrices N(0, 0.3^2), norm
    weights 1 + N(0, 0.2^2), xIELU raw alphas N(0, 0.5^2)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        noise = torch.randn(p.shape, generator=gen)
        if p.dim() >= 2:
            p.copy_(0.3 * noise)
        elif name.endswith(("alpha_p", "alpha_n")):
            p.copy_(0.5 * noise)
        else:
            p.copy_(1.0 + 0.2 * noise)


def to_hf_state_dict(model: torch.nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    return {hf_key(prefix + k): v.clone() for k, v in model.state_dict().items()}


def reference_block_causal(positions: list[list[int]]) -> torch.Tensor:
    """Brute force: i may attend to j iff j <= i and no document starts in (j, i]."""
    rows = []
    for pos in positions:
        n = len(pos)
        rows.append(
            [
                [j <= i and all(pos[t] != 0 for t in range(j + 1, i + 1)) for j in range(n)]
                for i in range(n)
            ]
        )
    return torch.tensor(rows)[:, None]


def additive(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


# --------------------------------------------------------------------------------------------
# xIELU
# --------------------------------------------------------------------------------------------

XIELU_INPUTS = torch.cat(
    [
        torch.linspace(-30, 30, 601),
        torch.tensor([0.0, -0.0, 1e-7, -1e-7, -1e-6, -2e-6, 1e-30, -1e-30, 1e4, -1e4, 88.0]),
        torch.randn(200, generator=torch.Generator().manual_seed(0)) * 5,
    ]
)


def test_xielu_init_matches_transformers_and_recipe():
    ours, ref = XIELU(), XIELUActivation(dtype=torch.float32)
    assert ours.alpha_p.shape == ours.alpha_n.shape == (1,)
    assert ours.beta.shape == ours.eps.shape == ()
    for name in ("alpha_p", "alpha_n", "beta", "eps"):
        assert torch.equal(getattr(ours, name), getattr(ref, name)), name
    # Effective alphas both 0.8 at init, beta 0.5, eps -1e-6 (RECIPE §1).
    assert torch.nn.functional.softplus(ours.alpha_p).item() == pytest.approx(0.8, abs=1e-6)
    effective_alpha_n = ours.beta + torch.nn.functional.softplus(ours.alpha_n)
    assert effective_alpha_n.item() == pytest.approx(0.8, abs=1e-6)
    assert ours.beta.item() == 0.5 and ours.eps.item() == pytest.approx(-1e-6)


@pytest.mark.parametrize("raw", [None, (0.3, -0.7), (-2.0, 1.5)])
def test_xielu_forward_and_gradients_match_transformers(raw):
    ours, ref = XIELU(), XIELUActivation(dtype=torch.float32)
    if raw is not None:
        with torch.no_grad():
            for module in (ours, ref):
                module.alpha_p.fill_(raw[0])
                module.alpha_n.fill_(raw[1])
    x_ours = XIELU_INPUTS.clone().requires_grad_(True)
    x_ref = XIELU_INPUTS.clone().requires_grad_(True)
    y_ours, y_ref = ours(x_ours), ref(x_ref)
    torch.testing.assert_close(y_ours, y_ref, rtol=0, atol=0)
    # A non-uniform upstream gradient, so each element's gradient matters separately.
    upstream = torch.linspace(-1, 1, len(XIELU_INPUTS))
    (y_ours * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_ref.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours.alpha_p.grad, ref.alpha_p.grad, rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(ours.alpha_n.grad, ref.alpha_n.grad, rtol=1e-6, atol=1e-3)
    assert ours.alpha_p.grad.abs().item() > 0 and ours.alpha_n.grad.abs().item() > 0


def test_xielu_formula_by_hand():
    """RECIPE §1 written out in float64 with alpha_p = alpha_n = 0.8, beta 0.5, eps -1e-6."""
    a_p, a_n = math.log(math.expm1(0.8)), math.log(math.expm1(0.3))
    for x in (2.0, 0.5, 1e-3, -1e-9, -0.5, -3.0, -40.0):
        if x > 0:
            expected = 0.8 * x * x + 0.5 * x
        else:
            expected = 0.8 * math.expm1(min(x, -1e-6)) - 0.8 * x + 0.5 * x
        x_t, a_p_t, a_n_t = (torch.tensor([v], dtype=torch.float64) for v in (x, a_p, a_n))
        got = xielu(x_t, a_p_t, a_n_t)
        assert got.item() == pytest.approx(expected, rel=1e-9, abs=1e-15), x


def test_xielu_bf16_matches_transformers_bf16():
    ours, ref = XIELU().to(torch.bfloat16), XIELUActivation(dtype=torch.bfloat16)
    x = XIELU_INPUTS.to(torch.bfloat16)
    y = ours(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref(x), rtol=0, atol=0)


# The fused xIELU (issue 11): the eager CPU form (0/1 masks) and the compiled/GPU form
# (torch.where), each forced on through `_masked_form`.
XIELU_FORMS = ("masked", "where")
RAW_ALPHAS = [(0.3, -0.7), (-2.0, 1.5)]


@pytest.fixture(params=XIELU_FORMS)
def form(request, monkeypatch):
    monkeypatch.setattr(model_module, "_masked_form", lambda x: request.param == "masked")
    return request.param


def special_inputs(dtype: torch.dtype) -> torch.Tensor:
    """XIELU_INPUTS plus what could tell two formulas apart: signed zeros, eps exactly and its
    neighbours, subnormals, the largest finite values, +-inf and NaN."""
    info = torch.finfo(dtype)
    eps = torch.tensor(-1e-6, dtype=dtype)
    tiny, huge = [info.tiny, info.tiny / 4], [info.max, 1e30, math.inf]  # tiny / 4: subnormal
    specials = torch.tensor([0.0, -0.0, *tiny, *huge, math.nan], dtype=dtype)
    specials = torch.cat([specials, -specials[2:-1]])
    near_eps = torch.stack([eps, torch.nextafter(eps, -eps), torch.nextafter(eps, 2 * eps)])
    return torch.cat([XIELU_INPUTS.to(dtype), specials, near_eps])


def assert_same_bits(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal bit for bit, the sign of zero included; NaN matches NaN (payloads may differ)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(got.isnan(), nan)
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    assert torch.equal(got[~nan].view(as_int), expected[~nan].view(as_int))


def raw_alphas(raw: tuple[float, float], dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.full((1,), value, dtype=dtype, requires_grad=True) for value in raw]


@pytest.mark.parametrize("raw", RAW_ALPHAS)
@pytest.mark.parametrize(
    ("dtype", "param_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float64, torch.float64),
        (torch.bfloat16, torch.float32),  # the (1,) alphas take part in type promotion
    ],
)
def test_xielu_fused_forward_is_the_reference_bit_for_bit(form, dtype, param_dtype, raw):
    x = special_inputs(dtype)
    alpha_p, alpha_n = raw_alphas(raw, param_dtype)
    beta, eps = torch.tensor(0.5, dtype=param_dtype), torch.tensor(-1e-6, dtype=param_dtype)
    expected = xielu(x, alpha_p, alpha_n, beta, eps)
    assert_same_bits(xielu_fused(x, alpha_p, alpha_n, beta, eps), expected)
    # Python-float beta and eps are made tensors of x's dtype, as the reference does.
    assert_same_bits(xielu_fused(x, alpha_p, alpha_n), xielu(x, alpha_p, alpha_n))


def xielu_gradients(fn, x, raw, dtype, upstream):
    x = x.detach().clone().requires_grad_(True)
    alpha_p, alpha_n = raw_alphas(raw, dtype)
    beta, eps = torch.tensor(0.5, dtype=dtype), torch.tensor(-1e-6, dtype=dtype)
    out = fn(x, alpha_p, alpha_n, beta, eps)
    return torch.autograd.grad(out, (x, alpha_p, alpha_n), upstream)


@pytest.mark.parametrize("raw", RAW_ALPHAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_xielu_fused_gradients_match_reference_autograd(form, dtype, raw):
    # eps exactly (autograd's torch.minimum splits that tie), its neighbours, zeros and
    # subnormals included; no huge values, whose squares would swamp the alphas' gradients
    # (or overflow them), and no +-inf, where the reference's gradient is NaN (0 * inf in
    # the branch not taken).
    x = special_inputs(dtype)
    x = x[x.abs() <= 100]
    upstream = torch.linspace(-1, 1, len(x), dtype=dtype)
    got = xielu_gradients(xielu_fused, x, raw, dtype, upstream)
    expected = xielu_gradients(xielu, x, raw, dtype, upstream)
    tight = {torch.float32: 1e-6, torch.float64: 1e-13}[dtype]
    for name, g, e in zip(("x", "alpha_p", "alpha_n"), got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape, name
        # The alphas' gradients sum ~800 terms of up to 1e3: relative tolerance only.
        atol = tight if name == "x" else 0.0
        torch.testing.assert_close(g, e, rtol=10 * tight, atol=atol, msg=name)


@pytest.mark.parametrize("raw", RAW_ALPHAS)
def test_xielu_fused_bf16_gradients_are_as_accurate_as_the_reference(form, raw):
    """bf16 rounds every intermediate, differently in each formula: both are held to the
    float64 gradient of the same bf16 inputs, within a few bf16 roundings of the largest."""
    x = XIELU_INPUTS.to(torch.bfloat16)
    upstream = torch.linspace(-1, 1, len(x), dtype=torch.bfloat16)
    raw = tuple(torch.tensor(v, dtype=torch.bfloat16).item() for v in raw)
    truth = xielu_gradients(xielu, x.double(), raw, torch.float64, upstream.double())
    for fn in (xielu_fused, xielu):
        got = xielu_gradients(fn, x, raw, torch.bfloat16, upstream)
        for name, g, t in zip(("x", "alpha_p", "alpha_n"), got, truth, strict=True):
            assert g.dtype == torch.bfloat16, name
            tolerance = 2**-8 * t.abs().max().item()
            torch.testing.assert_close(g.double(), t, rtol=2**-6, atol=tolerance, msg=name)


def test_xielu_fused_gradcheck_float64(form):
    """Finite differences in float64, away from the kinks at 0 and eps (1e-6 apart)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, generator=gen, dtype=torch.float64) * 3
    x = x[(x.abs() > 1e-2)].requires_grad_(True)
    alpha_p, alpha_n = raw_alphas((0.3, -0.7), torch.float64)
    beta = torch.tensor(0.5, dtype=torch.float64)
    eps = torch.tensor(-1e-6, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda x, p, n: xielu_fused(x, p, n, beta, eps), (x, alpha_p, alpha_n)
    )


@pytest.mark.parametrize("eps", [0.0, 0.25, -0.5])
def test_xielu_fused_matches_reference_for_other_eps(form, eps):
    """The recipe's eps is -1e-6; the formulas do not rely on its sign or size."""
    x = XIELU_INPUTS[XIELU_INPUTS.abs() <= 100]
    x = torch.cat([x, torch.tensor([eps, 0.1, 0.2, 0.3])])
    upstream = torch.linspace(-1, 1, len(x))
    alpha_p, alpha_n = raw_alphas((0.3, -0.7), torch.float32)
    assert_same_bits(
        xielu_fused(x, alpha_p, alpha_n, 0.5, eps), xielu(x, alpha_p, alpha_n, 0.5, eps)
    )

    def with_eps(fn):
        return lambda x, p, n, beta, _: fn(x, p, n, beta, torch.tensor(eps))

    got = xielu_gradients(with_eps(xielu_fused), x, (0.3, -0.7), torch.float32, upstream)
    expected = xielu_gradients(with_eps(xielu), x, (0.3, -0.7), torch.float32, upstream)
    for name, g, e in zip(("x", "alpha_p", "alpha_n"), got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6 if name == "x" else 0.0, msg=name)


def test_xielu_fused_frozen_alphas_and_constant_beta():
    x = XIELU_INPUTS.clone().requires_grad_(True)
    alpha_p, alpha_n = torch.full((1,), 0.3), torch.full((1,), -0.7)  # no grad wanted
    (grad,) = torch.autograd.grad(xielu_fused(x, alpha_p, alpha_n).sum(), x)
    (expected,) = torch.autograd.grad(xielu(x, alpha_p, alpha_n).sum(), x)
    torch.testing.assert_close(grad, expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ApertusError, match="beta requires grad"):
        xielu_fused(x, alpha_p, alpha_n, beta=torch.tensor(0.5, requires_grad=True))


def saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves for the backward while fn runs."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def test_xielu_fused_saves_only_its_input():
    act = XIELU()
    x = torch.randn(64, 96, requires_grad=True)
    fused = saved_bytes(lambda: act(x))
    reference = saved_bytes(lambda: xielu(x, act.alpha_p, act.alpha_n, act.beta, act.eps))
    # x, and one-element scalars: the raw and effective alphas, beta, eps.
    assert x.nbytes <= fused <= x.nbytes + 64
    assert reference > 2 * x.nbytes  # the mask, alpha_p * x and the expm1 result besides x


def test_xielu_compiled_matches_eager():
    """torch.compile(fullgraph=True) traces the autograd.Function, backward included (the
    where form); inductor's CPU expm1 is exp() - 1, hence a small absolute tolerance."""
    torch._dynamo.reset()
    act = XIELU()
    with torch.no_grad():
        act.alpha_p.fill_(0.3)
        act.alpha_n.fill_(-0.7)
    x = XIELU_INPUTS.clone().requires_grad_(True)
    upstream = torch.linspace(-1, 1, len(x))
    compiled = torch.compile(act, fullgraph=True)
    grads = {}
    for name, module in (("eager", act), ("compiled", compiled)):
        out = module(x)
        grads[name] = (out, *torch.autograd.grad(out, (x, act.alpha_p, act.alpha_n), upstream))
    for name, c, e in zip(("out", "x", "alpha_p", "alpha_n"), *grads.values(), strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6 if name in ("out", "x") else 0)


# --------------------------------------------------------------------------------------------
# RoPE, masks, one decoder layer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("theta", [500_000.0, 10_000.0, 12_000_000.0])
def test_rope_frequencies_match_transformers(theta):
    cfg = small_config(rope_theta=theta)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config(cfg))
    ours = rope_inverse_frequencies(32, theta, RopeScaling())
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    if theta == 500_000.0:
        # head_dim 32, theta 5e5: frequencies land in all three bands (kept, smoothed, / 8).
        plain = rope_inverse_frequencies(32, theta, None)
        ratio = plain / ours
        assert (ratio == 1).any() and (ratio == 8).any()
        assert ((ratio > 1.01) & (ratio < 7.99)).any()


def test_block_causal_mask_matches_brute_force():
    positions = [
        [0, 1, 2, 0, 1, 0, 1, 2, 3, 0],  # three documents, then a one-token fourth
        [5, 6, 7, 0, 1, 2, 3, 4, 5, 6],  # starts mid-document (continued from a previous row)
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],  # one document
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # ten one-token documents: each sees only itself
    ]
    got = block_causal_mask(torch.tensor(positions))
    assert torch.equal(got, reference_block_causal(positions))
    assert torch.equal(got[3, 0], torch.eye(10, dtype=torch.bool))


@pytest.mark.parametrize("packed", [False, True])
def test_decoder_layer_matches_transformers(packed):
    torch.manual_seed(0)
    cfg = small_config()
    ours = TransformerBlock(cfg)
    randomize_(ours, seed=1)
    config = hf_config(cfg)
    ref = hf.ApertusDecoderLayer(config, layer_idx=0)
    ref.load_state_dict(
        {
            hf_key(f"layers.0.{k}").removeprefix("model.layers.0."): v
            for k, v in ours.state_dict().items()
        },
        strict=True,
    )

    batch, seq_len = 2, 24
    x = torch.randn(batch, seq_len, cfg.dim)
    if packed:
        rows = [list(range(10)) + list(range(14)), list(range(3, 9)) + list(range(18))]
    else:
        rows = [list(range(seq_len))] * batch
    positions = torch.tensor(rows)
    mask = reference_block_causal(rows)

    cos, sin = hf.ApertusRotaryEmbedding(config)(x, positions)
    expected = ref(
        x, attention_mask=additive(mask), position_ids=positions, position_embeddings=(cos, sin)
    )
    ours_cos, ours_sin = ApertusModel(cfg).rope(positions, x.dtype)
    got = ours(x, ours_cos, ours_sin, block_causal_mask(positions) if packed else None)
    assert expected.abs().max() > 1.0  # the comparison is at a meaningful scale
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Whole model
# --------------------------------------------------------------------------------------------


def paired_models(cfg: ApertusModel.Config, rope_type: str = "llama3"):
    torch.manual_seed(0)
    ours = cfg.build()
    randomize_(ours, seed=2)
    ref = hf.ApertusForCausalLM(hf_config(cfg, rope_type)).eval()
    ref.load_state_dict(to_hf_state_dict(ours), strict=True)
    return ours.eval(), ref


def test_whole_model_matches_transformers():
    cfg = small_config(n_layers=3)
    ours, ref = paired_models(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (3, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = ours(tokens)
        expected = ref(tokens, use_cache=False).logits
    assert expected.abs().max() > 1.0
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_whole_model_comparison_notices_wrong_rope_scaling():
    """The comparison above is sensitive: the same weights under plain (unscaled) RoPE differ."""
    cfg = small_config(n_layers=3)
    ours, ref = paired_models(cfg, rope_type="default")
    tokens = torch.randint(0, cfg.vocab_size, (2, 128), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        difference = (ours(tokens) - ref(tokens, use_cache=False).logits).abs().max()
    assert difference > 1e-2


def test_packed_documents_match_transformers_packed_positions():
    """transformers turns restarting position_ids into a block-causal mask of its own."""
    cfg = small_config()
    ours, ref = paired_models(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 30), generator=torch.Generator().manual_seed(5))
    positions = torch.tensor(
        [list(range(12)) + list(range(18)), list(range(7)) + list(range(9)) + list(range(14))]
    )
    with torch.no_grad():
        got = ours(tokens, positions)
        expected = ref(tokens, position_ids=positions, use_cache=False).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_second_document_in_a_pack_equals_running_it_alone(backend):
    cfg = small_config(attn_backend=backend)
    torch.manual_seed(0)
    model = cfg.build().eval()
    randomize_(model, seed=6)
    gen = torch.Generator().manual_seed(7)
    doc_a = torch.randint(0, cfg.vocab_size, (1, 11), generator=gen)
    doc_b = torch.randint(0, cfg.vocab_size, (1, 17), generator=gen)
    packed = torch.cat([doc_a, doc_b], dim=1)
    positions = torch.cat([torch.arange(11), torch.arange(17)])[None]
    with torch.no_grad():
        together = model(packed, positions)
        alone_a, alone_b = model(doc_a), model(doc_b)
        unmasked = model(packed)  # one document: b's tokens would see a's
    torch.testing.assert_close(together[:, :11], alone_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(together[:, 11:], alone_b, rtol=1e-5, atol=1e-5)
    assert (unmasked[:, 11:] - alone_b).abs().max() > 1e-2


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_and_sdpa_backends_agree():
    positions = torch.tensor([list(range(9)) + list(range(7)), [4, 5, 6, *range(13)]])
    tokens = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(8))
    outputs = []
    for backend in ("sdpa", "flex"):
        torch.manual_seed(0)
        model = small_config(attn_backend=backend).build()
        randomize_(model, seed=9)
        with torch.no_grad():
            outputs.append(model(tokens, positions))
            outputs.append(model(tokens))
    torch.testing.assert_close(outputs[0], outputs[2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outputs[1], outputs[3], rtol=1e-5, atol=1e-5)
    # FlexAttention has no CPU backward: training with it on CPU is refused with a clear error.
    with pytest.raises(ApertusError, match="attn_backend='sdpa' on CPU"):
        model(tokens, positions)


def test_every_parameter_gets_a_gradient():
    model = flavor("debug").build()
    tokens = torch.randint(0, 256, (2, 16))
    positions = torch.tensor([list(range(16)), list(range(6)) + list(range(10))])
    model(tokens, positions).logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_skip_lm_head_returns_normalised_hidden_states():
    model = flavor("debug").build()
    tokens = torch.randint(0, 256, (1, 8))
    logits = model(tokens)
    model._skip_lm_head = True
    hidden = model(tokens)
    assert hidden.shape == (1, 8, 64)
    torch.testing.assert_close(model.lm_head(hidden), logits)


# --------------------------------------------------------------------------------------------
# Init, structure, meta device
# --------------------------------------------------------------------------------------------


def test_init_statistics_follow_the_recipe():
    torch.manual_seed(0)
    cfg = flavor("tiny")
    model = cfg.build()
    std, out_std = 0.008944, 0.008944 / math.sqrt(2 * cfg.n_layers)
    scaled = ("attention.wo.weight", "feed_forward.w_down.weight")
    for name, p in model.named_parameters():
        if p.dim() == 2:
            target = out_std if name.endswith(scaled) else std
            assert p.std().item() == pytest.approx(target, rel=0.03), name
            assert abs(p.mean().item()) < target * 0.02, name
        elif name.endswith("alpha_p") or name.endswith("alpha_n"):
            continue
        else:
            assert torch.equal(p, torch.ones_like(p)), name
    for name in ("tok_embeddings.weight", "lm_head.weight"):
        assert model.get_parameter(name).std().item() == pytest.approx(std, rel=0.01)
    act = model.layers["2"].feed_forward.act
    assert torch.nn.functional.softplus(act.alpha_p).item() == pytest.approx(0.8, abs=1e-6)
    assert (act.beta + torch.nn.functional.softplus(act.alpha_n)).item() == pytest.approx(0.8)


def test_no_bias_and_untied_embeddings():
    model = flavor("debug").build()
    assert not any("bias" in name for name, _ in model.named_parameters())
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            assert module.bias is None
    assert model.lm_head.weight.data_ptr() != model.tok_embeddings.weight.data_ptr()
    assert not torch.equal(model.lm_head.weight, model.tok_embeddings.weight)
    model.verify_module_protocol()  # what torchtitan's trainer checks after building


def test_meta_build_then_init_weights_materialises_the_same_model():
    cfg = flavor("debug")
    with torch.device("meta"):
        meta_model = cfg.build()
    assert all(p.is_meta for p in meta_model.parameters())
    assert all(b.is_meta for b in meta_model.buffers())
    meta_model.to_empty(device="cpu")
    torch.manual_seed(11)
    meta_model.init_weights(buffer_device=None)

    direct = cfg.build()
    torch.manual_seed(11)
    direct.init_weights()
    meta_state, direct_state = meta_model.state_dict(), direct.state_dict()
    assert meta_state.keys() == direct_state.keys()
    for key in direct_state:
        assert torch.equal(meta_state[key], direct_state[key]), key
    assert torch.equal(meta_model.rope.inv_freq, direct.rope.inv_freq)
    act = meta_model.layers["1"].feed_forward.act
    assert act.beta.item() == 0.5 and act.eps.item() == pytest.approx(-1e-6)
    tokens = torch.randint(0, 256, (1, 8))
    torch.testing.assert_close(meta_model(tokens), direct(tokens), rtol=0, atol=0)


def test_hf_key_mapping_covers_the_transformers_state_dict_exactly():
    cfg = small_config(n_layers=3)
    ours = cfg.build()
    ref = hf.ApertusForCausalLM(hf_config(cfg))
    mapped = [hf_key(k) for k in ours.state_dict()]
    assert len(set(mapped)) == len(mapped)
    assert set(mapped) == set(ref.state_dict())
    assert [apertus_key(k) for k in mapped] == list(ours.state_dict())
    assert hf_key("layers.12.feed_forward.act.eps") == "model.layers.12.mlp.act_fn.eps"
    assert apertus_key("model.layers.7.attention_layernorm.weight") == (
        "layers.7.attention_norm.weight"
    )
    with pytest.raises(ApertusError, match=r"rope\.inv_freq"):
        hf_key("rope.inv_freq")
    with pytest.raises(ApertusError, match=r"model\.layers\.x"):
        apertus_key("model.layers.x.mlp.up_proj.weight")


# --------------------------------------------------------------------------------------------
# Validation, flavors, torchtitan hooks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (dict(dim=64, n_heads=5, n_kv_heads=5, head_dim=None), ["n_heads=5", "dim=64"]),
        (dict(n_heads=4, n_kv_heads=3), ["n_kv_heads=3", "n_heads=4"]),
        (dict(head_dim=31), ["head_dim=31", "even"]),
        (dict(n_layers=0), ["n_layers", "0"]),
        (dict(vocab_size=True), ["vocab_size", "True"]),
        (dict(ffn_hidden=96.0), ["ffn_hidden", "96.0"]),
        (dict(init_std=-0.01), ["init_std", "-0.01"]),
        (dict(norm_eps=0.0), ["norm_eps"]),
        (dict(attn_backend="xla"), ["attn_backend", "xla"]),
        (
            dict(rope_scaling=RopeScaling(low_freq_factor=4.0, high_freq_factor=4.0)),
            ["high_freq_factor", "low_freq_factor"],
        ),
        (dict(rope_scaling={"factor": 8}), ["rope_scaling"]),
    ],
)
def test_bad_shapes_are_rejected_naming_the_field(overrides, fragments):
    with pytest.raises(ApertusError) as info:
        small_config(**overrides)
    for fragment in fragments:
        assert fragment in str(info.value)
    with pytest.raises(ApertusError):
        dataclasses.replace(small_config(), **overrides)


def test_head_dim_is_derived_when_not_given():
    cfg = small_config(head_dim=None, n_heads=8, n_kv_heads=8)
    assert cfg.attention_head_dim == 8
    model = cfg.build()
    assert model.layers["0"].attention.wq.weight.shape == (64, 64)
    assert sum(p.numel() for p in model.parameters()) == num_params(cfg)


def test_bad_forward_inputs_are_rejected():
    model = flavor("debug").build()
    tokens = torch.randint(0, 256, (2, 8))
    with pytest.raises(ApertusError, match="positions must have the shape"):
        model(tokens, torch.arange(8))
    with pytest.raises(ApertusError, match="integers"):
        model(tokens, torch.zeros(2, 8))
    with pytest.raises(ApertusError, match="max_seq_len=128"):
        model(torch.zeros(1, 129, dtype=torch.long))
    with pytest.raises(ApertusError, match=r"\[batch, seq_len\]"):
        model(torch.zeros(8, dtype=torch.long))


def test_8b_and_70b_flavors_carry_the_recipe_numbers():
    shape = ("n_layers", "dim", "ffn_hidden", "n_heads", "n_kv_heads", "head_dim", "vocab_size")
    eight, seventy = FLAVORS["8b"], FLAVORS["70b"]
    assert tuple(getattr(eight, f) for f in shape) == (32, 4096, 21504, 32, 8, 128, 131072)
    assert tuple(getattr(seventy, f) for f in shape) == (80, 8192, 43008, 64, 8, 128, 131072)
    for cfg in (eight, seventy):
        assert cfg.rope_theta == 500_000.0
        assert cfg.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
        assert cfg.norm_eps == 1e-5 and cfg.init_std == 0.008944
    assert num_params(eight) / 1e9 == pytest.approx(8.05, abs=0.005)
    assert num_params(seventy) / 1e9 == pytest.approx(70.6, abs=0.05)
    assert num_params(FLAVORS["1b"]) / 1e9 == pytest.approx(1.275, abs=0.001)


@pytest.mark.parametrize("name", ["debug", "tiny"])
def test_num_params_equals_the_built_model(name):
    model = flavor(name).build()
    assert sum(p.numel() for p in model.parameters()) == num_params(flavor(name))
    nparams, flops = model.config.get_nparams_and_flops(model, seq_len=64)
    assert nparams == num_params(flavor(name))
    assert flops > 6 * (nparams - 2 * model.config.vocab_size * model.config.dim)


def test_flavor_overrides_and_errors():
    cfg = flavor("8b", rope_theta=1_000_000.0, max_seq_len=8192)
    assert (cfg.rope_theta, cfg.max_seq_len, cfg.dim) == (1_000_000.0, 8192, 4096)
    assert FLAVORS["8b"].rope_theta == 500_000.0  # the registry entry is untouched
    cfg.n_layers = 1
    assert FLAVORS["8b"].n_layers == 32
    with pytest.raises(ApertusError, match=r"unknown model flavor '7b'.*8b, 70b"):
        flavor("7b")
    with pytest.raises(ApertusError, match="d_model"):
        flavor("tiny", d_model=512)
    with pytest.raises(ApertusError, match="n_kv_heads=5"):
        flavor("8b", n_kv_heads=5)


def test_update_from_config_checks_trainer_settings():
    cfg = flavor("debug")

    def trainer(seq_len, tp=1):
        return SimpleNamespace(
            training=SimpleNamespace(seq_len=seq_len),
            parallelism=SimpleNamespace(tensor_parallel_degree=tp),
        )

    cfg.update_from_config(config=trainer(128, tp=2))
    with pytest.raises(ApertusError, match=r"seq_len=256 .*max_seq_len=128"):
        cfg.update_from_config(config=trainer(256))
    with pytest.raises(ApertusError, match="tensor_parallel_degree=4 does not divide n_kv_heads"):
        cfg.update_from_config(config=trainer(128, tp=4))
