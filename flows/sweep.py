"""The `sweep` flow: a grid or random search over a job config's keys, each trial an `sft` / `grpo` / `wfm-rl` run.

    cosmos-train sweep --config configs/tiny-sft.toml --grid train.optm_lr=1e-5,3e-5 --grid train.epoch=1,2 \
        --parallel 2 [--metric val_loss --mode min]
    cosmos-train sweep --config configs/tiny-grpo.toml --random 'train.optm_lr=loguniform(1e-6,1e-4)' --trials 8
    prefect deployment run 'sweep/sweep' \
        --param params='{"config": "configs/tiny-sft.toml", "grid": ["train.optm_lr=1e-5,3e-5"]}'

The specs are checked against the config first (cosmos_train/sweep/plan.py: a bad key, value or distribution
names its spec). Each trial is a child flow run of the job's flow (the config's train.train_policy.type, a
world-model recipe's wfm-rl, or `kind`), named by its settings (`lr=1e-05,kl_beta=0`), in its own run folder
`<sweep folder>/<trial>/<key>` whose config.toml the sweep writes (the flow gets that file, no overrides).
Up to `parallel` trials run at once: each is a task of a thread pool of that size that calls the child flow.

How the trials run, and why:
- In this process (default): the task calls the flow as a subflow. It works the same with the CLI's temporary
  API and a real server; the trials share this machine, and each trial's torchrun task holds its GPU slots of
  the global concurrency limit (`launch.gpu_concurrency_limit`, tasks/torchrun.py) while it trains, so trials
  that do not fit together wait for each other's GPUs.
- `deployment="sft/sft"` (a deployed flow): the task calls `run_deployment(..., as_subflow=True)` and waits,
  so a work pool's workers take the trials on other machines (the GPU slots still apply). The sweep folder
  must then be on storage the workers share, and the deployment's own `concurrency_limit` (1 for sft, grpo,
  wfm-rl in prefect.yaml) caps how many run at once: make a deployment of the flow without it for sweeps.

At the end: `sweep-table` (one row per trial: settings, state, steps, metrics with the validation accuracy's
interval, best, export, run folder, error), `sweep-curves` (every trial's curves overlaid, also
<sweep folder>/plots/overlay.png) and `sweep-best` (the best trial by `metric` / `mode`, with its export). A
failed trial is a row with its error; the sweep fails only when every trial failed. `<sweep folder>/sweep.json`
records each trial (cosmos_train/sweep/record.py): a rerun skips the trials that finished with the same
settings and inputs and reruns the failed ones in their own run folders, from their newest checkpoint.

Early stop (`stop_margin`): every `poll_s` seconds, a trial past `stop_after` of its steps whose newest value
of `metric` trails the best any trial has shown by more than `stop_margin` is stopped: each of its ranks gets
one SIGTERM, so the trainer checkpoints and exits (a retry's relaunch is stopped the same way), and its row says
`stopped`; its checkpoint stays in its run folder. Only trials running on this machine can be stopped so, and
a validation metric moves during training only with `validation.freq` set.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import FlowRun
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from cosmos_train.curves import curves_markdown
from cosmos_train.errors import path_errors
from cosmos_train.sweep import (
    FINISHED,
    SweepPlan,
    SweepRecord,
    Trial,
    best_trial,
    early_stops,
    latest,
    plan_sweep,
    plot_overlay,
    table_rows,
    trial_metrics,
)
from flows.grpo import GRPOParams, grpo
from flows.sft import SFTParams, sft
from flows.wfm_rl import WfmRLParams, wfm_rl
from tasks.errors import user_errors_reported
from tasks.run_folder import CONFIG_FILE


class SweepParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    config: str = Field(..., description="Path of the job TOML every trial starts from.")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides of every trial.")
    grid: list[str] = Field(default_factory=list, description="Grid axes: key.path=v1,v2,... (every combination).")
    random: list[str] = Field(
        default_factory=list,
        description="Random axes: key.path=loguniform(a,b) | uniform(a,b) | choice(a,b,...), drawn `trials` times.",
    )
    trials: int = Field(8, ge=1, le=1000, description="Random draws (crossed with the grid when there is one).")
    seed: int = Field(0, description="Seed of the random draws: the same seed, the same trials.")
    kind: Literal["sft", "grpo", "wfm-rl"] | None = Field(
        None, description="The flow each trial runs (unset: from the config)."
    )
    parallel: int = Field(2, ge=1, le=64, description="Trials running at once.")
    metric: str | None = Field(
        None,
        description="What picks the best trial: a key of the last train row (loss, reward_mean, ...) or of the "
        "last validation row prefixed val_ (val_loss, val_accuracy); unset: val_loss (sft), val_accuracy (grpo), "
        "val_reward_mean (wfm-rl).",
    )
    mode: Literal["max", "min"] | None = Field(None, description="Best is the max or min (unset: min for a loss).")
    name: str | None = Field(None, description="The sweep folder's name (unset: the config file's stem).")
    output_dir: str | None = Field(None, description="Where the sweep folder goes (unset: <output_dir>/sweeps).")
    dataset_script: str | None = Field(None, description="Optional dataset script of sft / grpo trials.")
    train_retries: int = Field(1, ge=0, le=100, description="Relaunches of a crashed trial (each resumes).")
    timeout_s: float | None = Field(None, gt=0, description="Stop each trial's training after this many seconds.")
    deployment: str | None = Field(
        None, description="Run each trial as a run of this deployment (e.g. sft/sft) instead of in this process."
    )
    stop_margin: float | None = Field(
        None, ge=0, description="Early stop: a trial trailing the best by more than this is stopped (unset: off)."
    )
    stop_after: float = Field(0.3, ge=0, le=1, description="Early stop only after this fraction of a trial's steps.")
    poll_s: float = Field(10.0, gt=0, le=600, description="How often early stop looks at the running trials.")


def _run_name() -> str:
    """`sweep <name>`: the sweep folder's name (the config file's stem unless `name` is given)."""
    from prefect.runtime import flow_run

    params = flow_run.parameters.get("params")
    get = params.get if isinstance(params, dict) else lambda k: getattr(params, k, None)
    return f"sweep {get('name') or Path(str(get('config') or 'job')).stem}"


@flow(name="sweep", log_prints=True, flow_run_name=_run_name)
def sweep(params: SweepParams) -> dict[str, Any]:
    """Run the trials (skipping those finished before), then compare them; returns the summary."""
    with user_errors_reported("sweep"):
        plan = plan_sweep(
            params.config,
            params.overrides,
            params.grid,
            params.random,
            params.trials,
            params.seed,
            params.kind,
            params.name,
            params.output_dir,
            params.metric,
            params.mode,
            params.dataset_script,
        )
        return Sweep(plan, params).run()


def trainer_ranks(run_dir: Path) -> list[int]:
    """The training ranks of the run in `run_dir`: the children of the torchrun launcher whose command line names
    its config.toml (not their own children, such as data loader workers). Each rank gets one SIGTERM (it
    checkpoints, then exits); the launcher is left alone: it would send the ranks a second SIGTERM, which ends a
    rank before its checkpoint."""
    needle = str(run_dir / CONFIG_FILE).encode()
    procs: dict[int, tuple[int, bytes]] = {}  # pid -> (parent pid, command line)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                if needle in cmd:
                    ppid = int((d / "stat").read_text().rsplit(") ", 1)[1].split()[1])
                    procs[int(d.name)] = (ppid, cmd)
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
    launchers = {pid for pid, (_, cmd) in procs.items() if b"cosmos_train.launch" in cmd}
    return [pid for pid, (ppid, _) in procs.items() if ppid in launchers]


class Sweep:
    """One run of a planned sweep: the trials side by side, the record, the report."""

    def __init__(self, plan: SweepPlan, params: SweepParams):
        self.plan, self.params = plan, params
        with path_errors("output_dir / name (the sweep folder)"):
            plan.folder.mkdir(parents=True, exist_ok=True)
        self.record = SweepRecord(plan.folder)
        self.logger = get_run_logger()
        self.stopping: dict[str, str] = {}  # trial name -> why early stop stopped it
        self.signalled: dict[str, set[int]] = {}  # trial name -> its ranks sent SIGTERM (once each)
        self.done = threading.Event()

    # ---------------------------------------------------------------- one trial
    def child(self, trial: Trial) -> tuple[Any, BaseModel]:
        run, p = str(trial.run_dir), self.params
        common: dict[str, Any] = {
            "config": str(trial.run_dir / CONFIG_FILE),
            "run_dir": run,
            "train_retries": p.train_retries,
            "timeout_s": p.timeout_s,
        }
        if self.plan.kind == "wfm-rl":
            return wfm_rl, WfmRLParams(**common)
        if self.plan.kind == "grpo":
            return grpo, GRPOParams(**common, dataset_script=p.dataset_script)
        return sft, SFTParams(**common, dataset_script=p.dataset_script)

    def run_trial(self, trial: Trial) -> None:
        """The trial's child flow run; its outcome into the record (a failure is recorded, not raised)."""
        self.record.start(trial)
        fn, child_params = self.child(trial)
        self.logger.info("trial %s: %s", trial.name, trial.run_dir)
        error = None
        try:
            with path_errors("output_dir / name (the sweep folder)"):
                trial.run_dir.mkdir(parents=True, exist_ok=True)
                trial.cfg.write(trial.run_dir / CONFIG_FILE)  # resolved once, here; the flow reads it as it is
            if self.params.deployment:
                from prefect.deployments import run_deployment

                run = run_deployment(
                    name=self.params.deployment,
                    parameters={"params": child_params.model_dump(mode="json")},
                    flow_run_name=trial.name,
                    timeout=None,
                    as_subflow=True,
                )
                assert isinstance(run, FlowRun)  # async_dispatch types the sync call's result as value | coroutine
                state = run.state
            else:
                state = fn.with_options(flow_run_name=trial.name)(child_params, return_state=True)
            ok = state is not None and state.is_completed()
            if not ok:
                error = f"{state.name if state else 'no state'}: {(state.message if state else '') or ''}"
        except Exception as e:  # noqa: BLE001 (one trial's failure is its row, not the sweep's end)
            ok, error = False, f"{type(e).__name__}: {e}"
        metrics = trial_metrics(trial.run_dir)
        if trial.name in self.stopping:
            self.record.finish(trial.name, "stopped", metrics, self.stopping[trial.name])
        elif ok:
            self.record.finish(trial.name, "done", metrics)
        else:
            self.logger.warning("trial %s failed: %s", trial.name, error)
            self.record.finish(trial.name, "failed", metrics, error)

    # ---------------------------------------------------------------- early stop
    def watch(self, running: list[Trial]) -> None:
        """Early stop: look at the running trials every poll_s seconds until the sweep ends."""
        p, plan = self.params, self.plan
        assert p.stop_margin is not None
        while not self.done.wait(p.poll_s):
            progress: dict[str, tuple[int, int | None, float | None]] = {}
            for t in plan.trials:  # every trial's newest value counts towards the best, finished ones included
                now = latest(t.run_dir, plan.metric) if t.run_dir.is_dir() else None
                steps = trial_metrics(t.run_dir).get("steps", 0) if now else 0
                progress[t.name] = (steps or 0, t.total_steps, now[1] if now else None)
            mine = {t.name: t for t in running}
            for name in early_stops(progress, plan.mode, p.stop_margin, p.stop_after):
                if (
                    name in mine
                    and name not in self.stopping
                    and self.record.trials.get(name, {}).get("state") == "running"
                ):
                    steps, _, value = progress[name]
                    self.stopping[name] = (
                        f"stopped early at step {steps}: {plan.metric} {value:.4g} trails the best by more "
                        f"than {p.stop_margin} (its checkpoint is kept in its run folder)"
                    )
                    self.logger.info("trial %s: %s", name, self.stopping[name])
            for name in self.stopping:  # every poll: a retry's relaunch is stopped as well
                if self.record.trials.get(name, {}).get("state") != "running":
                    continue
                signalled = self.signalled.setdefault(name, set())
                for pid in set(trainer_ranks(mine[name].run_dir)) - signalled:
                    signalled.add(pid)
                    try:
                        os.kill(pid, signal.SIGTERM)  # once: the rank checkpoints, then exits
                    except ProcessLookupError:
                        pass

    # ---------------------------------------------------------------- the sweep
    def run(self) -> dict[str, Any]:
        plan, p = self.plan, self.params
        todo, skipped = [], []
        for t in plan.trials:
            if self.record.finished(t) is not None:
                skipped.append(t.name)
            else:
                todo.append(t)
        self.logger.info(
            "sweep %s: %d trials (%d finished earlier, skipped), %d at a time, %s trials, best by %s (%s)",
            plan.folder,
            len(plan.trials),
            len(skipped),
            p.parallel,
            plan.kind,
            plan.metric,
            plan.mode,
        )
        watcher = None
        if p.stop_margin is not None and todo:
            watcher = threading.Thread(target=self.watch, args=(todo,), daemon=True)
            watcher.start()
        try:
            runner: ThreadPoolTaskRunner[None]
            with ThreadPoolTaskRunner(max_workers=p.parallel) as runner:
                # why a runner of its own: its pool's size is `parallel`, which the flow's decorator cannot know
                futures: list[Any] = [
                    runner.submit(trial_task, {"sweep": self, "trial": t, "name": t.name})  # type: ignore[arg-type]
                    for t in todo
                ]
                for f in futures:
                    f.wait()
        finally:
            self.done.set()
            if watcher is not None:
                watcher.join(timeout=30)
        return self.report(skipped)

    def report(self, skipped: list[str]) -> dict[str, Any]:
        plan = self.plan
        entries = []
        for t in plan.trials:
            rec = self.record.trials.get(t.name) or {"state": "failed", "error": "did not run"}
            entries.append(
                {
                    "name": t.name,
                    "settings": t.settings,
                    "state": rec.get("state"),
                    "metrics": trial_metrics(t.run_dir) if t.run_dir.is_dir() else rec.get("result") or {},
                    "error": rec.get("error"),
                    "seconds": rec.get("seconds", ""),
                    "run_dir": str(t.run_dir),
                    "ran": "skipped (finished earlier)" if t.name in skipped else "ran",
                }
            )
        best = best_trial(entries, plan.metric, plan.mode)
        rows = table_rows(entries, plan.labels, plan.kind, plan.metric, best)
        create_table_artifact(
            rows,
            key="sweep-table",
            description=f"sweep {plan.folder.name}: {len(rows)} trials of {plan.kind}, best by {plan.metric} "
            f"({plan.mode})",
        )
        png = plot_overlay(
            [(t.name, t.run_dir) for t in plan.trials], plan.kind, plan.metric, plan.folder / "plots" / "overlay.png"
        )
        create_markdown_artifact(
            curves_markdown(png, f"Sweep {plan.folder.name}: every trial's curves"),
            key="sweep-curves",
            description=f"sweep {plan.folder.name}: curves overlaid",
        )
        by_name = {e["name"]: e for e in entries}
        best_entry = by_name.get(best) if best else None
        summary_best = None
        if best_entry is not None:
            m = best_entry["metrics"]
            summary_best = {
                "name": best,
                "settings": best_entry["settings"],
                "metric": plan.metric,
                "value": m.get(plan.metric),
                "export": m.get("best_export") or m.get("export"),
                "run_dir": best_entry["run_dir"],
            }
        create_markdown_artifact(
            _best_markdown(plan, summary_best, entries),
            key="sweep-best",
            description=f"sweep {plan.folder.name}: the best trial",
        )
        failed = [e["name"] for e in entries if e["state"] not in FINISHED]
        if failed and len(failed) == len(entries):
            raise RuntimeError(f"every trial of the sweep failed (see the sweep-table artifact): {plan.folder}")
        return {
            "folder": str(plan.folder),
            "kind": plan.kind,
            "metric": plan.metric,
            "mode": plan.mode,
            "best": summary_best,
            "trials": rows,
            "ran": {e["name"]: e["ran"] for e in entries},
            "failed": failed,
            "overlay": str(png) if png else None,
        }


@task(name="trial", cache_policy=NO_CACHE, task_run_name="trial {name}")
def trial_task(sweep: Sweep, trial: Trial, name: str) -> None:
    """A trial in the sweep's thread pool: its child flow run, recorded."""
    sweep.run_trial(trial)


def _best_markdown(plan: SweepPlan, best: dict[str, Any] | None, entries: list[dict[str, Any]]) -> str:
    done = sum(e["state"] in FINISHED for e in entries)
    head = f"# Sweep `{plan.folder.name}`: best by `{plan.metric}` ({plan.mode})\n\n"
    if best is None:
        return head + (
            f"No finished trial logged `{plan.metric}` ({done} of {len(entries)} finished). Pick a metric the runs "
            f"log (a key of metrics.jsonl's train rows, or val_<key> of its validation rows).\n"
        )
    settings = "\n".join(f"  - `{k}` = `{v}`" for k, v in best["settings"].items())
    return head + (
        f"- trial: **{best['name']}**\n- {plan.metric}: {best['value']}\n- settings:\n{settings}\n"
        f"- export: `{best['export']}`\n- run folder: `{best['run_dir']}`\n- sweep folder: `{plan.folder}` "
        f"({done} of {len(entries)} trials finished)\n"
    )
