"""World-model RL: Flow-GRPO and DDRL on a Cosmos-Predict2.5 video DiT (see wfm/trainer.py)."""
