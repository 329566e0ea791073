"""After a divergence: which checkpoint is sane (the launcher's judgement from metrics.jsonl) and
the `pretrain.restart` switch that takes a stage up again from it with a new LR. The runs
themselves are in test_torchtitan.py (`test_divergence_...`, `test_restart_...`)."""

import json
import math
from pathlib import Path

import pytest

from apertus.core import ApertusError
from apertus.core.config import load_config
from apertus.train.config import PretrainConfig
from apertus.train.launch import (
    DIVERGENCE_MARKERS,
    _divergence_report,
    checkpoint_health,
    sane_losses,
)
from apertus.train.metrics import SPIKE_FACTOR, ApertusMetrics
from apertus.train.run_spec import RunSpec
from apertus.train.stage import run_spec, work_directory
from tests.train.test_stage import phases  # noqa: F401 (fixture)


def test_a_checkpoint_is_sane_when_the_loss_of_its_weights_stays_near_the_running_median():
    # A healthy descent to ~2, then the loss climbs from step 31 on.
    losses = {s: 5.0 - 0.1 * s for s in range(1, 31)} | {31: 2.15, 32: 2.6, 33: 4.0, 41: 9.0}
    checkpoints = {s: Path(f"ckpt/step-{s}") for s in (10, 20, 30, 31, 32, 40)}
    judged = {h.step: h for h in checkpoint_health(checkpoints, losses)}
    # step 20's weights gave the loss logged at step 21, below the median of steps 1-20
    assert judged[20].loss == losses[21] and judged[20].median == pytest.approx(5.0 - 1.05)
    # the median of steps 1-30 is 3.45: 2.15 is sane, 2.6 too, while step 32's weights gave
    # 4.0, more than 10% above the median of steps 1-32 (3.35)
    assert [s for s in judged if judged[s].sane] == [10, 20, 30, 31]
    assert judged[32].median == pytest.approx(3.35) and not judged[32].sane
    # step 40's weights gave 9.0; no loss was logged on step 50's
    assert judged[40].loss == 9.0 and not judged[40].sane
    assert "no loss was logged" in checkpoint_health({50: Path("x")}, losses)[0].describe()
    # NaN is never sane; with no earlier loss a finite one is
    assert not checkpoint_health({1: Path("x")}, {2: math.nan})[0].sane
    assert checkpoint_health({0: Path("x")}, {1: 5.5})[0].sane


def test_a_spike_and_the_dead_model_after_it_never_raise_the_bar_a_recovery_is_sane_again():
    healthy = {s: 3.0 - 0.01 * s for s in range(1, 21)}
    dead = healthy | {21: 2e5, 22: 3e6} | {s: math.log(256) for s in range(23, 60)}
    judged = sane_losses(dead)
    assert [s for s in judged if not judged[s][0]] == list(range(21, 60))
    assert {judged[s][1] for s in range(22, 60)} == {judged[21][1]}  # the healthy median
    spike = healthy | {21: 9.0} | {s: 2.8 - 0.01 * s for s in range(22, 30)}
    assert [s for s, (sane, _) in sane_losses(spike).items() if not sane] == [21]


def spike_watch() -> ApertusMetrics:
    """The spike watch of `ApertusMetrics` alone (no loggers, no torchtitan state)."""
    metrics = object.__new__(ApertusMetrics)
    metrics.config = ApertusMetrics.Config(spike_factor=SPIKE_FACTOR)
    return metrics


def test_a_loss_that_leaps_past_twice_the_median_and_stays_up_stops_the_run_at_its_third_step():
    """A warmup's falling loss, a single bad batch, a data mix that raises the loss by half:
    none stops. A leap that stays up (the saturated model of a too-high LR: ln V after it, with
    a gradient norm of 0, never NaN) stops at its third step, as a divergence the launcher
    knows, naming the step it started and the median it was held to."""
    watch = spike_watch()
    losses = [9.0, 7.5, 8.0, 6.0] + [3.0 - 0.01 * s for s in range(20)]
    losses += [7.0, 2.8, 2.9, 4.2, 4.1, 4.0, 4.0, 3.9, 3.0]  # one bad batch; a new mixture
    for step, loss in enumerate(losses, start=1):
        watch._watch_for_spikes(step, loss)
    leap = len(losses) + 1
    watch._watch_for_spikes(leap, 2.7e5)
    watch._watch_for_spikes(leap + 1, math.log(256))
    message = rf"^Loss spike at step {leap + 2}: .* above 2x .* \(2\.9\d*\) at step {leap} "
    with pytest.raises(RuntimeError, match=message) as raised:
        watch._watch_for_spikes(leap + 2, math.log(256))
    assert any(marker in str(raised.value) for marker in DIVERGENCE_MARKERS)
    # a leap the run recovers from within the steps is no stop; a rise under 2x is none
    watch = spike_watch()
    for step, loss in enumerate([3.0] * 10 + [9.0, 5.0, 3.1, 3.0] + [5.9] * 10, start=1):
        watch._watch_for_spikes(step, loss)


def stage_spec(tmp_path: Path, name: str, losses: dict[int, float]) -> RunSpec:
    """A run spec placed in a stage's kind of work folder, `<name>-<16 hex>`, whose
    metrics.jsonl logged `losses`."""
    work = tmp_path / f"{name}-0123456789abcdef"
    (work / "out").mkdir(parents=True)
    lines = [json.dumps({"step": s, "loss": loss}) for s, loss in losses.items()]
    (work / "out" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    spec = {"flavor": "debug", "micro_batch": 1, "seq_len": 8, "global_batch": 1, "steps": 100}
    return RunSpec.from_dict({**spec, "lr": {"peak": 3e-3}, "phase_dir": "p"}).placed(work)


def test_the_divergence_report_names_the_last_sane_checkpoint_and_the_restart_lines(tmp_path):
    losses = {s: 5.0 - 0.1 * s for s in range(1, 31)} | {31: 2.2, 32: 7.0, 33: 9.0}
    spec = stage_spec(tmp_path, "phase1", losses)
    ckpt = Path(spec.checkpoint.folder)
    steps = {s: ckpt / f"step-{s}" for s in (10, 20, 30, 31, 32)}
    report = _divergence_report(spec, "Loss is not finite (global_avg_loss=nan) at step 34.", steps)
    assert report.startswith(
        f"The last checkpoint, {ckpt / 'step-32'} (step 32), is diverged: its weights gave a "
        "loss of 9 at step 33, the running median of the sane losses up to it was 3.4. The last "
        "sane checkpoint (a loss at most 10% above the running median of the sane ones) is "
        f"{ckpt / 'step-30'} (step 30): its weights gave a loss of 2.2 at step 31, the running "
        "median of the sane losses up to it was 3.45."
    )
    assert (
        "  pretrain:\n    restart:\n      stage: phase1\n"
        f"      checkpoint: {ckpt / 'step-30'}\n      lr: 1.50e-03  # half of this run's peak "
        "3.00e-03\nand run again: it continues from step 31 with that checkpoint's optimizer "
        "state and data position"
    ) in report
    # The losses logged after the failed step (an earlier attempt's) do not count.
    stale = stage_spec(tmp_path / "b", "phase1", losses | {34: 1.0})
    report = _divergence_report(stale, "Loss is not finite at step 34.", steps | {33: Path("s")})
    assert "The last checkpoint, s (step 33), is diverged: no loss was logged" in report
    # Nothing sane left: start over.
    spec = stage_spec(tmp_path / "c", "phase1", {1: 5.0, 2: 9.0, 3: 20.0})
    report = _divergence_report(
        spec, "Gradient norm is not finite at step 3", {1: Path("a"), 2: Path("b")}
    )
    assert "No checkpoint on disk is sane" in report
    assert "Start it over with a lower LR (e.g. 1.50e-03, half of 3.00e-03)" in report


def test_restart_switch_restarts_one_stage_from_its_checkpoint_with_the_new_lr(phases):  # noqa: F811
    cfg = load_config()["pretrain"]
    plain = PretrainConfig.from_dict(cfg)
    restart = {"stage": "phase2", "checkpoint": "/w/phase2-k/ckpt/step-40", "lr": 1.0e-3}
    typed = PretrainConfig.from_dict({**cfg, "restart": restart})
    previous = {"final_checkpoint": "/w/phase1-k/ckpt/step-30"}
    # phase 1 and the long-context stage are the runs they were
    assert run_spec(typed, "phase1", phases, None) == run_spec(plain, "phase1", phases, None)
    name = cfg["long_context"][0]["name"]
    assert run_spec(typed, name, phases, previous) == run_spec(plain, name, phases, previous)
    # phase 2 starts from its own step 40 with everything, at the new peak
    before = run_spec(plain, "phase2", phases, previous)
    after = run_spec(typed, "phase2", phases, previous)
    assert after.checkpoint.initial == "/w/phase2-k/ckpt/step-40"
    assert after.checkpoint.initial_mode == "restart" and after.first_step() == 40
    assert after.lr.peak == 1.0e-3 and before.lr.peak == cfg["lr"]["peak"]
    assert after.lr.total_steps == before.lr.total_steps  # the same schedule, a new peak
    # ... in a new work directory, whose key holds the restart
    work = Path("/results/pretrain/_work")
    assert work_directory(work, "phase2", after, []) != work_directory(work, "phase2", before, [])
    # the Goldfish control of phase 2 is its configured run
    control = run_spec(typed, "phase2-no-goldfish", phases, previous)
    assert control.checkpoint.initial_mode == "continue" and control.lr.peak == before.lr.peak
    # a long-context stage restarted takes the new LR as its constant one
    long = PretrainConfig.from_dict({**cfg, "restart": {**restart, "stage": name}})
    assert run_spec(long, name, phases, previous).lr.peak == 1.0e-3
    # a restart of phase 1 with a new LR: phase 2 continues at that peak (one WSD schedule)
    first = PretrainConfig.from_dict({**cfg, "restart": {**restart, "stage": "phase1"}})
    assert run_spec(first, "phase1", phases, None).checkpoint.initial_mode == "restart"
    assert run_spec(first, "phase2", phases, previous).lr.peak == 1.0e-3
    assert run_spec(first, "phase2", phases, previous).checkpoint == before.checkpoint
    with pytest.raises(ApertusError, match=r"pretrain.restart.stage .phase3. is not a pretraining"):
        PretrainConfig.from_dict({**cfg, "restart": {**restart, "stage": "phase3"}})
