r"""The QRPO sampler's vLLM engine against its transformers engine on one exported folder: greedy
completions of the same prompts, tokens/s and agreement, measured side by side in one run.

    python -m bench.vllm_sampler --folder EXPORT [--prompts 64] [--new-tokens 64] [--quick]

Both engines are `apertus.posttrain.sampling`'s: `VllmSampler` (one request per prompt, token
ids in and out) and `generate_ids` (transformers ``generate``, batches of 16, left-padded), both
in bfloat16 on the GPU, greedy, stopping at the folder's end token. Prompts: the first 32 tokens of
the held-out documents next to the folder (`--heldout`, default: the default run's). Needs vllm
and a GPU (`bench.gpu` skips it otherwise).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from bench.common import Ratio, main

ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--folder", type=Path, required=True, help="a Hugging Face export")
    parser.add_argument("--heldout", type=Path, default=ROOT / "results/default/tokenize/heldout")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)


def measure(args: argparse.Namespace) -> list[Ratio]:
    from apertus.export.verify import heldout_documents
    from apertus.posttrain.sampling import VllmSampler, generate_ids, load_causal_lm
    from apertus.tokenize.tokenizer import load_tokenizer

    if args.quick:
        args.prompts, args.new_tokens = 8, 16
    tokenizer = load_tokenizer(str(args.folder))
    prompts = []
    for _, text in heldout_documents(args.heldout):
        ids = tokenizer.encode(text, add_special_tokens=False)[:32]
        if len(ids) == 32:
            prompts.append(ids)
        if len(prompts) == args.prompts:
            break
    eos = tokenizer.eos_token_id
    stops = {eos: "eos"}
    seeds = [0] * len(prompts)
    timed = {}
    model = load_causal_lm(args.folder, dtype="bfloat16", device="cuda")
    start = time.perf_counter()
    theirs = generate_ids(model, prompts, seeds, temperature=0.0, max_new_tokens=args.new_tokens,
                          batch_size=16, stops=stops, pad_id=eos)  # fmt: skip
    torch.cuda.synchronize()
    timed["transformers"] = time.perf_counter() - start
    del model
    sampler = VllmSampler.from_folder(args.folder, "bfloat16")
    start = time.perf_counter()
    ours = sampler.generate(prompts, seeds, temperature=0.0, max_new_tokens=args.new_tokens,
                            stops=stops)  # fmt: skip
    timed["vllm"] = time.perf_counter() - start
    same = sum(a[0] == b[0] for a, b in zip(ours, theirs, strict=True))
    tokens = {name: sum(len(ids) for ids, _ in out) for name, out in (("vllm", ours),
              ("transformers", theirs))}  # fmt: skip
    return [
        Ratio("vLLM sampler tokens/s", tokens["vllm"] / timed["vllm"],
              tokens["transformers"] / timed["transformers"], "tokens/s", "transformers generate",
              lower_is_better=False,
              note=f"{len(prompts)} prompts x {args.new_tokens} greedy tokens, bf16 on "
              f"{torch.cuda.get_device_name(0)}; identical completions: {same} of "
              f"{len(prompts)}"),
    ]  # fmt: skip


if __name__ == "__main__":
    main(add_arguments, measure, __doc__)
