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
from apertus.model.config_registry import FLAVORS, flavor, num_params
from apertus.model.model import (
    XIELU,
    ApertusModel,
    RopeScaling,
    TransformerBlock,
    apertus_key,
    block_causal_mask,
    hf_key,
    rope_inverse_frequencies,
    xielu,
)

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
