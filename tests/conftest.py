"""Shared offline fixtures: the tiny model and a small synthetic dataset, made once per session."""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.torchrun import kill_leftovers

if TYPE_CHECKING:
    from tests.cli_inprocess import RunCli

# An accidental hub download must fail loudly, never hang or succeed silently.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

ROOT = Path(__file__).resolve().parents[1]


# Tests that run after the rest of `make pytest`, as its second part (pytest -m serial, two at a time; each one's
# processes are told apart by its own folder, session or environment): their bounds on seconds hold with no more than
# one other such test beside them (bench/RESULTS.md, "The suite's wall time"), not beside the first part's torchrun
# launches, or they load the machine on purpose.
# `make pytest-serial` collects them in this order (`serial_paths`) and hands the files out in it
# (--no-loadscope-reorder): the longest first, so that the part does not end on one long file while the other worker
# idles; the half-second timeouts first, beside the two-host bed's start; the test that spins both cores last, after
# the tests with tight bounds have been handed out.
SERIAL = (
    "tests/integration/services/test_reward_service_limits.py",  # timeouts to half a second
    "tests/integration/distributed/test_two_hosts.py",  # the two-host bed: rendezvous and collective timeouts
    # real faults: stop and restart bounds in seconds, collective timeouts, every session they made
    "tests/faults/test_ctrl_c.py",
    "tests/faults/test_reward_service_down.py",
    "tests/integration/flows/test_deployment_nodes.py",  # the two-host bed
    "tests/faults/test_host_lost.py",
    "tests/faults/test_prefect_server_lost.py",
    "tests/faults/test_disk_full.py",
    "tests/faults/test_cli_killed.py",
    "tests/integration/flows/test_cancel.py",  # a killed flow's ranks gone within 30 s; it failed under load ~9
    "tests/integration/distributed/test_grpo_reward_restart.py",  # a service restart a client's retries must outlast
    "tests/faults/test_wfm_reward_service_down.py",
    "tests/faults/test_preemption.py",  # no bound in seconds: the likely neighbour of the last test
    "tests/faults/",  # and any other file of the fault suite
    "tests/integration/distributed/test_multinode.py",
    "tests/integration/distributed/test_determinism_under_load.py",  # spins both cores on purpose
)


def serial_paths() -> list[str]:
    """SERIAL as `make pytest-serial` passes it to pytest: a folder's entry becomes its test files that SERIAL does not
    name (given a folder, pytest would collect every file of it at the folder's place, whatever the order named)."""
    named = {entry for entry in SERIAL if entry.endswith(".py")}
    paths = []
    for entry in SERIAL:
        if entry.endswith(".py"):
            paths.append(entry)
        else:
            files = (p.relative_to(ROOT).as_posix() for p in sorted((ROOT / entry).glob("test_*.py")))
            paths += [f for f in files if f not in named]
    return paths


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """`make(folder)` run once per pytest run however many xdist workers ask: the first makes it in the folder the
    workers' base temps share (popen-gwN/..), under a lock; the others wait for it and get the same result. For a
    session fixture that costs a training run (a worker of its own would run it again)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    done = root / f"{name}.done"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():  # a worker that failed to make it left no .done: the next one tries, and fails alike
            folder = root / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(str(make(folder)))
    return Path(done.read_text())


@pytest.fixture(autouse=True)
def _no_launch_outlives_its_test() -> Iterator[None]:
    """A torchrun launch (tests/torchrun.py) still running when its test ends, pass or fail: killed, ranks too."""
    yield
    kill_leftovers()


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """`cosmos-train ARGS` in this process, refused or answered before Prefect starts (flows=True: run on the test's
    Prefect API): tests/cli_inprocess.py. A subprocess would pay 3-5 s of interpreter start and imports a call."""
    from tests.cli_inprocess import run_cli as run  # imports cosmos_train.cli: not at every conftest import

    return functools.partial(run, monkeypatch)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cosmos_train.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


@pytest.fixture(scope="session")
def tiny_wfm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Cosmos-Predict2.5-layout world model (`make-tiny-wfm`)."""
    from cosmos_train.wfm.tiny_model import make_tiny_wfm

    return make_tiny_wfm(tmp_path_factory.mktemp("tiny-wfm") / "model")


@pytest.fixture(scope="session")
def wfm_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small world-model dataset (`make-synthetic-wfm-data`): 12 clips of 5 frames, 32x32."""
    from cosmos_train.wfm.synthetic_data import make_synthetic_wfm_data

    return make_synthetic_wfm_data(tmp_path_factory.mktemp("wfm-data") / "data", n=12, num_frames=5)


def wfm_eval_overrides(model: Path, data: Path, *more: str) -> list[str]:
    """--set overrides of configs/tiny-wfm-ddrl.toml for the world-model evaluation tests: the tiny model and
    dataset, 3 sampling steps, two reward handlers."""
    return [
        f"model.model_name_or_path='{model}'",
        f"dataloader_train.video_dataloader.dataset_dir='{data}'",
        "model.rl.sample_steps=3",
        "reward.fns={brightness=1.0, smoothness=0.5}",
        *more,
    ]


@pytest.fixture(scope="session")
def moved_wfm_export(tiny_wfm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's export: the tiny DiT with every weight moved a little (as a few RL steps would)."""
    import torch

    from cosmos_train.wfm.model import load_wfm
    from cosmos_train.wfm.model_export import export_wfm

    parts = load_wfm(tiny_wfm_dir, text_encoder=False)
    gen = torch.Generator().manual_seed(0)
    sd = {k: v + 0.02 * torch.randn(v.shape, generator=gen) for k, v in parts.transformer.state_dict().items()}
    return export_wfm(tiny_wfm_dir, sd, tmp_path_factory.mktemp("run") / "diffusers" / "final")


FAMILIES = ("qwen2_5_vl", "qwen3_vl", "cosmos3_edge")


@pytest.fixture(scope="session")
def family_model_dirs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    """The tiny model of every supported family (`make-tiny-model --family`), Qwen2.5-VL's being tiny_model_dir."""
    from cosmos_train.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("family-models")
    return {f: tiny_model_dir if f == "qwen2_5_vl" else make_tiny_model(root / f, family=f) for f in FAMILIES}


TEXT_FAMILIES = ("qwen2", "qwen3", "llama", "mistral")


@pytest.fixture(scope="session")
def text_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model of every text-only family (`make-tiny-model --family qwen2|qwen3|llama|mistral`)."""
    from cosmos_train.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("text-models")
    return {f: make_tiny_model(root / f, family=f) for f in TEXT_FAMILIES}


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cosmos_train.data.synthetic import make_synthetic_dataset

    return make_synthetic_dataset(tmp_path_factory.mktemp("synthetic") / "data", n_train=48, n_val=8, n_test=12)


def write_tiny_sft_config(path: Path, model: Path, data: Path, output_dir: Path, **train: object) -> Path:
    """A small SFT job for tests: the tiny model on 56x56 synthetic clips, letter answers."""
    steps = train.pop("max_num_steps", 4)
    save_mode = train.pop("save_mode", "sync")
    batch = train.pop("train_batch_per_replica", 4)
    lines = [
        "[train]",
        f'output_dir = "{output_dir}"',
        f"max_num_steps = {steps}",
        "epoch = 10",
        f"train_batch_per_replica = {batch}",
        "optm_lr = 1e-3",
        "optm_warmup_steps = 1",
        'optm_decay_type = "linear"',
        'param_dtype = "float32"',
        "seed = 1",
        *[f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in train.items()],
        "[train.ckpt]",
        "save_freq = 2",
        f'save_mode = "{save_mode}"',
        "max_keep = -1",
        "export_safetensors = true",
        "[train.train_policy]",
        'type = "sft"',
        "micro_batch = 2",
        "[train.train_policy.dataset]",
        f'name = "{data}"',
        'split = "train_letter"',
        "[train.train_policy.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[policy]",
        f'model_name_or_path = "{model}"',
        "model_max_length = 512",
        "model_gradient_checkpointing = false",
        "[logging]",
        'logger = ["console"]',
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


LEADING_SPACE_SCRIPT = """\
\"\"\"A toy GRPO task for tests: the synthetic RL rows, rewarded for a completion that starts with a space
(about half of the random tiny model's first tokens do, so every group has signal from step 1).\"\"\"
import json
from pathlib import Path


def get_dataset(config):
    return json.loads((Path(config.custom["data"]) / "rl" / "train.json").read_text())


def get_val_dataset(config):
    return json.loads((Path(config.custom["data"]) / "rl" / "val.json").read_text())


REWARD_FUNCTIONS = {"leading_space": lambda completion, reference, sample: float(completion.startswith(" "))}
"""


def write_tiny_grpo_config(path: Path, model: Path, data: Path, output_dir: Path, **keys: object) -> Path:
    """A small GRPO job for tests: 2 ranks x 2 prompts x 4 completions of <= 3 tokens, the leading-space
    reward of LEADING_SPACE_SCRIPT (written next to the config as toy_rewards.py), HF rollout engine.
    keys: dotted overrides, e.g. {"train.max_num_steps": 6}."""
    from cosmos_train.config import load_config

    base = {
        "train.output_dir": str(output_dir),
        "train.max_num_steps": 4,
        "train.epoch": 10,
        "train.train_batch_per_replica": 16,
        "train.optm_lr": 1e-3,
        "train.optm_warmup_steps": 0,
        "train.param_dtype": "float32",
        "train.seed": 1,
        "train.ckpt.save_freq": 2,
        "train.ckpt.save_mode": "sync",
        "train.ckpt.max_keep": -1,
        "train.train_policy.type": "grpo",
        "train.train_policy.micro_batch": 4,
        "train.train_policy.on_policy": True,
        "train.train_policy.reward_function": ["leading_space"],
        "train.train_policy.epsilon_high": 0.28,
        "train.train_policy.dataset.media_path": str(data),
        "train.train_policy.dataset.vision.min_pixels": 3136,
        "train.train_policy.dataset.vision.max_pixels": 3136,
        "rollout.backend": "hf",
        "rollout.batch_size": 4,
        "rollout.n_generation": 4,
        "rollout.max_response_length": 3,
        "validation.reward_function": ["leading_space"],
        "validation.max_response_length": 3,
        "policy.model_name_or_path": str(model),
        "policy.model_max_length": 512,
        "policy.model_gradient_checkpointing": False,
        "logging.completion_sample_freq": 1,
        "custom.data": str(data),
    }
    base.update(keys)

    cfg = load_config(None, [f"{k}={_toml_value(v)}" for k, v in base.items()], env={}, check_paths=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "toy_rewards.py").write_text(LEADING_SPACE_SCRIPT)
    return cfg.write(path)


def _toml_value(v: object) -> str:
    """A value as an inline TOML literal (a --set override): tables inline, strings JSON-quoted."""
    import json

    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def processes_with(*needles: str) -> list[int]:
    """Live (not zombie) processes whose command line contains every one of `needles`."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                state = (d / "stat").read_text().rsplit(") ", 1)[-1][:1]
            except OSError:
                continue
            if state != "Z" and all(n.encode() in cmd for n in needles):
                pids.append(int(d.name))
    return pids


def kill_a_rank_after_step_2(out_dir: Path, trainer_module: str, timeout_s: float = 600) -> tuple[Any, list[int]]:
    """A started thread that SIGKILLs one rank of `trainer_module` (e.g. "cosmos_train.train.sft") running
    in a run folder under `out_dir` once that run has its step_2 checkpoint and 3 logged train steps, as
    the OOM killer would; and the list the killed pid goes into."""
    import os
    import signal
    import threading
    import time

    killed: list[int] = []

    def crash_one_rank() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not killed:
            for run in out_dir.glob("*"):
                m = run / "metrics.jsonl"
                if (run / "checkpoints" / "step_2").exists() and m.exists() and m.read_text().count('"train"') >= 3:
                    pids = [
                        p
                        for p in processes_with(trainer_module, str(run / "config.toml"))
                        if p not in processes_with("cosmos_train.launch")
                    ]
                    if pids:
                        os.kill(pids[0], signal.SIGKILL)
                        killed.append(pids[0])
                        return
            time.sleep(0.05)

    watcher = threading.Thread(target=crash_one_rank, daemon=True)
    watcher.start()
    return watcher, killed


@contextmanager
def mounted_tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at `folder` (made here) with mount `options`, unmounted after; mounting needs root, so
    the test is skipped elsewhere."""
    folder.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here (needs root): {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
