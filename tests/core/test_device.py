"""The one reading of a ``device`` setting: "auto" follows the GPU, a GPU that is not there is a
clear error, and apertus.core stays importable without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from apertus.core import ApertusError
from apertus.core.device import resolve_device


@pytest.fixture(params=[True, False], ids=["gpu", "no-gpu"])
def gpu(request, monkeypatch):
    """Whether torch sees a GPU, both ways on any machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: request.param)
    return request.param


def test_auto_takes_the_gpu_when_there_is_one(gpu):
    assert resolve_device("auto") == torch.device("cuda" if gpu else "cpu")


@pytest.mark.parametrize("name", ["cpu", "meta", "mps"])
def test_a_device_other_than_cuda_is_taken_as_named(gpu, name):
    assert resolve_device(name) == torch.device(name)


@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_is_taken_when_torch_sees_a_gpu(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(name) == torch.device(name)


@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_an_error_naming_the_setting(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ApertusError, match=rf"posttrain\.qrpo\.device is '{name}'.*no CUDA"):
        resolve_device(name, setting="posttrain.qrpo.device")


@pytest.mark.parametrize("name", ["gpu", "CPU", "cuda:x", ""])
def test_a_name_torch_does_not_know_is_an_error_naming_the_setting(name):
    with pytest.raises(ApertusError, match=r"^evaluate\.device is .*not a torch device"):
        resolve_device(name, setting="evaluate.device")


def test_importing_the_module_does_not_import_torch():
    code = "import sys, apertus.core.device; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_model_spreads_over_the_gpus_of_a_job_given_several(monkeypatch):
    """`from_pretrained`'s placement: the whole model on one device, unless the job sees
    several GPUs and names none of them (70B sampling, scoring: resources.*.gpus 4)."""
    import torch

    from apertus.core.device import spread

    assert spread(torch.device("cpu")) == {}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert spread(torch.device("cuda")) == {}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert spread(torch.device("cuda")) == {"device_map": "auto"}
    assert spread(torch.device("cuda:1")) == {}  # a device named by its index is that one


def test_load_pretrained_gives_an_eval_mode_model_on_the_device(tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from apertus.core.device import load_pretrained

    config = LlamaConfig(
        vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    model = load_pretrained(
        LlamaForCausalLM, str(tmp_path), dtype=torch.float32, device=torch.device("cpu")
    )
    assert not model.training and next(model.parameters()).device == torch.device("cpu")


BF16_MATMULS = r"""
import json, sys, torch
from apertus.core import device
torch.manual_seed(0)
bf = torch.bfloat16
a, b, c = torch.randn(33, 64).to(bf), torch.randn(64, 17).to(bf), torch.randn(17).to(bf)
x, y, z = torch.randn(3, 9, 64).to(bf), torch.randn(3, 64, 5).to(bf), torch.randn(3, 9, 5).to(bf)
f32 = torch.randn(8, 8), torch.randn(8, 8)
def products():
    out = torch.empty(0, dtype=bf)
    lin = torch.nn.Linear(64, 17, bias=False).to(bf)
    with torch.no_grad():
        lin.weight.copy_(b.t())
    w = a.clone().requires_grad_()
    lin(w).float().square().sum().backward()
    return {"mm": a @ b, "mm.out": torch.mm(a, b, out=out),
            "addmm": torch.addmm(c, a, b, beta=0.5, alpha=2.0), "bmm": torch.bmm(x, y),
            "baddbmm": torch.baddbmm(z, x, y, alpha=0.25), "grad": w.grad, "fp32": f32[0] @ f32[1]}
before = products()
device.cpu_has_bf16 = lambda: False  # as on a CPU without bf16 units
installed = [device.bf16_matmuls_in_fp32("cpu", bf), device.bf16_matmuls_in_fp32("cpu", bf),
             device.bf16_matmuls_in_fp32("cpu", torch.float32),
             device.bf16_matmuls_in_fp32("meta", bf)]
after = products()
compiled = torch.compile(lambda u, v: torch.nn.functional.silu(u @ v))(a, b)
def wide(t):
    return t.double()
expected = {"mm": wide(a) @ wide(b), "mm.out": wide(a) @ wide(b),
            "addmm": 0.5 * wide(c) + 2.0 * (wide(a) @ wide(b)), "bmm": wide(x) @ wide(y),
            "baddbmm": wide(z) + 0.25 * (wide(x) @ wide(y))}
report = {"installed": installed, "dtypes": {k: str(v.dtype) for k, v in after.items()},
          "fp32_same": bool(torch.equal(before["fp32"], after["fp32"])),
          "grad_close": bool(torch.allclose(before["grad"].float(), after["grad"].float(),
                                            rtol=2e-2, atol=1e-2)),
          "compiled_close": bool(torch.allclose(
              compiled.float(), torch.nn.functional.silu(wide(a) @ wide(b)).float(),
              rtol=2e-2, atol=2e-2)),
          "ulps": {}}
for k, exact in expected.items():
    ulp = exact.abs().float().clamp_min(1e-30).log2().floor().exp2() * 2 ** -7
    report["ulps"][k] = (after[k].double() - exact).abs().div(ulp.double()).max().item()
print(json.dumps(report))
"""


def test_bf16_matmuls_on_a_cpu_without_bf16_units_are_fp32_products_rounded_once():
    """With the CPU's bf16 instructions absent (forced, in a process of its own: the kernels are
    the process's), the products of a bf16 model (mm, its out= form that torch.compile calls,
    addmm with beta and alpha, bmm, baddbmm, and autograd's backward) come out in bf16, each
    within one rounding (half a bf16 ulp, plus the fp32 sum's error) of the exact product;
    fp32 products are left to torch's kernels; installing twice, for fp32 or off the CPU is
    a no-op."""
    proc = subprocess.run(
        [sys.executable, "-c", BF16_MATMULS], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["installed"] == [True, True, False, False]
    assert set(report["dtypes"].values()) == {"torch.bfloat16", "torch.float32"}
    assert report["dtypes"]["fp32"] == "torch.float32" and report["fp32_same"]
    assert report["grad_close"] and report["compiled_close"]
    assert all(ulps <= 0.51 for ulps in report["ulps"].values()), report["ulps"]
