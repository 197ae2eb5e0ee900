"""Models: the offline tiny Qwen2.5-VL (`tiny`, `tokenizer`) and loading any Qwen2.5-VL checkpoint (`load`)."""
