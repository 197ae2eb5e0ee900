"""Sweep specs, trials and the best choice (cosmos_train/sweep): parsing, seeded draws, names, the record,
the table and the early-stop decision, without Prefect or training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cosmos_train.errors import ConfigError
from cosmos_train.sweep import (
    SweepRecord,
    best_trial,
    early_stops,
    expand,
    parse_axes,
    parse_grid,
    plan_sweep,
    plot_overlay,
    table_rows,
    trial_metrics,
    trial_name,
)
from cosmos_train.sweep.spec import split_values


def test_grid_values_are_read_as_toml_and_crossed_in_order() -> None:
    axes = parse_axes(["train.optm_lr=1e-5,3e-5", "train.train_policy.kl_beta=0,0.01"], [])
    trials = expand(axes)
    assert trials == [
        {"train.optm_lr": 1e-5, "train.train_policy.kl_beta": 0},
        {"train.optm_lr": 1e-5, "train.train_policy.kl_beta": 0.01},
        {"train.optm_lr": 3e-5, "train.train_policy.kl_beta": 0},
        {"train.optm_lr": 3e-5, "train.train_policy.kl_beta": 0.01},
    ]
    assert [trial_name(t) for t in trials][:2] == ["lr=1e-05,kl_beta=0", "lr=1e-05,kl_beta=0.01"]
    axis = parse_grid('policy.model_name_or_path="a,b",c')
    assert axis.values == ("a,b", "c") and split_values('1,[2,3],"x,y"') == ["1", "[2,3]", '"x,y"']


def test_random_draws_are_seeded_bounded_and_short() -> None:
    axes = parse_axes([], ["train.optm_lr=loguniform(1e-6,1e-4)", "train.epoch=choice(1,2,3)", "a.b=uniform(0,0.5)"])
    first, again, other = expand(axes, 8, seed=3), expand(axes, 8, seed=3), expand(axes, 8, seed=4)
    assert first == again and first != other and len(first) == 8
    for t in first:
        assert 1e-6 <= t["train.optm_lr"] <= 1e-4 and t["train.epoch"] in (1, 2, 3) and 0 <= t["a.b"] <= 0.5
        assert float(f"{t['train.optm_lr']:.3g}") == t["train.optm_lr"]  # names stay short
    logs = [math.log10(t["train.optm_lr"]) for t in expand(axes[:1], 200, seed=0)]
    assert min(logs) < -5.5 and max(logs) > -4.5  # log-uniform: both decades drawn from


def test_grid_crossed_with_random_draws_and_duplicates_dropped() -> None:
    axes = parse_axes(["train.epoch=1,2"], ["train.optm_lr=choice(1e-5,2e-5)"])
    trials = expand(axes, 6, seed=0)
    assert len(trials) == len({json.dumps(t, sort_keys=True) for t in trials}) <= 4
    assert {t["train.epoch"] for t in trials} == {1, 2}


@pytest.mark.parametrize(
    ("grid", "random", "needle"),
    [
        (["train.optm_lr"], [], "--grid 'train.optm_lr': expected key.path=VALUES"),
        (["train.optm_lr=1,,2"], [], "an empty value"),
        (["train.optm_lr=1,1"], [], "listed twice"),
        ([], ["train.optm_lr=gauss(1,2)"], "'gauss(1,2)' is not a distribution"),
        ([], ["train.optm_lr=loguniform(0,1)"], "loguniform() needs low > 0"),
        ([], ["train.optm_lr=uniform(2,1)"], "needs finite low < high"),
        ([], ["train.optm_lr=uniform(a,1)"], "needs two numbers"),
        ([], ["train.epoch=choice(1)"], "at least two options"),
        (["train.epoch=1,2"], ["train.epoch=choice(1,2)"], "swept already"),
        ([], [], "nothing to sweep"),
    ],
)
def test_bad_specs_name_themselves(grid: list[str], random: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_axes(grid, random)
    assert needle in str(e.value) and str(e.value).startswith("invalid sweep spec")


def _job(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    cfg = tmp_path / "job.toml"
    cfg.write_text(
        f'[train]\noutput_dir = "{tmp_path / "out"}"\nmax_num_steps = 3\n[train.train_policy]\ntype = "sft"\n'
        f'[train.train_policy.dataset]\nname = "{tmp_path / "data"}"\n[policy]\nmodel_name_or_path = "Qwen/x"\n'
    )
    return cfg


def test_plan_checks_each_spec_against_the_config(tmp_path: Path) -> None:
    cfg = _job(tmp_path)
    with pytest.raises(ConfigError) as e:
        plan_sweep(cfg, grid=["train.optm_lrr=1e-5,2e-5", "train.optm_lr=-1,1e-5"])
    text = str(e.value)
    assert "'--grid train.optm_lrr=1e-5,2e-5' (value 1e-05): train.optm_lrr: unknown key" in text
    assert "did you mean train.optm_lr" in text and "'--grid train.optm_lr=-1,1e-5' (value -1)" in text
    plan = plan_sweep(cfg, grid=["train.optm_lr=1e-5,3e-5"], name="s1")
    assert plan.kind == "sft" and (plan.metric, plan.mode) == ("val_loss", "min")
    assert plan.folder == (tmp_path / "out" / "sweeps" / "s1").resolve()
    a, b = plan.trials
    assert a.name == "lr=1e-05" and a.run_dir.parent == plan.folder / "lr=1e-05" and a.total_steps == 3
    assert a.cfg.train.optm_lr == 1e-5 and a.cfg.train.output_dir == str(a.run_dir.parent)
    assert a.key != b.key and plan_sweep(cfg, grid=["train.optm_lr=1e-5,3e-5"], name="s1").trials[0].key == a.key
    assert plan_sweep(cfg, grid=["train.optm_lr=1e-5"], metric="val_accuracy").mode == "max"
    with pytest.raises(ConfigError, match="--trials 0"):
        plan_sweep(cfg, random=["train.optm_lr=uniform(1e-5,1e-4)"], trials=0)
    with pytest.raises(ConfigError, match="--metric 'val accuracy'"):
        plan_sweep(cfg, grid=["train.optm_lr=1e-5"], metric="val accuracy")


def _run(folder: Path, train: list[dict], val: list[dict], result: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    rows = [{"kind": "train", **r} for r in train] + [{"kind": "val", **r} for r in val]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if result is not None:
        (folder / "result.json").write_text(json.dumps(result))
    return folder


def test_metrics_best_and_table(tmp_path: Path) -> None:
    a = _run(
        tmp_path / "a",
        [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}],
        [{"step": 2, "accuracy": 0.5, "n": 8, "reward_mean": 0.4}],
        {"step": 2, "final": "/x/a/final", "best": {"path": "/x/a/best"}},
    )
    b = _run(tmp_path / "b", [{"step": 1, "loss": 1.0}], [{"step": 1, "accuracy": 0.75, "n": 8}], {"step": 1})
    ma, mb = trial_metrics(a), trial_metrics(b)
    assert ma["steps"] == 2 and ma["loss"] == 1.5 and ma["val_accuracy"] == 0.5 and ma["best_export"] == "/x/a/best"
    lo, hi = ma["val_accuracy_ci95"]
    assert 0 < lo < 0.5 < hi < 1
    entries = [
        {"name": "a", "settings": {"train.optm_lr": 1e-5}, "state": "done", "metrics": ma},
        {"name": "b", "settings": {"train.optm_lr": 3e-5}, "state": "done", "metrics": mb},
        {"name": "c", "settings": {"train.optm_lr": 1e-4}, "state": "failed", "metrics": {"val_accuracy": 1.0}},
    ]
    assert best_trial(entries, "val_accuracy", "max") == "b"  # c failed: never the best
    assert best_trial(entries, "loss", "min") == "b" and best_trial(entries, "loss", "max") == "a"
    assert best_trial(entries, "nope", "max") is None
    rows = table_rows(entries, {"train.optm_lr": "lr"}, "grpo", "val_accuracy", "b")
    assert [r["best"] for r in rows] == ["", "best", ""] and len({tuple(r) for r in rows}) == 1
    assert (
        rows[0]["lr"] == 1e-5 and rows[0]["val_accuracy"].startswith("0.500 [") and "(n=8)" in rows[0]["val_accuracy"]
    )
    assert rows[0]["export"] == "/x/a/best" and rows[2]["state"] == "failed"
    png = plot_overlay([("a", a), ("b", b), ("missing", tmp_path / "none")], "sft", "val_accuracy", tmp_path / "o.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"
    assert plot_overlay([("missing", tmp_path / "none")], "sft", "loss", tmp_path / "p.png") is None


def test_early_stop_only_trailing_trials_past_their_fraction() -> None:
    progress = {"good": (5, 10, 0.8), "bad": (5, 10, 0.5), "young": (1, 10, 0.1), "close": (6, 10, 0.75)}
    assert early_stops(progress, "max", margin=0.1, after=0.3) == ["bad"]
    assert early_stops({"a": (5, 10, 1.0), "b": (5, 10, 2.0)}, "min", margin=0.5, after=0.5) == ["b"]
    assert early_stops({"a": (5, 10, None)}, "min", margin=0.0, after=0.0) == []


def test_record_skips_only_finished_trials_with_the_same_key(tmp_path: Path) -> None:
    cfg = _job(tmp_path)
    plan = plan_sweep(cfg, grid=["train.optm_lr=1e-5,3e-5"])
    a, b = plan.trials
    record = SweepRecord(plan.folder)
    for t in (a, b):
        t.run_dir.mkdir(parents=True)
        record.start(t)
    record.finish(a.name, "done", {"loss": 1.0})
    record.finish(b.name, "failed", {}, "TorchrunFailed: boom")
    again = SweepRecord(plan.folder)  # read back from sweep.json
    assert again.finished(a) is not None and again.finished(b) is None
    assert again.trials[b.name]["error"] == "TorchrunFailed: boom"
    changed = plan_sweep(cfg, ["train.max_num_steps=4"], grid=["train.optm_lr=1e-5,3e-5"]).trials[0]
    assert changed.name == a.name and changed.key != a.key and again.finished(changed) is None


def test_a_benchmark_evaluated_into_the_run_folder_is_a_column_with_its_interval(tmp_path: Path) -> None:
    from cosmos_train.evaluation.scoring import Score, Scores, write_results

    run = _run(tmp_path / "run", [{"step": 1, "loss": 1.0}], [])
    bench = Score.of("bench", 6, 10)
    write_results(run / "eval" / "final" / "letter", Scores({"bench": bench}, bench, bench))
    m = trial_metrics(run)
    assert m["benchmark_accuracy"] == 0.6 and m["benchmark_n"] == 10
    assert m["benchmark_accuracy_ci95"] == [pytest.approx(bench.ci95_low), pytest.approx(bench.ci95_high)]
    [row] = table_rows([{"name": "a", "settings": {}, "state": "done", "metrics": m}], {}, "sft", "loss", "a")
    assert row["benchmark_accuracy"] == f"0.600 [{bench.ci95_low:.3f}, {bench.ci95_high:.3f}] (n=10)"
