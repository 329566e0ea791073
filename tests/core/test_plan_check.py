"""Cross-field config checks (apertus.plan_check): each wrong config is refused before any job,
with a message naming the key path; the default config and the presets pass."""

from pathlib import Path

import pytest

from apertus.cli import main as cli_main
from apertus.core import REPO_ROOT
from apertus.core.config import ConfigError, dotted_config_args, load_config
from apertus.plan_check import check_plan, plan_problems

# A long-context stage without its steps (each test adds them and closes the mapping).
LONG = (
    "{name: ctx, phase: phase2, seq_len: 256, rope_theta: 1000000, global_batch: 4, lr: 0.001,"
    " warmup_steps: 1"
)


def problems(*overrides):
    return plan_problems(load_config((), overrides))


def one_problem(*overrides):
    found = problems(*overrides)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    "configfiles",
    [
        [],
        ["config/presets/apertus-8b.yaml"],
        ["config/presets/apertus-70b.yaml"],
        ["config/presets/apertus-8b.yaml", "config/presets/apertus-8b-continue.yaml"],
        ["config/presets/apertus-8b.yaml", "config/presets/apertus-8b-posttrain.yaml"],
    ],
    ids=["default", "8b", "70b", "8b-continue", "8b-posttrain"],
)
def test_default_and_presets_pass(configfiles):
    files = [REPO_ROOT / name for name in configfiles]
    assert plan_problems(load_config(files), inputs=False) == []


@pytest.fixture
def hub_reachable(monkeypatch):
    """The Hub not forbidden by this process's environment (the jobs inherit it): only the
    config's `offline` decides."""
    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.mark.parametrize(
    "configfile", ["config/presets/apertus-8b.yaml", "config/presets/apertus-70b.yaml"]
)
def test_a_preset_asks_for_the_quality_head_it_says_to_provide(hub_reachable, configfile):
    # `head: models/quality-head.safetensors   # provide: the heads are not distributed here`;
    # the presets are online, so their Hub ids are taken as they are (no request is made).
    found = plan_problems(load_config([REPO_ROOT / configfile]))
    assert len(found) == 1, found
    assert found[0].startswith("key 'data.quality.head' is 'models/quality-head.safetensors': ")


def test_duplicate_source_names_are_refused_naming_both_places():
    message = problems(
        "data.sources=[{name: web, reader: jsonl, path: sample, kind: web},"
        " {name: web, reader: jsonl, path: sample, kind: edu}]"
    )[0]
    assert message.startswith(
        "key 'data.sources[1].name' is 'web', already at 'data.sources[0].name'"
    )


def test_a_source_named_like_the_probes_is_refused_while_probes_are_planted():
    message = problems(
        "data.sources=[{name: probes, reader: jsonl, path: sample, kind: web}]",
        "tokenize.phases=[{name: phase1, tokens: 300000, seed: 1, weights: {probes: null}}]",
        "pretrain.phases=[phase1]",
        "pretrain.goldfish_control=null",
        "pretrain.long_context=[]",
    )[0]
    assert "key 'data.sources[0].name' is 'probes', already at 'data.probes.enabled'" in message


def test_duplicate_phase_names_are_refused():
    message = problems(
        "tokenize.phases=[{name: phase1, tokens: 300000, seed: 1, weights: {web: null}},"
        " {name: phase1, tokens: 1000, seed: 2, weights: {code: null}}]"
    )[0]
    assert (
        "key 'tokenize.phases[1].name' is 'phase1', already at 'tokenize.phases[0].name'" in message
    )


def test_duplicate_pretrain_stage_names_are_refused():
    assert "key 'pretrain.phases[1]' is 'phase1', already at 'pretrain.phases[0]'" in one_problem(
        "pretrain.phases=[phase1, phase1]", "pretrain.goldfish_control=phase1"
    )
    message = one_problem(f"pretrain.long_context=[{LONG.replace('ctx', 'phase1')}, steps: 2}}]")
    assert (
        "key 'pretrain.long_context[0].name' is 'phase1', already at 'pretrain.phases[0]'"
        in message
    )
    # Exported and evaluated under the same name as the SFT checkpoint.
    message = one_problem(f"pretrain.long_context=[{LONG.replace('ctx', 'sft')}, steps: 2}}]")
    assert "key 'pretrain.long_context[0].name' is 'sft'" in message
    message = one_problem(
        f"pretrain.long_context=[{LONG}, steps: 2}}, {LONG}, steps: 2}}]",
    )
    assert (
        "'pretrain.long_context[1].name' is 'ctx', already at 'pretrain.long_context[0].name'"
        in message
    )


def test_duplicate_suite_tasks_and_heuristic_families_are_refused():
    message = one_problem("evaluate.suite.tasks=[{task: apertus_mc}, {task: apertus_mc}]")
    assert "key 'evaluate.suite.tasks[1].task' is 'apertus_mc'" in message
    message = one_problem("data.heuristics.families=[c4, c4]")
    assert (
        "key 'data.heuristics.families[1]' is 'c4', already at 'data.heuristics.families[0]'"
        in message
    )


def test_a_weight_naming_an_unknown_source_is_refused():
    message = one_problem(
        "tokenize.phases=[{name: phase1, tokens: 300000, seed: 1, weights: {wbe: null}},"
        " {name: phase2, tokens: 200000, seed: 2, weights: {web: null}}]"
    )
    assert message.startswith("key 'tokenize.phases[0].weights.wbe' is 'wbe'")
    assert "(did you mean 'web'?)" in message
    message = one_problem("data.probes.enabled=false", "pretrain.goldfish_control=null")
    assert "key 'tokenize.phases[1].weights.probes'" in message
    assert "needs data.probes.enabled" in message


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            ["pretrain.phases=[phase1, phase3]", "pretrain.goldfish_control=null"],
            "pretrain.phases[1]",
        ),
        (
            [f"pretrain.long_context=[{LONG.replace('phase2', 'phase9')}, steps: 2}}]"],
            "pretrain.long_context[0].phase",
        ),
        (["pretrain.goldfish_control=phase7"], "pretrain.goldfish_control"),
        (["posttrain.sft_data.replay.phase=phase3"], "posttrain.sft_data.replay.phase"),
    ],
)
def test_a_reference_to_a_missing_phase_is_refused(overrides, named):
    message = one_problem(*overrides)
    assert message.startswith(f"key '{named}' is ")
    assert "not one of" in message


def test_a_goldfish_control_without_goldfish_is_refused():
    message = one_problem("pretrain.goldfish.enabled=false")
    assert message.startswith("key 'pretrain.goldfish_control' is 'phase2', but Goldfish is off")


def test_a_global_batch_that_does_not_split_over_the_ranks_is_refused():
    message = one_problem("pretrain.global_batch=12")
    assert message.startswith("key 'pretrain.global_batch' is 12: not divisible by micro_batch 8")
    found = problems("pretrain.nproc=3")
    assert any(m.startswith("key 'pretrain.batch_ramp.global_batch' is 16") for m in found)
    assert any(m.startswith("key 'pretrain.long_context[0].global_batch' is 4") for m in found)
    message = one_problem("pretrain.tensor_parallel=2")
    assert message.startswith("key 'pretrain.tensor_parallel' is 2: it does not divide the 1 rank")


def test_a_long_context_stage_the_phase_cannot_feed_is_refused():
    # phase2 plans 200000 tokens: 778 windows of 257 tokens, not 1000 x 4 sequences.
    message = one_problem(f"pretrain.long_context=[{LONG}, steps: 1000}}]")
    assert message.startswith("pretrain.long_context[0] ('ctx'): tokenize.phases[1] 'phase2'")
    assert "778 windows" in message and "4000 sequences" in message


def test_a_phase_too_small_for_one_batch_is_refused():
    message = one_problem(
        "tokenize.phases=[{name: phase1, tokens: 1000, seed: 1, weights: {web: null}},"
        " {name: phase2, tokens: 200000, seed: 2, weights: {probes: all, web: null}}]"
    )
    assert message.startswith("key 'tokenize.phases[0].tokens' is 1000: 7 windows")


def test_the_run_specs_own_checks_run_before_any_job():
    # A warmup longer than all the phases' steps leaves no room for the cooldown (RunSpec).
    message = one_problem("pretrain.lr.warmup_steps=100000")
    assert message.startswith("pretrain: lr.warmup_steps + lr.decay_steps")


def test_typed_sections_and_phase_specs_are_built_before_any_job():
    message = one_problem("evaluate.suite.model_args={device: cuda}")
    assert message.startswith("evaluate.suite.model_args sets device")
    message = one_problem(
        "tokenize.phases=[{name: phase1, tokens: 300000, seed: 1, weights: {web: null}},"
        " {name: phase2, tokens: 200000, seed: 2, weights: {web: 0.7, code: null, probes: 0.5}}]"
    )
    assert message.startswith("tokenize.phases[1]: phase 'phase2': with natural-share sources")


def test_an_unknown_heuristic_option_is_refused_from_the_filters_signature():
    message = one_problem("data.heuristics.options.gopher_quality={min_doc_wordz: 3}")
    assert message.startswith(
        "data.heuristics.options.gopher_quality: unknown option(s) min_doc_wordz"
    )
    assert "min_doc_words" in message  # a real GopherQualityFilter argument is listed
    message = one_problem("data.heuristics.languages=[xx_bogus]")
    assert message.startswith("data.heuristics.languages: language label(s) xx_bogus")


def test_a_verification_longer_than_a_stage_is_refused():
    message = one_problem("export.verify.seq_len=200")
    assert message.startswith("key 'export.verify.seq_len' is 200, longer than the 128 positions")


@pytest.mark.parametrize(
    ("value", "ok"),
    [(8, True), ("auto", True), ("auto:4", True), ("big", False), (0, False), ("auto:", False)],
)
def test_lm_eval_batch_size_is_what_lm_eval_accepts(value, ok):
    override = f"evaluate.suite.batch_size={value}"
    if ok:
        load_config((), [override])
        return
    with pytest.raises(ConfigError, match=r"key 'evaluate\.suite\.batch_size'"):
        load_config((), [override])


def test_check_plan_raises_one_config_error_listing_every_problem():
    config = load_config(
        (), ["pretrain.global_batch=12", "evaluate.suite.tasks=[{task: a}, {task: a}]"]
    )
    with pytest.raises(ConfigError) as info:
        check_plan(config, sources=["config/config.yaml"])
    text = str(info.value)
    assert text.startswith("invalid configuration (merged from config/config.yaml):\n  - ")
    assert "evaluate.suite.tasks[1].task" in text


def test_cli_check_runs_the_cross_field_checks(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["config", "check", "pretrain.global_batch=12"])
    assert exit_info.value.code == 2
    assert "key 'pretrain.global_batch' is 12" in capsys.readouterr().err


def test_cli_check_refuses_an_empty_config_file(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["config", "check", "--configfile", str(empty)])
    assert exit_info.value.code == 2
    assert f"error: config file {empty}: empty" in capsys.readouterr().err


def test_dotted_keys_in_snakemakes_config_are_refused_with_the_way_out():
    dotted_config_args(["-n", "--config", "run=x", "offline=false", "--cores", "1"])
    for args in (
        ["--config", "run=x", "pretrain.lr.peak=1e-3"],
        ["--config=a.b=1"],
        ["-C", "a.b=1"],
    ):
        with pytest.raises(ConfigError, match=r"apertus run .*--configfile"):
            dotted_config_args(args)


def test_a_heldout_minimum_above_its_maximum_is_refused():
    message = one_problem("tokenize.heldout.min_documents=50", "tokenize.heldout.max_documents=3")
    assert message == (
        "key 'tokenize.heldout.min_documents' is 50: more than tokenize.heldout.max_documents 3"
    )


def test_apertus_run_passes_snakemakes_arguments_and_targets_through(monkeypatch, tmp_path):
    """`apertus run KEY=VALUE -- ARGS [-- TARGETS]`: the overrides' config file goes in before
    the user's own `--` (after it every word is a target), else after their arguments."""
    import apertus.cli as cli

    commands = []

    def record(command, cwd):
        commands.append(command)
        return 0

    monkeypatch.setattr(cli, "run_until_stopped", record)
    target = str(tmp_path / "manifest.json")
    assert cli.run(["run", "pretrain.seq_len=64", "--", "--cores", "1", "--", target]) == 0
    *_, cores, one, flag, overrides, separator, last = commands[-1]
    assert [cores, one, flag, separator, last] == ["--cores", "1", "--configfile", "--", target]
    assert "overrides-" in overrides and overrides.endswith(".yaml")
    assert cli.run(["run", "pretrain.seq_len=64", "--", "--cores", "1", target]) == 0
    assert commands[-1][-5:] == ["--cores", "1", target, "--configfile", overrides]


# ---------------------------------------------------------------------------------------------
# Inputs (apertus.plan_inputs): every path, Hub id, model, task name and checkpoint the config
# names is found as its job finds it, or refused naming its key, before any job.

LMEVAL_TASK = """task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: /nonexistent/rows.jsonl}}}}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
"""


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """Empty Hugging Face caches of the test's own (no entry of the machine's counts), a cache
    of lm-eval names of its own, and inputs to name: a missing path, an empty folder, a plain
    file, a model folder (config.json and tokenizer files), a folder of text files only, a
    folder of one lm-eval task (`my_task`) and a corrupt `step-4` checkpoint."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("APERTUS_LMEVAL_CACHE", str(tmp_path / "lm-eval-names"))
    places = {"@MISSING": tmp_path / "nonexistent" / "thing"}
    places["@EMPTY"] = tmp_path / "empty"
    places["@EMPTY"].mkdir()
    places["@FILE"] = tmp_path / "plain.txt"
    places["@FILE"].write_text("not a model\n")
    model = places["@MODEL"] = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (model / name).write_text("{}\n")
    texts = places["@TEXTS"] = tmp_path / "texts"
    texts.mkdir()
    (texts / "notes.txt").write_text("hello\n")
    tasks = places["@TASKS"] = tmp_path / "lm-eval-tasks"
    tasks.mkdir()
    (tasks / "my_task.yaml").write_text(LMEVAL_TASK.format(name="my_task"))
    step = tmp_path / "ckpt" / "step-4"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"not a pickle")
    places["@CKPT"] = step
    return places


def cache_hub_model(cache: str, repo_id: str, files: list[str]) -> None:
    """`files` of the model `repo_id` in the Hugging Face cache's layout (refs/main names the
    snapshot), as a download leaves them."""
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    for name in files:
        (repo / "snapshots" / ("0" * 40) / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / "snapshots" / ("0" * 40) / name).write_text("{}\n")


def placed(overrides, places):
    out = []
    for override in overrides:
        for mark, path in places.items():
            override = override.replace(mark, str(path))
        out.append(override)
    return out


def sources(web_path, reader="jsonl", extra=""):
    return (
        f"data.sources=[{{name: web, reader: {reader}, path: '{web_path}', kind: web{extra}}},"
        " {name: edu, reader: jsonl, path: sample, kind: edu},"
        " {name: code, reader: jsonl, path: sample, kind: code}]"
    )


JUDGE = "posttrain.qrpo_data.reward={kind: judge, model: '@MODEL'"
XLMR = "data.quality.backend=xlmr"

# (the key the refusal names, the overrides): each config passes the schema and the cross-field
# checks, and would fail only when the job that reads the input starts.
HOSTILE = [
    ("tokenize.tokenizer.source", ["tokenize.tokenizer.source=@MISSING"]),
    ("tokenize.tokenizer.source", ["tokenize.tokenizer.source=/x/y"]),
    ("tokenize.tokenizer.source", ["tokenize.tokenizer.source=swiss-ai/Apertus-8B-2509"]),
    ("tokenize.tokenizer.source", ["tokenize.tokenizer.source=@EMPTY"]),
    ("tokenize.tokenizer.source", ["tokenize.tokenizer.source=@FILE"]),
    ("pretrain.restart.checkpoint", ["pretrain.restart={stage: phase1, checkpoint: '@MISSING'}"]),
    ("pretrain.restart.checkpoint", ["pretrain.restart={stage: phase2, checkpoint: '@EMPTY'}"]),
    ("pretrain.restart.checkpoint", ["pretrain.restart={stage: phase1, checkpoint: '@CKPT'}"]),
    ("data.robots.directory", ["data.robots.directory=@MISSING"]),
    ("data.language.model_path", ["data.language.model_path=@MISSING"]),
    ("data.language.model_path", ["data.language.model_path=@EMPTY"]),
    ("data.language.backend", ["data.language.backend=glotlid"]),
    ("data.sources[0].path", [sources("@MISSING")]),
    ("data.sources[0].path", [sources("@TEXTS", extra=", glob: '**/*.jsonl.gz'")]),
    ("data.sources[0].path", [sources("hf://datasets/HuggingFaceFW/fineweb-edu/data")]),
    ("data.sources[0].path", [sources("HuggingFaceFW/fineweb-edu", reader="huggingface")]),
    ("data.sources[0].path", ["offline=false", sources("@MISSING", reader="huggingface")]),
    (
        "data.sources[3].path",
        [sources("sample")[:-1] + ", {name: books, reader: jsonl, path: sample, kind: books}]"],
    ),
    ("data.quality.labels", ["data.quality.labels=@MISSING"]),
    ("data.toxicity.labels", ["data.toxicity.labels=@EMPTY"]),
    ("data.quality.encoder", [XLMR, "data.quality.encoder=@MISSING"]),
    ("data.quality.encoder", [XLMR]),  # FacebookAI/xlm-roberta-base, not cached, offline
    ("data.toxicity.encoder", ["data.toxicity.backend=xlmr", "data.toxicity.encoder=@TEXTS"]),
    ("data.quality.head", [XLMR, "data.quality.encoder=@MODEL", "data.quality.head=@MISSING"]),
    (
        "data.toxicity.labels",
        [
            "data.toxicity.backend=xlmr",
            "data.toxicity.encoder=@MODEL",
            "data.toxicity.labels=hf://datasets/PleIAs/ToxicCommons",
        ],
    ),
    ("evaluate.suite.tasks[1]", ["evaluate.suite.tasks=[{task: apertus_mc}, {task: hellaswag}]"]),
    ("evaluate.suite.tasks[0]", ["evaluate.suite.tasks=[{task: apertus_mcc}]"]),
    (
        "evaluate.suite.tasks[0]",
        ["evaluate.tasks.mc.languages=[de]", "evaluate.suite.tasks=[{task: apertus_mc_fr}]"],
    ),
    (
        "evaluate.suite.tasks[0]",
        ["evaluate.suite.include_path=@TASKS", "evaluate.suite.tasks=[{task: my_taks}]"],
    ),
    ("evaluate.suite.include_path", ["evaluate.suite.include_path=@MISSING"]),
    ("evaluate.suite.include_path", ["evaluate.suite.include_path=@FILE"]),
    ("evaluate.suite.data_home", ["evaluate.suite.data_home=@MISSING"]),
    ("evaluate.instruct.tasks[0]", ["evaluate.instruct.tasks=[{task: ifevall}]"]),
    (
        "evaluate.instruct.include_path",
        ["evaluate.instruct.include_path=@MISSING", "evaluate.instruct.tasks=[{task: apertus_mc}]"],
    ),
    ("posttrain.instructions.source.jsonl", ["posttrain.instructions.source={jsonl: '@MISSING'}"]),
    ("posttrain.instructions.source.hub", ["posttrain.instructions.source={hub: swiss-ai/sft}"]),
    ("posttrain.instructions.source.jsonl", ["posttrain.instructions.source={jsonl: '@EMPTY'}"]),
    (
        "posttrain.instructions.source.hub",
        ["offline=false", "posttrain.instructions.source={hub: '@MISSING'}"],
    ),
    ("posttrain.qrpo_data.reward.model", ["posttrain.qrpo_data.reward={kind: judge}"]),
    ("posttrain.qrpo_data.reward.model", ["posttrain.qrpo_data.reward={kind: reward_model}"]),
    ("posttrain.qrpo_data.reward.model", ["posttrain.qrpo_data.reward={kind: chrf, model: x}"]),
    (
        "posttrain.qrpo_data.reward",
        [JUDGE + ", rubric: be kind, rubric_file: config/charter/swiss-ai-charter.md}"],
    ),
    ("posttrain.qrpo_data.reward.model", [JUDGE.replace("@MODEL", "@MISSING") + "}"]),
    ("posttrain.qrpo_data.reward.model", [JUDGE.replace("@MODEL", "Qwen/Qwen2.5-32B") + "}"]),
    ("posttrain.qrpo_data.reward.model", [JUDGE.replace("@MODEL", "@EMPTY") + "}"]),
    ("posttrain.qrpo_data.reward.rubric_file", [JUDGE + ", rubric_file: '@MISSING'}"]),
    ("posttrain.qrpo_data.reward.template_file", [JUDGE + ", template_file: '@MISSING'}"]),
    ("posttrain.qrpo_data.reward.template_file", [JUDGE + ", template_file: '@FILE'}"]),
    (
        "posttrain.qrpo_data.rewards_by_category.controversial.model",
        ["posttrain.qrpo_data.rewards_by_category={controversial: {kind: judge}}"],
    ),
    (
        "posttrain.qrpo_data.rewards_by_category.controversial.rubric_file",
        [
            "posttrain.qrpo_data.rewards_by_category={controversial: {kind: judge, "
            "model: '@MODEL', rubric_file: config/charter/no-such-charter.md}}"
        ],
    ),
    ("release.hub.repo_id", ["release.hub.repo_id=swiss-ai/apertus-tiny"]),
]


@pytest.mark.parametrize(
    ("key", "overrides"), HOSTILE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(HOSTILE)]
)
def test_a_missing_input_is_refused_before_any_job_naming_its_key(inputs, key, overrides):
    config = load_config((), placed(overrides, inputs))
    assert plan_problems(config, inputs=False) == []  # only the input is wrong
    found = plan_problems(config)
    assert len(found) == 1, found
    assert found[0].startswith((f"key '{key}' is ", f"{key}: ", f"{key} ")), found[0]


GOOD = [
    ["tokenize.tokenizer.source=@MODEL"],
    ["data.robots.enabled=false", "data.robots.directory=@MISSING"],
    ["data.quality.enabled=false", "data.quality.labels=@MISSING"],
    [XLMR, "data.quality.encoder=@MODEL", "data.quality.head=@FILE"],
    ["evaluate.suite.include_path=@TASKS", "evaluate.suite.tasks=[{task: my_task}]"],
    ["evaluate.suite.tasks=[{task: apertus_mc_de}, {task: apertus_ppl}]"],
    ["posttrain.enabled=false", "posttrain.qrpo_data.reward={kind: judge}"],
    ["posttrain.instructions.source={jsonl: '@FILE'}"],
    [JUDGE + ", rubric_file: config/charter/swiss-ai-charter.md}"],
    ["release.hub.repo_id=swiss-ai/apertus-tiny", "release.hub.dry_run=true"],
    [sources("@TEXTS", extra=", glob: '*.txt'")],
]


@pytest.mark.parametrize("overrides", GOOD)
def test_inputs_that_are_there_pass(inputs, overrides):
    assert plan_problems(load_config((), placed(overrides, inputs))) == []


def test_offline_a_hub_id_passes_from_the_cache_and_online_without_a_request(inputs, hub_reachable):
    from huggingface_hub import constants

    hub_id = "tokenize.tokenizer.source=swiss-ai/Apertus-8B-2509"
    assert plan_problems(load_config((), ["offline=false", hub_id])) == []
    cache_hub_model(constants.HF_HUB_CACHE, "swiss-ai/Apertus-8B-2509", ["tokenizer.json"])
    assert plan_problems(load_config((), [hub_id])) == []
    # A reward model needs its config.json there; the tokenizer's files are not the model.
    found = plan_problems(
        load_config(
            (), ["posttrain.qrpo_data.reward={kind: reward_model, model: swiss-ai/Apertus-8B-2509}"]
        )
    )
    assert len(found) == 1 and "not in the Hugging Face cache" in found[0]


def test_relative_paths_resolve_from_the_jobs_working_directory(inputs, tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}\n")
    config = load_config((), ["tokenize.tokenizer.source=tok"])
    assert plan_problems(config, directory=tmp_path) == []
    assert plan_problems(config, directory=inputs["@EMPTY"])[0].startswith(
        "key 'tokenize.tokenizer.source' is 'tok': "
    )


def test_lm_eval_names_are_cached_by_the_include_paths_contents(inputs, monkeypatch):
    import apertus.evaluate.lmeval as lmeval
    from apertus.plan_inputs import lm_eval_task_names

    folder = str(inputs["@TASKS"])
    assert "my_task" in lm_eval_task_names(False, folder)
    built = []
    real = lmeval.task_manager
    monkeypatch.setattr(lmeval, "task_manager", lambda *a: built.append(a) or real(*a))
    assert "my_task" in lm_eval_task_names(False, folder)
    assert built == []  # read from the cache
    (inputs["@TASKS"] / "other.yaml").write_text(LMEVAL_TASK.format(name="other_task"))
    assert "other_task" in lm_eval_task_names(False, folder)
    assert len(built) == 1  # a changed folder is indexed again


def test_cli_check_prints_an_error_line_naming_the_missing_input(inputs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["config", "check", f"tokenize.tokenizer.source={inputs['@MISSING']}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "key 'tokenize.tokenizer.source' is " in err


def test_with_include_defaults_a_name_is_looked_up_in_lm_evals_builtin_index(
    inputs, hub_reachable, tmp_path, monkeypatch
):
    """The built-in index stands in for lm-eval's (14,700 files, seconds to build): a folder
    holding `hellaswag`, indexed by lm-eval's own TaskIndex."""
    from lm_eval.tasks import _index as lm_index

    import apertus.evaluate.lmeval as lmeval

    builtin = tmp_path / "builtin"
    builtin.mkdir()
    (builtin / "hellaswag.yaml").write_text(LMEVAL_TASK.format(name="hellaswag"))
    # A task reading a Hub dataset, in a group: offline, the dataset must be in the cache.
    hub_task = LMEVAL_TASK.format(name="arc_easy").replace(
        "dataset_path: json", "dataset_path: allenai/ai2_arc"
    )
    (builtin / "arc_easy.yaml").write_text(hub_task)
    (builtin / "arc.yaml").write_text("group: arc\ntask: [arc_easy, hellaswag]\n")
    monkeypatch.setattr(lmeval, "builtin_index", lambda: lm_index.TaskIndex.build([builtin]))
    defaults = "evaluate.suite.include_defaults=true"
    found = plan_problems(load_config((), [defaults, "evaluate.suite.tasks=[{task: hellaswagg}]"]))
    assert len(found) == 1 and found[0].startswith("evaluate.suite.tasks[0] is 'hellaswagg'")
    assert "(did you mean 'hellaswag'?)" in found[0]
    good = [defaults, "evaluate.suite.tasks=[{task: hellaswag}, {task: apertus_ppl}]"]
    assert plan_problems(load_config((), good)) == []
    found = plan_problems(load_config((), [defaults, "evaluate.suite.tasks=[{task: arc}]"]))
    assert len(found) == 1 and found[0].startswith("evaluate.suite.tasks[0] is 'arc': ")
    assert "allenai/ai2_arc (arc_easy) are not in the Hugging Face cache" in found[0]
    # Online (the config's and the suite's offline off), lm-eval downloads it.
    online = [defaults, "offline=false", "evaluate.suite.offline=false"]
    assert plan_problems(load_config((), [*online, "evaluate.suite.tasks=[{task: arc}]"])) == []
