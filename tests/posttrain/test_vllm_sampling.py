"""The vLLM sampling path (posttrain.qrpo_data.engine: vllm) on CPU, without vLLM: a stand-in
engine records the requests it is given and answers in the shape of vLLM's RequestOutput
(``request_id``, ``prompt_token_ids``, ``outputs[0].token_ids``, ``finish_reason``,
``stop_reason``). What this checks is the request construction and the output parsing; the GPU
run itself is untested.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from apertus.core import ApertusError
from apertus.posttrain import sampling
from apertus.posttrain.sampling import (
    VllmSampler,
    generate_answers,
    load_prompts,
    parse_vllm_output,
    sample_seed,
)
from tests.posttrain.test_qrpo_shards import workspace  # noqa: F401  (a fixture)

STOPS = {9: "assistant_end", 2: "eos"}


@dataclass
class StandInParams:
    """vllm.SamplingParams as a record of its keyword arguments."""

    kwargs: dict[str, Any] = field(default_factory=dict)

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def request_output(i: int, prompt: list[int], ids: list[int], stop_reason=None, finish="stop"):
    completion = SimpleNamespace(
        index=0, text="", token_ids=tuple(ids), finish_reason=finish, stop_reason=stop_reason
    )
    return SimpleNamespace(request_id=str(i), prompt_token_ids=prompt, outputs=[completion])


class StandInLLM:
    """Answers request i with `replies[i % len(replies)]`: (token ids, stop_reason, finish)."""

    def __init__(self, replies) -> None:
        self.replies, self.calls = replies, []

    def generate(self, prompts, params):
        self.calls.append((prompts, params))
        return [
            request_output(i, p["prompt_token_ids"], *self.replies[i % len(self.replies)])
            for i, p in enumerate(prompts)
        ]


def test_each_sample_is_one_request_with_its_own_seed():
    llm = StandInLLM([([5, 6, 9], 9, "stop")])
    prompts = [[1, 4, 4], [1, 7]]
    seeds = [11, 12]
    VllmSampler(llm, StandInParams).generate(
        prompts, seeds, temperature=0.7, max_new_tokens=5, stops=STOPS
    )
    ((sent, params),) = llm.calls
    assert sent == [{"prompt_token_ids": [1, 4, 4]}, {"prompt_token_ids": [1, 7]}]
    assert [p.kwargs for p in params] == [
        {
            "n": 1,
            "temperature": 0.7,
            "top_p": 1.0,
            "max_tokens": 5,
            "seed": seed,
            "stop_token_ids": [9, 2],
            "ignore_eos": True,
        }
        for seed in seeds
    ]
    # Greedy answers take no seed.
    VllmSampler(llm, StandInParams).generate(
        prompts, seeds, temperature=0.0, max_new_tokens=5, stops=STOPS
    )
    assert [p.kwargs["seed"] for p in llm.calls[-1][1]] == [None, None]


@pytest.mark.parametrize(
    ("ids", "stop_reason", "finish", "want"),
    [
        ([5, 6, 9], 9, "stop", ([5, 6, 9], "assistant_end")),  # vLLM v1: the stop id kept
        ([5, 6], 9, "stop", ([5, 6, 9], "assistant_end")),  # older: only in stop_reason
        ([5, 2], 2, "stop", ([5, 2], "eos")),
        ([5, 6, 7, 8, 3], None, "length", ([5, 6, 7, 8, 3], "length")),
        ([5, 9, 6], None, "stop", ([5, 9], "assistant_end")),  # cut at the first stop id
    ],
)
def test_outputs_are_parsed_as_the_transformers_path_gives_them(ids, stop_reason, finish, want):
    out = request_output(0, [1, 4], ids, stop_reason, finish)
    assert parse_vllm_output(out, [1, 4], STOPS, max_new_tokens=5) == want


def test_an_output_for_another_prompt_or_a_missing_one_is_refused():
    with pytest.raises(ApertusError, match="another prompt"):
        parse_vllm_output(request_output(3, [1, 5], [9], 9), [1, 4], STOPS, 5)
    empty = SimpleNamespace(request_id="0", prompt_token_ids=[1], outputs=[])
    with pytest.raises(ApertusError, match="no completion"):
        parse_vllm_output(empty, [1], STOPS, 5)

    class Short(StandInLLM):
        def generate(self, prompts, params):
            return super().generate(prompts, params)[:-1]

    with pytest.raises(ApertusError, match="answered 1 of 2"):
        VllmSampler(Short([([9], 9, "stop")]), StandInParams).generate(
            [[1], [2]], [0, 1], temperature=1.0, max_new_tokens=3, stops=STOPS
        )


def test_engine_vllm_samples_through_the_engine(workspace, monkeypatch):  # noqa: F811
    """The whole sampler with engine vllm: prompts rendered with the chat template, one request
    per (prompt, sample) seeded by sample_seed, the answers decoded like transformers'."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(workspace / "sft")
    end = tok.convert_tokens_to_ids("<|assistant_end|>")
    fox = tok.encode("the fox", add_special_tokens=False)
    # An answer that ends its turn, and one cut at max_new_tokens.
    llm = StandInLLM([([*fox, end], end, "stop"), ([*fox, fox[0]], None, "length")])
    made = []

    def from_folder(folder, dtype):
        made.append((folder, dtype))
        return VllmSampler(llm, StandInParams)

    monkeypatch.setattr(sampling, "use_vllm", lambda engine: engine == "vllm")
    monkeypatch.setattr(VllmSampler, "from_folder", staticmethod(from_folder))
    prompts = load_prompts(workspace / "prompts.jsonl")[:2]
    samples = generate_answers(
        workspace / "sft",
        prompts,
        n=2,
        temperature=1.0,
        max_new_tokens=len(fox) + 1,
        seed=3,
        batch_size=4,
        engine="vllm",
    )
    assert made == [(workspace / "sft", "float32")]
    ((sent, params),) = llm.calls
    assert [p.kwargs["seed"] for p in params] == [
        sample_seed(3, p.id, j) for p in prompts for j in range(2)
    ]
    assert sent[0]["prompt_token_ids"] == samples[0].prompt_ids
    assert tok.decode(sent[0]["prompt_token_ids"]).endswith("<|assistant_start|>")
    assert [(s.prompt_id, s.sample_index, s.finish_reason) for s in samples] == [
        ("en-1", 0, "assistant_end"),
        ("en-1", 1, "length"),
        ("de-1", 0, "assistant_end"),
        ("de-1", 1, "length"),
    ]
    assert samples[0].completion_ids == [*fox, end] and samples[0].text == "the fox"
    assert json.dumps(params[0].kwargs["stop_token_ids"])  # plain ids, as vLLM takes them
