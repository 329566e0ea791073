"""The one reading of a ``device`` setting: "auto" follows the GPU, a GPU that is not there is a
clear error, and apertus.core stays importable without torch."""

from __future__ import annotations

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
