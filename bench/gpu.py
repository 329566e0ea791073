r"""Everything a first GPU should measure, in one command (issue 43): the presets' layer shapes
against torchtitan's llama3, document-masked FlexAttention against dense SDPA, xIELU against
SwiGLU, AdEMAMix against AdamW, the tiny default trained in bf16 on the GPU against its CPU fp32
curve (exported and loaded), and the vLLM sampler; then a dated section in bench/RESULTS.md with
the device named.

    python -m bench.gpu [--quick] [--results-md bench/RESULTS.md] [--logs DIR] [--only NAME,...]

Each part is a benchmark of this folder in a fresh process (`python -m bench.<module> ...`, the
arguments listed in `PARTS`), one after the other, each under a time limit; the whole takes
about 8 minutes on one H100/H200. A part that needs what the machine lacks (a GPU, vllm) is
skipped and the section says so; on a machine without a GPU the CPU-capable parts run at CPU
sizes. A part that fails is reported with the end of its log and makes the exit status 1; the
section is written either way. `--quick` runs smoke sizes (their figures are not for quoting).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.__main__ import run_one
from bench.common import Ratio, format_table, machine

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
# Where the precision part trains and exports; the vLLM part samples from that export.
WORK = ROOT / "results" / "bench-gpu"
CPU_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Part:
    name: str
    module: str
    gpu_args: tuple[str, ...]
    cpu_args: tuple[str, ...] | None  # None: GPU only
    timeout_s: float  # on the GPU; on 2 CPU cores `CPU_TIMEOUT_S`
    needs_vllm: bool = False


LAYERS = ("--device", "cuda", "--dtype", "bfloat16", "--compile", "--fsdp", "--apart",
          "--attention", "flex", "--seq-len", "4096", "--batch", "1", "--steps", "5")  # fmt: skip
PARTS = (
    Part("8B layers vs llama3 (MFU)", "train_step", (*LAYERS, "--flavor", "8b", "--layers", "4"),
         None, 150),
    Part("70B layers vs llama3 (MFU)", "train_step", (*LAYERS, "--flavor", "70b", "--layers", "2"),
         None, 150),
    Part("document-masked attention", "attention", ("--device", "cuda"), None, 60),
    Part("xIELU vs SwiGLU", "activation",
         ("--device", "cuda", "--dtype", "bfloat16", "--dim", "4096", "--tokens", "8192"),
         ("--device", "cpu"), 60),
    Part("AdEMAMix vs AdamW", "optimizer",
         ("--device", "cuda", "--params", "500000000", "--threads", "4"), ("--threads", "2"), 60),
    Part("tiny default: bf16 (on the GPU if any) vs fp32 (CPU)", "precision",
         ("--device", "cuda", "--steps", "200", "--threads", "15", "--out", str(WORK)),
         ("--device", "cpu", "--steps", "200", "--out", str(WORK)), 420),
    Part("vLLM sampler", "vllm_sampler", ("--folder", str(WORK / "bf16-200" / "export-bf16")),
         None, 120, needs_vllm=True),
)  # fmt: skip


def skip_reason(part: Part, gpu: bool) -> str | None:
    if part.cpu_args is None and not gpu:
        return "no GPU"
    if part.needs_vllm and importlib.util.find_spec("vllm") is None:
        return "vllm is not installed"
    return None


def section(rows: list[Ratio], skipped: list[str], failed: list[str], quick: bool) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"## bench.gpu, {today}: {machine()}",
        "",
        "`python -m bench.gpu --quick` (smoke sizes: not figures to quote)"
        if quick
        else "`python -m bench.gpu`",
        "",
        "```",
        format_table(rows) if rows else "(no part ran)",
        "```",
    ]
    if skipped:
        lines += ["", "Skipped: " + "; ".join(skipped) + "."]
    if failed:
        lines += ["", "Failed: " + "; ".join(failed) + " (their logs: `--logs DIR`)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu",
        description=__doc__.strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smoke sizes")
    parser.add_argument("--results-md", type=Path, default=RESULTS_MD, help="appended to")
    parser.add_argument("--logs", type=Path, help="keep each part's output here")
    parser.add_argument("--only", help="comma-separated part modules (e.g. attention,optimizer)")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    chosen = [p for p in PARTS if not args.only or p.module in args.only.split(",")]
    rows: list[Ratio] = []
    skipped: list[str] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="apertus-bench-gpu-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for i, part in enumerate(chosen, 1):
            reason = skip_reason(part, gpu)
            if reason:
                print(f"[{i}/{len(chosen)}] {part.name}: skipped ({reason})", flush=True)
                skipped.append(f"{part.name} ({reason})")
                continue
            extra = part.gpu_args if gpu else part.cpu_args
            print(f"[{i}/{len(chosen)}] {part.name} ...", end=" ", flush=True)
            label = f"{i}-{part.module}"
            ratios, seconds, error = run_one(
                part.module,
                args.quick,
                logs,
                extra,
                label=label,
                timeout=part.timeout_s if gpu else CPU_TIMEOUT_S,
            )
            print(f"{'FAILED' if error else 'done'} in {seconds:.0f} s", flush=True)
            rows += ratios
            if error:
                failed.append(part.name)
                print(error, file=sys.stderr)
    text = section(rows, skipped, failed, args.quick)
    print("\n" + text)
    with args.results_md.open("a") as out:
        out.write("\n" + text)
    print(f"appended to {args.results_md}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
