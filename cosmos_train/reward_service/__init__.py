"""The reward service: rewards too heavy for the trainer (video statistics, VLM judges), or shared by
many runs, scored over HTTP with the reference service's wire protocol (nvidia-cosmos/cosmos-rl,
reward_service/), authenticated and bounded.

    REWARD_SERVICE_TOKEN=secret cosmos-train reward-service [--config rewards.toml] [--host 127.0.0.1] [--port 8080]

- `protocol`: the enqueue body and its strict parsing; `tensors`: its tensor bytes decoded within bounds
  (checked from the headers first); `latents`: Wan VAE latents -> pixels; `errors`: ProtocolError;
  `auth`: the Bearer check;
- `handlers`: the plug-in registry (`register_handler`) and the shipped handlers;
- `service`: queue bounded by count and bytes, worker pool, results with a TTL, request ids claimed
  exactly once; `state`: their disk copy;
- `app`: the routes, body timeout, status counts and JSON 500s; `server`: the token rules and uvicorn;
- `http_limits`: the header timeout and the connection cap (uvicorn's h11 protocol); `config`: rewards.toml.
The client is `cosmos_train.rewards.remote`.
"""
