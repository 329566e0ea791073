"""AdEMAMix against a literal, element-by-element float64 reference of RECIPE.md §3."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from apertus.train.ademamix import AdEMAMix, ademamix_alpha, ademamix_beta3, param_groups

# Two groups with different options, both warmups shorter than the run so that the warmup and
# the post-warmup branches of alpha(t) and b3(t) are both exercised.
GROUP_OPTIONS = [
    {
        "lr": 1e-2,
        "betas": (0.9, 0.999, 0.9999),
        "alpha": 8.0,
        "t_alpha": 20,
        "t_beta3": 30,
        "eps": 1e-8,
        "weight_decay": 0.1,
    },
    {
        "lr": 3e-3,
        "betas": (0.8, 0.99, 0.995),
        "alpha": 5.0,
        "t_alpha": None,
        "t_beta3": 10,
        "eps": 1e-6,
        "weight_decay": 0.0,
    },
]
SHAPES = [[(4, 5), (7,)], [(3, 2, 2), (1,)]]
GRAD_SCALES = [[1.0, 1e-3], [10.0, 0.5]]
STEPS = 50


def ref_alpha(t, alpha, t_alpha):
    return alpha if t_alpha is None else alpha * min(t / t_alpha, 1)


def ref_beta3(t, b1, b3, t_beta3):
    if t_beta3 is None or t >= t_beta3:
        return b3

    def f(b):
        return math.log(0.5) / math.log(b) - 1

    f_t = (1 - t / t_beta3) * f(b1) + (t / t_beta3) * f(b3)
    return 0.5 ** (1 / (f_t + 1))


class ReferenceAdEMAMix:
    """RECIPE.md §3 line by line, on Python floats, one element at a time."""

    def __init__(self, groups):
        # groups: list of (options, list of flat parameter lists)
        self.groups = []
        for opts, params in groups:
            states = []
            for p in params:
                zeros = [0.0] * len(p)
                states.append({"p": list(p), "m1": zeros, "m2": zeros[:], "v": zeros[:], "t": 0})
            self.groups.append((opts, states))

    def step(self, grads):
        # grads: per group, per parameter, a flat list or None (skipped, step does not advance)
        for (opts, states), group_grads in zip(self.groups, grads, strict=True):
            b1, b2, b3 = opts["betas"]
            lr, eps, wd = opts["lr"], opts["eps"], opts["weight_decay"]
            for st, g in zip(states, group_grads, strict=True):
                if g is None:
                    continue
                st["t"] += 1
                t = st["t"]
                a_t = ref_alpha(t, opts["alpha"], opts["t_alpha"])
                b3_t = ref_beta3(t, b1, b3, opts["t_beta3"])
                for i, gi in enumerate(g):
                    st["m1"][i] = b1 * st["m1"][i] + (1 - b1) * gi
                    st["m2"][i] = b3_t * st["m2"][i] + (1 - b3_t) * gi
                    st["v"][i] = b2 * st["v"][i] + (1 - b2) * gi * gi
                    u = (st["m1"][i] / (1 - b1**t) + a_t * st["m2"][i]) / (
                        math.sqrt(st["v"][i]) / math.sqrt(1 - b2**t) + eps
                    )
                    st["p"][i] = st["p"][i] - lr * (u + wd * st["p"][i])


def make_params(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        [torch.randn(shape, generator=gen, dtype=torch.float64) for shape in shapes]
        for shapes in SHAPES
    ]


def make_grads(step, gen):
    grads = []
    for gi, shapes in enumerate(SHAPES):
        row = []
        for pi, shape in enumerate(shapes):
            g = torch.randn(shape, generator=gen, dtype=torch.float64) * GRAD_SCALES[gi][pi]
            # The second parameter of the first group misses some steps, so its step count lags
            # and the foreach path has to bucket parameters with different t.
            row.append(None if (gi == 0 and pi == 1 and step % 7 == 3) else g)
        grads.append(row)
    return grads


def build_optimizer(params, foreach):
    groups = [
        {"params": [p.clone().requires_grad_(True) for p in ps], **opts}
        for ps, opts in zip(params, GROUP_OPTIONS, strict=True)
    ]
    # The constructor defaults must not leak into groups that set their own options.
    return AdEMAMix(groups, lr=123.0, alpha=99.0, weight_decay=7.0, foreach=foreach)


def set_grads(opt, grads):
    for group, group_grads in zip(opt.param_groups, grads, strict=True):
        for p, g in zip(group["params"], group_grads, strict=True):
            p.grad = None if g is None else g.clone()


def assert_rel_close(actual: torch.Tensor, expected: list[float], what: str):
    expected_t = torch.tensor(expected, dtype=torch.float64)
    actual_flat = actual.detach().reshape(-1)
    scale = expected_t.abs().max().clamp_min(1e-300)
    rel = ((actual_flat - expected_t).abs().max() / scale).item()
    assert rel <= 1e-10, f"{what}: relative difference {rel:.3e}"


@pytest.mark.parametrize("foreach", [True, False])
def test_matches_literal_reference_step_for_step(foreach):
    params = make_params()
    opt = build_optimizer(params, foreach)
    ref = ReferenceAdEMAMix(
        [
            (opts, [p.reshape(-1).tolist() for p in ps])
            for ps, opts in zip(params, GROUP_OPTIONS, strict=True)
        ]
    )
    gen = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        grads = make_grads(step, gen)
        set_grads(opt, grads)
        opt.step()
        ref.step([[None if g is None else g.reshape(-1).tolist() for g in row] for row in grads])
        for gi, (group, (_, states)) in enumerate(zip(opt.param_groups, ref.groups, strict=True)):
            for pi, (p, st) in enumerate(zip(group["params"], states, strict=True)):
                where = f"step {step} group {gi} param {pi}"
                assert_rel_close(p, st["p"], f"{where} param")
                state = opt.state[p]
                assert int(state["step"].item()) == st["t"], where
                for key in ("m1", "m2", "v"):
                    assert_rel_close(state[key], st[key], f"{where} {key}")
    # The skipped parameter really lagged behind (otherwise the bucketing was not exercised).
    lagging = opt.state[opt.param_groups[0]["params"][1]]["step"].item()
    assert lagging == STEPS - len([s for s in range(STEPS) if s % 7 == 3])


def test_foreach_and_loop_are_bit_identical():
    params = make_params(seed=5)
    opts = {flag: build_optimizer(params, flag) for flag in (True, False)}
    gen = torch.Generator().manual_seed(6)
    for step in range(20):
        grads = make_grads(step, gen)
        for opt in opts.values():
            set_grads(opt, grads)
            opt.step()
    for ga, gb in zip(opts[True].param_groups, opts[False].param_groups, strict=True):
        for pa, pb in zip(ga["params"], gb["params"], strict=True):
            assert torch.equal(pa, pb)
            for key in ("m1", "m2", "v"):
                assert torch.equal(opts[True].state[pa][key], opts[False].state[pb][key])


@pytest.mark.parametrize("foreach", [True, False])
def test_state_dict_round_trip_continues_identically(foreach):
    params = make_params(seed=2)
    gen = torch.Generator().manual_seed(3)
    opt = build_optimizer(params, foreach)
    for step in range(12):
        set_grads(opt, make_grads(step, gen))
        opt.step()
    saved_state = copy.deepcopy(opt.state_dict())
    saved_params = [[p.detach().clone() for p in g["params"]] for g in opt.param_groups]

    # A fresh optimizer over copies of the parameters, with different constructor options that
    # the loaded state must override.
    resumed = build_optimizer(saved_params, foreach)
    for group in resumed.param_groups:
        group["lr"] = 0.5
    resumed.load_state_dict(saved_state)
    assert [g["lr"] for g in resumed.param_groups] == [o["lr"] for o in GROUP_OPTIONS]

    for step in range(12, 30):
        grads = make_grads(step, gen)
        for o in (opt, resumed):
            set_grads(o, grads)
            o.step()
    for ga, gb in zip(opt.param_groups, resumed.param_groups, strict=True):
        for pa, pb in zip(ga["params"], gb["params"], strict=True):
            assert torch.equal(pa, pb)
            assert opt.state[pa]["step"].item() == resumed.state[pb]["step"].item()
            for key in ("m1", "m2", "v"):
                assert torch.equal(opt.state[pa][key], resumed.state[pb][key])


def test_state_dict_holds_the_recipe_state():
    p = nn.Parameter(torch.ones(3))
    opt = AdEMAMix([p], lr=0.1)
    p.grad = torch.full((3,), 2.0)
    opt.step()
    state = opt.state_dict()["state"][0]
    assert set(state) == {"step", "m1", "m2", "v"}
    assert state["step"].item() == 1
    # After one step: m1 = (1-b1) g, m2 = (1-b3) g (no warmup: b3 = 0.9999), v = (1-b2) g^2.
    torch.testing.assert_close(state["m1"], torch.full((3,), 0.1 * 2.0))
    torch.testing.assert_close(state["m2"], torch.full((3,), 1e-4 * 2.0))
    torch.testing.assert_close(state["v"], torch.full((3,), 1e-3 * 4.0))


def test_first_step_by_hand():
    # t=1, g=2, p=1, b=(0.9, 0.999, 0.9999), alpha=8 without warmup, eps=0, wd=0.1, lr=0.1:
    # m1/(1-b1) = 2, m2 = 2e-4, sqrt(v)/sqrt(1-b2) = 2  ->  u = (2 + 8*2e-4)/2 = 1.0008
    # p = 1 - 0.1*(1.0008 + 0.1*1) = 0.88992
    for foreach in (True, False):
        p = nn.Parameter(torch.ones(2, dtype=torch.float64))
        opt = AdEMAMix([p], lr=0.1, eps=0.0, foreach=foreach)
        p.grad = torch.full((2,), 2.0, dtype=torch.float64)
        opt.step()
        torch.testing.assert_close(p.detach(), torch.full((2,), 0.88992, dtype=torch.float64))


def test_parameters_without_grad_are_left_alone():
    a, b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    opt = AdEMAMix([a, b], lr=0.1)
    a.grad = torch.ones(2)
    opt.step()
    assert torch.equal(b.detach(), torch.ones(2))
    assert b not in opt.state
    assert not torch.equal(a.detach(), torch.ones(2))


def test_alpha_warmup_values():
    assert ademamix_alpha(0, 8.0, 100) == 0.0
    assert ademamix_alpha(50, 8.0, 100) == 4.0
    assert ademamix_alpha(100, 8.0, 100) == 8.0
    assert ademamix_alpha(250, 8.0, 100) == 8.0
    assert ademamix_alpha(1, 8.0, None) == 8.0


def test_beta3_warmup_values():
    t_beta3 = 100_000
    assert ademamix_beta3(0, 0.9, 0.9999, t_beta3) == pytest.approx(0.9, abs=1e-15)
    # Half-lives f(0.9) = 5.578813478960584, f(0.9999) = 6930.125226232651; their mean at T/2 is
    # 3467.852019855806, and 0.5 ** (1 / 3468.852019855806) = 0.99980019962548027 (mpmath).
    assert ademamix_beta3(t_beta3 // 2, 0.9, 0.9999, t_beta3) == pytest.approx(
        0.99980019962548027, abs=1e-15
    )
    # At T/4 the half-life is 1736.7154166673849: 0.5 ** (1 / 1737.7154...) = 0.99960119536860216.
    assert ademamix_beta3(t_beta3 // 4, 0.9, 0.9999, t_beta3) == pytest.approx(
        0.99960119536860216, abs=1e-15
    )
    assert ademamix_beta3(t_beta3, 0.9, 0.9999, t_beta3) == 0.9999
    assert ademamix_beta3(t_beta3 + 7, 0.9, 0.9999, t_beta3) == 0.9999
    assert ademamix_beta3(3, 0.9, 0.9999, None) == 0.9999
    # Just below T the warmup is continuous with beta3.
    assert ademamix_beta3(t_beta3 - 1, 0.9, 0.9999, t_beta3) == pytest.approx(0.9999, abs=1e-8)
    values = [ademamix_beta3(t, 0.9, 0.9999, t_beta3) for t in range(0, t_beta3 + 1, 5000)]
    assert values == sorted(values)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"betas": (0.9, 0.999)}, "betas must be"),
        ({"betas": (0.9, 1.0, 0.9999)}, "beta2 must be in"),
        ({"betas": (0.0, 0.999, 0.9999), "t_beta3": 10}, "beta3 warmup needs"),
        ({"t_alpha": 0}, "t_alpha must be"),
        ({"lr": -1.0}, "lr must be"),
        ({"weight_decay": -0.1}, "weight_decay must be"),
    ],
)
def test_bad_options_are_rejected(kwargs, message):
    options = {"lr": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        AdEMAMix([nn.Parameter(torch.ones(1))], **options)


def test_bad_options_in_a_param_group_name_the_group():
    groups = [{"name": "no_decay", "params": [nn.Parameter(torch.ones(1))], "eps": -1.0}]
    with pytest.raises(ValueError, match="param group 'no_decay': eps must be"):
        AdEMAMix(groups, lr=0.1)


def test_sparse_gradients_are_rejected():
    p = nn.Parameter(torch.ones(3))
    opt = AdEMAMix([p], lr=0.1)
    p.grad = torch.ones(3).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


class XIELU(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha_p = nn.Parameter(torch.ones(1))
        self.alpha_n = nn.Parameter(torch.ones(1))


class TinyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 4)
        self.attention_layernorm = nn.LayerNorm(4)  # weight and bias, both 1-D
        self.up_proj = nn.Linear(4, 8, bias=False)
        self.act_fn = XIELU()
        self.down_proj = nn.Linear(8, 4, bias=True)
        self.frozen = nn.Linear(4, 4, bias=False)
        self.frozen.weight.requires_grad_(False)
        # A 2-D tensor named like an xIELU scalar is still excluded by name.
        self.odd = nn.Module()
        self.odd.alpha_p = nn.Parameter(torch.ones(2, 2))


def test_param_groups_exclude_norms_biases_and_xielu_scalars():
    model = TinyBlock()
    groups = param_groups(model, weight_decay=0.1)
    by_name = {g["name"]: g for g in groups}
    assert set(by_name) == {"decay", "no_decay"}
    assert by_name["decay"]["weight_decay"] == 0.1
    assert by_name["no_decay"]["weight_decay"] == 0.0
    assert by_name["decay"]["param_names"] == [
        "embed_tokens.weight",
        "up_proj.weight",
        "down_proj.weight",
    ]
    assert sorted(by_name["no_decay"]["param_names"]) == sorted(
        [
            "attention_layernorm.weight",
            "attention_layernorm.bias",
            "act_fn.alpha_p",
            "act_fn.alpha_n",
            "down_proj.bias",
            "odd.alpha_p",
        ]
    )
    named = dict(model.named_parameters())
    for group in groups:
        assert [named[n] for n in group["param_names"]] == group["params"]
    assert all(p is not model.frozen.weight for g in groups for p in g["params"])


def test_param_groups_drive_weight_decay_in_the_optimizer():
    model = TinyBlock()
    opt = AdEMAMix(param_groups(model, weight_decay=0.5), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # Zero gradients: the whole update is the decay term, p <- p * (1 - lr*wd).
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    opt.step()
    for name, p in model.named_parameters():
        factor = 0.95 if name in opt.param_groups[0]["param_names"] else 1.0
        torch.testing.assert_close(p.detach(), before[name] * factor)
    assert "param_names" in opt.state_dict()["param_groups"][0]
