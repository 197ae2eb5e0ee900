"""One GRPO rollout: prompts from the one builder, n completions per row, rewards, advantages, DAPO refill;
its statistics by name; the colocated rollout source (the worker process:
tests/integration/distributed/test_grpo_async.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.generation import Completion, SamplingParams
from cosmos_train.rewards import combine
from cosmos_train.train.rollout import colocated as rollout_colocated
from cosmos_train.train.rollout.groups import Shaping, collect_rollouts, shared_prefix_ignore
from cosmos_train.train.rollout.stats import RolloutSums, rollout_stats

OPTIONS = {"A": "left", "B": "right", "C": "stays", "D": "falls"}


def _row(i: int, reference: str) -> dict:
    return {
        "id": f"r{i}",
        "messages": [{"role": "user", "content": f"Q{i}"}],
        "reference": reference,
        "options": OPTIONS,
    }


class ScriptedEngine:
    """Answers row Qi with script[i] (n texts); records the chats it was asked."""

    name = "scripted"
    weight_version = 3

    def __init__(self, script: dict[str, list[str]]):
        self.script = script
        self.asked: list[list[dict]] = []

    def generate(self, requests: Sequence[list[dict]], sampling: SamplingParams) -> list[list[Completion]]:
        self.asked += list(requests)
        out = []
        for chat in requests:
            texts = self.script[chat[-1]["content"]]
            assert len(texts) == sampling.n
            out.append(
                [Completion(t, list(range(len(t))), [0.0] * len(t), "stop", [], self.weight_version) for t in texts]
            )
        return out


def test_rewards_advantages_and_stats() -> None:
    engine = ScriptedEngine({"Q0": ["B", "A", "B", "C"], "Q1": ["A", "A", "A", "A"]})
    rewards = combine(["single_choice"])
    rollout = collect_rollouts(
        engine, [_row(0, "B"), _row(1, "B")], rewards, SamplingParams(n=4), system_prompt="Be brief."
    )
    assert engine.asked[0] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q0"}]
    g0, g1 = rollout.groups
    assert g0.rewards == [1.0, 0.0, 1.0, 0.0] and g1.rewards == [0.0] * 4 and g1.zero_std and not g0.zero_std
    # mean 0.5, population std (np.std, cosmos-rl's) sqrt(4 * 0.25 / 4) = 0.5: +-0.5 / (0.5 + 1e-6)
    assert g0.advantages == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)
    assert g1.advantages == [0.0] * 4
    stats = rollout_stats(rollout, rewards.names)
    assert stats["reward_mean"] == pytest.approx(0.25) and stats["zero_std_fraction"] == 0.5
    assert stats["reward/single_choice"] == pytest.approx(0.25) and stats["accuracy"] == stats["reward/single_choice"]
    assert all(c.weight_version == 3 for g in rollout.groups for c in g.completions)


def test_dynamic_sampling_refills_informative_groups() -> None:
    engine = ScriptedEngine({"Q0": ["B", "A"], "Q1": ["A", "A"], "Q2": ["B", "B"], "Q3": ["A", "B"], "Q4": ["C", "B"]})
    pool = [_row(2, "B"), _row(3, "B"), _row(4, "B")]
    asked_for = []

    def refill(k: int) -> list[dict]:
        asked_for.append(k)
        taken, pool[:] = pool[:k], pool[k:]
        return taken

    rollout = collect_rollouts(
        engine,
        [_row(0, "B"), _row(1, "B")],
        combine("single_choice"),
        SamplingParams(n=2),
        refill=refill,
        max_refill_rounds=3,
    )
    # Q1 all wrong -> refill 1 -> Q2 all right -> refill 1 -> Q3 informative: the batch is full again
    assert [g.row["id"] for g in rollout.groups] == ["r0", "r3"]
    assert asked_for == [1, 1] and rollout.refill_rounds == 2 and rollout.dropped_zero_std == 2
    # a cap on rounds: what could not be refilled is reported, not hidden
    engine2 = ScriptedEngine({"Q0": ["A", "A"], "Q1": ["A", "A"]})
    short = collect_rollouts(
        engine2,
        [_row(0, "B")],
        combine("single_choice"),
        SamplingParams(n=2),
        refill=lambda k: [_row(1, "B")],
        max_refill_rounds=1,
    )
    assert short.groups == [] and short.dropped_zero_std == 2 and rollout_stats(short, ["single_choice"])["groups"] == 0


def test_tiny_model_rollout_on_synthetic_rl_rows(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """The real path: synthetic RL rows through the data layer, the HF engine, the single_choice reward."""
    from cosmos_train.config import load_config
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.prompt import prompt_messages
    from cosmos_train.data.sources import load_samples
    from cosmos_train.generation import GenerationConfig, create_engine
    from tests.conftest import write_tiny_sft_config

    path = write_tiny_sft_config(tmp_path / "c.toml", tiny_model_dir, synthetic_dir, tmp_path / "out")
    cfg = load_config(
        path,
        [
            'train.train_policy.type="grpo"',
            'train.train_policy.dataset.split="train"',
            'train.train_policy.reward_function=["single_choice"]',
            "train.train_policy.dataset.vision.fps=1",
            "rollout.max_response_length=3",
        ],
    )
    rows = load_samples(cfg, "train")[:3]
    assert all(r["reference"] in "ABCD" and r["options"] for r in rows)
    engine = create_engine(
        GenerationConfig(
            model_path=str(tiny_model_dir),
            engine="hf",
            dtype="float32",
            device="cpu",
            vision_defaults={"min_pixels": 3136, "max_pixels": 3136},
        )
    )
    try:
        rollout = collect_rollouts(
            engine,
            rows,
            combine(cfg.train.train_policy.reward_function),
            SamplingParams(n=4, temperature=1.0, max_new_tokens=3, seed=0),
        )
    finally:
        engine.close()
    assert len(rollout.groups) == 3 and all(len(g.completions) == 4 for g in rollout.groups)
    for g in rollout.groups:
        assert set(g.rewards) <= {0.0, 1.0} and sum(g.advantages) == pytest.approx(0, abs=1e-5)
        prompt = encode_chat(engine.processor, prompt_messages(g.row["messages"]), add_generation_prompt=True)
        assert all(c.prompt_token_ids == prompt.input_ids.tolist() for c in g.completions)
    stats = rollout_stats(rollout, ["single_choice"])
    assert 0 <= stats["reward_mean"] <= 1 and stats["response_length_max"] <= 3


def test_shared_prefix_ignore_by_hand() -> None:
    seqs = [[1, 2, 3, 9], [1, 2, 3, 8], [1, 2, 7], [5, 6], [1, 2, 3]]
    # maximal shared prefixes: [1, 2, 3] (seqs 0, 1, 4: rewards 1, 0, 0 differ) -> seqs 0 and 1 skip 3 tokens,
    # seq 4 is all prefix and keeps its tokens; [1, 2] is not maximal ([1, 2, 3] is deeper)
    assert shared_prefix_ignore(seqs, [1.0, 0.0, 1.0, 0.0, 0.0], min_tokens=1) == [3, 3, 0, 0, 0]
    assert shared_prefix_ignore(seqs, [1.0, 0.0, 1.0, 0.0, 0.0], min_tokens=4) == [0] * 5  # too short a prefix
    assert shared_prefix_ignore(seqs, [1.0, 1.0, 0.0, 0.0, 1.0], min_tokens=1) == [0] * 5  # same rewards: kept
    # two completions sharing 2 tokens, two others sharing 1: each pair judged on its own rewards
    assert shared_prefix_ignore([[4, 4, 1], [4, 4, 2], [6, 1], [6, 2]], [1.0, 0.0, 1.0, 1.0], 1) == [2, 2, 0, 0]


def test_shaping_clips_advantages_masks_prefixes_and_filters_on_named_parts() -> None:
    # scripted token ids are range(len(text)): "BA" is all of "BAC"'s prefix [0, 1]; their rewards differ, so
    # "BAC" leaves its 2 shared tokens out of the loss and "BA", all prefix, keeps its own
    engine = ScriptedEngine({"Q0": ["B", "A", "A", "A", "A", "A", "A", "A"], "Q1": ["BA", "BAC"]})
    rows = [_row(0, "B"), _row(1, "BA")]
    plain = collect_rollouts(engine, rows[:1], combine("single_choice"), SamplingParams(n=8))
    # one right of 8: mean 1/8, population variance (49/64 + 7/64) / 8 = 7/64, so (7/8) / sqrt(7/64) = sqrt(7)
    assert max(plain.groups[0].advantages) == pytest.approx(7**0.5, rel=1e-4)
    clipped = collect_rollouts(
        engine, rows[:1], combine("single_choice"), SamplingParams(n=8), shaping=Shaping(advantage_clip=(-0.3, 2.0))
    )
    assert max(clipped.groups[0].advantages) == 2.0 and min(clipped.groups[0].advantages) == pytest.approx(-0.3)
    masked = collect_rollouts(
        engine, rows[1:], combine("exact_match"), SamplingParams(n=2), shaping=Shaping(min_filter_prefix_tokens=1)
    )
    assert masked.groups[0].rewards == [1.0, 0.0] and masked.groups[0].ignore_prefix == [0, 2]
    # DAPO's filter on one part: format is 0 for every answer here, so the group carries no signal on it, whether
    # reward_function names it or not (then it is scored for the filter alone, weight 0 in the total)
    two = combine({"single_choice": 1.0, "format": 1.0})
    assert not collect_rollouts(engine, rows[:1], two, SamplingParams(n=8)).groups[0].zero_std
    for rewards in (
        combine(["single_choice", "format"], filter_metrics=["format"]),
        combine("single_choice", filter_metrics="format"),
    ):
        on_format = collect_rollouts(engine, rows[:1], rewards, SamplingParams(n=8))
        assert on_format.groups[0].zero_std and on_format.groups[0].filter_values == [0.0] * 8
    # two filter metrics: their sum (cosmos-rl), so format 1 + single_choice 0 and 0 + 1 are the same filter value
    tagged = ScriptedEngine({"Q2": ["<think>x</think>\n\n<answer>C</answer>", "B"]})
    summed = combine("single_choice", filter_metrics=["single_choice", "format"])
    group = collect_rollouts(tagged, [_row(2, "B")], summed, SamplingParams(n=2)).groups[0]
    assert group.parts == [{"single_choice": 0.0, "format": 1.0}, {"single_choice": 1.0, "format": 0.0}]
    assert group.rewards == [0.0, 1.0] and group.filter_values == [1.0, 1.0] and group.zero_std


def test_rollout_sums_name_what_they_sum_and_reduce_over_ranks() -> None:
    """The additive statistics, by name, over kept and dropped groups; one rank's all-reduce is itself."""
    engine = ScriptedEngine({"Q0": ["B", "A"], "Q1": ["A", "A"], "Q2": ["B", "CC"]})
    rollout = collect_rollouts(
        engine,
        [_row(0, "B"), _row(1, "B")],
        combine("single_choice"),
        SamplingParams(n=2),
        refill=lambda k: [_row(2, "B")],
        max_refill_rounds=1,
    )
    sums = RolloutSums.of(rollout, ["single_choice", "format"])
    assert (sums.completions, sums.groups_kept, sums.groups_sampled, sums.zero_std_groups) == (6.0, 2.0, 3.0, 1.0)
    assert (sums.reward, sums.reward_squared, sums.response_tokens, sums.longest) == (2.0, 2.0, 7.0, 2.0)
    assert [g.row["id"] for g in rollout.groups] == ["r0", "r2"]
    assert sums.refill_rounds == 1.0 and sums.part_rewards == [2.0, 0.0] and sums.truncated == 0.0
    alone = SimpleNamespace(device=torch.device("cpu"), tp=1, cp=1)  # no process group: the sums stay this rank's
    assert sums.all_reduced(alone) == sums
    stats = sums.stats()
    assert stats["dropped_zero_std"] == 1.0 and stats["zero_std_fraction"] == pytest.approx(1 / 3)
    assert stats["accuracy"] == pytest.approx(2 / 6) and "reward/format" in stats
    assert "accuracy" not in RolloutSums.of(rollout, ["format"]).stats()


class _SleepyEngine(ScriptedEngine):
    """A scripted engine with the sleep / wake calls a colocated engine gets around each rollout."""

    def __init__(self, script: dict[str, list[str]], name: str):
        super().__init__(script)
        self.name = name
        self.calls: list[str] = []

    def wake(self) -> None:
        self.calls.append("wake")

    def sleep(self) -> None:
        self.calls.append("sleep")

    def close(self) -> None:
        self.calls.append("close")


def _colocated(
    monkeypatch: pytest.MonkeyPatch, engine: _SleepyEngine, world_size: int
) -> rollout_colocated.ColocatedRollout:
    monkeypatch.setattr(rollout_colocated, "create_engine", lambda generation_cfg: engine)
    monkeypatch.setattr(rollout_colocated, "from_rollout", lambda cfg, processes_per_host: None)
    cfg = config_from_dict({"train": {"train_policy": {"type": "grpo"}}, "rollout": {"n_generation": 2}})
    dist = SimpleNamespace(world_size=world_size, rank=1, dp_rank=1, device=torch.device("cpu"))
    return rollout_colocated.ColocatedRollout(cfg, dist, combine("single_choice"), [], processes_per_host=1)


def test_colocated_source_samples_a_step_when_asked_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _SleepyEngine({"Q0": ["B", "A"]}, name="hf")
    source = _colocated(monkeypatch, engine, world_size=1)
    assert not source.lockstep and source.seed_rank == 1 and source.steps_ahead == 0
    source.start(5, [_row(0, "B")], seed=11)
    assert engine.asked == []  # sampled when trained, with the weights of the step before
    got = source.result(5)
    assert got.rollout.groups[0].rewards == [1.0, 0.0] and got.metrics == {}
    assert engine.calls == ["wake", "sleep"]
    chat = [{"role": "user", "content": "Q0"}]
    assert source.generate_for_validation([], SamplingParams(n=2), together=3, filler=chat) == []
    source.close()
    assert engine.calls[-1] == "close"


def test_colocated_lockstep_pads_validation_to_the_shared_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM under torchrun: every rank asks for `together` chats, the padding's answers are dropped."""
    engine = _SleepyEngine({"Q0": ["B"], "Q1": ["A"]}, name="vllm")
    source = _colocated(monkeypatch, engine, world_size=2)
    assert source.lockstep and source.seed_rank == 1  # rollout tp 1: each rank its own engine group
    chat, filler = [{"role": "user", "content": "Q0"}], [{"role": "user", "content": "Q1"}]
    answers = source.generate_for_validation([chat], SamplingParams(n=1), together=3, filler=filler)
    assert [a[0].text for a in answers] == ["B"] and engine.asked == [chat, filler, filler]
    engine.asked.clear()
    assert source.generate_for_validation([], SamplingParams(n=1), together=1, filler=filler) == []
    assert engine.asked == [filler]  # a rank without rows still generates with the others
