"""The run-health verdicts (cosmos_train/train/run_health.py, its checks health_checks.py and remedies
health_remedies.py) on hand-built metrics rows: each verdict fires on its state and not on a healthy series, at the
[train.run_health] thresholds; late_collapse's drop and its noise; the remedies in the world model's keys;
result.json's record and the CLI's closing lines; the summary line; the loop's `end_early` hook (stop_when_stuck)
ends a run as at its last step, and the loop judges an RL run into its result. Real runs that provoke the verdicts:
tests/integration/flows/test_run_health_flow.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from cosmos_train.config import ConfigError, GRPOPolicyConfig, RunHealthConfig, SFTPolicyConfig, load_config
from cosmos_train.errors import EXIT_RUN_STUCK, KINDS, RunStuck, error_from_record
from cosmos_train.train.health_checks import Verdict
from cosmos_train.train.report import grpo_summary_markdown, read_run_report
from cosmos_train.train.run_health import (
    HealthReport,
    HealthWatch,
    assess,
    assess_run,
    ratio_moves_of,
    stuck_message,
)
from cosmos_train.wfm.config import load_wfm_config
from tests.conftest import ROOT
from tests.unit.test_trainer_base import ToyTrainer, _toy

TINY_WFM = ROOT / "configs" / "tiny-wfm-flow-grpo.toml"


def _wiggle(i: int, size: float) -> float:
    """A deterministic, zero-mean-ish step-to-step noise."""
    return size * math.sin(1.7 * i)


def _row(step: int, **values: float) -> dict[str, Any]:
    return {"kind": "train", "step": step, **values}


def healthy(n: int = 60) -> list[dict[str, Any]]:
    """A GRPO run that learns: a third of its groups without variance, entropy easing from 1.5 to ~1.1, reward
    rising 0.2 -> 0.7 with noise, a few percent of tokens clipped, validation accuracy rising."""
    rows = [{"kind": "val", "step": 0, "accuracy": 0.25, "reward_mean": 0.25, "n": 8}]
    for s in range(1, n + 1):
        rows.append(
            _row(
                s,
                zero_std_fraction=0.3 + _wiggle(s, 0.1),
                entropy=1.5 - 0.4 * s / n + _wiggle(s, 0.05),
                reward_mean=0.2 + 0.5 * s / n + _wiggle(s, 0.05),
                reward_std=0.4,
                clip_fraction=0.04 + _wiggle(s, 0.02),
                ratio_mean=1.0 + _wiggle(s, 0.01),
                grad_norm=0.5,
            )
        )
        if s % 10 == 0:
            rows.append({"kind": "val", "step": s, "accuracy": 0.25 + 0.5 * s / n, "reward_mean": 0.3, "n": 8})
    return rows


def stuck_like_the_issue(n: int = 300) -> list[dict[str, Any]]:
    """The reported run: 88-100% of the groups at zero variance, gradient norm 0 on most steps, entropy 0.17 ->
    0.02, validation accuracy flat at its start, for 300 steps."""
    rows = [{"kind": "val", "step": 0, "accuracy": 0.625, "n": 8}]
    for s in range(1, n + 1):
        share = 1.0 if s % 4 else 0.88
        rows.append(
            _row(
                s,
                zero_std_fraction=share,
                entropy=0.17 * (0.02 / 0.17) ** (s / n),
                reward_mean=0.62 + (0.0 if share == 1.0 else 0.01),
                reward_std=0.0 if share == 1.0 else 0.05,
                grad_norm=0.0 if share == 1.0 else 0.02,
                **({"clip_fraction": 0.0, "ratio_mean": 1.0} if share < 1.0 else {}),
            )
        )
        if s % 20 == 0:
            rows.append({"kind": "val", "step": s, "accuracy": 0.625, "n": 8})
    return rows


def names(rows: list[dict[str, Any]], cfg: RunHealthConfig | None = None, **kw: Any) -> set[str]:
    return {v.name for v in assess(rows, cfg or RunHealthConfig(), **kw).verdicts}


def test_a_healthy_run_gets_no_verdict_and_says_what_was_checked() -> None:
    report = assess(healthy(), RunHealthConfig(), ratio_moves=True)
    assert report.healthy and report.verdicts == [] and report.steps == 60
    md = report.markdown("run-1")
    assert "healthy: none of zero-variance groups, entropy collapse, flat reward, flat validation" in md
    # the numbers checked, one line per check
    for what in ("zero-variance groups:", "entropy:", "train reward over the last 50 steps", "validation accuracy"):
        assert what in md, what
    assert "clip fraction: mean 0.04" in md
    assert report.line().startswith("- run health: healthy over 60 step(s)")


def test_the_reported_stuck_run_gets_its_verdicts_with_evidence_cause_and_change() -> None:
    report = assess(stuck_like_the_issue(), RunHealthConfig(), ratio_moves=False)
    by_name = {v.name: v for v in report.verdicts}
    assert set(by_name) == {"zero_variance_groups", "entropy_collapse", "reward_flat", "validation_flat"}
    zero = by_name["zero_variance_groups"]
    assert zero.first_step == 1 and zero.last_step == 300 and zero.ongoing
    assert "on 300 consecutive steps (1-300)" in zero.evidence and "min 88%" in zero.evidence
    assert "gradient norm 0 on 225 of them" in zero.evidence  # 3 steps in 4 had no group with variance
    # the changes shown to unstick such a run, and none that was not (bench/RESULTS.md, the remedies table)
    assert "temperature" in zero.change and "train.train_policy.kl_beta > 0" in zero.change
    assert "filter-rl-data" not in zero.change and "dapo" not in zero.change and "too sure" in zero.cause
    entropy = by_name["entropy_collapse"]
    assert "fell x" in entropy.evidence and "kl_beta" in entropy.change and "entropy_coeff" not in entropy.change
    for flat in ("reward_flat", "validation_flat"):
        assert "SFT on some of this task's own answers" in by_name[flat].change, flat
        assert "train.train_batch_per_replica" in by_name[flat].change, flat  # more prompts a step
        assert "optm_lr" not in by_name[flat].change, flat
    assert "0.625..0.625" in by_name["validation_flat"].evidence
    md = report.markdown("run-2")
    assert "4 verdict(s) over 300 train step(s)" in md and "### `zero_variance_groups`" in md
    assert "`zero_variance_groups`" in report.line() and "could not learn" in report.line()
    # no late collapse: validation never left its start
    assert "late collapse: validation accuracy: best 0.625 at step 0, final 0.625 at step 300" in md


def test_zero_variance_respects_its_share_and_its_patience() -> None:
    rows = [_row(s, zero_std_fraction=0.85, reward_mean=0.5) for s in range(1, 11)]
    cfg = RunHealthConfig(patience=10, zero_std_fraction=0.85)
    assert "zero_variance_groups" in names(rows, cfg)
    assert "zero_variance_groups" not in names(rows, cfg.model_copy(update={"zero_std_fraction": 0.86}))
    assert "zero_variance_groups" not in names(rows, cfg.model_copy(update={"patience": 11}))
    # a step with signal in the middle breaks the run of steps
    broken = [dict(r, zero_std_fraction=0.2) if r["step"] == 5 else r for r in rows]
    assert "zero_variance_groups" not in names(broken, cfg.model_copy(update={"patience": 6}))
    assert "zero_variance_groups" in names(broken, cfg.model_copy(update={"patience": 5}))


def test_zero_variance_that_ended_is_reported_but_not_ongoing() -> None:
    rows = [_row(s, zero_std_fraction=1.0 if s <= 5 else 0.1) for s in range(1, 9)]
    report = assess(rows, RunHealthConfig(patience=3))
    (verdict,) = [v for v in report.verdicts if v.name == "zero_variance_groups"]
    assert (verdict.first_step, verdict.last_step, verdict.ongoing) == (1, 5, False)
    assert report.ongoing == []  # nothing for stop_when_stuck to end the run on


def test_the_state_holding_now_is_judged_even_after_a_longer_earlier_one() -> None:
    shares = [1.0] * 6 + [0.1] * 2 + [1.0] * 3  # steps 1-6 stuck, 7-8 not, 9-11 stuck again
    rows = [_row(s, zero_std_fraction=x) for s, x in enumerate(shares, start=1)]
    (verdict,) = assess(rows, RunHealthConfig(patience=3)).verdicts
    assert (verdict.first_step, verdict.last_step, verdict.ongoing) == (9, 11, True)
    (verdict,) = assess(rows, RunHealthConfig(patience=4)).verdicts  # the later run is too short: the longest
    assert (verdict.first_step, verdict.last_step, verdict.ongoing) == (1, 6, False)


def test_world_model_rows_without_groups_count_a_zero_reward_std() -> None:
    rows = [_row(s, reward_mean=0.3, reward_std=0.0, clip_frac=0.0, ratio=1.0) for s in range(1, 5)]
    report = assess(rows, RunHealthConfig(patience=4))
    (verdict,) = [v for v in report.verdicts if v.name == "zero_variance_groups"]
    assert verdict.evidence.startswith("reward_std 0 (no group varies) on 4 consecutive steps (1-4)")
    varied = [dict(r, reward_std=0.1) for r in rows]
    assert "zero_variance_groups" not in names(varied, RunHealthConfig(patience=4))


def test_entropy_collapse_by_its_drop_and_by_its_floor() -> None:
    falling = [_row(s, entropy=1.0 if s <= 3 else 0.15) for s in range(1, 7)]  # x6.7 between the windows
    cfg = RunHealthConfig(patience=3)
    assert "entropy_collapse" in names(falling, cfg)
    assert "entropy_collapse" not in names(falling, cfg.model_copy(update={"entropy_drop": 7.0}))
    low = [_row(s, entropy=0.005) for s in range(1, 4)]
    assert "entropy_collapse" in names(low, cfg)  # below the 0.01 floor
    assert "entropy_collapse" not in names(low, cfg.model_copy(update={"entropy_floor": 0.0}))
    assert "entropy_collapse" not in names(low[:2], cfg)  # fewer steps than patience: not judged
    assert "entropy: 2 step(s) logged it, the check needs 3" in assess(low[:2], cfg).markdown("r")


def test_reward_flat_is_change_within_noise_over_the_window() -> None:
    cfg = RunHealthConfig(flat_steps=20)
    flat = [_row(s, reward_mean=0.4 + _wiggle(s, 0.05)) for s in range(1, 21)]
    assert "reward_flat" in names(flat, cfg)
    rising = [_row(s, reward_mean=0.2 + 0.02 * s + _wiggle(s, 0.05)) for s in range(1, 21)]
    assert "reward_flat" not in names(rising, cfg)
    assert "reward_flat" not in names(flat[:19], cfg)  # the window is not full yet
    constant = [_row(s, reward_mean=0.5) for s in range(1, 21)]
    assert "reward_flat" in names(constant, cfg)
    step_up = [_row(s, reward_mean=0.5 if s <= 10 else 0.52) for s in range(1, 21)]
    assert "reward_flat" not in names(step_up, cfg)  # 0.02 > the 0.01 tolerance, and no noise
    assert "reward_flat" in names(step_up, cfg.model_copy(update={"flat_tolerance": 0.03}))


def test_validation_flat_looks_at_the_validations_inside_the_window() -> None:
    cfg = RunHealthConfig(flat_steps=10, flat_tolerance=0.01)
    train = [_row(s, reward_mean=0.1 * s) for s in range(1, 21)]
    val = [{"kind": "val", "step": s, "accuracy": 0.5} for s in (0, 5, 10, 15, 20)]
    assert "validation_flat" in names(train + val, cfg)
    moved = [dict(v, accuracy=0.625) if v["step"] == 15 else v for v in val]
    assert "validation_flat" not in names(train + moved, cfg)
    early = [dict(v, accuracy=0.625) if v["step"] == 5 else v for v in val]  # before the last 10 steps
    assert "validation_flat" in names(train + early, cfg)
    # no accuracy: the validation reward
    rewards = [{"kind": "val", "step": v["step"], "reward_mean": 0.3} for v in val]
    (verdict,) = [v for v in assess(train + rewards, cfg).verdicts if v.name == "validation_flat"]
    assert "validation reward_mean" in verdict.evidence


def test_clip_fraction_pinned_high_or_low_where_the_ratio_can_move() -> None:
    cfg = RunHealthConfig(patience=3)
    high = [_row(s, clip_fraction=0.95, zero_std_fraction=0.2) for s in range(1, 5)]
    assert "clip_pinned" in names(high, cfg, ratio_moves=False)
    assert "clip_pinned" not in names(high, cfg.model_copy(update={"clip_near_one": 0.96}))
    low = [_row(s, clip_fraction=0.0, ratio_mean=1.0, zero_std_fraction=0.2) for s in range(1, 5)]
    assert "clip_pinned" in names(low, cfg, ratio_moves=True)
    # one pass on the trainer's own log-probs: the ratio is 1 and nothing is clipped by design
    assert "clip_pinned" not in names(low, cfg, ratio_moves=False)
    assert "clip_pinned" not in names(low, cfg)  # not told: the ratio never left 1, so it could not move
    # steps whose groups all lacked variance had no advantages: not counted as pinned low
    no_signal = [dict(r, zero_std_fraction=1.0) for r in low]
    assert "clip_pinned" not in names(no_signal, cfg, ratio_moves=True)


def test_ratio_moves_from_the_grpo_policy() -> None:
    assert ratio_moves_of(GRPOPolicyConfig()) is False
    assert ratio_moves_of(GRPOPolicyConfig(mu_iterations=2)) is True
    assert ratio_moves_of(GRPOPolicyConfig(old_logprobs="engine")) is True
    assert ratio_moves_of(SFTPolicyConfig()) is None


def test_thresholds_are_config_keys_with_bounds(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        ["train.stop_when_stuck=true", "train.run_health.patience=3", "train.run_health.zero_std_fraction=0.5"],
        env={},
        check_paths=False,
    )
    assert cfg.train.stop_when_stuck and cfg.train.run_health.patience == 3
    assert cfg.train.run_health.zero_std_fraction == 0.5 and cfg.train.run_health.flat_steps == 50
    bad_keys = (
        "train.run_health.patience=0",
        "train.run_health.zero_std_fraction=1.5",
        "train.run_health.x=1",
        'train.run_health.stop_on=["stuck"]',
    )
    for bad in bad_keys:
        with pytest.raises(ConfigError):
            load_config(None, [bad], env={}, check_paths=False)
    assert not load_config(None, [], env={}, check_paths=False).train.stop_when_stuck  # off unless asked


def test_health_watch_reports_only_what_holds_now_and_the_message_says_what_to_do() -> None:
    watch = HealthWatch(RunHealthConfig(patience=2), ratio_moves=False)
    watch.add("val", 0, {"accuracy": 0.5})
    watch.add("train", 1, {"zero_std_fraction": 1.0, "grad_norm": 0.0})
    assert watch.stuck() == []
    watch.add("train", 2, {"zero_std_fraction": 1.0, "grad_norm": 0.0})
    stuck = watch.stuck()
    assert [v.name for v in stuck] == ["zero_variance_groups"]
    # a falling entropy alone is reported, and ends a run only when asked (stop_on)
    falling = HealthWatch(RunHealthConfig(patience=1), ratio_moves=False)
    for step, entropy in ((1, 1.0), (2, 0.1)):
        falling.add("train", step, {"entropy": entropy, "zero_std_fraction": 0.2})
    assert falling.stuck() == []
    falling.cfg = RunHealthConfig(patience=1, stop_on=["entropy_collapse"])
    assert [v.name for v in falling.stuck()] == ["entropy_collapse"]
    message = stuck_message(stuck, 2, 10)
    assert message.startswith("train.stop_when_stuck: the run ended after step 2 of 10")
    assert "zero_variance_groups" in message and "train.stop_when_stuck = false" in message


def test_the_summary_line_and_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = stuck_like_the_issue(40)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "result.json").write_text(json.dumps({"step": 40, "ended_early": "train.stop_when_stuck: ..."}))
    health = assess_run(run, RunHealthConfig())
    assert "zero_variance_groups" in {v.name for v in health.verdicts}
    summary = grpo_summary_markdown(read_run_report(run), health)
    assert "- steps: 40 (ended early by train.stop_when_stuck" in summary
    assert health.line() in summary
    assert "run health" not in grpo_summary_markdown(read_run_report(run))  # not asked: no line


def test_run_stuck_is_a_user_error_with_its_own_exit_code_and_kind() -> None:
    err = RunStuck("train.stop_when_stuck: the run ended after step 2 of 10")
    assert err.exit_code == EXIT_RUN_STUCK == 3 and KINDS["stuck"] is RunStuck
    rebuilt = error_from_record({"kind": "stuck", "message": str(err)})  # as the launching task reads error.json
    assert isinstance(rebuilt, RunStuck) and str(rebuilt) == str(err)


class _StuckToy(ToyTrainer):
    def end_early(self, values: dict[str, Any]) -> RunStuck | None:
        return RunStuck("stuck") if self.step == 4 else None


def test_end_early_ends_the_run_as_at_its_last_step(tmp_path: Path) -> None:
    toy = _toy(tmp_path, "run", 7)
    toy.__class__ = _StuckToy
    result = toy.fit()
    assert result["step"] == 4 and not result["stopped"] and result["ended_early"] == "stuck"
    assert isinstance(toy.ended_early, RunStuck)
    # validated once at its end (not also as the periodic validation), and saved as the last step is
    assert toy.validations == [3, 4]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_2", "step_4"]
    assert (tmp_path / "run" / "checkpoints" / "step_4" / "COMPLETE").is_file()


# ----------------------------------------------------------------------------- late collapse
def _val(*points: tuple[int, float], n: int | None = None, metric: str = "accuracy") -> list[dict[str, Any]]:
    """Train rows 1..last (a learning series: no other verdict) and validations (step, score)."""
    last = max(s for s, _ in points)
    rows: list[dict[str, Any]] = [_row(s, reward_mean=0.1 + 0.01 * s) for s in range(1, last + 1)]
    return rows + [{"kind": "val", "step": s, metric: x, **({"n": n} if n else {})} for s, x in points]


def test_late_collapse_names_the_best_and_the_final_validation_and_what_keeps_the_best() -> None:
    # the issue's demo: SFT 0.36, 0.97 at step 210, 0.39 at step 300, on a 200-clip validation
    rows = _val((0, 0.36), (100, 0.80), (210, 0.97), (300, 0.39), n=200)
    (verdict,) = [v for v in assess(rows, RunHealthConfig()).verdicts if v.name == "late_collapse"]
    assert verdict.evidence.startswith(
        "validation accuracy: best 0.970 at step 210, final 0.390 at step 300, a drop of 0.580 (a verdict at 0.1 "
    )
    assert "the first validation's 0.360 (step 0)" in verdict.evidence
    assert (verdict.first_step, verdict.last_step, verdict.ongoing) == (210, 300, True)
    assert "after its best" in verdict.cause and "the best export kept the best ones" in verdict.cause
    for remedy in ('export = "best"', "safetensors/best", 'optm_decay_type = "cosine"', "train.max_num_steps"):
        assert remedy in verdict.change, remedy
    assert "kl_beta" not in verdict.change  # the KL anchor did not keep the best (bench/RESULTS.md)


def test_late_collapse_threshold_is_late_drop_absolute() -> None:
    cfg = RunHealthConfig(late_drop=0.10)
    assert "late_collapse" in names(_val((0, 0.5), (10, 0.97), (20, 0.87), n=10_000), cfg)  # exactly 0.10 counts
    assert "late_collapse" not in names(_val((0, 0.5), (10, 0.97), (20, 0.88), n=10_000), cfg)
    assert "late_collapse" not in names(
        _val((0, 0.5), (10, 0.97), (20, 0.87), n=10_000), RunHealthConfig(late_drop=0.2)
    )
    assert "late_collapse" not in names(_val((0, 0.5), (10, 0.6), (20, 0.97), n=10_000), cfg)  # the end is the best
    assert "late_collapse" not in names(
        _val(
            (10, 0.97),
        ),
        cfg,
    )  # one validation: nothing to compare
    assert "late collapse: 1 validation(s) of accuracy, the check needs 2" in assess(_val((10, 0.97)), cfg).markdown(
        "r"
    )
    with pytest.raises(ConfigError):
        load_config(None, ["train.run_health.late_drop=0"], env={}, check_paths=False)


def test_late_collapse_on_a_small_validation_must_beat_its_noise() -> None:
    # 0.75 -> 0.50 on 8 answers is 2 answers: 2 standard errors of the two shares are ~0.47
    small = _val((0, 0.5), (10, 0.75), (20, 0.5), n=8)
    assert "late_collapse" not in names(small)
    assert "beyond the noise 0.4" in assess(small, RunHealthConfig()).markdown("r")
    assert "late_collapse" in names(_val((0, 0.5), (10, 0.75), (20, 0.5), n=400))
    # a validation reward: its own units, no size to judge noise by
    (verdict,) = assess(_val((0, 0.3), (10, 0.6), (20, 0.45), metric="reward_mean"), RunHealthConfig()).verdicts
    assert verdict.name == "late_collapse" and verdict.evidence.startswith("validation reward_mean: best 0.600")


def test_late_collapse_from_the_start_says_the_updates_made_it_worse() -> None:
    (verdict,) = assess(_val((0, 1.0), (2, 0.0), metric="reward_mean"), RunHealthConfig()).verdicts
    assert verdict.name == "late_collapse" and "best 1.000 at step 0, final 0.000 at step 2" in verdict.evidence
    assert "worse than where the run started" in verdict.cause and "first validation" not in verdict.evidence


def test_late_collapse_is_reported_but_stops_a_run_only_when_asked() -> None:
    watch = HealthWatch(RunHealthConfig(), ratio_moves=False)
    for row in _val((0, 0.3), (10, 0.9), (20, 0.4), metric="reward_mean"):
        watch.add(row.pop("kind"), row.pop("step"), row)
    assert [v.name for v in watch.assess(watch.rows).verdicts] == ["late_collapse"]
    assert watch.stuck() == []  # not in the default stop_on: stopping would not bring the best weights back
    watch.cfg = RunHealthConfig(stop_on=["late_collapse"])
    assert [v.name for v in watch.stuck()] == ["late_collapse"]


# ----------------------------------------------------------------------------- the world model's keys
def test_world_model_verdicts_name_the_world_models_keys() -> None:
    rows = [_row(s, reward_mean=0.6, reward_std=0.1, zero_std_fraction=1.0, clip_frac=0.0) for s in range(1, 4)]
    rows += _val((0, 0.7), (3, 0.5), metric="reward_mean")[-2:]
    report = assess(rows, RunHealthConfig(patience=3), ratio_moves=False, world_model=True)
    by_name = {v.name: v for v in report.verdicts}
    zero, late = by_name["zero_variance_groups"], by_name["late_collapse"]
    assert zero.evidence.startswith("zero_std_fraction >= 80% on 3 consecutive steps (1-3)")
    assert "model.rl.noise_level" in zero.change and "use_same_seed = false" in zero.change
    assert "temperature" not in zero.change and "filter-rl-data" not in zero.change and "SFT" not in zero.change
    assert "too easy" not in zero.cause  # a video has no right answer
    assert "optimizer.lr" in late.change and "model.rl.kl_beta" in late.change and "trainer.max_iter" in late.change
    assert "export" not in late.cause and "safetensors" not in late.change  # the world model keeps no best export
    message = stuck_message([zero], 3, 10, HealthWatch(RunHealthConfig(), world_model=True).section)
    assert message.startswith("trainer.stop_when_stuck: the run ended after step 3 of 10")
    assert "[trainer.run_health]" in message and "train.stop_when_stuck" not in message.replace("trainer.", "")


def test_world_model_thresholds_are_its_trainer_keys() -> None:
    def wfm(*overrides: str) -> Any:
        return load_wfm_config(TINY_WFM, list(overrides), env={}, check_paths=False)

    cfg = wfm("trainer.stop_when_stuck=true", "trainer.run_health.patience=2", "trainer.run_health.late_drop=0.05")
    assert cfg.trainer.stop_when_stuck and cfg.trainer.run_health.patience == 2
    assert cfg.trainer.run_health.late_drop == 0.05
    assert not wfm().trainer.stop_when_stuck and wfm().trainer.run_health == RunHealthConfig()  # off unless asked
    with pytest.raises(ConfigError):
        wfm("trainer.run_health.patience=0")


# ----------------------------------------------------------------------------- what the user reads
VERDICT_KEYS = ["name", "title", "evidence", "cause", "change", "first_step", "last_step", "ongoing"]


def test_result_json_record_has_the_stable_keys_and_reads_back() -> None:
    report = assess(stuck_like_the_issue(40), RunHealthConfig(), ratio_moves=False)
    record = json.loads(json.dumps(report.to_dict()))  # as result.json holds it
    assert list(record) == ["healthy", "steps", "verdicts"] and record["healthy"] is False and record["steps"] == 40
    assert all(list(v) == VERDICT_KEYS for v in record["verdicts"])
    assert [v["name"] for v in record["verdicts"]] == [v.name for v in report.verdicts]
    back = HealthReport.from_dict(record)
    assert back.verdicts == report.verdicts and back.steps == 40 and not back.healthy
    assert HealthReport(steps=5).to_dict() == {"healthy": True, "steps": 5, "verdicts": []}


def test_closing_lines_give_each_verdict_with_its_remedy_or_one_healthy_line() -> None:
    report = assess(stuck_like_the_issue(40), RunHealthConfig(), ratio_moves=False)
    head, *rest = report.closing_lines()
    assert head.startswith(f"run health: {len(report.verdicts)} verdict(s) over 40 step(s)")
    assert rest == [f"  - {v.sentence()}" for v in report.verdicts]
    assert all("Likely cause:" in line and "Change:" in line for line in rest)
    (line,) = HealthReport(steps=7).closing_lines("grpo")
    assert line == "grpo: run health: healthy over 7 step(s), none of the run-health verdicts"
    assert HealthReport(steps=7).names() == "healthy"
    one = Verdict("late_collapse", "t", "e", "c", "x", 1, 2, True)
    assert HealthReport(steps=2, verdicts=[one, one]).names() == "late_collapse, late_collapse"


# ----------------------------------------------------------------------------- the shared loop
class _NoSignalToy(ToyTrainer):
    """Every step reports groups without reward variance, as a GRPO step sampled greedily does."""

    def train_step(self, x: torch.Tensor) -> dict[str, Any]:
        return {**super().train_step(x), "zero_std_fraction": 1.0, "reward_mean": 0.5}


def _no_signal_toy(tmp_path: Path, name: str, stop: bool) -> ToyTrainer:
    toy = _toy(tmp_path, name, 7)
    toy.__class__ = _NoSignalToy
    toy.dist.device = torch.device("cpu")  # the toy's stand-in for DistInfo has no device; end_early needs one
    toy.watch_health(RunHealthConfig(patience=3, flat_steps=50), ratio_moves=False, world_model=False, stop=stop)
    return toy


def test_the_loop_judges_an_rl_run_into_its_result_and_stop_when_stuck_ends_it(tmp_path: Path) -> None:
    result = _no_signal_toy(tmp_path, "judged", stop=False).fit()
    assert result["step"] == 7 and "ended_early" not in result  # reported, not stopped
    assert result["health"]["healthy"] is False and [v["name"] for v in result["health"]["verdicts"]] == [
        "zero_variance_groups"
    ]
    assert result["health"]["verdicts"][0]["evidence"].startswith("zero_std_fraction >= 80% on 7 consecutive steps")
    toy = _no_signal_toy(tmp_path, "stopped", stop=True)
    result = toy.fit()
    assert result["step"] == 3 and isinstance(toy.ended_early, RunStuck)  # patience 3
    assert str(toy.ended_early).startswith("train.stop_when_stuck: the run ended after step 3 of 7")
    assert result["health"]["verdicts"][0]["last_step"] == 3
    assert "health" not in _toy(tmp_path, "sft", 2).fit()  # a trainer that does not watch: no record


def test_a_plateau_the_run_climbed_to_is_not_flat() -> None:
    """A run that learnt and then holds (a decaying learning rate ends on a plateau): the reward rose from 0.25 to
    0.75 by step 100 and stays there with noise, validation 0.25 -> 0.75 and flat: neither flat verdict, the
    plateau named in what was checked. The same last 100 steps without the climb are flat."""
    rows: list[dict[str, Any]] = []
    for s in range(1, 201):
        reward = 0.25 + 0.5 * min(s, 100) / 100 + _wiggle(s, 0.02)
        rows.append(_row(s, reward_mean=reward, entropy=1.0, zero_std_fraction=0.2, clip_fraction=0.01))
    rows += [{"kind": "val", "step": s, "accuracy": 0.25 if s < 100 else 0.75, "n": 64} for s in range(0, 201, 10)]
    report = assess(rows, RunHealthConfig(flat_steps=50), ratio_moves=False)
    assert not {"reward_flat", "validation_flat"} & {v.name for v in report.verdicts}, report.verdicts
    checked = "\n".join(report.checked)
    assert (
        "train reward: a plateau, +0.435 above its first 25 steps" in checked
        and "validation accuracy: a plateau +0.500 above" in checked
    )
    never_climbed = [dict(r, reward_mean=0.75 + _wiggle(r["step"], 0.02)) if r["kind"] == "train" else r for r in rows]
    never_climbed = [dict(r, accuracy=0.75) if r["kind"] == "val" else r for r in never_climbed]
    assert {"reward_flat", "validation_flat"} <= names(never_climbed, RunHealthConfig(flat_steps=50), ratio_moves=False)


def test_a_validation_at_its_ceiling_is_not_flat() -> None:
    rows = [_row(s, reward_mean=0.9 + _wiggle(s, 0.05)) for s in range(1, 101)]
    perfect = rows + [{"kind": "val", "step": s, "accuracy": 1.0, "n": 64} for s in range(0, 101, 10)]
    report = assess(perfect, RunHealthConfig(flat_steps=50), ratio_moves=False)
    assert "validation_flat" not in {v.name for v in report.verdicts}
    assert "validation accuracy: at its ceiling (1.000), nothing left to learn" in report.checked
    held = rows + [{"kind": "val", "step": s, "accuracy": 0.95, "n": 64} for s in range(0, 101, 10)]
    assert "validation_flat" in names(held, RunHealthConfig(flat_steps=50), ratio_moves=False)
