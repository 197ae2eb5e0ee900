"""The reward service: rewards too heavy for the trainer (video statistics, VLM judges), or shared by
many runs, scored over HTTP with the reference service's wire protocol (nvidia-cosmos/cosmos-rl,
reward_service/), authenticated and bounded.

    REWARD_SERVICE_TOKEN=secret cosmos-train reward-service [--config rewards.toml] [--host 127.0.0.1] [--port 8080]

- `protocol`: the enqueue body and its strict parsing; `auth`: the Bearer check;
- `handlers`: the plug-in registry (`register_handler`) and the shipped handlers;
- `service`: queue, worker pool, results with a TTL, idempotent request ids; `state`: their disk copy;
- `app`: the routes; `server`: the token rules and uvicorn; `config`: rewards.toml.
The client is `cosmos_train.rewards.remote`.
"""
