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
from apertus.core.diskcache import JsonCache
from apertus.evaluate.lmeval import (
    Invocation,
    LmEvalOptions,
    SuiteEntry,
    _tree_key,
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


# --------------------------------------------------------------------------------------------
# The instruct suite: chat models through their chat template

CHAT_TASK = """\
task: chat_answer
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}}}
test_split: test
output_type: generate_until
doc_to_text: question
doc_to_target: answer
generation_kwargs: {{until: ["QQQQ"], max_gen_toks: 12, do_sample: false}}
metric_list:
  - {{metric: exact_match, aggregation: mean, higher_is_better: true}}
metadata: {{version: 1.0}}
"""
CHOICE_TASK = """\
task: chat_choice
dataset_path: json
dataset_kwargs:
  data_files: {{test: {data}}}
test_split: test
output_type: multiple_choice
doc_to_text: question
doc_to_choice: choices
doc_to_target: gold
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
metadata: {{version: 1.0}}
"""


def greedy_tokens(model_dir: Path, context: str, n: int) -> list[int]:
    """`n` greedy tokens after `context` (which starts with <s>), no end token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(context, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=3
        )
    return out[0, ids.shape[1] :].tolist()


@pytest.fixture(scope="module")
def chat_run(evaluated, tmp_path_factory):
    """A chat export of the tiny model (its generation ending at </s>, <|assistant_end|> and,
    to see the stop work on a random model, the token it writes fourth), a generative and a
    multiple-choice task, and one run of the instruct step."""
    import shutil

    from transformers import AutoTokenizer

    from apertus.evaluate.lmeval import END_OF_TURN

    root = tmp_path_factory.mktemp("instruct")
    model = Path(shutil.copytree(evaluated["model"], root / "model"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    question = "Where is the house by the river?"
    context = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    tokens = greedy_tokens(model, context, 12)
    # The first token (after two) not written before: the random model stops there.
    k = next(i for i in range(2, 12) if tokens[i] not in tokens[:i] and tokens[i] > 3)
    end = tokenizer.get_vocab()[END_OF_TURN]
    (model / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": [2, end, tokens[k]], "pad_token_id": 3})
    )
    tasks = root / "tasks"
    tasks.mkdir()
    rows = {"answer": [{"question": question, "answer": "By the river."}]}
    rows["choice"] = [
        {"question": "Where is the house?", "choices": ["the mountain", "the water"], "gold": 0},
        {"question": "When do we travel?", "choices": ["today", "tomorrow"], "gold": 1},
    ]
    for name, template in (("answer", CHAT_TASK), ("choice", CHOICE_TASK)):
        data = tasks / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows[name]))
        (tasks / f"chat_{name}.yaml").write_text(template.format(data=data))
    config = json.dumps(
        {"instruct": {"tasks": [{"task": "chat_answer"}, {"task": "chat_choice"}], "seed": 3}}
    )
    out = root / "run"
    main(["instruct", "--config", config, "--manifest", str(root / "run.manifest.json"),
          "--model", str(model), "--tasks", str(tasks), "--output", str(out)])  # fmt: skip
    return {
        "root": root,
        "model": model,
        "out": out,
        "context": context,
        "tokens": tokens[:k],
        "stop": tokens[k],
        "end": end,
        "tokenizer": tokenizer,
    }


def test_instruct_requests_go_through_the_chat_template(chat_run):
    (answer,) = samples(chat_run["out"], "chat_answer")
    assert answer["arguments"][0][0] == chat_run["context"]
    assert chat_run["context"].startswith("<s><|user_start|>")
    assert chat_run["context"].endswith("<|assistant_start|>")
    choices = samples(chat_run["out"], "chat_choice")
    contexts = {context for row in choices for context, _ in row["arguments"]}
    assert all(c.startswith("<s><|user_start|>") for c in contexts)
    assert all(c.endswith("<|assistant_start|>") for c in contexts)
    data = results(chat_run["out"], 0)
    assert data["fewshot_as_multiturn"] is True and "<|assistant_start|>" in data["chat_template"]


def test_instruct_generation_stops_at_the_exports_end_tokens(chat_run):
    """The answer is the greedy tokens up to the first of generation_config's end ids, that
    one included (generate keeps it; <|assistant_end|>, a special token, is decoded away)."""
    (answer,) = samples(chat_run["out"], "chat_answer")
    tokens, stop = chat_run["tokens"], chat_run["stop"]
    decode = chat_run["tokenizer"].decode
    assert answer["resps"][0][0] == decode([*tokens, stop], skip_special_tokens=True)
    assert decode([stop]) and not decode([chat_run["end"]], skip_special_tokens=True)


def test_gen_kwargs_cap_every_generation_of_the_step_and_its_command(chat_run, tmp_path):
    """`gen_kwargs: {max_gen_toks: 1}`: the answer is the first greedy token (the model would
    write more before its stop token), in the step and in its command.sh."""
    config = json.dumps(
        {"instruct": {"tasks": [{"task": "chat_answer"}], "gen_kwargs": {"max_gen_toks": 1}}}
    )
    out = tmp_path / "run"
    main(["instruct", "--config", config, "--manifest", str(tmp_path / "run.manifest.json"),
          "--model", str(chat_run["model"]), "--tasks", str(chat_run["root"] / "tasks"),
          "--output", str(out)])  # fmt: skip
    (answer,) = samples(out, "chat_answer")
    tokens = chat_run["tokens"]
    assert len(tokens) > 1
    assert answer["resps"][0][0] == chat_run["tokenizer"].decode(tokens[:1])
    assert """--gen_kwargs '{"max_gen_toks": 1}'""" in (out / "command.sh").read_text()


def test_instruct_step_writes_its_scores_and_command(chat_run):
    manifest = json.loads((chat_run["root"] / "run.manifest.json").read_text())
    scores = manifest["summary"]["scores"]
    assert set(scores) == {"chat_answer", "chat_choice"}
    assert 0.0 <= scores["chat_choice"]["acc"] <= 1.0
    command = (chat_run["out"] / "command.sh").read_text()
    assert "--apply_chat_template --fewshot_as_multiturn true" in command


def test_the_instruct_suite_refuses_a_model_that_is_not_a_chat_export(evaluated, tmp_path):
    from apertus.evaluate.lmeval import InstructOptions, run_suite

    options = InstructOptions.from_dict({"tasks": [{"task": "apertus_mc_de"}]})
    with pytest.raises(ApertusError, match=r"does not end at <\|assistant_end\|>.*--chat"):
        run_suite(evaluated["model"], evaluated["tasks"], options, tmp_path / "out")


def test_unknown_task_names_are_refused_by_key_path_before_any_task_loads(manager):
    suite = [SuiteEntry("apertus_mc_de"), SuiteEntry("apertus_mc_dee"), SuiteEntry("ifevl")]
    with pytest.raises(ApertusError) as error:
        plan_invocations(suite, manager, "evaluate.instruct")
    lines = str(error.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("evaluate.instruct.tasks[1] is 'apertus_mc_dee'")
    assert "did you mean 'apertus_mc_de'" in lines[0]
    assert lines[1].startswith("evaluate.instruct.tasks[2] is 'ifevl'")
    assert "evaluate.instruct.include_defaults" in lines[1]


def test_an_unknown_instruct_task_is_an_error_line_of_the_step(
    chat_run, evaluated, tmp_path, capsys
):
    from apertus.core.stage import run_main

    config = json.dumps({"instruct": {"tasks": [{"task": "no_such_task"}]}})
    argv = ["instruct", "--config", config, "--manifest", str(tmp_path / "m.json"),
            "--model", str(chat_run["model"]), "--tasks", str(evaluated["tasks"]),
            "--output", str(tmp_path / "out")]  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        run_main(main, argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "error: evaluate.instruct.tasks[0] is 'no_such_task'" in err
    assert not (tmp_path / "out").exists()  # refused before anything was run


@pytest.mark.parametrize(
    "config, message",
    [
        ({"batch_size": 0}, r"^evaluate\.instruct\.batch_size"),
        ({"confirm_run_unsafe_code": "yes"}, r"instruct\.confirm_run_unsafe_code"),
        ({"metadata": [1]}, r"instruct\.metadata"),
        ({"gen_kwargs": {"until": [["x"]]}}, r"instruct\.gen_kwargs\.until must be a string"),
        ({"tasks": [{"task": "ifeval", "shots": 5}]}, r"instruct\.tasks\[0\]: unknown key"),
    ],
)
def test_bad_instruct_options_are_refused_by_their_key(config, message):
    with pytest.raises(ApertusError, match=message):
        EvaluateConfig.from_dict({"instruct": config})


def test_the_instruct_suite_is_off_by_default_and_keys_match_the_suite():
    cfg = EvaluateConfig.from_dict({})
    assert cfg.instruct.tasks == () and cfg.instruct.chat_template
    assert not cfg.suite.chat_template and not cfg.instruct.confirm_run_unsafe_code
    assert cfg.instruct.batch_size == cfg.suite.batch_size and cfg.instruct.metadata == {}


def test_instruct_command_arguments_round_trip_through_lm_evals_parser(evaluated, monkeypatch):
    from lm_eval._cli.harness import HarnessCLI

    from apertus.evaluate.lmeval import InstructOptions

    options = InstructOptions.from_dict(
        {
            "tasks": [{"task": "ruler"}],
            "confirm_run_unsafe_code": True,
            "metadata": {"max_seq_lengths": [4096, 8192]},
            "gen_kwargs": {"max_gen_toks": 64, "temperature": 0.0},
        }
    )
    invocation = Invocation(("humaneval_instruct", "ruler"), None, None, True)
    words = lm_eval_command(invocation, evaluated["model"], None, options, "o.json")
    monkeypatch.setattr("sys.argv", words)
    args = HarnessCLI().parse_args()
    assert args.apply_chat_template is True and args.fewshot_as_multiturn is True
    assert args.confirm_run_unsafe_code is True
    assert args.metadata == {"max_seq_lengths": [4096, 8192]}
    assert args.gen_kwargs == {"max_gen_toks": 64, "temperature": 0.0}


def test_a_task_whose_code_needs_an_absent_package_is_refused_naming_the_extra(monkeypatch):
    """IFEval, MATH and RULER import packages lm-eval does not install: refused before lm-eval
    imports the task, naming the entry, the packages and the project's extra."""
    import importlib.util

    from apertus.evaluate.lmeval import missing_packages

    absent = {"langdetect", "wonderwords"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else object()
    )
    suite = [SuiteEntry("gsm8k"), SuiteEntry("ifeval"), SuiteEntry("ruler")]
    problems = missing_packages(suite, "evaluate.instruct")
    assert problems == [
        "evaluate.instruct.tasks[1] is 'ifeval': its lm-eval task code needs langdetect, not "
        "installed; install them with pip install -e '.[instruct-eval]'",
        "evaluate.instruct.tasks[2] is 'ruler': its lm-eval task code needs wonderwords, not "
        "installed; install them with pip install -e '.[instruct-eval]'",
    ]
    absent.clear()
    assert missing_packages(suite) == []


# --------------------------------------------------------------------------------------------
# The built-in tasks' index, kept between processes


def test_the_kept_index_of_built_in_tasks_gives_lm_evals_own_task_manager(
    evaluated, tmp_path, monkeypatch
):
    """task_manager(include_defaults=True) equals lm-eval's TaskManager over the same folders,
    whether the built-in index is built and kept (cold) or read back (warm); what is read is
    what was kept (a whole entry with a task removed removes it). Broken entries are misses
    (apertus.core.diskcache; tests/core/test_codedigest.py)."""
    from lm_eval.tasks import TaskManager

    folder = tmp_path / "cache"
    monkeypatch.setenv("APERTUS_LMEVAL_CACHE", str(folder))
    expected = TaskManager(include_path=[str(evaluated["tasks"])], include_defaults=True)
    for _ in ("cold", "warm"):
        manager = task_manager(evaluated["tasks"], include_defaults=True)
        assert manager.task_index == expected.task_index
        for listed in ("all_tasks", "all_subtasks", "all_groups", "all_tags"):
            assert getattr(manager, listed) == getattr(expected, listed), listed
    (entry,) = folder.glob("*.json")
    cache = JsonCache(folder)
    planted = cache.get(entry.stem)
    del planted["arc_easy"]
    cache.put(entry.stem, planted)
    assert "arc_easy" not in task_manager(evaluated["tasks"], include_defaults=True).all_tasks


def test_the_index_key_follows_every_task_file(tmp_path):
    """An edited, added or removed file under the task folder gives another key."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "task.yaml").write_text("task: one\n")
    keys = {_tree_key(tmp_path)}
    (tmp_path / "a" / "task.yaml").write_text("task: second\n")  # another size
    keys.add(_tree_key(tmp_path))
    (tmp_path / "b.yaml").write_text("task: three\n")
    keys.add(_tree_key(tmp_path))
    (tmp_path / "a" / "task.yaml").unlink()
    keys.add(_tree_key(tmp_path))
    assert len(keys) == 4
    assert _tree_key(tmp_path) in keys  # and the same tree the same key
