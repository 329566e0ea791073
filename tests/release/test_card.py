"""The model card: Hub metadata that huggingface_hub parses, numbers read from the files."""

from __future__ import annotations

import csv
import json

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.repocard import metadata_load

from apertus.core import ApertusError
from apertus.release.bundle import build_release
from apertus.release.card import read_scores
from tests.release.conftest import release_inputs


@pytest.fixture
def card_path(run_dir, run_config, release_config):
    build_release(release_inputs(run_dir), release_config, run_config, run_dir / "release")
    return run_dir / "release" / "README.md"


def test_card_metadata_parses_with_huggingface_hub(card_path):
    meta = metadata_load(card_path)
    assert meta["license"] == "mit"  # from the config, not the default
    assert meta["language"] == ["de", "rm"]  # "la" has no document left at the last step
    # Hub ids only: the local source "web" has none.
    assert meta["datasets"] == ["HuggingFaceFW/fineweb-2", "owner/dataset-x"]
    assert "base_model" not in meta  # trained from scratch: no self-reference
    assert meta["pipeline_tag"] == "text-generation"
    assert meta["library_name"] == "transformers"
    card = ModelCard.load(card_path)
    assert card.data.license == "mit"
    # 4 scores each, one cell of the base row empty, memorization left out
    assert len(card.data.eval_results) == 3 + 4


def test_model_index_holds_each_released_models_scores(card_path):
    index = metadata_load(card_path)["model-index"]
    assert [entry["name"] for entry in index] == [
        "apertus-tiny-fixture-run/base",
        "apertus-tiny-fixture-run/aligned",
    ]
    with (card_path.parent / "evaluation" / "scores.csv").open() as f:
        rows = {r["checkpoint"]: r for r in csv.DictReader(f)}
    for entry, checkpoint in zip(index, ("ctxA", "qrpo"), strict=True):
        got = {
            f"{result['dataset']['name']}/{metric['type']}": metric["value"]
            for result in entry["results"]
            for metric in result["metrics"]
        }
        want = {
            k: float(v)
            for k, v in rows[checkpoint].items()
            if k != "checkpoint" and v and not k.startswith("memorization/")
        }
        assert got == want, checkpoint


def test_card_body_reports_the_numbers_of_the_files(card_path):
    text = card_path.read_text()
    body = text.split("\n---\n", 1)[1]
    for expected in (
        "98,765",  # tokens of phase p1 (its manifest)
        "4,321",  # ctxA tokens and the email PII replacements
        "640",  # QRPO completions
        "| GPTBot | 606 |",  # robots.txt refusals per agent (filter manifest)
        "| replaced_email | 4,321 |",
        "robots.txt opt-out: 16 documents removed",  # the funnel's robots step, all languages
        "| ctxA (base) | 0.21 |",  # evaluation group scores, released rows marked
        "| qrpo (aligned) | 0.41 |",
        "| 64 | 2 | 0.8765 | 0.5 | 1 |",  # memorization curve of the base model
        "| greedy | qrpo | 0.2468 | 0.0476 | 0.625 |",  # reward before/after
        "k = 13, h = 29",  # Goldfish, from the config
        "peak LR 0.0042",
        "cooldown over the last 0.25 of the training tokens",  # a share of tokens, not of steps
        'repo = "aligned"',  # the release folder's own copy ...
        "`someone/apertus-fixture-aligned`",  # ... and its Hub repository
        "generated sample corpus (sources `web`)",
    ):
        assert expected in body, expected
    # What the run cost: the plan of the run's config beside the measured wall-clock.
    compute = body.split("### Compute", 1)[1].split("\n## ", 1)[0]
    assert "| p1 | 1 x 1: dp 1 x tp 1 x cp 1 |" in compute
    assert "| 1.50 |" in compute  # p1's manifest: 5400 s
    for stage in ("ctxA", "sft", "qrpo"):
        assert f"| {stage} |" in compute


def test_card_numbers_follow_the_files(run_dir, run_config, release_config):
    report = run_dir / "posttrain" / "reward_report.json"
    data = json.loads(report.read_text())
    data["models"]["qrpo"]["mean"] = 0.9137
    report.write_text(json.dumps(data))
    run_config["pretrain"]["goldfish"]["enabled"] = False
    build_release(release_inputs(run_dir), release_config, run_config, run_dir / "release")
    body = (run_dir / "release" / "README.md").read_text()
    assert "| greedy | qrpo | 0.9137 |" in body and "0.2468" not in body
    assert "Goldfish loss: off." in body


def test_a_table_without_the_released_checkpoint_is_refused(run_dir, run_config, release_config):
    table = run_dir / "evaluate" / "table" / "scores.csv"
    lines = [line for line in table.read_text().splitlines() if not line.startswith("qrpo,")]
    table.write_text("\n".join(lines) + "\n")
    with pytest.raises(ApertusError, match="no row for checkpoint 'qrpo'"):
        build_release(release_inputs(run_dir), release_config, run_config, run_dir / "release")


def test_read_scores_names_a_bad_table(tmp_path):
    bad = tmp_path / "scores.csv"
    bad.write_text("model,acc\nx,0.1\n")
    with pytest.raises(ApertusError, match=r"scores\.csv: not an evaluation table"):
        read_scores(bad)
    bad.write_text("checkpoint,acc\nx,zero\n")
    with pytest.raises(ApertusError, match="line 2: not a number"):
        read_scores(bad)
    with pytest.raises(ApertusError, match=r"missing\.csv: cannot read"):
        read_scores(tmp_path / "missing.csv")
    bad.write_text("checkpoint,a/acc,b/acc\nx,0.5,\n")
    assert read_scores(bad) == {"x": {"a/acc": 0.5, "b/acc": None}}


def test_the_goldfish_comparison_puts_the_two_curves_side_by_side():
    """The control's memorization.json (its phase's curve under `compared`) becomes a table of
    Rouge-L with and without Goldfish per exposure count, with the share of labels dropped."""
    from apertus.release.card import _goldfish_comparison

    def curve(*rouge):
        return [
            {"exposures": e, "rouge_l_mean": r, "exact_match_prefix_mean": 24 * r}
            for e, r in zip((0, 4, 64), rouge, strict=True)
        ]

    control = {
        "curve": curve(0.01, 0.3, 0.9),
        "goldfish": {"run": "phase2-no-goldfish", "enabled": False},
        "compared": {
            "goldfish": {
                "curve": curve(0.02, 0.03, 0.05),
                "goldfish": {"run": "phase2", "k": 4, "h": 13, "dropped_fraction": 0.25},
            }
        },
    }
    text = _goldfish_comparison(control)
    assert "run `phase2`, k = 4, h = 13, 25% of its labels dropped" in text
    assert "without (run `phase2-no-goldfish`)" in text
    rows = [line for line in text.splitlines() if line.startswith("| 64 ")]
    assert rows == ["| 64 | 0.05 | 0.9 | 1.2 | 21.6 |"]


def card_code(card: str) -> str:
    return card.split("```python\n", 1)[1].split("```", 1)[0]


def test_each_model_has_its_own_card_for_its_own_repository(card_path):
    release = card_path.parent
    base, aligned = (metadata_load(release / m / "README.md") for m in ("base", "aligned"))
    assert "base_model" not in base  # no self-reference
    assert aligned["base_model"] == "someone/apertus-fixture"  # the base model's repository
    assert [e["name"] for e in base["model-index"]] == ["apertus-tiny-fixture-run/base"]
    assert [e["name"] for e in aligned["model-index"]] == ["apertus-tiny-fixture-run/aligned"]
    assert base["datasets"] == aligned["datasets"] == ["HuggingFaceFW/fineweb-2", "owner/dataset-x"]
    assert 'repo = "someone/apertus-fixture"' in card_code((release / "base/README.md").read_text())
    aligned_code = card_code((release / "aligned/README.md").read_text())
    assert 'repo = "someone/apertus-fixture-aligned"' in aligned_code
    assert "apply_chat_template" in aligned_code


@pytest.mark.parametrize("model", ["base", "aligned"])
def test_the_cards_code_runs_against_the_released_model(card_path, model, capsys):
    """The card's snippet, pointed at the local copy of what the repository holds."""
    folder = card_path.parent / model
    repo = "someone/apertus-fixture" + ("-aligned" if model == "aligned" else "")
    code = card_code((folder / "README.md").read_text())
    exec(compile(code.replace(f'repo = "{repo}"', f"repo = {str(folder)!r}"), "card", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == (2 if model == "aligned" else 1)


def test_a_run_started_from_a_released_checkpoint_says_so_in_card_manifest_and_audit(
    run_dir, run_config, release_config
):
    """`pretrain.init_from` (the first phase's manifest records it): the card names the
    checkpoint, its revision, commit and each weight file's sha256 and what was not in it, its
    Hub metadata's `base_model` is that Hub id, the release manifest carries the record, and
    `apertus audit` of the release prints it."""
    from apertus.audit.checksums import audit_release, render_report

    record = {
        "model": "swiss-ai/Apertus-8B-2509",
        "revision": "v1.0",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "files": {
            "config.json": {"sha256": "a" * 64, "bytes": 800},
            "model-00001-of-00002.safetensors": {"sha256": "b" * 64, "bytes": 5_000_000_000},
        },
        "not_in_checkpoint": ["optimizer state (AdEMAMix starts at zero)"],
    }
    phase = run_dir / "pretrain" / "p1.manifest.json"
    data = json.loads(phase.read_text())
    data["summary"]["init_from"] = record
    phase.write_text(json.dumps(data))
    build_release(release_inputs(run_dir), release_config, run_config, run_dir / "release")
    card = (run_dir / "release" / "README.md").read_text()
    assert "A model continued from `swiss-ai/Apertus-8B-2509`" in card
    assert "revision `v1.0`, commit `0123456789abcdef0123456789abcdef01234567`" in card
    assert f"| model-00001-of-00002.safetensors | {'b' * 64} |" in card
    assert "optimizer state (AdEMAMix starts at zero)" in card
    assert metadata_load(run_dir / "release" / "README.md")["base_model"] == record["model"]
    released = json.loads((run_dir / "release" / "RELEASE-MANIFEST.json").read_text())
    assert released["started_from"] == {**record, "stage": "pretrain"}
    report = audit_release(run_dir / "release")
    assert report.ok and report.started_from == released["started_from"]
    text = render_report(report)
    assert "started from swiss-ai/Apertus-8B-2509 (revision v1.0, commit 0123" in text
    assert f"model-00001-of-00002.safetensors sha256 {'b' * 64}" in text


def test_a_post_training_only_release_has_no_base_and_no_funnel_and_names_its_start(
    run_dir, run_config, release_config
):
    """`posttrain.init_from` (the start step's manifest records it): the release holds the
    aligned model only, no data folder; the card says what was post-trained (and that the data
    compliance is that model's), its aligned model's `base_model` is the start's Hub id (the
    release has no base of its own), and the audit prints the start."""
    import dataclasses

    from apertus.audit.checksums import audit_release, render_report

    record = {
        "model": "swiss-ai/Apertus-8B-2509",
        "revision": None,
        "commit": "89abcdef0123456789abcdef0123456789abcdef",
        "files": {"model.safetensors": {"sha256": "c" * 64, "bytes": 16_000_000_000}},
        "not_in_checkpoint": ["data position"],
    }
    phase = json.loads((run_dir / "pretrain" / "p1.manifest.json").read_text())
    start = {**phase, "stage": "posttrain", "step": "start", "summary": {"init_from": record}}
    (run_dir / "posttrain" / "start.manifest.json").write_text(json.dumps(start))
    for manifest in (run_dir / "pretrain").glob("*.manifest.json"):
        manifest.unlink()  # no pretraining in such a run
    inputs = dataclasses.replace(
        release_inputs(run_dir),
        base=None,
        base_checkpoint=None,
        funnel_json=None,
        funnel_png=None,
        memorization=None,
    )
    build_release(inputs, release_config, run_config, run_dir / "release")
    release = run_dir / "release"
    assert not (release / "base").exists() and not (release / "data").exists()
    card = (release / "README.md").read_text()
    assert "A model post-trained from `swiss-ai/Apertus-8B-2509`" in card
    assert "Post-training (SFT) started from the weights of `swiss-ai/Apertus-8B-2509`" in card
    assert "This run has no data stage: it post-trained `swiss-ai/Apertus-8B-2509`" in card
    assert "data funnel" not in card
    assert "Warmup-Stable-Decay" not in card and "Goldfish" not in card  # no pretraining here
    aligned = metadata_load(release / "aligned" / "README.md")
    assert aligned["base_model"] == record["model"]
    index = metadata_load(release / "README.md")["model-index"]
    assert [entry["name"] for entry in index] == ["apertus-tiny-fixture-run/aligned"]
    released = json.loads((release / "RELEASE-MANIFEST.json").read_text())
    assert released["started_from"] == {**record, "stage": "posttrain"}
    report = audit_release(release)
    assert report.ok
    text = render_report(report)
    assert "post-training started from swiss-ai/Apertus-8B-2509 (revision main, commit 89ab" in text
