"""The rehearsal's model stand-ins (apertus.rehearsal.models) load where the 8B preset merged
with its overlay points, through the code that loads the real ones: the tokenizer through the
tokenize stage's checks, the GlotLID stand-in through the language tagger, the XLM-R encoder and
quality head through the classifier, the reward model and judge through the QRPO rewards, the
instruction data through the Hub reader, and every task of the evaluation suites through the
project's lm-eval TaskManager, by its own name, on local rows."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from datatrove.data import Document

from apertus.core.config import load_config
from apertus.data.classifiers import XLMRClassifier
from apertus.data.language import LanguageTagger
from apertus.evaluate.lmeval import (
    MERGED_INCLUDE,
    Invocation,
    LmEvalOptions,
    command_script,
    lm_eval_command,
    missing_packages,
    task_manager,
)
from apertus.posttrain.instructions import (
    InstructionConfig,
    load_hub_conversations,
    split_conversations,
)
from apertus.posttrain.rewards import Exchange, RewardsByCategory
from apertus.rehearsal import models
from apertus.rehearsal.overlay import STANDIN_ROOT
from apertus.tokenize.tokenizer import (
    SPECIAL_TOKENS,
    check_special_tokens,
    load_tokenizer,
    save_pretrained_from,
)
from tests.rehearsal.background import OVERLAY, PRESET, digests


@pytest.fixture(scope="module")
def config() -> dict:
    return load_config([PRESET, OVERLAY])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A working directory holding the stand-ins where the overlay's relative paths look."""
    workdir = tmp_path_factory.mktemp("rehearsal")
    models.build(workdir / STANDIN_ROOT)
    return workdir


@pytest.fixture
def in_workdir(workdir, monkeypatch) -> Path:
    monkeypatch.chdir(workdir)
    return workdir


def test_a_rebuild_gives_the_same_bytes(workdir):
    root = workdir / STANDIN_ROOT
    before = digests(root)
    models.build(root)
    assert digests(root) == before
    assert sum((root / p).stat().st_size for p in before) < 5_000_000


def test_the_overlay_points_at_the_stand_ins(config):
    """Every model location of the merged configuration is where the builder writes it."""
    here = {
        name: STANDIN_ROOT + value
        for name, value in vars(models).items()
        if name.endswith(("_DIR", "_MODEL", "_HEAD"))
    }
    posttrain, evaluate = config["posttrain"], config["evaluate"]
    assert config["tokenize"]["tokenizer"]["source"] == here["TOKENIZER_DIR"]
    assert config["data"]["language"]["model_path"] == here["GLOTLID_MODEL"]
    assert config["data"]["quality"]["encoder"] == here["XLMR_DIR"]
    assert config["data"]["toxicity"]["encoder"] == here["XLMR_DIR"]
    assert config["data"]["quality"]["head"] == here["QUALITY_HEAD"]
    assert posttrain["instructions"]["source"]["hub"] == here["INSTRUCTIONS_DIR"]
    assert posttrain["qrpo_data"]["reward"]["model"] == here["REWARD_MODEL_DIR"]
    judge = posttrain["qrpo_data"]["rewards_by_category"]["controversial"]
    assert (judge["kind"], judge["model"]) == ("judge", here["JUDGE_DIR"])
    assert evaluate["suite"]["include_path"] == evaluate["instruct"]["include_path"]
    assert evaluate["suite"]["include_path"] == here["LM_EVAL_DIR"]
    assert evaluate["suite"]["data_home"] == evaluate["instruct"]["data_home"]
    assert evaluate["suite"]["data_home"] == here["EVAL_HOME_DIR"]


def test_the_tokenizer_passes_the_tokenize_stages_checks(workdir, config, tmp_path):
    source = workdir / config["tokenize"]["tokenizer"]["source"]
    facts = save_pretrained_from(str(source), tmp_path / "tokenizer")  # the tokenize step
    assert (facts["bos_id"], facts["eos_id"], facts["pad_id"]) == (1, 2, 3)
    assert (facts["adds_bos"], facts["adds_eos"]) == (True, False)
    assert facts["vocab_size"] == models.TOKENIZER_VOCAB and facts["has_chat_template"]
    tokenizer = load_tokenizer(str(tmp_path / "tokenizer"))
    check_special_tokens(tokenizer, SPECIAL_TOKENS)  # the chat tokens too, at the trained ids
    chat = [{"role": "user", "content": "Grüezi"}, {"role": "assistant", "content": "Allegra"}]
    assert tokenizer.apply_chat_template(chat, tokenize=False) == (
        "<s><|user_start|>Grüezi<|user_end|><|assistant_start|>Allegra<|assistant_end|>"
    )


TEXTS = {
    "deu_Latn": "Der Zug nach Bern fährt jeden Morgen pünktlich um acht Uhr vom Bahnhof ab.",
    "fra_Latn": "Le marché du samedi propose des légumes frais et du fromage de la région.",
    "eng_Latn": "The library opens at nine and lends books, films and music to everyone.",
    "ita_Latn": "La biblioteca comunale apre alle nove e presta libri a tutti i cittadini.",
    "spa_Latn": "El mercado del sábado ofrece verduras frescas y queso de la región.",
}


def test_the_glotlid_stand_in_tags_with_glotlid_labels(workdir, config):
    data = config["data"]["language"]
    assert data["backend"] == "glotlid"
    tagger = LanguageTagger(data["backend"], model_path=workdir / data["model_path"])
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(TEXTS.values())]
    tagged = list(tagger.run(docs))
    assert [d.metadata["language"] for d in tagged] == list(TEXTS)
    assert all(d.metadata["language_score"] > 0.5 for d in tagged)
    labels = set(models.GLOTLID_LABELS.values())
    assert len(labels) == 176 and all(re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", x) for x in labels)


def test_the_xlmr_encoder_and_quality_head_score_documents(workdir, config):
    quality = config["data"]["quality"]
    classifier = XLMRClassifier(
        str(workdir / quality["encoder"]), workdir / quality["head"], "quality", batch_size=2
    )
    long_text = " ".join(TEXTS.values()) * 20  # several 512-token chunks: positions suffice
    scores = classifier.score([TEXTS["deu_Latn"], long_text])
    assert all(0 < s < 1 for s in scores) and scores[0] != scores[1]


def test_the_instruction_data_reads_as_the_hub_dataset_with_controversial_prompts(
    workdir, config, tmp_path
):
    cfg = config["posttrain"]["instructions"]
    conversations = load_hub_conversations(
        str(workdir / cfg["source"]["hub"]), split="train", cache_dir=tmp_path / "cache"
    )
    splits = split_conversations(conversations, InstructionConfig.from_dict(cfg))
    categories = [p.get("category", "standard") for p in splits.qrpo]
    assert len(splits.qrpo) == cfg["qrpo"] and len(splits.train) > 0
    assert {"standard", "controversial"} <= set(categories)


def test_the_reward_model_and_judge_score_through_the_qrpo_rewards(in_workdir, config):
    qrpo = config["posttrain"]["qrpo_data"]
    rewards = RewardsByCategory(qrpo["reward"], qrpo["rewards_by_category"])
    exchanges = [
        Exchange("a", ({"role": "user", "content": "Wie viel ist 2 + 3?"},), "5", "5"),
        Exchange(
            "b",
            ({"role": "user", "content": "Soll die Kernenergie ausgebaut werden?"},),
            "Die Meinungen gehen auseinander.",
            category="controversial",
        ),
    ]
    scores = rewards.score(exchanges)
    assert rewards.built == ["reward", "rewards_by_category.controversial"]
    assert math.isfinite(scores[0]) and 1 <= scores[1] <= 10


def _names(config: dict) -> list[str]:
    return [
        entry["task"]
        for suite in ("suite", "instruct")
        for entry in config["evaluate"][suite]["tasks"]
        if entry["task"] != "apertus_ppl"  # the project's own task directory
    ]


# Tasks not loaded here: HumanEval and MBPP load `evaluate`'s code_eval module and IFEval NLTK's
# punkt_tab when imported, from the data home only in a process started with its variables, and
# RULER generates 500 samples per length with the model's tokenizer: the instruct run below
# loads them. (Others may lack lm-eval's instruct extras: `missing_packages`.)
NOT_LOADED = {"humaneval_instruct", "mbpp_instruct", "ifeval", "ruler"}


def test_every_suite_task_resolves_to_its_stand_in_on_local_rows(in_workdir, config, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(in_workdir / "hf-datasets"))
    folder = (in_workdir / config["evaluate"]["suite"]["include_path"]).resolve()
    manager = task_manager(None, True, include_path=config["evaluate"]["suite"]["include_path"])
    names = _names(config)
    assert set(names) <= set(models.lm_eval_task_names())

    def leaves(name: str) -> list[str]:
        entry = manager.task_index[name]
        if name in models.LM_EVAL_TAGS:
            return list(models.LM_EVAL_TAGS[name])
        assert entry.yaml_path.resolve().parent == folder, name  # not lm-eval's own
        return list(models.LM_EVAL_GROUPS.get(name, (None, [name]))[1])

    from lm_eval.tasks._yaml_loader import load_yaml

    for name in names:
        for leaf in leaves(name):
            entry = manager.task_index[leaf]
            if name == "ruler":  # generated from the tokenizer: no data to stand in
                continue
            assert entry.yaml_path.resolve().parent == folder, leaf
            cfg = load_yaml(entry.yaml_path, resolve_func=False)
            files = cfg["dataset_kwargs"]["data_files"]
            assert cfg["dataset_path"] == "json" and cfg["task"] == leaf
            assert all(Path(f).is_file() and folder in Path(f).parents for f in files.values())

    entries = [LmEvalOptions.from_dict({"tasks": [{"task": n}]}).tasks[0] for n in names]
    loadable = [e.task for e in entries if not missing_packages([e]) and e.task not in NOT_LOADED]
    for name, task in manager.load(loadable)["tasks"].items():
        docs = list(task.eval_docs)
        assert task.config.dataset_path == "json" and docs, name
        assert task.doc_to_text(docs[0]) is not None and task.doc_to_target(docs[0]) is not None


def test_command_sh_gives_lm_eval_one_folder_with_both_task_folders(tmp_path):
    tasks, extra = tmp_path / "tasks", tmp_path / "standins"
    tasks.mkdir(), extra.mkdir()
    options = LmEvalOptions.from_dict({"tasks": [{"task": "arc_easy"}], "include_path": str(extra)})
    invocation = Invocation(("arc_easy",), None, None, True)
    words = lm_eval_command(invocation, tmp_path / "model", tasks, options, "o.json")
    assert words[words.index("--include_path") + 1] == MERGED_INCLUDE
    script = command_script([invocation], tmp_path / "model", tasks, options, {})
    assert f'cp -R {extra} "$include/1-include_path"' in script
    assert f'cp -R {tasks} "$include/2-tasks"' in script
    assert '--include_path "$include"' in script
    alone = lm_eval_command(invocation, tmp_path / "model", None, options, "o.json")
    assert alone[alone.index("--include_path") + 1] == str(extra)


# --------------------------------------------------------------------------------------------
# lm-eval's side data (eval-home) and the instruct suite, offline


def _code_eval_module(workdir: Path):
    """The code_eval stand-in, imported from its file in the evaluate cache layout."""
    import importlib.util

    from apertus.evaluate.lmeval import DATA_HOME_DIRS

    modules = workdir / STANDIN_ROOT / models.EVAL_HOME_DIR / DATA_HOME_DIRS["HF_MODULES_CACHE"]
    (path,) = (modules / models.CODE_EVAL_FOLDER).glob("*/code_eval.py")
    assert len(path.parent.name) == 64  # evaluate's cached module: a 64-hex hash folder
    spec = importlib.util.spec_from_file_location("rehearsal_code_eval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_code_eval_stand_in_estimates_pass_at_k(workdir, monkeypatch):
    import itertools

    code_eval = _code_eval_module(workdir)
    # The estimator against the fraction of k-subsets of n candidates (c correct) holding one.
    for n, c, k in [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 2), (10, 3, 4), (6, 5, 3), (7, 0, 7)]:
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        expected = sum(any(s) for s in subsets) / len(subsets)
        assert math.isclose(code_eval.estimate_pass_at_k(n, c, k), expected), (n, c, k)

    test = "assert add(2, 3) == 5"
    candidates = [
        "def add(a, b):\n    return a + b",
        "def add(a, b):\n    return b + a",
        "def add(a, b):\n    return a * b",  # fails its assertion
        "def add(a, b):\n    while True:\n        pass",  # hangs: killed at the timeout
        "def add(a, b) return",  # a syntax error
    ]
    metric = code_eval.CodeEval(keep_in_memory=True)
    kwargs = {"predictions": [candidates, candidates[2:]], "references": [test, test]}
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    with pytest.raises(ValueError, match="HF_ALLOW_CODE_EVAL=1"):
        metric.compute(**kwargs, k=[1])
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    pass_at_k, results = metric.compute(**kwargs, k=[1, 2, 3, 5], timeout=1.0)
    # pass@5 needs 5 candidates for every problem: the second has 3.
    assert pass_at_k == pytest.approx(
        {"pass@1": (2 / 5 + 0) / 2, "pass@2": (1 - 3 / 10 + 0) / 2, "pass@3": (1 - 1 / 10) / 2}
    )
    outcomes = [r["result"] for _, r in results[0]]
    assert outcomes[:2] == ["passed", "passed"] and outcomes[3] == "timed out"
    assert outcomes[2] == "failed: AssertionError" and outcomes[4].startswith("failed: ")
    assert [j for j, _ in results[1]] == [0, 1, 2]
    assert not any(r["passed"] for _, r in results[1])


def test_the_punkt_tab_stand_in_splits_sentences(workdir, monkeypatch):
    import nltk
    from nltk.tokenize.punkt import PunktTokenizer

    from apertus.evaluate.lmeval import DATA_HOME_DIRS

    home = workdir / STANDIN_ROOT / models.EVAL_HOME_DIR / DATA_HOME_DIRS["NLTK_DATA"]
    monkeypatch.setattr(nltk.data, "path", [str(home)])  # what NLTK_DATA does, alone
    text = "Dr. Smith came at 5 p.m. on Monday. He left early, e.g. at six. The end!"
    assert PunktTokenizer("english").tokenize(text) == [
        "Dr. Smith came at 5 p.m. on Monday.",
        "He left early, e.g. at six.",
        "The end!",
    ]
