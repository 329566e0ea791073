"""Small release inputs built in a tmp run directory: two tiny Apertus exports that transformers
loads, an evaluation table, a memorization result, a reward report, a data funnel and step
manifests in the formats the stages write."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from apertus.core.config import load_config
from apertus.release.bundle import ReleaseInputs
from apertus.release.config import ReleaseConfig
from apertus.tokenize.tokenizer import CHAT_TEMPLATE

SCORE_COLUMNS = [
    "apertus_mc/acc",
    "apertus_mc_de/acc",
    "apertus_ppl/bits_per_byte",
    "apertus_ppl_de/bits_per_byte",
    "memorization/rouge_l@0",
    "memorization/rouge_l@4",
]
# Distinct per checkpoint, so a card that takes the wrong row is caught.
SCORES = {
    "p1": [0.11, 0.12, 3.31, 3.32, 0.01, 0.02],
    "ctxA": [0.21, 0.22, 2.41, None, 0.03, 0.04],
    "sft": [0.31, 0.32, 4.51, 4.52, 0.05, 0.06],
    "qrpo": [0.41, 0.42, 4.61, 4.62, 0.07, 0.08],
}
FUNNEL_STEPS = ["read", "robots", "language", "exact", "written"]
# documents per step per language; "la" is filtered out completely, "und" is no language.
FUNNEL_DOCS = {"de": [50, 41, 41, 37, 37], "rm": [40, 33, 33, 30, 30], "la": [7, 7, 0, 0, 0]}


def _rows(docs: list[int]) -> list[dict]:
    rows = []
    for i, (step, d) in enumerate(zip(FUNNEL_STEPS, docs, strict=True)):
        row = {"step": step, "documents": d, "characters": d * 1000}
        if i:
            row["removed_documents"] = docs[i - 1] - d
            row["removed_characters"] = (docs[i - 1] - d) * 1000
        rows.append(row)
    return rows


def make_export(folder: Path, seed: int) -> None:
    """A tiny Apertus model with a tokenizer, in the export stage's layout."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import ApertusConfig, ApertusForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    config = ApertusConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    ApertusForCausalLM(config).save_pretrained(folder)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3} | {chr(97 + i): 4 + i for i in range(26)}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(folder)
    (folder / "verification.json").write_text(json.dumps({"passed": True, "max_abs_diff": 0.0}))
    (folder / ".snakemake_timestamp").write_text("")


def manifest(stage: str, step: str, summary: dict | None = None) -> dict:
    return {"manifest_version": 1, "stage": stage, "step": step, "summary": summary or {}}


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


@pytest.fixture(scope="session")
def exports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    out = {}
    for seed, name in enumerate(("ctxA", "qrpo")):
        make_export(root / name, seed)
        out[name] = root / name
    return out


@pytest.fixture
def run_config() -> dict:
    """A resolved run config (every default filled, as the run's manifests hold it) with the
    fixture's sources, stages and recipe numbers merged over it (not validated again: the
    fixture's stage names, ``ctxA``, are not ones the schema allows)."""
    overlay = {
        "run": "fixture-run",
        "data": {
            "sources": [
                {"name": "web", "reader": "jsonl", "path": "sample"},
                {
                    "name": "fw2",
                    "reader": "parquet",
                    "path": "hf://datasets/HuggingFaceFW/fineweb-2/data/deu_Latn/train",
                },
                {"name": "hub", "reader": "huggingface", "path": "owner/dataset-x"},
            ]
        },
        "tokenize": {"phases": [{"name": "p1", "tokens": 98765, "seed": 1, "weights": {"web": 1}}]},
        "pretrain": {
            "flavor": "tiny",
            "seq_len": 32,
            "global_batch": 4,
            "batch_ramp": {"global_batch": 8, "at_tokens": 7777},
            "grad_clip": 0.3,
            "lr": {"peak": 0.0042, "warmup_steps": 3, "decay_fraction": 0.25, "min_lr_ratio": 0.1},
            "ademamix": {
                "betas": [0.9, 0.999, 0.9999],
                "alpha": 8,
                "t_alpha": 11,
                "t_beta3": 12,
                "weight_decay": 0.1,
            },
            "goldfish": {"enabled": True, "k": 13, "h": 29},
            "goldfish_control": None,
            "phases": ["p1"],
            "long_context": [
                {
                    "name": "ctxA",
                    "phase": "p1",
                    "seq_len": 64,
                    "rope_theta": 1000000.0,
                    "global_batch": 4,
                    "steps": 3,
                    "lr": 0.001,
                    "warmup_steps": 1,
                }
            ],
        },
    }
    return _merged(load_config([]), overlay)


def _merged(base: dict, overlay: dict) -> dict:
    """`overlay` over `base`, mappings key by key, anything else replaced."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merged(base[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture
def run_dir(tmp_path, exports) -> Path:
    """A run directory with the release's inputs and a step manifest per step."""
    run = tmp_path / "results" / "fixture-run"
    for name, src in exports.items():
        shutil.copytree(src, run / "export" / name)
        write_json(run / "export" / f"{name}.manifest.json", manifest("export", "hf"))
    table = run / "evaluate" / "table"
    table.mkdir(parents=True)
    with (table / "scores.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["checkpoint", *SCORE_COLUMNS])
        for checkpoint, values in SCORES.items():
            writer.writerow([checkpoint, *("" if v is None else repr(v) for v in values)])
    (table / "scores.md").write_text("| checkpoint |\n|---|\n")
    (table / "scores.png").write_bytes(b"\x89PNG fake table plot")
    (table / ".snakemake_timestamp").write_text("")
    write_json(run / "evaluate" / "table.manifest.json", manifest("evaluate", "table"))
    memo = run / "evaluate" / "memorization" / "ctxA"
    write_json(
        memo / "memorization.json",
        {
            "prefix_tokens": 16,
            "suffix_tokens": 48,
            "curve": [
                {
                    "exposures": 0,
                    "probes": 8,
                    "rouge_l_mean": 0.0313,
                    "exact_match_prefix_mean": 0.0,
                    "verbatim": 0,
                },
                {
                    "exposures": 64,
                    "probes": 2,
                    "rouge_l_mean": 0.8765,
                    "exact_match_prefix_mean": 0.5,
                    "verbatim": 1,
                },
            ],
        },
    )
    (memo / "memorization.png").write_bytes(b"\x89PNG fake memorization plot")
    write_json(
        run / "evaluate" / "memorization" / "ctxA.manifest.json",
        manifest("evaluate", "memorization"),
    )
    funnel = {
        "steps": FUNNEL_STEPS,
        "languages": {lang: _rows(docs) for lang, docs in FUNNEL_DOCS.items()},
        "total": _rows([sum(d[i] for d in FUNNEL_DOCS.values()) for i in range(len(FUNNEL_STEPS))]),
    }
    write_json(run / "data" / "funnel.json", funnel)
    (run / "data" / "funnel.png").write_bytes(b"\x89PNG fake funnel plot")
    write_json(run / "data" / "funnel.manifest.json", manifest("data", "funnel"))
    write_json(
        run / "data" / "corpus.manifest.json",
        manifest(
            "data",
            "select",
            {
                "stats": {
                    "x - FORMAT: PII": {"replaced_email": 4321, "replaced_iban": 17, "total": 9}
                }
            },
        ),
    )
    write_json(
        run / "data" / "filtered" / "web" / "0.manifest.json",
        manifest(
            "data",
            "filter:web-0",
            {"stats": {"F - FILTER: robots.txt opt-out": {"allowed": 5, "disallowed_GPTBot": 606}}},
        ),
    )
    write_json(run / "data" / "robots" / "manifest.json", manifest("data", "robots"))
    write_json(
        run / "pretrain" / "p1.manifest.json",
        manifest(
            "pretrain",
            "p1",
            {"final_step": 123, "tokens_seen": 98765, "seq_len": 32, "final_loss": 4.5},
        )
        | {"seconds": 5400.0},  # the measured wall-clock the card's compute table shows
    )
    write_json(
        run / "pretrain" / "ctxA.manifest.json",
        manifest(
            "pretrain",
            "ctxA",
            {"final_step": 7, "tokens_seen": 4321, "seq_len": 64, "final_loss": 4.25},
        ),
    )
    write_json(
        run / "posttrain" / "qrpo.manifest.json",
        manifest(
            "posttrain",
            "qrpo",
            {"final_step": 9, "completions": 640, "seq_len": 32, "final_loss": 0.5},
        ),
    )
    # Scratch and the release's own manifests are not step manifests of the run's outputs.
    write_json(run / "pretrain" / "_work" / "p1-abc" / "stray.manifest.json", manifest("x", "y"))
    write_json(run / "release.manifest.json", manifest("release", "folder"))
    report = {
        "baseline": "sft",
        "order": ["sft", "qrpo"],
        "prompt_count": 60,
        "reward": {"kind": "chrf"},
        "models": {"sft": {"mean": 0.1992}, "qrpo": {"mean": 0.2468}},
        "comparison": {"qrpo": {"mean_delta": 0.0476, "win_rate": 0.625}},
        "sampled": {
            "models": {"sft": {"mean": 0.0921}, "qrpo": {"mean": 0.0973}},
            "comparison": {"qrpo": {"mean_delta": 0.0052, "win_rate": 0.53}},
        },
    }
    write_json(run / "posttrain" / "reward_report.json", report)
    (run / "posttrain" / "reward_report.md").write_text("# reward report\n")
    write_json(
        run / "posttrain" / "reward_report.manifest.json", manifest("posttrain", "qrpo_report")
    )
    return run


def release_inputs(run: Path, aligned: bool = True) -> ReleaseInputs:
    return ReleaseInputs(
        run_dir=run,
        base=run / "export" / "ctxA",
        base_checkpoint="ctxA",
        table=run / "evaluate" / "table",
        funnel_json=run / "data" / "funnel.json",
        funnel_png=run / "data" / "funnel.png",
        aligned=run / "export" / "qrpo" if aligned else None,
        aligned_checkpoint="qrpo" if aligned else None,
        memorization=run / "evaluate" / "memorization" / "ctxA",
        reward_json=run / "posttrain" / "reward_report.json" if aligned else None,
        reward_md=run / "posttrain" / "reward_report.md" if aligned else None,
    )


@pytest.fixture
def release_config() -> ReleaseConfig:
    return ReleaseConfig.from_dict(
        {"license": "mit", "hub": {"repo_id": "someone/apertus-fixture"}}
    )
