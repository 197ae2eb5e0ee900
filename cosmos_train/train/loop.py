"""The trainer base every training process subclasses: SFT and GRPO (through train/trainer.py's `Trainer`) and
the world-model trainer (wfm/trainer.py). It owns what does not depend on the kind of model or job:

    run_main(SFTTrainer, argv)   # parse the arguments, logging, process group, seed, train, RUN/result.json
        trainer.maybe_resume(own_run_first)   # this run's newest checkpoint, or what the config's resume names
        trainer.fit()                         # the steps, agreed stopping, periodic checkpoints, validation, the end

A subclass maps its config onto `LoopSettings` (`loop_settings`), builds its model, optimizer and schedule, and
supplies each step's input (`step_inputs`), the step (`train_step`) and its export (`export`); what it keeps in a
checkpoint beyond the step is `checkpoint_extra` / `restore_extra`. An RL trainer (GRPO, the world model) names how
its run is judged (`watch_health`): the run-health verdicts go into RUN/result.json ("health"), and with
stop_when_stuck the run ends, saved, at the step one holds (`end_early`, exit 3).

An s3:// output_dir: the run folder is its local working copy, rank 0 mirrors it to the bucket while the run
goes (`run_sync.RunSync`: checkpoints and exports as they complete, metrics and logs on a timer and at exit),
and resume = true downloads the bucket's newest complete checkpoint first (`resolve_resume`).
"""

from __future__ import annotations

import argparse
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from cosmos_train.checkpoint import CheckpointManager
from cosmos_train.checkpoint_paths import resolve_resume
from cosmos_train.config import CheckpointConfig, ParallelismConfig, RunHealthConfig
from cosmos_train.config.paths import is_s3, run_cache_root
from cosmos_train.distributed import DistInfo, all_ok, any_rank, broadcast_str, cpu_group, init_distributed, teardown
from cosmos_train.errors import (
    RunStuck,
    ServiceUnavailable,
    TrainingDiverged,
    UserError,
    error_from_record,
    read_error_file,
    report_rank_failure,
)
from cosmos_train.logs import setup_logging
from cosmos_train.metrics import LoggedJob, MetricsLogger, read_metrics
from cosmos_train.rng_state import seed_process_rngs
from cosmos_train.run_sync import RunSync, fetch_checkpoint, run_url, settings_for
from cosmos_train.signals import install_exit_handlers
from cosmos_train.train.run_health import HealthWatch, stuck_message
from cosmos_train.train.step import clip_grad_norm

logger = logging.getLogger(__name__)

# a job config: the vision-language one (cosmos_train.config.Config) or the world model's (wfm/config.py)
ConfigT = TypeVar("ConfigT", bound=LoggedJob)  # the job config: Config or WfmConfig


@dataclass(frozen=True)
class LoopSettings:
    """What the shared loop reads from a job's config, whatever the config's own layout."""

    seed: int  # the process RNGs' seed (the rank is added)
    parallelism: ParallelismConfig  # the process group's mesh
    ckpt: CheckpointConfig  # the checkpoint manager's settings, and whether / how often to save
    resume: bool | str  # false, true (the newest checkpoint under output_dir) or a checkpoint / run folder
    resume_key: str  # the config key of `resume`, for messages
    output_dir: str  # where resume = true looks
    export_final: bool  # export the trained model after the last step
    export_each_save: bool  # export beside every periodic checkpoint too
    save_at_exit: bool = True  # a checkpoint when stopped by a signal
    validation_freq: int = 0  # validate every this many steps (0: only after the last step)
    grad_clip: float = 0.0  # the global gradient norm is clipped to this (<= 0: measured only)
    grad_force_finite: bool = False  # NaN / inf gradient elements become 0 before the norm
    deterministic: bool = False  # torch.use_deterministic_algorithms (warn only)
    collective_timeout_s: float | None = None  # the process group's timeout (None: torch's own)


def seed_everything(seed: int, rank: int, deterministic: bool) -> None:
    """Seed this process's global RNGs from (seed, rank) (`checkpoint.seed_process_rngs`, which a resumed rank
    without saved RNG state uses too); `deterministic` asks torch for deterministic kernels."""
    seed_process_rngs(seed, rank)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


class BaseTrainer(ABC, Generic[ConfigT]):
    """The run around a trainer's steps. A subclass builds its model and optimizer, then calls this __init__
    (the run's checkpoint manager, metrics and exit handlers start after the model, as they always have), then
    sets `total_steps` and `scheduler` before `maybe_resume`."""

    name: ClassVar[str] = "train"

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    total_steps: int

    def __init__(self, cfg: ConfigT, run_dir: Path, dist: DistInfo, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.cfg, self.run_dir, self.dist = cfg, run_dir, dist
        self.settings = self.loop_settings(cfg)
        self.model, self.optimizer = model, optimizer
        self.ckpt = CheckpointManager(run_dir, self.settings.ckpt, seed=self.settings.seed)
        self.metrics = MetricsLogger(run_dir, cfg, enabled=dist.is_main)
        # output_dir = "s3://...": run_dir is the run's local working copy; rank 0 mirrors it to the bucket
        self.run_url = run_url(self.settings.output_dir, run_dir)
        self.sync: RunSync | None = None
        self._closed_sync: RunSync | None = None
        if self.run_url and dist.is_main:
            self.sync = RunSync(run_dir, self.run_url, settings_for(self.settings.ckpt)).start()
        self.step = 0
        self.resumed_from: str | None = None
        self.resume_note: str | None = None
        self.skipped_steps: list[int] = []
        # SIGTERM/SIGUSR1 (Prefect cancel, preemption): checkpoint and leave at a step's end. Ranks get the
        # signal at different moments, so they agree (one all-reduce) to stop after the same step.
        self.exit_request = install_exit_handlers()
        self.stopped = False
        # a user-facing reason the run ended before its last step (`end_early`), raised once the end is saved
        self.ended_early: UserError | None = None
        # RL trainers (`watch_health`): how the run is judged (RUN/result.json's "health"), and whether
        # stop_when_stuck follows the verdicts step by step
        self.health: HealthWatch | None = None
        self.stop_when_stuck = False

    # ------------------------------------------------------------------ what a subclass maps from its config
    @classmethod
    @abstractmethod
    def loop_settings(cls, cfg: ConfigT) -> LoopSettings:
        """The config's seed, mesh, checkpoint, resume, export, validation and clipping settings."""

    @classmethod
    @abstractmethod
    def load_job_config(cls, path: Path) -> ConfigT:
        """The run folder's resolved config (the whole truth: no environment overrides)."""

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Command-line arguments beyond --config and --resume-own-run."""
        return None  # an optional hook

    @classmethod
    @abstractmethod
    def from_args(cls, cfg: ConfigT, run_dir: Path, dist: DistInfo, args: argparse.Namespace) -> BaseTrainer[ConfigT]:
        """The trainer of this process, from its config and command line."""

    # ------------------------------------------------------------------ what a checkpoint carries
    def checkpoint_extra(self) -> dict[str, Any]:
        """Beyond model, optimizer, scheduler and RNG: the step (subclasses add)."""
        return {"step": self.step, "world_size": self.dist.world_size}

    def restore_extra(self, extra: dict[str, Any]) -> None:
        self.step = int(extra["step"])

    def position(self) -> str:
        """Where the run is, for the log: the step (subclasses add their data position)."""
        return f"step {self.step}"

    # ------------------------------------------------------------------ resume / save / export
    def maybe_resume(self, own_run_first: bool = False) -> None:
        """Continue from this run folder's newest checkpoint (a retried launch) when asked and present,
        else as the config's resume says (`checkpoint_paths.resolve_resume`: a path that is not a complete
        checkpoint is an error listing the complete ones; true with none found starts fresh and says so)."""
        s = self.settings
        ckpt = CheckpointManager.find_latest(self.run_dir) if own_run_first else None
        if ckpt is None:
            ckpt = self.resolve_resume()
            if ckpt is None and s.resume is True:
                self.resume_note = (
                    f"{s.resume_key} = true: no complete checkpoint under {s.output_dir}; started from step 0"
                )
                self.log(self.resume_note)
        if ckpt is None:
            return
        extra = self.ckpt.load(ckpt, self.model, self.optimizer, self.scheduler)
        self.restore_extra(extra)
        self.resumed_from = str(ckpt)
        # A relaunch after a crash: the failed attempt's metrics past this step are replaced, not repeated.
        self.metrics.drop_after(self.step)
        self.log(f"resumed from {ckpt} at {self.position()}")

    def resolve_resume(self) -> Path | None:
        """The checkpoint the config's resume names (`checkpoint_paths.resolve_resume`). From S3 (resume = an
        s3:// URL, or true with an s3:// output_dir): rank 0 first downloads the newest complete checkpoint there
        into the local copy (`run_sync.fetch_checkpoint`; the other ranks wait), then true takes the newest
        complete one of the local copy (the download, or a newer one this machine wrote)."""
        s = self.settings
        remote = s.resume if isinstance(s.resume, str) and is_s3(s.resume) else None
        if s.resume is True and is_s3(s.output_dir):
            remote = s.output_dir
        if remote is None:
            return resolve_resume(s.resume, s.output_dir)
        fetched: Path | None = None
        error: Exception | None = None
        if self.dist.rank == 0:
            try:
                fetched = fetch_checkpoint(remote, settings_for(s.ckpt), s.resume_key, required=s.resume is not True)
            except Exception as e:  # noqa: BLE001 (raised below on rank 0, after every rank knows)
                error = e
        if not all_ok(error is None, cpu_group()):
            raise error or UserError(f"{s.resume_key}: rank 0 could not download the checkpoint from {remote}")
        path = broadcast_str(str(fetched or ""), cpu_group())
        if s.resume is True:
            return resolve_resume(True, run_cache_root(s.output_dir))
        return Path(path)

    def save(self, blocking: bool = False) -> Path:
        """A checkpoint of this step (the checkpoint manager logs where and how long it took)."""
        path = self.ckpt.save(
            self.step, self.model, self.optimizer, self.scheduler, self.checkpoint_extra(), blocking=blocking
        )
        if self.sync is not None:
            self.sync.poke()  # a synchronous save is complete now; an async one at a later scan
        return path

    def close_sync(self) -> list[dict[str, Any]]:
        """Rank 0 of a run on S3: stop the mirror's thread after its last scans (every checkpoint, export,
        metrics and logs); one record per folder uploaded or failed. Nothing to do elsewhere."""
        if self.sync is None:
            return []
        sync, self.sync = self.sync, None
        records = sync.close()
        self._closed_sync = sync
        return records

    def push_run_files(self) -> None:
        """After `close_sync`: the run's files written since (RUN/result.json, RUN/error.json) to the bucket."""
        if self._closed_sync is not None:
            self._closed_sync.scan()

    @abstractmethod
    def export(self, name: str) -> Path | None:
        """The trained model as a folder named `name` (a collective: every rank calls it)."""

    def periodic_save(self) -> None:
        """A checkpoint every ckpt.save_freq steps between the start and the last step (and an export when
        export_each_save)."""
        s = self.settings
        if s.ckpt.enable_checkpoint and self.step % s.ckpt.save_freq == 0 and self.step < self.total_steps:
            self.save()
            if s.export_each_save:
                self.export(f"step_{self.step}")

    def finish(self) -> Path | None:
        """After the last step: a blocking checkpoint, then the export `final` (None when exports are off).
        On an agreed stop (signal): the exit checkpoint only."""
        s = self.settings
        if self.stopped:
            if s.save_at_exit and s.ckpt.enable_checkpoint:
                self.save(blocking=True)
            self.ckpt.wait()
            self.log(f"stopped by signal {self.exit_request.signum} at step {self.step}")
            return None
        if s.ckpt.enable_checkpoint:
            self.save(blocking=True)
        self.ckpt.wait()
        final = self.export("final") if s.export_final else None
        if self.sync is not None:
            self.sync.poke()
        return final

    def clip_gradients(self) -> float:
        """The global gradient norm of the model, clipped to the config's limit (`step.clip_grad_norm`)."""
        return clip_grad_norm(self.model, self.settings.grad_clip, force_finite=self.settings.grad_force_finite)

    # ------------------------------------------------------------------ what a subclass supplies to the loop
    @abstractmethod
    def describe(self) -> str:
        """The line logged before the first step."""

    @abstractmethod
    def step_inputs(self) -> Iterator[tuple[Any, Any]]:
        """(a step's input, what `advance` gets after that step) from where the run is, as long as there are
        steps; read lazily: `self.step` is the steps done before the one being asked for."""

    def advance(self, after: Any) -> None:
        """After a step: take `after` (from `step_inputs`), e.g. the data position past the step's batch."""
        return None  # an optional hook

    @abstractmethod
    def train_step(self, batch: Any) -> dict[str, Any]:
        """One step on `batch` (self.step is the number of steps done before it); "skipped": True when
        the update was not applied (a non-finite loss or gradient)."""

    @property
    def validating(self) -> bool:
        return False

    def validate_and_log(self) -> None:
        """Validation every validation_freq steps and after the last step."""
        return None  # an optional hook

    def before_loop(self) -> None:
        """After resume, before the first step."""
        return None  # an optional hook

    def after_loop(self) -> None:
        """After the last checkpoint and export (or the exit checkpoint)."""
        return None  # an optional hook

    def result_extra(self) -> dict[str, Any]:
        """What RUN/result.json holds beyond the common keys."""
        return {}

    def watch_health(self, cfg: RunHealthConfig, ratio_moves: bool | None, world_model: bool, stop: bool) -> None:
        """An RL trainer's run is judged by the run-health verdicts (train/run_health.py): at its end into
        RUN/result.json's "health", and with `stop` (its stop_when_stuck) step by step, ending the run when a
        verdict of cfg.stop_on holds (`end_early`). ratio_moves / world_model: as `run_health.assess` takes them."""
        self.health = HealthWatch(cfg, ratio_moves, world_model=world_model)
        self.stop_when_stuck = stop

    def log_validation(self, values: dict[str, Any]) -> None:
        """A validation's row of RUN/metrics.jsonl at this step, followed by stop_when_stuck too."""
        self.metrics.log(self.step, values, kind="val")
        if self.health is not None and self.stop_when_stuck:
            self.health.add("val", self.step, values)

    def end_early(self, values: dict[str, Any]) -> UserError | None:
        """After each logged step (`values` its metrics): a reason to end the run here, as if this were its last
        step (final validation, checkpoint, export, result.json), after which `run_main` raises it; None to go
        on. Every rank must give the same answer (decide on all-reduced values). Here: stop_when_stuck's
        `RunStuck` when a run-health verdict of stop_on holds at this step (`watch_health`)."""
        if self.health is None or not self.stop_when_stuck:
            return None
        self.health.add("train", self.step, values)
        stuck = self.health.stuck()
        # the values are all-reduced, so ranks agree; any rank's verdict makes a rank that read less history follow
        if not any_rank(bool(stuck), self.dist.device):
            return None
        key = f"{self.health.section}.stop_when_stuck"
        self.log(f"{key}: ending after step {self.step}: {', '.join(v.name for v in stuck)}")
        # its paragraph is printed at the exit
        return RunStuck(stuck_message(stuck, self.step, self.total_steps, self.health.section))

    def skip_nonfinite(self, values: dict[str, Any]) -> None:
        """A step that made no update (train_step said "skipped"). A trainer that allows skipping overrides this;
        here the run stops."""
        raise TrainingDiverged(
            f"step {self.step}: loss {values.get('loss')} / gradient norm "
            f"{values.get('grad_norm')} not finite: training diverged"
        )

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, Any]:
        """The steps from where the run is to its end (or an agreed stop), then the end's checkpoint and export.

        A service the run needs that stayed unreachable (GRPO's reward service) ends it saved: every rank raises
        ServiceUnavailable at the same point (`rollout.sources.agree_on_outage`), before the step's update, so the
        model, optimizer and data position still hold the last completed step; that step is saved here (a
        collective all ranks reach together) and the error goes on with where the run stopped (run_main: its
        paragraph, RUN/error.json of kind "service", exit 75)."""
        self.log(self.describe())
        last: dict[str, Any] = {}
        freq = self.settings.validation_freq
        try:
            if self.step and self.health is not None and self.stop_when_stuck:
                # resumed: the steps before count (a rank that cannot read them follows the others: `end_early`)
                self.health.rows = read_metrics(self.run_dir)
            self.before_loop()
            if self.step < self.total_steps:
                for batch, after in self.step_inputs():
                    values = self.train_step(batch)
                    self.step += 1
                    self.advance(after)
                    if values.pop("skipped", False):
                        self.skip_nonfinite(values)  # no update was made: nothing new to log, check or save
                    else:
                        last = values
                        self.metrics.log(self.step, {**values, "total_steps": self.total_steps})
                        self.ended_early = self.end_early(values)
                        if self.ended_early is None:  # else this step is the last: validated and saved below
                            if self.validating and freq and self.step % freq == 0 and self.step < self.total_steps:
                                self.validate_and_log()
                            self.periodic_save()
                    self.stopped = self.exit_request.agreed()
                    if self.stopped or self.ended_early is not None or self.step >= self.total_steps:
                        break
            if not self.stopped and self.validating:
                self.validate_and_log()  # the final weights
        except ServiceUnavailable as e:
            s = self.settings
            if not s.ckpt.enable_checkpoint:
                saved = "checkpoints are off in this job's config, so nothing was saved (a rerun starts from step 0)"
            elif self.step == 0:
                saved = "no step was completed, so nothing was saved"
            else:  # a no-op when this step's checkpoint exists (a periodic save, or the one the run resumed from)
                saved = f"its checkpoint {self.save(blocking=True)} is saved"
            where = f"step {self.step} of {self.total_steps}"
            self.log(f"{e}: every rank stops after {where}; {saved}")
            raise ServiceUnavailable(
                f"{e}. The run stopped after {where}: {saved}; resume it once the service answers again"
            ) from e
        final = self.finish()
        self.after_loop()
        if self.stopped:
            return {"step": self.step, "stopped": True}
        self.metrics.close()
        health = None  # an RL run's verdicts, on the rows rank 0 wrote (rank 0 writes result.json)
        if self.health is not None and self.dist.is_main:
            health = self.health.assess(read_metrics(self.run_dir))
        return {
            "step": self.step,
            "stopped": False,
            "final": str(final) if final else None,
            **self.result_extra(),
            **({"health": health.to_dict()} if health is not None else {}),
            "resumed_from": self.resumed_from,
            "resume_note": self.resume_note,
            "skipped_steps": self.skipped_steps,
            **({"ended_early": str(self.ended_early)} if self.ended_early is not None else {}),
            **last,
        }

    def log(self, msg: str) -> None:
        """A line of the run's log (rank 0's, unless logging was set up for all ranks: `cosmos_train.logs`)."""
        logger.info(msg)


def run_main(trainer_cls: type[BaseTrainer[Any]], argv: list[str] | None = None) -> int:
    """The process entry point every trainer shares: parse --config / --resume-own-run (and the trainer's own
    arguments), set up logging, start the process group, seed, train, write RUN/result.json; a user error is
    its paragraph in RUN/error.json and exit 2 (3 for a run `end_early` ended: `RunStuck`), a crash its traceback;
    143 when stopped by a signal."""
    ap = argparse.ArgumentParser(description=f"{trainer_cls.name} trainer (run under torchrun).")
    ap.add_argument("--config", type=Path, required=True, help="The run folder's resolved config.toml.")
    ap.add_argument(
        "--resume-own-run",
        action="store_true",
        help="Resume from this run folder's newest checkpoint if it has one (used by retries).",
    )
    trainer_cls.add_arguments(ap)
    args = ap.parse_args(argv)
    run_dir = args.config.resolve().parent
    # once the process reading this rank's output dies (the launching CLI killed), its lines go on in the log the
    # reader was writing, instead of a broken pipe killing the rank before it saved its stop checkpoint
    setup_logging(trainer_cls.name, log_file=run_dir / "logs" / "train.log")
    trainer: BaseTrainer[Any] | None = None
    dist: DistInfo | None = None
    try:
        cfg = trainer_cls.load_job_config(args.config)
        settings = trainer_cls.loop_settings(cfg)
        dist = init_distributed(settings.parallelism, settings.collective_timeout_s)
        seed_everything(settings.seed, dist.rank, settings.deterministic)
        trainer = trainer_cls.from_args(cfg, run_dir, dist, args)
        trainer.maybe_resume(args.resume_own_run)
        result = trainer.fit()
        if trainer.run_url:
            result["run_url"] = trainer.run_url
        if dist.is_main:
            (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
        if trainer.ended_early is not None and not result.get("stopped"):
            raise trainer.ended_early  # saved and reported like a normal end; then its paragraph and exit code
    except Exception as e:
        # A user error: its paragraph and exit 2 (RUN/error.json tells the launching task); a crash
        # re-raises with its traceback. No collective: the other ranks may be anywhere. First the checkpoint
        # being written is settled (an async write that ended on every rank is marked, else its folder removed),
        # and RUN/error.json is written while this rank's connections are still open: the peers' errors this
        # rank's exit causes ("Connection closed by peer") come after it.
        if trainer is not None:
            trainer.ckpt.abort()
        code = report_rank_failure(e, run_dir, step=trainer.step if trainer else None, rank=dist.rank if dist else 0)
        teardown(barrier=False)
        if trainer is not None:  # a run on S3: what it saved, its metrics and RUN/error.json go up before exit
            trainer.close_sync()
            trainer.push_run_files()
        if code is None:
            # A crash right after another rank stopped the run with a user error (its write, rank 0's alone, found
            # the disk full, and this rank's next collective lost its peer) is that error, said once by that rank:
            # this rank's traceback would only repeat "Connection closed by peer".
            record = read_error_file(run_dir)
            peer = error_from_record(record) if record is not None else None
            if record is None or peer is None:
                raise
            said = (str(e).splitlines() or [""])[0][:300]
            logger.warning(
                "stopped after rank %s's %s (here %s: %s)", record["rank"], record["type"], type(e).__name__, said
            )
            return peer.exit_code
        return code
    teardown()
    if trainer is not None and trainer.sync is not None:
        # rank 0 of a run on S3, once the other ranks are done (no collective waits on the uploads): the last
        # checkpoint and export go up, then result.json with their records
        result["uploads"] = trainer.close_sync()
        (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
        trainer.push_run_files()
    return 143 if result.get("stopped") else 0
