"""The one trainer base (train/loop.py): SFT, GRPO and the world-model trainer subclass it and keep no copy of its
run logic; its loop checkpoints, resumes to the same numbers as an uninterrupted run, and stops on an agreed
signal; the process log (cosmos_train/logs.py) is rank-aware."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cosmos_train.config import CheckpointConfig, LoggingConfig, ParallelismConfig
from cosmos_train.logs import LIBRARY_LOGGER, ConsoleHandler, setup_logging
from cosmos_train.train import loop as loop_module
from cosmos_train.train.grpo import GRPOTrainer
from cosmos_train.train.loop import BaseTrainer, LoopSettings
from cosmos_train.train.sft import SFTTrainer
from cosmos_train.train.trainer import Trainer
from cosmos_train.wfm import trainer as wfm_trainer
from cosmos_train.wfm.trainer import WfmTrainer

# What only the base does: no trainer may define its own.
SHARED = ("fit", "maybe_resume", "save", "finish", "periodic_save", "clip_gradients", "log")


@pytest.mark.parametrize("cls", [SFTTrainer, GRPOTrainer, WfmTrainer])
def test_the_three_trainers_share_the_base_and_keep_no_copy_of_it(cls: type) -> None:
    assert issubclass(cls, BaseTrainer)
    for klass in cls.__mro__[: cls.__mro__.index(BaseTrainer)]:
        copied = [name for name in SHARED if name in vars(klass)]
        assert not copied, f"{klass.__name__} redefines {copied}: the base's run logic belongs in train/loop.py"


def test_the_world_model_trainer_has_no_seeding_or_entry_point_of_its_own() -> None:
    assert WfmTrainer.__mro__[1] is BaseTrainer and not issubclass(WfmTrainer, Trainer)
    assert not hasattr(wfm_trainer, "seed_rng") and not hasattr(WfmTrainer, "_clip_grads")
    assert wfm_trainer.run_main is loop_module.run_main  # its main is the shared one


# ------------------------------------------------------------------ logging
@pytest.fixture
def library_logger() -> Iterator[logging.Logger]:
    log = logging.getLogger(LIBRARY_LOGGER)
    level, handlers = log.level, list(log.handlers)
    yield log
    log.handlers[:] = handlers
    log.setLevel(level)


def test_rank_zero_logs_progress_lines_as_trainers_always_printed_them(library_logger, capsys) -> None:
    setup_logging("sft", rank=0, all_ranks=False)
    setup_logging("sft", rank=0, all_ranks=False)  # twice: still one pair of handlers
    assert sum(isinstance(h, ConsoleHandler) for h in library_logger.handlers) == 2
    logging.getLogger("cosmos_train.train.loop").info("training 5/10 parameters")
    logging.getLogger("cosmos_train.checkpoint").warning("disk slow")
    out, err = capsys.readouterr()
    assert out == "[sft] training 5/10 parameters\n"  # the line train.log readers look for ("[sft] training ")
    assert err == "[sft] WARNING cosmos_train.checkpoint: disk slow\n"


def test_other_ranks_log_only_warnings_naming_their_rank_unless_all_ranks(library_logger, capsys) -> None:
    setup_logging("wfm_rl", rank=3, all_ranks=False)
    log = logging.getLogger("cosmos_train.wfm.trainer")
    log.info("before training: {}")
    log.error("reward service down")
    out, err = capsys.readouterr()
    assert out == "" and err == "[wfm_rl rank 3] ERROR cosmos_train.wfm.trainer: reward service down\n"
    setup_logging("wfm_rl", rank=3, all_ranks=True)
    log.info("step 2")
    assert capsys.readouterr().out == "[wfm_rl rank 3] step 2\n"


def test_all_ranks_can_be_asked_for_in_the_environment(library_logger, capsys, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("COSMOS_TRAIN_LOG_ALL_RANKS", "1")
    setup_logging("grpo")
    logging.getLogger("cosmos_train.train.grpo").info("hello")
    assert capsys.readouterr().out == "[grpo rank 1] hello\n"


# ------------------------------------------------------------------ the loop, on a toy trainer
class ToyTrainer(BaseTrainer[SimpleNamespace]):
    """Least squares on a fixed stream of batches: one SGD step each, the batch a function of the step."""

    name = "toy"

    def __init__(self, cfg: SimpleNamespace, run_dir: Path):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        super().__init__(
            cfg,
            run_dir,
            SimpleNamespace(is_main=True, world_size=1, rank=0),  # type: ignore[arg-type]
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0 / (1 + step))
        self.total_steps = cfg.steps
        self.stop_after = cfg.stop_after
        self.validations: list[int] = []

    @classmethod
    def loop_settings(cls, cfg: SimpleNamespace) -> LoopSettings:
        return LoopSettings(
            seed=0,
            parallelism=ParallelismConfig(),
            ckpt=CheckpointConfig(save_freq=2, save_mode="sync"),
            resume=False,
            resume_key="resume",
            output_dir=str(cfg.out),
            export_final=False,
            export_each_save=False,
            validation_freq=3,
            grad_clip=1.0,
        )

    @classmethod
    def load_job_config(cls, path: Path) -> SimpleNamespace:
        raise NotImplementedError

    @classmethod
    def from_args(cls, cfg: SimpleNamespace, run_dir: Path, dist: Any, args: Any) -> ToyTrainer:
        raise NotImplementedError

    def export(self, name: str) -> Path | None:
        return None

    def describe(self) -> str:
        return "toy"

    def step_inputs(self) -> Iterator[tuple[torch.Tensor, None]]:
        while True:
            g = torch.Generator().manual_seed(self.step)
            yield torch.randn(4, 3, generator=g), None

    def train_step(self, x: torch.Tensor) -> dict[str, Any]:
        if self.stop_after is not None and self.step + 1 == self.stop_after:
            self.exit_request.signum = 15  # as the SIGTERM handler does
        loss = ((self.model(x).squeeze(1) - x.sum(1)) ** 2).mean()
        loss.backward()
        norm = self.clip_gradients()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        return {"loss": float(loss.detach()), "grad_norm": norm}

    @property
    def validating(self) -> bool:
        return True

    def validate_and_log(self) -> None:
        self.validations.append(self.step)


def _toy(tmp_path: Path, name: str, steps: int, stop_after: int | None = None) -> ToyTrainer:
    cfg = SimpleNamespace(
        steps=steps, stop_after=stop_after, out=tmp_path, logging=LoggingConfig(logger=[]), model_dump=lambda **_: {}
    )
    (tmp_path / name).mkdir(exist_ok=True)  # the run folder the launching flow made
    return ToyTrainer(cfg, tmp_path / name)


def _train_rows(run: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows if r["kind"] == "train"]


def test_the_loop_saves_validates_and_resumes_to_the_uninterrupted_numbers(tmp_path: Path) -> None:
    whole = _toy(tmp_path, "whole", 7)
    result = whole.fit()
    assert result["step"] == 7 and not result["stopped"] and result["resumed_from"] is None
    assert whole.validations == [3, 6, 7]  # every validation_freq steps, then the final weights
    assert sorted(p.name for p in (tmp_path / "whole" / "checkpoints").iterdir()) == ["step_6", "step_7"]

    stopped = _toy(tmp_path, "part", 7, stop_after=3)  # a signal during step 3: every rank stops after it
    assert stopped.fit() == {"step": 3, "stopped": True}
    assert (tmp_path / "part" / "checkpoints" / "step_3" / "COMPLETE").is_file()  # the exit checkpoint
    again = _toy(tmp_path, "part", 7)
    again.maybe_resume(own_run_first=True)
    assert again.step == 3 and again.resumed_from is not None and again.resumed_from.endswith("step_3")
    again.fit()
    assert _train_rows(tmp_path / "part") == _train_rows(tmp_path / "whole")
    for a, b in zip(whole.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
