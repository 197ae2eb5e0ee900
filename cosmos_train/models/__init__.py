"""Models: family specs (`families`), loading any supported checkpoint (`load`), LoRA (`lora`), FSDP2 / TP
(`parallelize`), Hugging Face folders written and checked (`hf_folder`, with `wrappers` for training's name
prefixes), and the offline tiny models (`tiny`, trained tokenizer in `tiny_tokenizer`). Never imports data/."""
