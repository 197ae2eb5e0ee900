"""GRPO's rollout: prompts in, scored groups of completions with advantages out (the step: docs/grpo.md).

- `groups`: one rollout batch (sampling, rewards, advantages, dynamic sampling) and the settings it is made with
  (`reward_shaping`, `step_sampling`, `derive_seed`);
- `sources`: where a trainer's rollout comes from (`RolloutSource`), and the ranks' agreement on a reward outage;
- `colocated`: the engine in the trainer's process; `worker`: a worker process per rank, sampling ahead;
- `stats`: what to log about a rollout.
"""
