"""The reward service through Prefect: the `reward-service` flow with its token in a Secret block, and a
GRPO run's token taken from a Secret block (remote_reward.token_secret), never from the TOML."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from cosmos_train.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def test_reward_service_flow_serves_with_the_secret_token(tmp_path: Path) -> None:
    from prefect.blocks.system import Secret

    from flows.reward_service import RewardServiceParams, reward_service_flow
    from tests.conftest import processes_with

    Secret(value="s3cret-token-5e2f-a9").save("test-reward-token", overwrite=True)
    port = free_port()
    result: dict = {}
    runner = threading.Thread(
        target=lambda: result.update(
            reward_service_flow(
                RewardServiceParams(token_secret="test-reward-token", port=port, log_dir=str(tmp_path), run_for_s=25)
            )
        )
    )
    runner.start()
    ping = f"http://127.0.0.1:{port}/api/reward/ping"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.post(ping, headers={"Authorization": "Bearer s3cret-token-5e2f-a9"}, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        pytest.fail("the flow's service never answered ping")
    assert httpx.post(ping, headers={"Authorization": "Bearer wrong"}, timeout=2).status_code == 401
    assert httpx.post(ping, timeout=2).status_code == 401
    runner.join(timeout=90)
    assert not runner.is_alive() and result["url"].endswith(f":{port}/api/reward")
    assert not processes_with("reward-service", str(port))


def test_grpo_token_comes_from_a_secret_block(tmp_path: Path) -> None:
    from prefect.blocks.system import Secret

    from cosmos_train.config import config_from_dict
    from tasks.reward_service import remote_reward_env

    Secret(value="from-the-block").save("grpo-reward-token", overwrite=True)
    remote = {"reward_fns": [{"name": "single_choice"}], "token_secret": "grpo-reward-token", "token_env": "MY_TOKEN"}
    cfg = config_from_dict(
        {
            "train": {
                "train_batch_per_replica": 16,
                "train_policy": {
                    "type": "grpo",
                    "use_remote_reward": True,
                    "reward_function": [],
                    "remote_reward": remote,
                },
            }
        }
    )
    assert remote_reward_env(cfg) == {"MY_TOKEN": "from-the-block"}
    assert "from-the-block" not in cfg.to_toml()
    missing = config_from_dict(
        {
            "train": {
                "train_batch_per_replica": 16,
                "train_policy": {
                    "type": "grpo",
                    "use_remote_reward": True,
                    "reward_function": [],
                    "remote_reward": {**remote, "token_secret": "no-such-block"},
                },
            }
        }
    )
    with pytest.raises(ValueError, match="no Prefect Secret block named 'no-such-block'"):
        remote_reward_env(missing)
