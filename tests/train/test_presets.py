"""The 8B and 70B presets carry RECIPE.md's numbers (§1-§6) exactly."""

import pytest

from apertus.core import REPO_ROOT
from apertus.core.config import load_config
from apertus.evaluate.lmeval import task_manager
from apertus.model.flavors import flavor

PRESETS = REPO_ROOT / "config" / "presets"


@pytest.fixture(scope="module", params=["8b", "70b"])
def preset(request):
    return request.param, load_config([PRESETS / f"apertus-{request.param}.yaml"])


# RECIPE §1
SHAPES = {
    "8b": {"n_layers": 32, "dim": 4096, "ffn_hidden": 21504, "n_heads": 32, "n_kv_heads": 8},
    "70b": {"n_layers": 80, "dim": 8192, "ffn_hidden": 43008, "n_heads": 64, "n_kv_heads": 8},
}
# RECIPE §4 and §6
PEAK_LR = {"8b": 1.1e-4, "70b": 1.0e-5}
BATCH = {"8b": 1024, "70b": 2048}
THETAS = {"8b": [1e6, 2e6, 4e6, 12e6], "70b": [1e6, 2e6, 4e6, 8e6]}
LONG_LR = {"8b": (1.1e-5, 150), "70b": (1e-6, 75)}
WARMUP_TOKENS = 16_780_000_000  # 16.78B


def test_model_shape_is_recipe_section_1(preset):
    size, config = preset
    model = flavor(config["pretrain"]["flavor"])
    for field, value in SHAPES[size].items():
        assert getattr(model, field) == value, field
    assert model.attention_head_dim == 128 and model.vocab_size == 131072
    assert model.norm_eps == 1e-5 and model.init_std == 0.008944
    assert model.rope_scaling.factor == 8 and model.rope_scaling.high_freq_factor == 4
    assert model.rope_scaling.original_max_position_embeddings == 8192


def test_optimizer_schedule_and_goldfish_are_recipe_sections_2_to_4(preset):
    size, config = preset
    pre = config["pretrain"]
    assert pre["ademamix"] == {
        "betas": [0.9, 0.999, 0.9999],
        "alpha": 8,
        "t_alpha": 100000,
        "t_beta3": 100000,
        "eps": 1e-8,
        "weight_decay": 0.1,
    }
    assert pre["grad_clip"] == 0.1
    assert pre["goldfish"] == {"enabled": True, "k": 50, "h": 50}
    assert pre["lr"]["peak"] == PEAK_LR[size] and pre["lr"]["min_lr_ratio"] == 0.1
    assert pre["seq_len"] == 4096 and pre["rope_theta"] == 500000
    assert pre["global_batch"] == BATCH[size]
    # RECIPE §4: the batch doubles at 7.038T tokens (8B) / 4.392T (70B), LR unchanged.
    assert pre["batch_ramp"] == {
        "global_batch": 2 * BATCH[size],
        "at_tokens": {"8b": 7_038_000_000_000, "70b": 4_392_000_000_000}[size],
    }
    # RECIPE §4: 16.78B warmup tokens, rounded down to whole steps of the starting batch (the
    # rule both presets' comments name); the steps then cover a token count that rounds to 16.78B.
    tokens_per_step = BATCH[size] * 4096
    warmup = pre["lr"]["warmup_steps"]
    assert warmup == WARMUP_TOKENS // tokens_per_step
    assert round(warmup * tokens_per_step / 1e9, 2) == WARMUP_TOKENS / 1e9
    assert pre["lr"]["decay_fraction"] == pytest.approx(1.65 / 15, abs=0.001)
    assert pre["dtype"] == "bfloat16"


def test_long_context_stages_are_recipe_section_6(preset):
    size, config = preset
    stages = config["pretrain"]["long_context"]
    assert [s["seq_len"] for s in stages] == [8192, 16384, 32768, 65536]
    assert [s["rope_theta"] for s in stages] == THETAS[size]
    assert {(s["lr"], s["warmup_steps"]) for s in stages} == {LONG_LR[size]}
    # 8B batch x steps (the recipe gives none for 70B; the preset reuses 8B's)
    assert [(s["global_batch"], s["steps"]) for s in stages] == [
        (1024, 9350),
        (512, 6930),
        (256, 7000),
        (128, 3480),
    ]
    # Context parallel 1/1/2/4 (8B; the 70B preset uses the same degrees), and each stage's
    # ranks split into it: the plan check (apertus config check) runs the arithmetic.
    assert [s["context_parallel"] for s in stages] == [1, 1, 2, 4]
    pretrain = config["pretrain"]
    for stage in stages:
        ranks = pretrain["nproc"] * (stage["nnodes"] or pretrain["nnodes"])
        data_parallel = ranks // (stage["context_parallel"] * pretrain["tensor_parallel"])
        assert stage["seq_len"] % (2 * stage["context_parallel"]) == 0
        assert stage["global_batch"] % (pretrain["micro_batch"] * data_parallel) == 0
        # No rank holds more than 16k tokens of a sequence; from 16k every stage recomputes.
        per_rank = stage["seq_len"] // stage["context_parallel"]
        assert per_rank <= 16384
        activation_checkpoint = stage["activation_checkpoint"] or pretrain["activation_checkpoint"]
        assert activation_checkpoint == ("full" if per_rank >= 16384 or size == "70b" else "none")


def test_long_context_stages_read_the_long_context_mixture(preset):
    """RECIPE §6: the stages read a phase of their own whose long-document selections are
    documents of more than 4k tokens, 20% of it, and whose budget covers the largest stage."""
    _, config = preset
    phases = {p["name"]: p for p in config["tokenize"]["phases"]}
    stages = config["pretrain"]["long_context"]
    assert {s["phase"] for s in stages} == {"longctx"}
    mixture = phases["longctx"]
    assert mixture["seed"] not in {p["seed"] for n, p in phases.items() if n != "longctx"}
    selections = mixture["select"]
    assert selections and {s["min_tokens"] for s in selections.values()} == {4097}
    assert sum(mixture["weights"][name] for name in selections) == pytest.approx(0.2)
    needed = max(s["steps"] * s["global_batch"] * (s["seq_len"] + 1) for s in stages)
    assert needed <= mixture["tokens"] < 1.05 * needed


def test_fineweb2_is_one_source_over_every_language_folder(preset):
    _, config = preset
    (fineweb2,) = [s for s in config["data"]["sources"] if s["name"] == "fineweb2"]
    assert fineweb2["path"].endswith("HuggingFaceFW/fineweb-2/data")
    assert fineweb2["language_from_path"] and "*" not in fineweb2["glob"].split("/")[0]
    names = [s["name"] for s in config["data"]["sources"]]
    assert not [n for n in names if n.startswith("fineweb2-") and len(n) == len("fineweb2-deu")]


def test_five_phases_of_recipe_section_5(preset):
    """15T tokens in five phases, one WSD schedule with its cooldown (the last decay_fraction of
    the tokens) exactly phase 5; every phase its own data seed; 70B's phase 2 adds FineWeb-HQ."""
    size, config = preset
    pretrain = config["pretrain"]
    phases = {p["name"]: p for p in config["tokenize"]["phases"]}
    assert pretrain["phases"] == ["phase1", "phase2", "phase3", "phase4", "phase5"]
    budgets = [phases[name]["tokens"] for name in pretrain["phases"]]
    assert sum(budgets) == 15_000_000_000_000
    assert budgets[-1] == pytest.approx(pretrain["lr"]["decay_fraction"] * sum(budgets))
    assert sum(budgets[:2]) == pretrain["batch_ramp"]["at_tokens"] or size == "70b"
    seeds = [phases[name]["seed"] for name in pretrain["phases"]]
    assert len(set(seeds)) == 5
    for name in pretrain["phases"]:
        shares = [w for w in phases[name]["weights"].values() if w != "all"]
        assert sum(shares) == pytest.approx(1.0)
    # RECIPE §5 phase 1: the memorization probes, every copy once (§8: 1-128 exposures).
    assert phases["phase1"]["weights"]["probes"] == "all"
    assert not any("probes" in phases[name]["weights"] for name in pretrain["phases"][1:])
    probes = config["data"]["probes"]
    assert probes["enabled"] and max(probes["exposures"]) == 128 and min(probes["exposures"]) == 1
    memorization = config["evaluate"]["memorization"]
    assert memorization["suffix_tokens"] == 500  # §8: 500-token continuations
    # Goldfish's h - 1 tokens of prompt, so every scored token's drop depends on the probe alone.
    assert memorization["prefix_tokens"] >= pretrain["goldfish"]["h"] - 1
    assert ("fineweb-hq" in phases["phase2"]["weights"]) == (size == "70b")
    assert {"megamath", "infimm-webmath"} <= set(phases["phase3"]["weights"])
    assert {"dclm-edu", "fineweb2-hq-top10"} <= set(phases["phase4"]["weights"])
    assert {"stack-v2-edu", "wikipedia", "flan"} <= set(phases["phase5"]["weights"])
    # RECIPE §5's cooldown: EuroParl + ParaDocs (parallel data), Flan + EuroBlocks (task data).
    cooldown = set(phases["phase5"]["weights"])
    assert {"euroblocks"} <= cooldown
    assert any(n.startswith("europarl") for n in cooldown)
    assert any(n.startswith("paradocs") for n in cooldown)
    sources = {s["name"]: s for s in config["data"]["sources"]}
    assert sources["fineweb2-hq-top10"]["quality_filter"] is False  # already a quality selection
    books = [s["name"] for s in config["data"]["sources"] if s["kind"] == "books"]
    assert sum(phases["longctx"]["weights"][b] for b in books) == pytest.approx(0.1)


QRPO_LR = {"8b": 5e-7, "70b": 1e-7}


def test_post_training_is_recipe_section_7(preset):
    size, config = preset
    post = config["posttrain"]
    assert post["instructions"]["source"]["hub"]  # not the tiny default's generated set
    assert post["sft_data"]["max_len"] == 4096
    assert (post["sft"]["epochs"], post["sft"]["warmup_ratio"], post["sft"]["grad_clip"]) == (
        1,
        0.03,
        1.0,
    )
    assert (post["qrpo_data"]["n_samples"], post["qrpo_data"]["temperature"]) == (10, 1.0)
    reward = post["qrpo_data"]["reward"]
    assert (reward["kind"], reward["model"]) == (
        "reward_model",
        "Skywork/Skywork-Reward-V2-Llama-3.1-8B",
    )
    assert (post["qrpo"]["lr"], post["qrpo"]["beta_kl"], post["qrpo"]["max_beta"]) == (
        QRPO_LR[size],
        5.0,
        0.1,
    )
    # Both trainings on GPU nodes in bf16, their batches split over all ranks (plan check).
    for name in ("sft", "qrpo"):
        stage = post[name]
        assert stage["nproc"] == config["pretrain"]["nproc"] and stage["nnodes"] > 1
        assert stage["dtype"] == "bfloat16"
        assert stage["activation_checkpoint"] == ("full" if size == "70b" else "none")
    ranks = post["qrpo"]["nproc"] * post["qrpo"]["nnodes"]
    assert post["qrpo"]["batch_size"] % (post["qrpo"]["micro_batch"] * ranks) == 0


def test_data_filters_are_recipe_section_5(preset):
    _, config = preset
    data = config["data"]
    assert data["toxicity"]["drop_fraction"] == 0.05
    assert set(data["toxicity"]["apply_to_kinds"]).isdisjoint({"edu", "code", "math"})
    # The toxicity heads are trained by the pipeline on ToxicCommons (RECIPE §5), XLM-R based.
    toxicity = data["toxicity"]
    assert toxicity["head"] is None and toxicity["backend"] == "xlmr"
    assert toxicity["labels"] == "hf://datasets/PleIAs/ToxicCommons"
    assert len(toxicity["hub_labels"]["label_field"]) == 5  # its five axes
    assert data["quality"]["keep_fraction"] in (0.33, 0.10)
    # 20 languages by classifier (and English), the others sampled at random.
    assert 20 <= len(set(data["quality"]["languages"])) <= 21
    assert data["pii"]["exempt_kinds"] == ["code", "math"]
    assert data["language"]["backend"] == "glotlid"
    assert config["tokenize"]["tokenizer"]["source"].startswith("swiss-ai/Apertus")


# RECIPE §8: the base-model benchmarks, each present in lm-eval 0.4.13 (CulturalBench, BLEnD and
# SwitzerlandQA are not), plus the project's per-language perplexity.
RECIPE_TASKS = {"arc_easy", "arc_challenge", "hellaswag", "winogrande", "piqa", "mmlu", "xnli"}
RECIPE_TASKS |= {"xcopa", "global_mmlu_de", "global_mmlu_fr", "global_mmlu_it", "global_mmlu_en"}
RECIPE_TASKS |= {"include_base_44_german", "include_base_44_french", "include_base_44_italian"}


@pytest.fixture(scope="module")
def lm_eval_task_names():
    # lm-eval's own TaskManager (its built-in index kept between processes: test_lmeval.py)
    return set(task_manager(None, include_defaults=True).all_tasks)


def test_evaluation_suite_is_recipe_section_8_and_exists_in_lm_eval(preset, lm_eval_task_names):
    _, config = preset
    suite = config["evaluate"]["suite"]
    names = {entry["task"] for entry in suite["tasks"]}
    assert names == RECIPE_TASKS | {"apertus_ppl"}
    assert lm_eval_task_names >= RECIPE_TASKS
    assert suite["include_defaults"] and suite["device"] == "cuda"


# RECIPE §8's instruct tasks as lm-eval 0.4.13 names them (MATH as Minerva's, the chat variants
# of HumanEval and MBPP, MGSM's languages as one tag); WMT24++ Romansh is not in it.
RECIPE_INSTRUCT_TASKS = {"ifeval", "gsm8k", "minerva_math", "humaneval_instruct", "mbpp_instruct"}
RECIPE_INSTRUCT_TASKS |= {"bbh", "mgsm_direct", "truthfulqa_mc1", "truthfulqa_mc2", "ruler"}


def test_instruct_suite_is_recipe_section_8_and_exists_in_lm_eval(preset, lm_eval_task_names):
    _, config = preset
    instruct = config["evaluate"]["instruct"]
    names = [entry["task"] for entry in instruct["tasks"]]
    assert set(names) == RECIPE_INSTRUCT_TASKS
    assert not set(names) - lm_eval_task_names
    # HumanEval and MBPP run generated code; RULER is sized to the chat models' 64k.
    assert instruct["confirm_run_unsafe_code"] and instruct["include_defaults"]
    assert max(instruct["metadata"]["max_seq_lengths"]) == 65536
    assert instruct["device"] == "cuda" and not instruct["offline"]
