"""The remote-reward client against the real service: retries through a restart without scoring
anything twice, the world-model env settings, and GRPO's RewardSet mixing local and remote rewards."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from cosmos_train.config import RemoteRewardConfig, RemoteRewardFn
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import Batch, Handler, register_handler
from cosmos_train.rewards import combine
from cosmos_train.rewards.remote import ClientSettings, RemoteRewardClient
from tests.reward_server import TOKEN, ServiceThread, npy_bytes

SCORED: Counter[str] = Counter()
OPEN = threading.Event()  # scoring waits for it: a test holds work in the queue by clearing it
OPEN.set()


@register_handler("test_tally")
class Tally(Handler):
    """Scores len(prompt) per item and tallies every prompt it scores, once OPEN is set."""

    def score(self, batch: Batch) -> list[float]:
        OPEN.wait(timeout=60)
        time.sleep(0.02)
        SCORED.update(batch.prompts)
        return [float(len(p)) for p in batch.prompts]


def _client(url: str, **kw) -> RemoteRewardClient:
    return RemoteRewardClient(
        ClientSettings(
            enqueue_url=url + "/api/reward/enqueue",
            fetch_url=url + "/api/reward/pull",
            token=TOKEN,
            timeout_s=10,
            max_retries=12,
            backoff_s=0.05,
            backoff_max_s=0.5,
            poll_interval_s=0.02,
            result_timeout_s=60,
            **kw,
        )
    )


def test_client_retries_through_a_restart_and_nothing_is_scored_twice(tmp_path) -> None:
    st = ServiceThread(ServiceConfig(workers=1, state_dir=str(tmp_path / "state"))).start()
    client = _client(st.url)
    video = npy_bytes(np.zeros((1, 3, 2, 2, 2), dtype=np.uint8))
    prompts = [f"restart-{i:02d}-" + "x" * i for i in range(24)]
    restarted = threading.Event()

    def restart() -> None:
        # Scoring is held until the stop is under way, so the restart surely finds queued work: the stop cancels
        # the worker at once, then waits for the batch being scored, which finishes when OPEN is set.
        threading.Timer(1.0, OPEN.set).start()
        st.stop()
        time.sleep(0.5)  # down for a while: calls in between fail to connect and back off
        st.start()
        restarted.set()

    OPEN.clear()
    try:
        jobs, restarter = [], None
        for i, p in enumerate(prompts):
            if i == 12:
                restarter = threading.Thread(target=restart)
                restarter.start()
                time.sleep(0.1)
            jobs.append(client.submit({"prompts": [p], "reward_fn": {"test_tally": 1.0}, "media_type": "video"}, video))
        scores = [job.result()["test_tally"]["scores"]["test_tally"] for job in jobs]
        assert restarter is not None
        restarter.join(timeout=60)
        assert restarted.is_set()
        # the restart caught work queued: the new instance took it over from state_dir
        assert st.service.metrics()["counters"].get("restored", 0) > 0
    finally:
        OPEN.set()
        st.stop()
        client.close()
    assert scores == [[float(len(p))] for p in prompts]
    assert all(SCORED[p] == 1 for p in prompts), {p: SCORED[p] for p in prompts if SCORED[p] != 1}


def test_a_forgetful_restart_is_enqueued_again() -> None:
    st = ServiceThread(ServiceConfig(workers=1)).start()  # no state_dir: a restart forgets every uuid
    client = _client(st.url)
    try:
        job = client.submit(
            {"prompts": ["forgotten"], "reward_fn": {"test_tally": 1.0}, "media_type": "video"},
            npy_bytes(np.zeros((1, 3, 2, 2, 2), dtype=np.uint8)),
        )
        st.stop()
        st.start()
        assert job.result()["test_tally"]["scores"]["test_tally"] == [9.0]
    finally:
        st.stop()
        client.close()


def test_world_model_client_reads_the_wfm_env() -> None:
    with_token = ServiceThread().start()
    try:
        env = {
            "WFM_REWARD_TOKEN": TOKEN,
            "WFM_REWARD_ENQUEUE_URL": with_token.url + "/api/reward/enqueue",
            "WFM_REWARD_FETCH_URL": with_token.url + "/api/reward/pull",
        }
        client = RemoteRewardClient.for_world_model(env, poll_interval_s=0.02)
        video = np.full((2, 3, 2, 2, 2), 255, dtype=np.uint8)
        video[1] = 0
        docs = client.score({"reward_fn": {"brightness": 1.0}, "media_type": "video"}, npy_bytes(video))
        client.close()
    finally:
        with_token.stop()
    assert docs["brightness"]["scores"]["brightness"] == [1.0, 0.0]


def test_reward_set_combines_local_and_remote_weights() -> None:
    st = ServiceThread().start()
    try:
        remote = RemoteRewardConfig(
            scale=1.5,
            batch_size=2,
            reward_fns=[
                RemoteRewardFn(name="single_choice", weight=2.0),
                RemoteRewardFn(name="format", weight=-1.0, clip_max=0.5),
            ],
            enqueue_url=st.url + "/api/reward/enqueue",
            fetch_url=st.url + "/api/reward/pull",
            backoff_s=0.05,
            poll_interval_s=0.02,
        )
        rewards = combine({"exact_match": 0.5}, remote=remote, env={"REMOTE_REWARD_TOKEN": TOKEN})
        sample = {"reference": "B", "options": {"A": "left", "B": "right"}}
        # cosmos-rl's format: a blank line between the blocks
        completions = ["<think>r</think>\n\n<answer>B</answer>", "<answer>A</answer>", "B"]
        scored = rewards.score_batch(completions, [sample] * 3)
    finally:
        st.stop()
    # parts: exact_match (local), single_choice and format (remote, format clipped to 0.5)
    expected_parts = [
        {"exact_match": 1.0, "single_choice": 1.0, "format": 0.5},
        {"exact_match": 0.0, "single_choice": 0.0, "format": 0.0},
        {"exact_match": 1.0, "single_choice": 1.0, "format": 0.0},
    ]
    assert [p for _, p in scored] == expected_parts
    # total = 0.5 * exact_match + 1.5 * (2.0 * single_choice - 1.0 * format)
    assert [t for t, _ in scored] == pytest.approx([0.5 + 1.5 * (2.0 - 0.5), 0.0, 0.5 + 1.5 * 2.0])


def test_remote_settings_come_from_the_config_or_the_env() -> None:
    from cosmos_train.errors import ConfigError

    rc = RemoteRewardConfig(reward_fns=[RemoteRewardFn(name="format")])
    with pytest.raises(ConfigError, match="REMOTE_REWARD_ENQUEUE_URL"):
        RemoteRewardClient.from_config(rc, env={})
    client = RemoteRewardClient.from_config(
        rc,
        env={
            "REMOTE_REWARD_ENQUEUE_URL": "http://h/e",
            "REMOTE_REWARD_FETCH_URL": "http://h/f",
            "REMOTE_REWARD_TOKEN": "t",
        },
    )
    assert (client.settings.enqueue_url, client.settings.fetch_url, client.settings.token) == (
        "http://h/e",
        "http://h/f",
        "t",
    )
    client.close()


def test_use_remote_reward_needs_reward_fns() -> None:
    from cosmos_train.config import config_from_dict, unsupported_settings
    from cosmos_train.errors import ConfigError

    on = {"train": {"train_policy": {"kl_beta": 0.1, "use_remote_reward": True}}}
    with pytest.raises(ConfigError, match="remote_reward.reward_fns"):
        config_from_dict(on)
    on["train"]["train_policy"]["remote_reward"] = {"reward_fns": [{"name": "format"}]}
    assert unsupported_settings(config_from_dict(on)) == []


def test_remote_total_is_clipped_then_scaled_and_score_keys_add() -> None:
    """cosmos-rl's remote reward: total = scale x clip(sum of weight x clip(score), reward_clip_min, reward_clip_max);
    over real HTTP with two rewards whose weighted sum leaves the clip."""
    from cosmos_train.rewards.remote import _score

    st = ServiceThread().start()
    try:
        remote = RemoteRewardConfig(
            scale=2.0,
            batch_size=4,
            reward_clip_min=-0.5,
            reward_clip_max=1.5,
            reward_fns=[RemoteRewardFn(name="single_choice", weight=1.0), RemoteRewardFn(name="format", weight=-1.0)],
            enqueue_url=st.url + "/api/reward/enqueue",
            fetch_url=st.url + "/api/reward/pull",
            backoff_s=0.05,
            poll_interval_s=0.02,
        )
        rewards = combine({"exact_match": 1.0}, remote=remote, env={"REMOTE_REWARD_TOKEN": TOKEN})
        sample = {"reference": "B", "options": {"A": "left", "B": "right"}}
        completions = ["<answer>B</answer>", "<think>r</think>\n\n<answer>A</answer>", "B"]
        scored = rewards.score_batch(completions, [sample] * 3)
    finally:
        st.stop()
    parts = [p for _, p in scored]
    assert [(p["single_choice"], p["format"]) for p in parts] == [(1.0, 0.0), (0.0, 1.0), (1.0, 0.0)]
    # remote sums 1, -1, 1 -> clipped to [-0.5, 1.5]: 1, -0.5, 1 -> x2; plus the local exact_match (1, 0, 1)
    assert [t for t, _ in scored] == pytest.approx([3.0, -1.0, 3.0])
    # a score key "a+b" adds two scores of one reply (cosmos-rl's form); a key the reply has wins
    assert _score({"vq": [0.25], "mq": [0.5]}, "vq+mq", 0) == 0.75
    assert _score({"vq+mq": [0.1], "vq": [0.25], "mq": [0.5]}, "vq+mq", 0) == 0.1
