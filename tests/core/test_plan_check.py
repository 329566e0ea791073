"""Cross-field config checks (apertus.plan_check): each wrong config is refused before any job,
with a message naming the key path; the default config and the presets pass."""

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
    "configfile", [None, "config/presets/apertus-8b.yaml", "config/presets/apertus-70b.yaml"]
)
def test_default_and_presets_pass(configfile):
    files = [REPO_ROOT / configfile] if configfile else []
    assert plan_problems(load_config(files)) == []


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
