"""The report of the session's default run: `snakemake --report` writes one self-contained
HTML file, and a real headless Chromium (tests/report/browser.py) opens it, walks its
categories through the page's own menu and buttons, and sees every plot decode and every
table filled. Also `apertus status` on the finished run and with a changed config."""

import json
from pathlib import Path

import pytest

from apertus.cli import run as cli
from apertus.report.html import format_cell
from tests.conftest import planned_jobs, run_tool
from tests.report.browser import Browser, require_chromium

CATEGORIES = [
    "1. Data",
    "2. Tokenization",
    "3. Training",
    "4. Evaluation",
    "5. Post-training",
    "6. Manifests",
]
TRAINING = ["phase1", "phase2", "phase2-no-goldfish", "ctx256", "sft", "qrpo"]
MANIFEST_PAGES = [
    "data",
    "tokenize",
    "pretrain",
    "export",
    "evaluate",
    "posttrain",
    "release",
    "report",
]


@pytest.fixture(scope="module")
def report_html(default_run, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    run_tool(
        "snakemake",
        "--report",
        path,
        "--config",
        f"results_dir={default_run.parent}",
        f"run={default_run.name}",
        check=True,
        timeout=600,
    )
    return path


def test_the_report_stage_wrote_every_figure_and_table(default_run):
    report = default_run / "report"
    assert sorted(p.stem for p in (report / "training").glob("*.png")) == sorted(TRAINING)
    summary = report / "summary"
    for name in ("compliance.html", "tokens.html", "tokens.png", "evaluation.html", "cost.html",
                 "memorization.png", "rewards.html", "rewards.png"):  # fmt: skip
        assert (summary / name).stat().st_size > 500, name
    # The cost page: `apertus plan` on the run's config, each training job beside the
    # wall-clock its manifest measured.
    cost = (summary / "cost.html").read_text()
    for stage in TRAINING:
        kind = "posttrain" if stage in ("sft", "qrpo") else "pretrain"
        seconds = json.loads((default_run / kind / f"{stage}.manifest.json").read_text())["seconds"]
        job = stage if kind == "posttrain" else f"pretrain {stage}"
        assert f"<td>{job}</td>" in cost and f">{format_cell(seconds)}</td>" in cost, stage
    assert "<td>evaluate phase1 (suite)</td>" in cost and "loss backward" in cost
    assert sorted(p.stem for p in (summary / "manifests").glob("*.html")) == sorted(MANIFEST_PAGES)
    manifest = json.loads((report / "summary.manifest.json").read_text())
    # Every step of the run but the summary itself is listed on a stage page.
    steps = sum(manifest["summary"]["manifests"].values())
    assert steps == len(list(default_run.rglob("*manifest.json"))) - 1
    # The tokens drawn per phase add up to each phase's plan.
    for name, languages in manifest["summary"]["tokens"].items():
        phase = json.loads((default_run / "tokenize" / "phases" / name / "phase.json").read_text())
        assert sum(languages.values()) == phase["tokens_planned"]
    compliance = (summary / "compliance.html").read_text()
    funnel = json.loads((default_run / "data" / "funnel.json").read_text())
    removed = sum(
        step["removed_documents"]
        for steps in funnel["languages"].values()
        for step in steps
        if step["step"] == "robots"
    )
    assert removed > 0 and "robots.txt removals per language" in compliance
    assert "email replaced" in compliance
    # Every filter that removed documents left a readable sample, shown in the report.
    assert "records the readers skipped" in compliance
    for step in ("robots", "gopher_repetition", "exact", "quality"):
        files = sorted((default_run / "data" / "removed").glob(f"*/{step}/*/*.jsonl"))
        assert files, step
        first = json.loads(files[0].read_text().splitlines()[0])
        assert first["metadata"]["filter_reason"] and first["text"]
        assert f"data/removed/{files[0].relative_to(default_run / 'data' / 'removed')}" in (
            compliance
        )


# Clicks through the report the way a reader does: a category in the menu, then each
# result's eye button; returns what the content pane showed for each.
WALK = """
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const link = text => [...document.querySelectorAll("#app a")]
    .find(a => a.textContent.trim() === text);
  const shown = [];
  for (const category of %s) {
    if (link("Results")) link("Results").click();  // the breadcrumb back to the menu
    await sleep(100);
    link(category).click();
    await sleep(200);
    const rows = [...document.querySelectorAll("nav table tbody tr")];
    for (const row of rows) {
      row.querySelector("a[iconname=eye]").click();
      let content = null;
      for (let i = 0; i < 50 && !content; i++) {
        await sleep(100);
        const img = document.querySelector("#app img[src^='data:image/png']");
        const frame = document.querySelector("#app iframe[src^='data:text/html']");
        if (img && img.complete) content = ["img", img.naturalWidth, img.naturalHeight, img.src];
        else if (frame) content = ["html", 0, 0, frame.src];
      }
      shown.push([category, row.innerText.trim(), content]);
    }
  }
  return shown;
})()
"""


def test_the_report_opens_in_a_browser_with_every_plot_and_table(report_html):
    require_chromium()
    with Browser() as browser:
        page = browser.open(report_html, timeout=60)
        page.wait_for("typeof app !== 'undefined' && typeof categories !== 'undefined'")
        assert sorted(page.evaluate("Object.keys(categories)")) == CATEGORIES
        shown = page.evaluate(WALK % json.dumps(CATEGORIES), timeout=120)
        assert page.console_errors == []
        by_kind = {"img": [], "html": []}
        for category, label, content in shown:
            assert content, f"{category} / {label}: nothing shown"
            by_kind[content[0]].append((category, label, content))
        # Every plot decoded in the browser at its full size.
        assert len(by_kind["img"]) == len(TRAINING) + 4  # + funnel, tokens, memorization, reward
        for category, label, (_, width, height, _) in by_kind["img"]:
            assert width >= 600 and height >= 300, (category, label, width, height)
        # Every table page has its tables: opened on its own, since a data-URI frame's
        # document is not readable from the report's page.
        assert len(by_kind["html"]) == 5 + len(MANIFEST_PAGES)  # + the cost page
        for category, label, (_, _, _, uri) in by_kind["html"]:
            table_page = browser.open(uri)
            cells = table_page.evaluate("document.querySelectorAll('table td').length")
            assert cells >= 4, (category, label)
            assert table_page.console_errors == []
            table_page.close()


def test_status_of_the_finished_run_and_after_a_config_change(default_run, capsys):
    where = ["--results-dir", str(default_run.parent), "--run", default_run.name]
    assert cli(["status", *where, "--json"]) == 0
    finished = json.loads(capsys.readouterr().out)
    # Later tests of the session may re-run steps; every stage is made and not running.
    assert set(finished["stages"]) >= {"data", "tokenize", "pretrain", "evaluate", "report"}
    assert all(s["missing"] == 0 and s["running"] == 0 for s in finished["stages"].values())
    assert {t["stage"] for t in finished["training"]} >= set(TRAINING)
    assert cli(["status", *where, "--json", "tokenize.tokenizer.min_frequency=3"]) == 0
    changed = json.loads(capsys.readouterr().out)["stages"]
    assert changed["data"]["state"] == "done"
    assert changed["tokenize"]["state"] == changed["pretrain"]["state"] == "stale"


def test_changing_the_report_settings_reruns_only_the_report(default_run, tmp_path):
    # ... and the release, which records the whole resolved config.
    assert planned_jobs(default_run, tmp_path, "report:\n  dpi: 120\n") == {
        "release": 1,
        "report_training": len(TRAINING),
        "report_summary": 1,
    }
