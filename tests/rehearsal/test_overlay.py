"""The rehearsal overlays (config/rehearsal/apertus-8b.yaml, apertus-70b.yaml) change only sizes
and locations: each real overlay passes the drift check, a copy with a recipe key changed fails
naming that key, the merged configuration is valid, and its dry run plans the preset's whole
pipeline. The 8B overlay is the one whose whole run is rehearsed (test_rehearsal.py), and the one
tried with every kind of recipe change; the 70B overlay with a few, those a copy of the 8B
overlay would get wrong among them."""

from __future__ import annotations

import copy
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from apertus.audit.explain import explain_changes
from apertus.core.config import load_config
from apertus.plan_check import plan_problems
from apertus.rehearsal import data
from apertus.rehearsal.overlay import (
    DEVICE_DIFFERENCES,
    INPUT_KEYS,
    STANDIN_ROOT,
    changes,
    dotted_key,
    drift,
    matches,
    overlay_drift,
)
from tests.conftest import REPO, run_tool
from tests.rehearsal.background import OVERLAY, PRESET, PROFILE

PROFILE_FILE = "config.v8+.yaml"
# Each preset with its rehearsal overlay, by the preset's name.
REHEARSALS = {
    "apertus-8b": (PRESET, OVERLAY),
    "apertus-70b": (
        REPO / "config" / "presets" / "apertus-70b.yaml",
        REPO / "config" / "rehearsal" / "apertus-70b.yaml",
    ),
}


@pytest.mark.parametrize("name", sorted(REHEARSALS))
def test_the_real_overlay_changes_only_sizes_and_locations(name):
    preset_file, overlay_file = REHEARSALS[name]
    assert overlay_drift(preset_file, overlay_file) == []
    # ... and it does change the preset: sizes, and every Hub data source's location.
    preset = load_config([preset_file])
    keys = {dotted_key(k) for k, _, _ in changes(preset, load_config([preset_file, overlay_file]))}
    assert {"pretrain.flavor", "pretrain.device", "data.probes.words"} <= keys
    for source in preset["data"]["sources"]:
        if source["path"].startswith("hf://"):
            assert f"data.sources[{source['name']}].path" in keys


def test_the_overlay_names_what_the_cpu_changes_without_a_key():
    """The numerics keys are the preset's (`RECIPE_CHANGES` below tries them); what a CPU device
    changes in the code is named in the 8B overlay's header, each with its reason."""
    header = "\n".join(line for line in OVERLAY.read_text().splitlines() if line.startswith("#"))
    words = {"attention": "FlexAttention", "kernels": "Triton", "collectives": "gloo",
             "bf16": "emulated"}  # fmt: skip
    assert set(words) == set(DEVICE_DIFFERENCES)
    for what, word in words.items():
        assert word in header and word in DEVICE_DIFFERENCES[what], what


def _set(path: str, value):
    """A change to the overlay: the mapping key at the dotted `path` set to `value`."""

    def change(overlay: dict, preset: dict) -> None:
        *parents, last = path.split(".")
        node = overlay
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return change


def _entry(section: str, items: str, name: str, key: str, value):
    """A change to one named entry of a list the overlay restates (sources, phases, stages),
    the list copied from the preset where the overlay has none."""

    def change(overlay: dict, preset: dict) -> None:
        entries = overlay.setdefault(section, {}).setdefault(
            items, copy.deepcopy(preset[section][items])
        )
        entry = next(e for e in entries if e["name"] == name)
        if isinstance(entry.get(key), dict) and isinstance(value, dict):
            entry[key] = {**entry[key], **value}
        else:
            entry[key] = value

    return change


def _drop_source(name: str):
    def change(overlay: dict, preset: dict) -> None:
        sources = overlay["data"]["sources"]
        sources[:] = [s for s in sources if s["name"] != name]

    return change


RECIPE_CHANGES = {
    "pretrain.goldfish.k": _set("pretrain.goldfish.k", 4),
    "pretrain.goldfish.h": _set("pretrain.goldfish.h", 13),
    "pretrain.ademamix.betas": _set("pretrain.ademamix.betas", [0.9, 0.99, 0.999]),
    "pretrain.ademamix.alpha": _set("pretrain.ademamix.alpha", 5),
    "pretrain.lr.peak": _set("pretrain.lr.peak", 3.0e-3),
    "pretrain.lr.decay_fraction": _set("pretrain.lr.decay_fraction", 0.2),
    "data.quality.keep_fraction": _set("data.quality.keep_fraction", 0.9),
    "data.toxicity.drop_fraction": _set("data.toxicity.drop_fraction", 0.1),
    "data.toxicity.hub_labels.positive_above": _set("data.toxicity.hub_labels.positive_above", 2),
    "data.language.min_score": _set("data.language.min_score", 0.3),
    "data.probes.exposures": _set("data.probes.exposures", [1, 4, 16]),
    "tokenize.phases[phase3].weights.fineweb-hq": _entry(
        "tokenize", "phases", "phase3", "weights", {"fineweb-hq": 0.3}
    ),
    "tokenize.phases[phase2].seed": _entry("tokenize", "phases", "phase2", "seed", 1),
    "pretrain.long_context[ctx8k].rope_theta": _entry(
        "pretrain", "long_context", "ctx8k", "rope_theta", 500000
    ),
    "pretrain.long_context[ctx16k].lr": _entry("pretrain", "long_context", "ctx16k", "lr", 1e-4),
    "data.sources[fineweb2].glob": _entry("data", "sources", "fineweb2", "glob", "*/*.parquet"),
    "data.sources[wikipedia].text_template": _entry(
        "data", "sources", "wikipedia", "text_template", "{text}"
    ),
    "data.sources[euroblocks]": _drop_source("euroblocks"),
    # The preset's numerics (issue 43): fp32 or eager would rehearse other code paths.
    "pretrain.dtype": _set("pretrain.dtype", "float32"),
    "pretrain.compile": _set("pretrain.compile", False),
    "posttrain.sft.compile": _set("posttrain.sft.compile", False),
    "posttrain.qrpo.dtype": _set("posttrain.qrpo.dtype", "float32"),
    "export.dtype": _set("export.dtype", "float32"),
    "evaluate.suite.dtype": _set("evaluate.suite.dtype", "float32"),
}
# The 70B overlay's: a few of the above, and the 8B values of the keys where the two recipes
# differ (an overlay copied from the 8B one and not restated).
RECIPE_CHANGES_70B = {
    "pretrain.goldfish.k": RECIPE_CHANGES["pretrain.goldfish.k"],
    "pretrain.ademamix.betas": RECIPE_CHANGES["pretrain.ademamix.betas"],
    "pretrain.lr.peak": _set("pretrain.lr.peak", 1.1e-4),
    "pretrain.long_context[ctx64k].rope_theta": _entry(
        "pretrain", "long_context", "ctx64k", "rope_theta", 12000000
    ),
    "pretrain.long_context[ctx8k].lr": _entry("pretrain", "long_context", "ctx8k", "lr", 1.1e-5),
    "tokenize.phases[phase2].weights.fineweb-hq": _entry(
        "tokenize", "phases", "phase2", "weights", {"fineweb-hq": 0.3}
    ),
    "data.sources[euroblocks]": RECIPE_CHANGES["data.sources[euroblocks]"],
}
CHANGES = {"apertus-8b": RECIPE_CHANGES, "apertus-70b": RECIPE_CHANGES_70B}


@pytest.mark.parametrize(
    ("name", "key"), [(name, key) for name in sorted(CHANGES) for key in sorted(CHANGES[name])]
)
def test_an_overlay_changing_a_recipe_key_fails_naming_it(name, key, tmp_path):
    preset_file, overlay_file = REHEARSALS[name]
    overlay = yaml.safe_load(overlay_file.read_text(encoding="utf-8"))
    CHANGES[name][key](overlay, yaml.safe_load(preset_file.read_text(encoding="utf-8")))
    changed = tmp_path / "overlay.yaml"
    changed.write_text(yaml.safe_dump(overlay), encoding="utf-8")
    problems = overlay_drift(preset_file, changed)
    assert [p.split(":")[0] for p in problems] == [key], problems
    assert "neither a size nor a location" in problems[0]


@pytest.mark.parametrize("name", sorted(REHEARSALS))
def test_an_input_redirected_elsewhere_than_a_stand_in_fails(name, tmp_path):
    """A location may change only to a local stand-in: another Hub dataset is another recipe."""
    preset_file, overlay_file = REHEARSALS[name]
    overlay = yaml.safe_load(overlay_file.read_text(encoding="utf-8"))
    flan = next(s for s in overlay["data"]["sources"] if s["name"] == "flan")
    flan["path"] = "hf://datasets/someone/other-flan"
    overlay["data"]["quality"]["encoder"] = "FacebookAI/xlm-roberta-large"
    changed = tmp_path / "overlay.yaml"
    changed.write_text(yaml.safe_dump(overlay), encoding="utf-8")
    problems = overlay_drift(preset_file, changed)
    assert [p.split(":")[0] for p in problems] == [
        "data.sources[flan].path",
        "data.quality.encoder",
    ]
    assert all(f"a stand-in under {STANDIN_ROOT}" in p for p in problems)


def test_drift_matches_list_entries_by_name_not_position():
    preset = {"tokenize": {"phases": [{"name": "a", "tokens": 10}, {"name": "b", "tokens": 20}]}}
    reordered = {"tokenize": {"phases": [{"name": "b", "tokens": 2}, {"name": "a", "tokens": 1}]}}
    assert drift(preset, reordered) == []
    renamed = {"tokenize": {"phases": [{"name": "a", "tokens": 1}, {"name": "c", "tokens": 2}]}}
    assert [p.split(":")[0] for p in drift(preset, renamed)] == [
        "tokenize.phases[b]",
        "tokenize.phases[c]",
    ]


def test_the_rehearsals_share_their_stand_ins():
    """Where the two presets read the same input, the two overlays read the same stand-in: one
    `python -m apertus.rehearsal rehearsal-inputs` serves both."""
    (preset_8b, overlay_8b), (preset_70b, overlay_70b) = (
        REHEARSALS["apertus-8b"],
        REHEARSALS["apertus-70b"],
    )
    presets = {k for k, _, _ in changes(load_config([preset_8b]), load_config([preset_70b]))}
    differ = [
        (dotted_key(k), a, b)
        for k, a, b in changes(
            load_config([preset_8b, overlay_8b]), load_config([preset_70b, overlay_70b])
        )
        if matches(k, INPUT_KEYS) and k not in presets
    ]
    assert differ == []


@pytest.mark.parametrize("name", sorted(REHEARSALS))
def test_the_merged_config_is_valid_and_its_arithmetic_holds(name, tmp_path):
    preset_file, overlay_file = REHEARSALS[name]
    config = load_config([preset_file, overlay_file])
    assert plan_problems(config, inputs=False) == []
    # The inputs it names are the stand-ins `python -m apertus.rehearsal` makes before its run:
    # not made in an empty folder (a session's rehearsal makes them in the checkout), so each
    # is refused there, and nothing else.
    missing = plan_problems(config, directory=tmp_path)
    assert missing and all(STANDIN_ROOT in problem for problem in missing), missing
    proc = run_tool(
        "apertus", "config", "check", "--configfile", Path(preset_file).absolute(),
        "--configfile", Path(overlay_file).absolute(), cwd=tmp_path,
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and STANDIN_ROOT in said, said


def _inputs_in_place(workdir: Path, config: dict) -> None:
    """The model stand-ins `config` names under `workdir` that are not there yet, as empty
    placeholders: a dry run reads none of them."""

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and value.startswith(STANDIN_ROOT):
            path = workdir / value
            if not path.exists():
                if path.suffix:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch()
                else:
                    path.mkdir(parents=True)

    walk(config)


@pytest.fixture(scope="session")
def standins(tmp_path_factory) -> Path:
    """One working directory holding the stand-ins of every dry run below, built once: the
    data ones, the released model (its tokenizer and a transformers-made checkpoint, as
    apertus.rehearsal.models makes them: the plan loads and checks both where a run starts from
    it), the other models as placeholders."""
    from apertus.rehearsal import models

    workdir = tmp_path_factory.mktemp("standins")
    data.build(workdir / STANDIN_ROOT)
    start = workdir / load_config(ADDENDA["posttrain"])["posttrain"]["init_from"]["model"]
    start.mkdir(parents=True)
    models.build_tokenizer(start, models.sample_texts())
    models.build_apertus_checkpoint(start)
    for files in [*map(list, REHEARSALS.values()), *ADDENDA.values()]:
        _inputs_in_place(workdir, load_config(files))
    return workdir


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REHEARSALS))
def test_the_dry_run_plans_the_whole_preset_pipeline(name, standins, tmp_path):
    """`snakemake -n` of the preset with the overlay, in a working directory holding the
    stand-ins: the five phases, the four long-context stages, the classifiers' training, SFT
    and QRPO are all planned (one dry run each, ~10 s)."""
    preset_file, overlay_file = REHEARSALS[name]
    config = load_config([preset_file, overlay_file])
    start = time.monotonic()
    plan = explain_changes(
        [preset_file, overlay_file], results_dir=str(tmp_path / "results"), cwd=standins
    )
    print(f"\n{name} rehearsal: {len(plan.jobs)} jobs planned in {time.monotonic() - start:.1f} s")
    rules = Counter(job.rule for job in plan.jobs)
    stages = {job.wildcards["stage"] for job in plan.jobs if job.rule == "pretrain_stage"}
    assert stages == {
        "phase1",
        "phase2",
        "phase3",
        "phase4",
        "phase5",
        "ctx8k",
        "ctx16k",
        "ctx32k",
        "ctx64k",
    }
    assert {"data_classifiers", "posttrain_sft", "posttrain_qrpo"} <= set(rules)
    # Every rule the rehearsal's profile groups runs in the rehearsal (a renamed rule fails).
    assert set(yaml.safe_load((PROFILE / PROFILE_FILE).read_text())["groups"]) <= set(rules)
    sources = {job.wildcards.get("source") for job in plan.jobs if job.rule == "data_filter"}
    assert {s["name"] for s in config["data"]["sources"]} <= sources
    assert plan.run_dir.endswith(f"{name}-rehearsal")


def test_the_rehearsals_profile_is_the_local_clusters_with_job_groups():
    """profiles/slurm-rehearsal is profiles/slurm-local with the `groups` of the rehearsal's
    small steps (and their `group-components`), and nothing else: the two stay in step."""
    local = yaml.safe_load((PROFILE.parent / "slurm-local" / PROFILE_FILE).read_text())
    rehearsal = yaml.safe_load((PROFILE / PROFILE_FILE).read_text())
    groups = rehearsal.pop("groups")
    components = rehearsal.pop("group-components")
    assert rehearsal == local
    assert set(components) <= set(groups.values())
    # Training, SFT and QRPO are two-node jobs of their own.
    assert not {"pretrain_stage", "posttrain_sft", "posttrain_qrpo"} & set(groups)


# The post-training preset is an addendum merged after the 8B preset, and so is its overlay.
POSTTRAIN_PRESETS = [PRESET, REPO / "config" / "presets" / "apertus-8b-posttrain.yaml"]
POSTTRAIN_OVERLAYS = [OVERLAY, REPO / "config" / "rehearsal" / "apertus-8b-posttrain.yaml"]


def test_the_post_training_rehearsal_changes_only_sizes_and_locations(tmp_path):
    assert overlay_drift(POSTTRAIN_PRESETS, POSTTRAIN_OVERLAYS) == []
    rehearsal = load_config([*POSTTRAIN_PRESETS, *POSTTRAIN_OVERLAYS])
    assert rehearsal["posttrain"]["init_from"]["model"].startswith(STANDIN_ROOT)
    # The released model is an input like the others: a Hub id elsewhere is another recipe,
    # and the addendum's recipe keys are the 8B preset's.
    overlay = yaml.safe_load(POSTTRAIN_OVERLAYS[1].read_text(encoding="utf-8"))
    overlay["posttrain"]["init_from"]["model"] = "someone/Apertus-8B-finetune"
    overlay["posttrain"]["sft"] = {"lr": 1e-4}
    changed = tmp_path / "overlay.yaml"
    changed.write_text(yaml.safe_dump(overlay), encoding="utf-8")
    problems = overlay_drift(POSTTRAIN_PRESETS, [OVERLAY, changed])
    assert [p.split(":")[0] for p in problems] == ["posttrain.sft.lr", "posttrain.init_from.model"]
    assert f"a stand-in under {STANDIN_ROOT}" in problems[1]


# The continued-pretraining preset, an addendum too.
CONTINUE_PRESETS = [PRESET, REPO / "config" / "presets" / "apertus-8b-continue.yaml"]
CONTINUE_OVERLAYS = [OVERLAY, REPO / "config" / "rehearsal" / "apertus-8b-continue.yaml"]
# Each addendum's config files in merge order: the presets, then the overlays.
ADDENDA = {
    "posttrain": [*POSTTRAIN_PRESETS, *POSTTRAIN_OVERLAYS],
    "continue": [*CONTINUE_PRESETS, *CONTINUE_OVERLAYS],
}


def test_the_continued_pretraining_rehearsal_changes_only_sizes_and_locations(tmp_path):
    """The overlay replaces the lists the 8B overlay replaced (the phases, the long-context
    stages) with the continue preset's at rehearsal sizes, and its batch ramp is the preset's
    (none) again: no drift. The start and the tokenizer are one stand-in."""
    assert overlay_drift(CONTINUE_PRESETS, CONTINUE_OVERLAYS) == []
    preset, rehearsal = (
        load_config(CONTINUE_PRESETS),
        load_config([*CONTINUE_PRESETS, *CONTINUE_OVERLAYS]),
    )
    start = rehearsal["pretrain"]["init_from"]["model"]
    assert start.startswith(STANDIN_ROOT) and rehearsal["tokenize"]["tokenizer"]["source"] == start
    assert preset["pretrain"]["init_from"]["model"] == "swiss-ai/Apertus-8B-2509"
    assert [p["name"] for p in rehearsal["tokenize"]["phases"]] == ["swiss", "longctx"]
    assert [s["name"] for s in rehearsal["pretrain"]["long_context"]] == ["ctx64k"]
    assert rehearsal["pretrain"]["batch_ramp"] is None
    # Where the 8B overlay's ramp came back, or a mixture weight changed, the check says so.
    overlay = yaml.safe_load(CONTINUE_OVERLAYS[1].read_text(encoding="utf-8"))
    del overlay["pretrain"]["batch_ramp"]
    overlay["tokenize"]["phases"][0]["weights"]["fineweb2"] = 0.25
    changed = tmp_path / "overlay.yaml"
    changed.write_text(yaml.safe_dump(overlay), encoding="utf-8")
    problems = overlay_drift(CONTINUE_PRESETS, [OVERLAY, changed])
    assert sorted(p.split(":")[0] for p in problems) == [
        "pretrain.batch_ramp",
        "tokenize.phases[swiss].weights.fineweb2",
    ], problems


@pytest.mark.slow
def test_the_post_training_rehearsals_dry_run_plans_post_training_only(standins, tmp_path):
    """`snakemake -n` of the post-training preset with its overlay, the stand-ins in place (the
    released model's too): SFT, QRPO, their evaluation and the release, and no data,
    tokenization or pretraining job."""
    plan = explain_changes(
        ADDENDA["posttrain"], results_dir=str(tmp_path / "results"), cwd=standins
    )
    rules = Counter(job.rule for job in plan.jobs)
    assert not {rule.split("_")[0] for rule in rules} & {"data", "tokenize", "pretrain"}, rules
    assert rules["posttrain_start"] == rules["posttrain_sft"] == rules["posttrain_qrpo"] == 1
    assert rules["export_checkpoint"] == 2 and rules["release"] == 1
    assert plan.run_dir.endswith("apertus-8b-posttrain-rehearsal")


@pytest.mark.slow
def test_the_continued_pretraining_rehearsals_dry_run_plans_its_phase_from_the_start(
    standins, tmp_path
):
    """`snakemake -n` of the continue preset with its overlay: every source filtered, the two
    phases tokenized, `swiss` then `ctx64k` trained (the first from the released model: no
    pretraining job before it), post-training, the release."""
    plan = explain_changes(ADDENDA["continue"], results_dir=str(tmp_path / "results"), cwd=standins)
    rules = Counter(job.rule for job in plan.jobs)
    trained = [job.wildcards["stage"] for job in plan.jobs if job.rule == "pretrain_stage"]
    assert sorted(trained) == ["ctx64k", "swiss"]
    phases = {job.wildcards["phase"] for job in plan.jobs if job.rule == "tokenize_phase"}
    assert phases == {"swiss", "longctx"}
    config = load_config(ADDENDA["continue"])
    sources = {job.wildcards.get("source") for job in plan.jobs if job.rule == "data_filter"}
    assert {s["name"] for s in config["data"]["sources"]} <= sources
    assert rules["posttrain_sft"] == rules["posttrain_qrpo"] == rules["release"] == 1
    assert "posttrain_start" not in rules
    assert plan.run_dir.endswith("apertus-8b-continue-rehearsal")
