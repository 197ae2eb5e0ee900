"""A reward service that stays unreachable: the client's error (URL, tries, seconds, last error), and how the ranks
agree on it (`rollout.sources.agree_on_outage`) so that every rank raises the same ServiceUnavailable at the same
point. The real runs: tests/faults/test_reward_service_down.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from cosmos_train.distributed import cpu_group
from cosmos_train.errors import EXIT_SERVICE_DOWN, ServiceUnavailable, error_from_record
from cosmos_train.generation import SamplingParams
from cosmos_train.net import free_port
from cosmos_train.rewards import RewardSet
from cosmos_train.rewards.remote import ClientSettings, RemoteRewardClient, RemoteScorer, RewardServiceUnreachable
from cosmos_train.train.rollout.groups import collect_rollouts
from cosmos_train.train.rollout.sources import agree_on_outage, outage_agreed
from tests.spawn_ranks import spawn_ranks
from tests.unit.test_rollout import ScriptedEngine, _row


def dead_client(retries: int = 2) -> RemoteRewardClient:
    """A client of a port where nothing listens (each try is refused at once)."""
    base = f"http://127.0.0.1:{free_port()}/api/reward"
    return RemoteRewardClient(
        ClientSettings(enqueue_url=f"{base}/enqueue", fetch_url=f"{base}/pull", max_retries=retries, backoff_s=0.01)
    )


def test_a_service_that_never_answers_is_named_with_its_tries_and_last_error() -> None:
    client = dead_client(retries=2)
    with pytest.raises(RewardServiceUnreachable) as got:
        client.score({"reward_fn": {"format": 1.0}, "media_type": "text", "completions": ["x"]})
    e = got.value
    assert e.url == client.settings.enqueue_url and e.tries == 3 and e.waited_s < 5
    assert str(e).startswith(f"reward service {e.url}: no answer after 3 tries in ")
    assert "ConnectError" in e.last and "refused" in str(e)
    # it crosses from the rollout worker process whole
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is RewardServiceUnreachable and str(again) == str(e) and again.url == e.url


def test_one_process_raises_service_unavailable_with_the_services_words() -> None:
    assert outage_agreed(lambda: 7) == 7
    agree_on_outage(None)  # nothing met: nothing raised
    unreachable = RewardServiceUnreachable("http://h:1/api/reward/enqueue", 9, 45.2, "ConnectError: refused")

    def scoring() -> int:
        raise unreachable

    with pytest.raises(ServiceUnavailable) as got:
        outage_agreed(scoring)
    assert str(got.value) == str(unreachable) and got.value.__cause__ is unreachable
    assert got.value.exit_code == EXIT_SERVICE_DOWN == 75 and got.value.kind == "service"
    # RUN/error.json's record comes back as the same kind in the launching task
    rebuilt = error_from_record({"kind": got.value.kind, "message": str(got.value)})
    assert type(rebuilt) is ServiceUnavailable and str(rebuilt) == str(got.value)


def test_lockstep_scoring_agrees_after_each_round() -> None:
    """Ranks that generate together pass agree_outage: called after every scoring, with the outage on this rank."""
    engine = ScriptedEngine({"Q0": ["B", "A"], "Q1": ["A", "B"]})
    calls: list[object] = []
    rollout = collect_rollouts(
        engine, [_row(0, "B")], RewardSet({"single_choice": 1.0}), SamplingParams(n=2), agree_outage=calls.append
    )
    assert calls == [None] and len(rollout.groups) == 1

    scorer = RemoteScorer(dead_client(retries=0), [])
    calls.clear()
    with pytest.raises(RewardServiceUnreachable):
        collect_rollouts(engine, [_row(1, "B")], RewardSet({}, scorer), SamplingParams(n=2), agree_outage=calls.append)
    assert len(calls) == 1 and isinstance(calls[0], RewardServiceUnreachable)


def _rank(rank: int, init: str, out: Path) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:

        def scoring() -> str:
            if rank == 1:  # the service died between the two ranks' requests: only rank 1 met it
                raise RewardServiceUnreachable("http://h:1/api/reward/pull", 5, 3.0, "ReadTimeout: timed out")
            return "scored"

        try:
            said = f"returned {outage_agreed(scoring)}"
        except ServiceUnavailable as e:
            said = f"{type(e).__name__}: {e}"
        # both ranks are at the same point again: one more collective pairs up
        flag = torch.ones(1)
        dist.all_reduce(flag)
        (out / f"rank{rank}.txt").write_text(f"{said} | {int(flag.item())}")
        dist.barrier(group=cpu_group())  # neither rank leaves while the other still talks on the CPU group
    finally:
        dist.destroy_process_group()


def test_two_ranks_raise_together_when_one_met_the_outage(tmp_path: Path) -> None:
    init = f"file://{tmp_path / 'store'}"
    spawn_ranks(_rank, init, tmp_path)
    words = "ServiceUnavailable: reward service http://h:1/api/reward/pull: no answer after 5 tries in 3 s"
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text() == f"{words} (last: ReadTimeout: timed out) | 2"
