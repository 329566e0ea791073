"""lm-eval on a tiny random model, checked against log-probabilities computed here with
transformers directly, and the written command line against the API run. That running
command.sh from another directory reproduces the numbers is checked once, on the pipeline's
export (tests/evaluate/test_evaluate_stage.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from apertus.core import ApertusError
from apertus.evaluate.lmeval import (
    Invocation,
    LmEvalOptions,
    SuiteEntry,
    lm_eval_command,
    plan_invocations,
    task_manager,
)
from apertus.evaluate.stage import EvaluateConfig, main
from tests.evaluate import heldout_documents, tiny_model_folder, write_heldout

LANGUAGES = ("de", "en", "fr", "it", "rm")
WINDOW = 128  # the model's max length: lm-eval's rolling window

CONFIG = {
    "tasks": {
        "seed": 3,
        "mc": {"items_per_language": 6, "context_chars": 150, "continuation_chars": 40},
    },
    "suite": {"batch_size": 4, "seed": 3},
}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """Held-out files, a tiny model, the task directory and one run of the default suite, all
    through the stage's entry points."""
    root = tmp_path_factory.mktemp("lmeval")
    documents = heldout_documents(LANGUAGES, documents=6, chars=(500, 900))
    heldout = write_heldout(root / "heldout", documents)
    texts = [d["text"] for rows in documents.values() for d in rows]
    model = tiny_model_folder(root / "model", texts, max_positions=WINDOW)
    config = json.dumps(CONFIG)
    tasks, out = root / "tasks", root / "run"
    main(["tasks", "--config", config, "--manifest", str(root / "tasks.manifest.json"),
          "--heldout", str(heldout), "--output", str(tasks)])  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        # Any attempt to reach the network fails at once instead of passing unnoticed.
        env.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        env.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
        env.setenv("NO_PROXY", "")
        main(["run", "--config", config, "--manifest", str(root / "run.manifest.json"),
              "--model", str(model), "--tasks", str(tasks), "--output", str(out)])  # fmt: skip
    return {"root": root, "model": model, "tasks": tasks, "out": out, "documents": documents}


@pytest.fixture(scope="module")
def hf(evaluated):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(evaluated["model"], dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(evaluated["model"])
    return model, tokenizer


def results(out: Path, k: int) -> dict:
    return json.loads((out / "lm_eval" / f"results-{k}.json").read_text())


def samples(out: Path, task: str) -> list[dict]:
    (path,) = (out / "lm_eval").glob(f"samples-*/{task}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def task_results(out: Path, task: str) -> dict:
    found = [
        r["results"][task]
        for r in map(json.loads, map(Path.read_text, (out / "lm_eval").glob("results-*.json")))
        if task in r["results"]
    ]
    assert len(found) == 1
    return found[0]


@torch.no_grad()
def scored_logprob(model, inputs: list[int], targets: list[int]) -> float:
    """Sum of log p(targets[i]) at the last len(targets) positions of one forward pass over
    `inputs`, where position j predicts inputs[j + 1] (targets[-1] follows inputs[-1])."""
    logits = model(torch.tensor([inputs])).logits[0, -len(targets) :]
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    return float(logprobs[torch.arange(len(targets)), torch.tensor(targets)].sum())


def rolling_loglikelihood(model, tokens: list[int], bos: int, window: int) -> float:
    """log p(text | <s>) as lm-eval's rolling windows define it: the tokens in chunks of
    `window`, each chunk scored in one pass over the `window` tokens of <s> + text that end
    right before its last token."""
    sequence = [bos, *tokens]
    total = 0.0
    for start in range(0, len(tokens), window):
        chunk = tokens[start : start + window]
        end = start + len(chunk)  # sequence[end] is the chunk's last token
        total += scored_logprob(model, sequence[max(0, end - window) : end], chunk)
    return total


# --------------------------------------------------------------------------------------------
# Numbers against direct computations


def test_perplexity_matches_a_direct_rolling_computation(evaluated, hf):
    model, tokenizer = hf
    out = evaluated["out"]
    longest = 0
    for language in LANGUAGES:
        task = f"apertus_ppl_{language}"
        total_ll = words = nbytes = 0.0
        rows = samples(out, task)
        assert len(rows) == 6
        for row in rows:
            text = row["doc"]["text"]
            tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
            longest = max(longest, len(tokens))
            direct = rolling_loglikelihood(model, tokens, tokenizer.bos_token_id, WINDOW)
            assert row["resps"][0][0] == pytest.approx(direct, abs=1e-3, rel=1e-6)
            total_ll += direct
            words += len(text.split())
            nbytes += len(text.encode("utf-8"))
        got = task_results(out, task)
        assert got["word_perplexity,none"] == pytest.approx(math.exp(-total_ll / words), rel=1e-5)
        assert got["byte_perplexity,none"] == pytest.approx(math.exp(-total_ll / nbytes), rel=1e-5)
        assert got["bits_per_byte,none"] == pytest.approx(
            -total_ll / nbytes / math.log(2), rel=1e-5
        )
    assert longest > 2 * WINDOW  # documents span three windows or more


def test_mc_accuracy_matches_a_direct_argmax_over_choices(evaluated, hf):
    model, tokenizer = hf
    out = evaluated["out"]
    bos = tokenizer.bos_token_id
    accuracies = []
    for language in LANGUAGES:
        task = f"apertus_mc_{language}"
        rows = samples(out, task)
        assert len(rows) == 6
        correct = correct_norm = 0
        for row in rows:
            doc = row["doc"]
            context = [bos, *tokenizer(doc["context"], add_special_tokens=False)["input_ids"]]
            lls = []
            for choice in doc["choices"]:
                target = tokenizer(" " + choice, add_special_tokens=False)["input_ids"]
                inputs = context + target[:-1]
                assert len(inputs) <= WINDOW  # lm-eval would truncate the context otherwise
                lls.append(scored_logprob(model, inputs, target))
            lm_eval_lls = [resp[0][0] for resp in row["resps"]]
            assert lm_eval_lls == pytest.approx(lls, abs=1e-3, rel=1e-6)
            gaps = sorted(lls)
            assert gaps[-1] - gaps[-2] > 1e-2  # no near-tie that rounding could flip
            best = max(range(len(lls)), key=lls.__getitem__)
            best_norm = max(range(len(lls)), key=lambda k: lls[k] / len(doc["choices"][k]))
            assert row["acc"] == float(best == doc["gold"])
            correct += best == doc["gold"]
            correct_norm += best_norm == doc["gold"]
        got = task_results(out, task)
        assert got["acc,none"] == pytest.approx(correct / len(rows))
        assert got["acc_norm,none"] == pytest.approx(correct_norm / len(rows))
        accuracies.append(correct / len(rows))
    group = task_results(out, "apertus_mc")
    assert group["acc,none"] == pytest.approx(sum(accuracies) / len(accuracies))


# --------------------------------------------------------------------------------------------
# What is written


def test_results_are_lm_evals_json_with_fixed_seeds(evaluated):
    for k, add_bos in ((0, True), (1, False)):
        data = results(evaluated["out"], k)
        config = data["config"]
        assert config["model"] == "hf"
        assert config["model_args"] == {
            "pretrained": str(evaluated["model"]),
            "dtype": "float32",
            "add_bos_token": add_bos,
        }
        assert (config["random_seed"], config["numpy_seed"]) == (3, 3)
        assert (config["torch_seed"], config["fewshot_seed"]) == (3, 3)
        assert config["batch_size"] == 4
        assert data["lm_eval_version"] == "0.4.13"
    assert set(results(evaluated["out"], 0)["group_subtasks"]["apertus_mc"]) == {
        f"apertus_mc_{lang}" for lang in LANGUAGES
    }


def test_command_sh_holds_one_lm_eval_line_per_invocation(evaluated):
    text = (evaluated["out"] / "command.sh").read_text()
    lines = [line for line in text.splitlines() if line.startswith("lm_eval ")]
    assert len(lines) == 2
    assert "HF_DATASETS_OFFLINE=1" in text and "HF_HUB_OFFLINE=1" in text
    for line, task, bos in zip(
        lines, ("apertus_mc", "apertus_ppl"), ("true", "false"), strict=True
    ):
        assert f"--tasks {task} " in line
        assert f'"add_bos_token": {bos}' in line
        assert f"--include_path {evaluated['tasks']}" in line
        assert "--seed 3,3,3,3" in line and "--batch_size 4" in line and "--device cpu" in line
        assert "--limit" not in line and "--num_fewshot" not in line


def test_run_step_writes_its_manifest_with_the_scores(evaluated):
    manifest = json.loads((evaluated["root"] / "run.manifest.json").read_text())
    summary = manifest["summary"]
    assert [i["add_bos_token"] for i in summary["invocations"]] == [True, False]
    assert (
        summary["scores"]["apertus_mc"]["acc"]
        == results(evaluated["out"], 0)["results"]["apertus_mc"]["acc,none"]
    )
    assert "apertus_ppl_rm" in summary["scores"]


# --------------------------------------------------------------------------------------------
# Planning and options


@pytest.fixture(scope="module")
def manager(evaluated):
    return task_manager(evaluated["tasks"], include_defaults=False)


def test_suite_is_grouped_into_lm_eval_calls(manager):
    suite = [
        SuiteEntry("apertus_mc_de", limit=2),
        SuiteEntry("apertus_ppl_de"),
        SuiteEntry("apertus_mc_fr", limit=2),
        SuiteEntry("apertus_mc_it", num_fewshot=0, limit=2),
    ]
    assert plan_invocations(suite, manager) == [
        Invocation(("apertus_mc_de", "apertus_mc_fr"), None, 2, True),
        Invocation(("apertus_ppl_de",), None, None, False),
        Invocation(("apertus_mc_it",), 0, 2, True),
    ]


@pytest.mark.parametrize(
    "suite, message",
    [
        ([SuiteEntry("apertus_ppl", add_bos_token=True)], "issue #3333"),
        ([SuiteEntry("arc_easy")], "include_defaults: true"),
        ([SuiteEntry("apertus_mc"), SuiteEntry("apertus_mc")], "twice"),
    ],
)
def test_bad_suites_are_refused(manager, suite, message):
    with pytest.raises(ApertusError, match=message):
        plan_invocations(suite, manager)


def test_limit_and_few_shot_reach_lm_eval(evaluated, tmp_path):
    from apertus.evaluate.lmeval import run_suite

    options = LmEvalOptions.from_dict(
        {"tasks": [{"task": "apertus_mc_de", "limit": 2}], "batch_size": 2}
    )
    outcome = run_suite(evaluated["model"], evaluated["tasks"], options, tmp_path / "run")
    assert outcome["results"]["apertus_mc_de"]["sample_len"] == 2
    assert len(outcome["samples"]["apertus_mc_de"]) == 2
    data = results(tmp_path / "run", 0)
    assert data["config"]["limit"] == 2 and data["n-shot"]["apertus_mc_de"] == 0
    command = (tmp_path / "run" / "command.sh").read_text()
    assert "--limit 2 " in command


def test_command_arguments_round_trip_through_lm_evals_parser(evaluated, monkeypatch):
    from lm_eval._cli.harness import HarnessCLI

    options = LmEvalOptions.from_dict(
        {"model_args": {"max_length": 32}, "batch_size": "auto", "seed": 5}
    )
    invocation = Invocation(("apertus_mc_de", "apertus_mc_fr"), 1, 0.5, True)
    words = lm_eval_command(invocation, evaluated["model"], evaluated["tasks"], options, "o.json")
    assert words[:2] == ["lm_eval", "run"]
    monkeypatch.setattr("sys.argv", words)
    args = HarnessCLI().parse_args()
    assert args.model_args == {
        "pretrained": str(evaluated["model"]),
        "dtype": "float32",
        "add_bos_token": True,
        "max_length": 32,
    }
    assert args.tasks == ["apertus_mc_de", "apertus_mc_fr"]
    assert (args.num_fewshot, args.limit, args.batch_size) == (1, 0.5, "auto")
    assert args.seed == [5, 5, 5, 5]
    assert args.include_path == str(evaluated["tasks"]) and args.output_path == "o.json"


@pytest.mark.parametrize(
    "config, message",
    [
        ({"batch_size": 0}, r"suite\.batch_size"),
        ({"batch_size": "big"}, r"suite\.batch_size"),
        ({"dtype": "float64"}, r"suite\.dtype"),
        ({"model_args": {"pretrained": "x"}}, "model_args sets pretrained"),
        ({"model_args": {"max_length": [1]}}, r"model_args\.max_length"),
        ({"tasks": []}, r"suite\.tasks is empty"),
        ({"tasks": "apertus_mc"}, r"suite\.tasks must be a list"),
        ({"tasks": [{"task": "apertus_mc", "shots": 5}]}, r"suite\.tasks\[0\]: unknown key"),
        ({"tasks": [{"task": "apertus_mc", "limit": 0}]}, "limit"),
        ({"tasks": [{"task": "apertus_mc", "num_fewshot": -1}]}, "num_fewshot"),
        ({"tasks": [{"task": "apertus_mc", "add_bos_token": "yes"}]}, "add_bos_token"),
        ({"offline": "yes"}, r"suite\.offline"),
        ({"seed": 1.5}, r"suite\.seed"),
        ({"batch": 8}, r"evaluate\.suite: unknown key"),
    ],
)
def test_bad_run_options_are_refused(config, message):
    with pytest.raises(ApertusError, match=message):
        EvaluateConfig.from_dict({"suite": config})


def test_table_options_are_checked():
    with pytest.raises(ApertusError, match="plot_metric"):
        EvaluateConfig.from_dict({"table": {"plot_metric": "acc"}})
    assert EvaluateConfig.from_dict({"table": {"metrics": ["acc"]}}).table.metrics == ("acc",)


def test_a_folder_without_a_model_is_refused(tmp_path, evaluated):
    from apertus.evaluate.lmeval import run_suite

    with pytest.raises(ApertusError, match=r"no config\.json"):
        run_suite(tmp_path, evaluated["tasks"], LmEvalOptions.from_dict({}), tmp_path / "out")
