"""A small byte-level BPE tokenizer with Qwen2.5-VL's pipeline and special tokens, trained offline.

The tiny model (`cosmos_train.models.tiny`) needs a real tokenizer without the model hub. This module
trains one with the `tokenizers` library on an embedded English corpus (physics descriptions,
multiple-choice questions with option letters, <think>/<answer> reasoning, digits) using exactly
Qwen2's normaliser, pre-tokeniser regex and byte-level decoder, then appends Qwen2.5-VL's added
tokens in Qwen's own order, so they sit right after the BPE vocabulary as they do in the real
tokenizer (151643..151664 there, `bpe_size`..`bpe_size + 21` here).

Training is deterministic: the corpus is fixed text plus combinations enumerated in a fixed order.
"""

from __future__ import annotations

import itertools

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# Qwen2's split regex (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""  # noqa: E501 (Qwen2's exact regex)

# Qwen2.5-VL's added tokens in id order; the bool is the `special` flag of the real tokenizer.json.
QWEN25_VL_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)

# The tokens Qwen2.5-VL's tokenizer_config.json lists as additional_special_tokens.
ADDITIONAL_SPECIAL_TOKENS: tuple[str, ...] = tuple(
    tok for tok, special in QWEN25_VL_ADDED_TOKENS if special and tok != "<|endoftext|>"
)

_SENTENCES = """\
You are a helpful assistant.
Answer the questions.
You are a helpful assistant that reasons about the physical world before answering.
The ball rolls down the ramp and speeds up because gravity pulls it along the slope.
A red square moves from the left side of the frame to the right side at a constant speed.
The blue circle falls, hits the floor, and bounces back up to a lower height.
Friction slows the box as it slides across the table until it stops.
The robot arm picks up the cup, lifts it, and places it on the shelf.
The car turns left at the intersection after the traffic light becomes green.
The object is moving toward the camera, so it appears larger in each frame.
Objects at rest stay at rest unless a force acts on them.
Momentum is conserved when two carts collide on a frictionless track.
Energy changes from potential energy to kinetic energy as the pendulum swings down.
The water flows out of the bottle and spreads on the ground.
The door opens slowly, and a person walks through it into the room.
Is it safe for the robot to move forward? Yes, the path is clear. No, there is an obstacle.
What will happen next in the video?
Which direction is the square moving?
What is the most plausible next action?
Is the gripper holding the object at the end of the clip?
How many times does the ball bounce before it stops?
The answer is B because the square moves up and to the right.
Answer with the option's letter from the given choices directly.
Please answer the question in the following format: <think> your reasoning </think> <answer> your answer </answer>.
<think>
The square starts near the bottom and ends near the top, so it moves up.
</think>

<answer>
A
</answer>
<think>The ball moves left in every frame.</think>

<answer>C</answer>
The frames are sampled at 1 fps, 2 fps, or 4 fps from a clip of 10 seconds.
The speed is 3.5 meters per second and the mass is 2 kilograms, so the momentum is 7.
Time 0.0 s, 0.5 s, 1.0 s, 1.5 s, 2.0 s; position 12, 24, 36, 48, 60 pixels.
The temperature rises from 20 to 85 degrees when the kettle heats the water.
It's the shadow that moves, not the object; they're both still, we'll see it later.
"""

# Extra vocabulary from the domains the Cosmos-Reason data covers (robots, driving, households, physics).
_WORDS = """\
acceleration velocity displacement trajectory collision gravity inertia torque pressure density volume
liquid solid gas container bottle glass plate bowl spoon knife fork towel drawer cabinet fridge oven
counter sink faucet table chair sofa window curtain shelf basket bag paper pen pencil book laptop phone
camera sensor lidar radar wheel tire brake steering lane road highway pedestrian cyclist truck bus
motorcycle sidewalk crosswalk parking vehicle driver merge overtake yield signal intersection highway
gripper manipulator joint elbow wrist finger grasp release push pull rotate twist lift lower insert
remove open close fold unfold stack unstack pour wipe clean cut slice hold carry drop throw catch
kick hit break bend stretch compress expand melt freeze boil evaporate condense burn float sink
transparent opaque reflective heavy light rigid flexible elastic fragile smooth rough sticky slippery
before after during while until because therefore however although since unless whether either neither
first second third next then finally previous current future past present likely unlikely possible
impossible correct incorrect true false left right above below behind front inside outside between
near far center corner edge top bottom middle horizontal vertical diagonal clockwise counterclockwise
slowly quickly suddenly gradually steadily carefully immediately eventually repeatedly continuously
person hand arm leg head body kitchen bedroom garage warehouse factory street parking outdoor indoor
morning evening night shadow sunlight lamp mirror reflection smoke dust rain snow wind wave water fire
question answer option choice reasoning evidence observation hypothesis prediction explanation summary
frame frames clip video image picture scene view timestamp second seconds minute minutes speed distance
"""

_OBJECTS = ("ball", "square", "cube", "box", "cup", "car", "robot", "gripper", "block", "circle")
_COLOURS = ("red", "blue", "green", "white", "black", "yellow")
_DIRECTIONS = ("left", "right", "up", "down", "forward", "backward", "toward the camera", "away")
_VERBS = ("moves", "rolls", "slides", "falls", "drops", "turns", "stops", "bounces")


def training_corpus() -> list[str]:
    """Return the fixed list of lines the BPE merges are learned from (same list on every call)."""
    lines = _SENTENCES.splitlines()
    # The chat template puts a role name on its own line after <|im_start|>.
    lines.extend(f"{role}\nhello\n" for role in ("system", "user", "assistant") for _ in range(20))
    for obj, colour, direction, verb in itertools.product(_OBJECTS, _COLOURS, _DIRECTIONS, _VERBS):
        lines.append(f"The {colour} {obj} {verb} {direction}.")
    options = "ABCD"
    for i, (obj, direction) in enumerate(itertools.product(_OBJECTS, _DIRECTIONS)):
        letter = options[i % 4]
        lines.append(f"Which way does the {obj} move?")
        lines.extend(f"({o}) {d}" for o, d in zip(options, _DIRECTIONS[i % 4 :] + _DIRECTIONS))
        lines.append(f"<think>\nThe {obj} moves {direction}.\n</think>\n\n<answer>\n{letter}\n</answer>")
        lines.append(f"<answer>{letter}</answer> ({letter}) {letter}.")
    lines.extend(f"{n} {n / 4:.2f} {n * 37 % 1000}" for n in range(200))
    words = _WORDS.split()
    lines.extend(
        f"The {w} is {words[(i * 7) % len(words)]}, and {words[(i * 13) % len(words)]}." for i, w in enumerate(words)
    )
    lines.extend(f"{w.capitalize()} {w}s {w}ed {w}ing" for w in words)
    return lines


def build_qwen_style_tokenizer(vocab_size: int = 1024) -> Tokenizer:
    """Train a byte-level BPE of `vocab_size` tokens (before the 22 added ones) on `training_corpus()`.

    The returned tokenizer has the added tokens appended in Qwen2.5-VL order, so
    `tokenizer.token_to_id("<|endoftext|>") == vocab_size` and `"<|file_sep|>"` is `vocab_size + 21`.
    """
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size <= len(alphabet):
        raise ValueError(f"vocab_size must exceed the {len(alphabet)} byte symbols, got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=alphabet,
        special_tokens=[],
        show_progress=False,
        min_frequency=1,
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    learned = tok.get_vocab_size()
    if learned != vocab_size:
        # The corpus is too small to learn that many merges: say so rather than shift every special id.
        raise ValueError(f"the embedded corpus yields only {learned} BPE tokens, asked for {vocab_size}")
    tok.add_tokens(
        [AddedToken(t, special=s, normalized=False, lstrip=False, rstrip=False) for t, s in QWEN25_VL_ADDED_TOKENS]
    )
    return tok
