"""cosmos-rl's job configs load here: every key of its schema is implemented, accepted with no effect (said, with
why) or refused (with what to do), and the fixture configs, which use every key the public configs use, pass
`config check`. The reference field list is recorded in tests/data/cosmos_rl_fields.json
(scripts/record_cosmos_rl_fields.py); the public configs' key list in tests/data/cosmos_rl_public_keys.txt."""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from cosmos_train.config import NO_EFFECT_HEADER, ConfigError, config_from_dict, load_config
from cosmos_train.config.compat import key_state
from cosmos_train.config.compat_notes import DEFAULTS_DIFFER, INERT, default_note
from cosmos_train.config.compat_rules import RULES
from cosmos_train.config.docs import alias_map, cosmos_rl_key_table, recorded_default, schema_keys
from cosmos_train.config.key_tests import GUESSES, NO_TEST_YET, PROVED_BY
from tests.cli_inprocess import RunCli
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data"
RECORDED = json.loads((DATA / "cosmos_rl_fields.json").read_text())
FIXTURES = DATA / "cosmos_rl_configs"
ACCEPTED = sorted(p for p in FIXTURES.glob("*.toml") if not p.name.startswith("refused_"))
DOC = ROOT / "docs" / "COSMOS_RL_KEYS.md"


def test_every_reference_key_has_a_state_and_every_default_difference_a_reason() -> None:
    ours, aliases = schema_keys(), alias_map()
    states = {f["key"]: key_state(f["key"], set(ours), aliases)[0] for f in RECORDED["fields"]}
    assert len(states) > 300  # the whole schema was recorded, not a part
    assert [k for k, s in states.items() if s == "not covered"] == []
    unexplained = [
        f["key"]
        for f in RECORDED["fields"]
        if f["key"] in ours and default_note(f["key"], ours[f["key"]], recorded_default(f)) == ""
    ]
    assert unexplained == [], "a default that differs from cosmos-rl's needs a reason in DEFAULTS_DIFFER"
    stale = [
        k
        for k in DEFAULTS_DIFFER
        if k not in ours
        or default_note(k, ours[k], recorded_default(next(f for f in RECORDED["fields"] if f["key"] == k))) is None
    ]
    assert stale == [], "DEFAULTS_DIFFER lists a key whose defaults now agree"


def test_key_table_doc_is_current() -> None:
    assert DOC.read_text() == cosmos_rl_key_table(RECORDED), (
        "docs/COSMOS_RL_KEYS.md is out of date: run scripts/record_cosmos_rl_fields.py (see its docstring)"
    )


def test_recorder_reads_classes_unions_inheritance_and_defaults(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from record_cosmos_rl_fields import record
    finally:
        sys.path.pop(0)
    source = """
from pydantic import BaseModel, Field
class Par(BaseModel):
    tp_size: int = Field(default=2, description="x")
class RolloutPar(Par):
    pass
class A(BaseModel):
    type: Literal["a"]
    lr: float = 1e-6
    names: list = Field(default_factory=lambda: ["x"])
class B(BaseModel):
    type: Literal["b"]
    lr: float = Field(3e-6)
class Train(BaseModel):
    policy: Union[A, B] = Field(discriminator="type")
    par: RolloutPar = Field(default_factory=RolloutPar)
class Config(BaseModel):
    train: Train = Field(default_factory=Train)
    redis: str = ""
"""
    rows = {r["key"]: r for r in record(source)}
    assert list(rows) == ["train.policy.type", "train.policy.lr", "train.policy.names", "train.par.tp_size", "redis"]
    assert rows["train.policy.lr"]["default_by_section"] == {"A": 1e-6, "B": 3e-6}
    assert rows["train.policy.names"]["default"] == ["x"] and rows["train.par.tp_size"]["default"] == 2
    assert rows["train.policy.type"]["default"] == "<required>"


def _keys(table: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in table.items():
        key = prefix + k
        if key == "custom":
            out.add(key)
        elif isinstance(v, dict) and key != "train.train_policy.reward_function":
            out |= _keys(v, key + ".")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                out |= _keys(item, key + ".")
        else:
            out.add(key)
    return out


def test_fixture_configs_use_every_key_the_public_configs_use() -> None:
    public = {
        line.strip()
        for line in (DATA / "cosmos_rl_public_keys.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    used = set().union(*(_keys(tomllib.loads(p.read_text())) for p in FIXTURES.glob("*.toml")))
    assert len(public) > 200 and sorted(public - used) == []


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.name)
def test_fixture_configs_load_and_say_what_has_no_effect(path: Path, tmp_path: Path) -> None:
    cfg = load_config(path, env={})
    rule_keys = {r.key for r in RULES} | {
        "policy.parallelism.cp_size",
        "policy.parallelism.pp_size",
        "train.compile",
        "rollout.backend",
        "train.train_policy.advantage_low",
        "train.train_policy.advantage_high",
        "train.train_policy.behav_imp_weight_cap",
        *INERT,
    }
    assert cfg.no_effect and {n.key for n in cfg.no_effect} <= rule_keys
    # the run folder's copy keeps the list (as comments) and still loads to the same config
    written = cfg.write(tmp_path / "config.toml").read_text()
    assert NO_EFFECT_HEADER in written and all(f"# {n.key} = " in written for n in cfg.no_effect)
    again = load_config(tmp_path / "config.toml", env={})
    assert again.model_dump() == cfg.model_dump()


def test_config_check_lists_accepted_keys_and_exits_zero(run_cli: RunCli) -> None:
    path = FIXTURES / "reason2_reference.toml"
    done = run_cli("config", "check", path, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert NO_EFFECT_HEADER in done.stderr
    assert "#   redis = '12802': cosmos-rl's controller port" in done.stderr
    assert "#   rollout.backend = 'trtllm': runs as 'vllm'" in done.stderr
    assert tomllib.loads(done.stdout)["rollout"]["backend"] == "vllm"


@pytest.mark.parametrize(
    "path, words",
    [
        ("refused_multiturn.toml", "rollout.multi_turn_config = {'enable': True, 'enable_tools': True}: multi-turn"),
        ("refused_diffusers.toml", "recipe of cosmos-rl's diffusers trainer (policy.is_diffusers = true)"),
    ],
)
def test_refused_fixtures_say_why_in_one_paragraph(path: str, words: str, run_cli: RunCli) -> None:
    done = run_cli("config", "check", FIXTURES / path, cwd=ROOT)
    assert done.returncode == 2 and words in done.stderr
    assert "Traceback" not in done.stderr and "unknown key" not in done.stderr


@pytest.mark.parametrize(
    "override, words",
    [
        ("profiler.enable_profiler=true", "set profiler.enable_profiler = false"),
        ("distillation.enable=true", "on-policy distillation from a teacher is not implemented"),
        ("train.fp8.enable_fp8=true", "fp8 training is not implemented"),
        ("train.ema_enable=true", "an EMA of the weights is not kept here"),
        ("train.train_policy.trainer_type='custom_grpo_example'", "custom trainer classes"),
        ("train.train_policy.algo='my_algo'", "custom rule-based algorithms"),
        ("train.timestamp='20260101'", "set launch.rdzv_id"),
        ("policy.trainable_map={visual=false}", "use policy.trainable_pattern"),
        ("train.train_policy.positive_nll_coef=0.1", "positive-example NLL loss"),
        ("train.ckpt.save_freq_in_epoch=1", "set train.ckpt.save_freq"),
        ("train.transfer_dtype='float16'", "float16 weight transfer (fp16 rollouts) is not implemented"),
        ("policy.enable_liger_fused_cross_entropy=true", "set train.fused_linear_ce = true"),
    ],
)
def test_values_that_would_change_the_result_are_refused(override: str, words: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError) as e:
        load_config(None, [override], env={}, check_paths=False)
    [problem] = e.value.problems
    assert words in problem and (problem.startswith(key) or problem.startswith(key.rsplit(".", 1)[0]))
    # the same key at a value that runs as asked is accepted, and said
    default = {
        "profiler.enable_profiler": "false",
        "distillation.enable": "false",
        "train.fp8.enable_fp8": "false",
        "train.ema_enable": "false",
        "train.train_policy.trainer_type": "'sft'",
        "train.train_policy.algo": "'grpo'",
        "train.timestamp": "''",
        "policy.trainable_map": "{}",
        "train.train_policy.positive_nll_coef": "0.0",
        "train.ckpt.save_freq_in_epoch": "0",
        "train.transfer_dtype": "'bfloat16'",
        "policy.enable_liger_fused_cross_entropy": "false",
    }[key]
    cfg = load_config(None, [f"{key}={default}"], env={}, check_paths=False)
    assert [n.key for n in cfg.no_effect] in ([key], [key.rsplit(".", 1)[0]])


def test_balance_dp_token_reads_as_in_cosmos_rl() -> None:
    """GRPO and SFT take either value (tests/unit/test_cosmos_rl_parity.py checks GRPO's loss,
    tests/unit/test_cosmos_rl_sft_loss.py SFT's); the key alone leaves the run SFT."""
    for value in ("true", "false"):
        grpo = load_config(
            None,
            ["train.train_policy.type='grpo'", f"train.train_policy.balance_dp_token={value}"],
            env={},
            check_paths=False,
        )
        assert grpo.train.train_policy.balance_dp_token is (value == "true")
        sft = load_config(None, [f"train.train_policy.balance_dp_token={value}"], env={}, check_paths=False)
        assert sft.policy_type == "sft" and sft.train.train_policy.balance_dp_token is (value == "true")


def test_a_typo_of_an_accepted_key_is_still_an_error_with_a_suggestion() -> None:
    for override, hint in (
        ("profilr.enable_profiler=false", "did you mean profiler?"),
        ("train.train_policy.enable_dataset_cach=true", "enable_dataset_cache?"),
        ("rollout.enforce_eagr=true", "rollout.enforce_eager?"),
    ):
        with pytest.raises(ConfigError, match="unknown key") as e:
            load_config(None, [override], env={}, check_paths=False)
        assert hint in e.value.problems[0]


def test_older_names_and_inverted_keys_load_as_ours() -> None:
    cfg = config_from_dict(
        {
            "train": {
                "enable_validation": True,
                "validation_step": 30,
                "validation_batch_per_replica": 2,
                "train_policy": {"unbiased_advantage": True},
            }
        }
    )
    assert (cfg.validation.enable, cfg.validation.freq, cfg.validation.batch_size) == (True, 30, 2)
    assert cfg.train.train_policy.scale_rewards is False  # Dr.GRPO: r - mean, no std division
    grpo = {"type": "grpo", "use_rollout_logprobs_for_loss": True}
    assert (
        config_from_dict(
            {"train": {"train_batch_per_replica": 16, "train_policy": grpo}}
        ).train.train_policy.old_logprobs
        == "engine"
    )
    with pytest.raises(
        ConfigError,
        match=r"unbiased_advantage = True conflicts with train.train_policy.scale_rewards "
        r"= True: they are the same setting \(.* means scale_rewards = False\)",
    ):
        config_from_dict({"train": {"train_policy": {"unbiased_advantage": True, "scale_rewards": True}}})


def test_pipeline_parallel_runs_as_fsdp_shards_context_parallel_is_kept() -> None:
    cfg = load_config(FIXTURES / "qwen_sft_pp_cp.toml", env={})
    par = cfg.policy.parallelism
    assert (par.dp_shard_size, par.cp_size, par.pp_size) == (4, 2, 1)  # 2 x pp 2 shards, cp 2: the same 8 ranks
    notes = {n.key: n for n in cfg.no_effect}
    assert "dp_shard_size 2 -> 4" in notes["policy.parallelism.pp_size"].reason
    assert "policy.parallelism.cp_size" not in notes


def test_dataset_cache_resolves_to_the_shared_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path))
    cfg = config_from_dict(
        {
            "train": {"train_policy": {"enable_dataset_cache": True}},
            "validation": {"enable": True, "dataset": {"name": "x"}},
        }
    )
    assert cfg.train.train_policy.dataset.cache_dir == str(tmp_path / "clip_cache")
    assert cfg.validation.dataset is not None and cfg.validation.dataset.cache_dir == str(tmp_path / "clip_cache")
    own = config_from_dict({"train": {"train_policy": {"enable_dataset_cache": True, "dataset": {"cache_dir": "/c"}}}})
    assert own.train.train_policy.dataset.cache_dir == "/c"
    assert config_from_dict({}).train.train_policy.dataset.cache_dir is None


def test_config_check_of_a_pipeline_lists_each_stages_accepted_keys(run_cli: RunCli) -> None:
    pipeline = ROOT / "configs" / "tiny-post-train.toml"
    done = run_cli("config", "check", pipeline, "--set", "grpo.redis='12800'", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "# [grpo] accepted with no effect here" in done.stderr and "#   redis = '12800'" in done.stderr
    assert "[sft] accepted" not in done.stderr


# ------------------------------------------------------------------------------------------------ proved by
Definitions = dict[str, tuple[str, ast.stmt]]  # a module-level name -> (its file's source, its definition)


def _definitions(path: Path) -> Definitions:
    """The module-level functions, classes and assignments of a test file, and the names it imports from another
    tests/ module (a helper module or a fixture file), as defined there."""
    source = path.read_text()
    out: Definitions = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = (source, node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update({n.id: (source, node) for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            module = ROOT / (node.module or "").replace(".", "/")
            there = _definitions(module.with_suffix(".py")) if module.with_suffix(".py").is_file() else {}
            out.update({a.asname or a.name: there[a.name] for a in node.names if a.name in there})
    return out


def _with_comment_above(source: str, node: ast.stmt) -> str:
    """A definition's lines, its decorators and the comment lines right above it included."""
    lines = source.splitlines()
    start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno]) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return "\n".join(lines[start : node.end_lineno])


def named_test_source(node_id: str) -> str | None:
    """What a named test is read as: the test function and every module-level definition it reaches by name, in
    its file or imported from a tests/ module, and so on from those (each with its decorators and the comment
    right above it); None when the file or the function does not exist."""
    file, _, name = node_id.partition("::")
    path = ROOT / file
    if not path.is_file():
        return None
    defined = _definitions(path)
    if not isinstance(defined.get(name, (None, None))[1], ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    seen: set[int] = set()
    todo, parts = [name], []
    while todo:
        source, node = defined[todo.pop()]
        if id(node) in seen:
            continue
        seen.add(id(node))
        parts.append(_with_comment_above(source, node))
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        used |= {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}  # a fixture is named by its argument
        todo += sorted(used & defined.keys())
    return "\n".join(parts)


def mentions(node_id: str, text: str, key: str, ours: str) -> bool:
    """The rule: the test's text names the key, our alias of it, or either's last part as a whole word
    (`policy.lora.r` counts `r=4`, not `rank`), or that last part is a word of the test's name (test_no_type_...)."""
    words = {key, ours, key.rsplit(".", 1)[-1], ours.rsplit(".", 1)[-1]}
    named = set(node_id.partition("::")[2].split("_"))
    return bool(words & named) or any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text) for w in words)


def _implemented() -> set[str]:
    ours, aliases = schema_keys(), alias_map()
    return {f["key"] for f in RECORDED["fields"] if key_state(f["key"], set(ours), aliases)[0] == "implemented"}


def test_every_implemented_key_names_the_test_that_proves_it_or_says_none_does() -> None:
    implemented, aliases = _implemented(), alias_map()
    assert len(implemented) > 140
    assert sorted(implemented - PROVED_BY.keys() - NO_TEST_YET.keys()) == [], "a key with no entry in key_tests"
    assert sorted(PROVED_BY.keys() & NO_TEST_YET.keys()) == [] and all(PROVED_BY.values())
    assert sorted((PROVED_BY.keys() | NO_TEST_YET.keys()) - implemented) == [], "an entry for no implemented key"
    assert [k for k, need in NO_TEST_YET.items() if not need] == [], "say what a test would need"
    texts = {t: named_test_source(t) for ids in PROVED_BY.values() for t in ids}
    assert sorted(t for t, text in texts.items() if text is None) == [], "a named test that does not exist"
    silent = [
        (key, t)
        for key, ids in PROVED_BY.items()
        for t in ids
        if not mentions(t, texts[t] or "", key, aliases.get(key, key))
    ]
    assert silent == [], "a named test that never mentions its key"


def test_the_mention_rule_reads_helpers_fixtures_and_whole_words_only() -> None:
    parity = "tests/unit/test_cosmos_rl_parity.py::test_compute_loss_equals_cosmos_rl_over_every_setting"
    text = named_test_source(parity) or ""
    assert "def ours_vs_theirs_loss" in text and "LOSS_CASES = [" in text  # reached by name from the test
    assert mentions(parity, text, "train.train_policy.lower_bound_ratio", "train.train_policy.lower_bound_ratio")
    assert not mentions(parity, text, "train.optm_name", "train.optm_name")
    assert not mentions("tests/x.py::test_clip", "epsilon_low=0.1", "train.epsilon", "train.epsilon")  # a part
    assert mentions("tests/x.py::test_no_type_is_sft", "", "train.train_policy.type", "train.train_policy.type")
    assert named_test_source("tests/unit/test_cosmos_rl_parity.py::test_no_such_test") is None
    assert named_test_source("tests/unit/no_such_file.py::test_x") is None


def test_every_key_with_no_effect_or_refused_says_why() -> None:
    ours, aliases = schema_keys(), alias_map()
    states = [(f["key"], *key_state(f["key"], set(ours), aliases)) for f in RECORDED["fields"]]
    assert [k for k, state, why in states if state != "implemented" and not why.strip()] == []
    refused = [why for _, state, why in states if state == "no effect / refused"]
    assert refused and all("; otherwise refused: " in w and not w.endswith(": ") for w in refused)


def test_guesses_are_recorded_keys_and_marked_in_the_table() -> None:
    recorded = {f["key"] for f in RECORDED["fields"]}
    assert sorted(GUESSES.keys() - recorded) == [] and all(GUESSES.values())
    table = cosmos_rl_key_table(RECORDED)
    marked = re.findall(r"^\| `([^`]+)` \|[^|]*\|[^|]*\| \*\*guess\*\*: ", table, flags=re.MULTILINE)
    assert sorted(marked) == sorted(GUESSES)
