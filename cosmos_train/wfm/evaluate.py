"""World-model evaluation: diffusers folders (the base model, a run's RUN/diffusers/final) scored on held-out prompts
with the same noise, by the job config's rewards, and by the flow-matching loss on held-out clips.

    cosmos-train eval-wfm --config configs/tiny-wfm-flow-grpo.toml --model outputs/tiny-wfm --model RUN/diffusers/final

    plan = eval_plan(load_wfm_config("configs/tiny-wfm-ddrl.toml"), num_prompts=8, seed=0)
    result = evaluate_wfm_model(plan, "outputs/tiny-wfm", "base", Path("OUT"))    # a dict; OUT/base/samples.npy

What every model gets, so that a difference is the model's:
- the prompts: the dataset's held-out rows (the last dataloader_train.video_dataloader.heldout_videos, which the
  trainer never trains on), or with type = "mock" the mock generator's next prompts after the training ones (those
  already among the training prompts left out);
- the noise: one initial latent per prompt, drawn from a generator seeded by (seed, the row's name) alone, so the
  same prompt gets the same noise whatever the model, the order or how many prompts are asked;
- the sampler: the trainer's evaluation sampler (deterministic Euler ODE over model.rl.eval_sample_steps or
  sample_steps, with the flow shift, classifier-free guidance model.rl.guidance);
- video2world (model.rl.max_num_conditional_frames > 0): each prompt continues its own held-out clip, whose first
  k latent frames are given and kept clean (k = max(min_num_conditional_frames, 1), the trainer's evaluation k;
  wfm.conditioning), and the held-out loss covers the generated frames only;
- the rewards: [reward] fns scored as the trainer scores (local handlers or the reward service: wfm.rewards), each
  part and the weighted total per prompt;
- the held-out diffusion loss: the flow-matching loss on the held-out clips at the trainer's fixed sigmas
  (EVAL_SIGMAS) and noise seeded per clip, averaged over the sigmas per clip (local data only).
Summaries are means with Student t 95% intervals over prompts (clips), and a collapse flag (wfm.eval_report).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cosmos_train.atomic import write_json_atomic
from cosmos_train.config.paths import is_s3, looks_local
from cosmos_train.errors import DataError, ModelError
from cosmos_train.evaluation.report import unique_labels
from cosmos_train.run_sync import fetch_folder
from cosmos_train.storage.s3 import s3_settings
from cosmos_train.wfm.conditioning import (
    FrameCondition,
    conditioned_velocity,
    eval_num_conditional_frames,
    frame_condition,
    generated_mean,
    sample_ode,
)
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.data import load_clip, load_text_embedding, mock_prompts, scan_dataset
from cosmos_train.wfm.eval_report import collapse_flags, sample_spread, t_interval
from cosmos_train.wfm.losses import noised
from cosmos_train.wfm.model import (
    WfmParts,
    check_folder,
    decode_latents,
    encode_prompts,
    encode_video,
    latent_shape,
    load_wfm,
)
from cosmos_train.wfm.rewards import VideoScorer
from cosmos_train.wfm.rl_step import EVAL_SIGMAS
from cosmos_train.wfm.sde import sigma_schedule

BATCH = 8  # prompts sampled at once


@dataclass
class EvalPlan:
    """What every model is evaluated on: the config (sampler, rewards, video shape), the prompt rows, the held-out
    clips, the seed; built once, handed to each model's evaluation."""

    cfg: WfmConfig
    rows: list[dict[str, Any]]  # {name, prompt, video, text_embedding}: the prompts sampled
    heldout: list[dict[str, Any]]  # rows with a video: the held-out diffusion loss's clips (empty for mock data)
    seed: int
    source: str  # where the prompts come from, in words
    info: dict[str, Any] = field(default_factory=dict)
    conditional_frames: int = 0  # video2world: latent frames of each row's clip given (0: text2world)


def _row(name: str, prompt: str, video: Any = None, text_embedding: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "prompt": prompt,
        "video": str(video) if video else None,
        "text_embedding": str(text_embedding) if text_embedding else None,
    }


def eval_plan(cfg: WfmConfig, num_prompts: int | None = None, seed: int | None = None) -> EvalPlan:
    """The held-out prompts and clips of the job config `cfg` (see the module docstring); num_prompts and seed
    default to [evaluation] num_prompts and seed."""
    n = num_prompts or cfg.evaluation.num_prompts
    seed = cfg.evaluation.seed if seed is None else seed
    dl, v = cfg.dataloader_train, cfg.video
    if dl.type == "mock":
        train = mock_prompts(v.mock_prompts, seed=cfg.trainer.seed)
        seen, rows = set(train), list[dict[str, Any]]()
        # the generator's next prompts (a prefix-stable sequence), those the training list has left out
        more = mock_prompts(v.mock_prompts + 64 * n, seed=cfg.trainer.seed)[v.mock_prompts :]
        for i, p in enumerate(more):
            if p not in seen and len(rows) < n:
                seen.add(p)
                rows.append(_row(f"heldout_mock_{i}", p))
        if not rows:
            raise DataError(
                f"dataloader_train.video_dataloader.mock_prompts = {v.mock_prompts}: every mock prompt is a "
                "training prompt, none is left to hold out; lower mock_prompts or evaluate on a local dataset"
            )
        source = f"mock prompts after the {v.mock_prompts} training ones (not trained on)"
        return EvalPlan(cfg, rows, [], seed, source, {"type": "mock", "prompts": len(rows)})
    if dl.type != "local":
        raise DataError(
            f'dataloader_train.type = "{dl.type}": the evaluation reads held-out rows from a local dataset or '
            "mock prompts (web shards have no held-out split); evaluate on a local folder of clips the run did not "
            "train on: --set dataloader_train.type='local' --set dataloader_train.video_dataloader.dataset_dir=DIR"
        )
    samples, report = scan_dataset(**v.scan_settings)
    all_rows = [_row(s.name, s.prompt, s.video, s.text_embedding) for s in samples]
    n_held = min(v.heldout_videos, len(all_rows) - 1)
    if n_held < 1:
        raise DataError(
            f"{v.dataset_dir}: {len(all_rows)} usable row(s) and heldout_videos = {v.heldout_videos}: no row is "
            "held out of training to evaluate on; set dataloader_train.video_dataloader.heldout_videos >= 1 (the "
            "trainer holds the same rows out) with at least 2 rows"
        )
    heldout = all_rows[len(all_rows) - n_held :]
    source = f"the last {n_held} rows of {v.dataset_dir} (held out of training: heldout_videos)"
    info = {"type": "local", "rows": len(all_rows), "heldout": n_held, "skipped": report.n_skipped}
    k = eval_num_conditional_frames(cfg.model.rl.min_num_conditional_frames, cfg.model.rl.max_num_conditional_frames)
    if k:
        source += f", each continuing the first {k} latent frame(s) of its own clip (video2world)"
    return EvalPlan(cfg, heldout[:n], heldout, seed, source, info, conditional_frames=k)


def _seed_of(seed: int, name: str) -> int:
    """A generator seed from (seed, a row's name) alone: the same prompt gets the same noise in every evaluation."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def row_noise(seed: int, names: list[str], shape: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
    """[B, *shape] float32 noise, each row's from its own generator (CPU, so it is the same on any device)."""
    out = [torch.randn(shape, generator=torch.Generator().manual_seed(_seed_of(seed, n))) for n in names]
    return torch.stack(out).to(device)


class _Model:
    """One model's parts with the plan's embedding and sampling (the trainer's evaluation, without a trainer)."""

    def __init__(self, plan: EvalPlan, path: str, device: torch.device):
        cfg = plan.cfg
        self.plan, self.device, self.rl, self.video = plan, device, cfg.model.rl, cfg.video
        dtype = torch.bfloat16 if cfg.model.param_dtype == "bfloat16" and device.type == "cuda" else torch.float32
        revision = cfg.model.model_revision if path == cfg.model.model_name_or_path else None  # the config's model
        self.parts: WfmParts = load_wfm(
            path, device, dtype, text_encoder=not self.video.offline_text_embedding, revision=revision
        )
        self.parts.transformer.requires_grad_(False).eval()
        w, h = self.video.video_size
        self.shape = latent_shape(self.parts, self.video.num_frames, h, w)
        self.sigmas = sigma_schedule(self.rl.eval_sample_steps or self.rl.sample_steps, self.rl.shift)

    def embed(self, rows: list[dict[str, Any]]) -> torch.Tensor:
        if self.video.offline_text_embedding:
            embs = [load_text_embedding(r["text_embedding"], self.video.dataset_dir) for r in rows]
            return torch.stack(embs).to(self.device)
        return encode_prompts(self.parts, [r["prompt"] for r in rows], self.plan.cfg.model.max_prompt_length)

    def condition(self, rows: list[dict[str, Any]], clean: torch.Tensor | None = None) -> FrameCondition | None:
        """Video2world: the rows' clips' first k latent frames given (k = the plan's); None for text2world."""
        if not self.plan.conditional_frames:
            return None
        return frame_condition(self.clips(rows) if clean is None else clean, self.plan.conditional_frames)

    def clips(self, rows: list[dict[str, Any]]) -> torch.Tensor:
        """Clean normalised latents [B, C, T', H', W'] of the rows' videos."""
        w, h = self.video.video_size
        missing = [r["name"] for r in rows if not r.get("video")]
        if missing:
            raise DataError(f"rows {', '.join(missing)}: no video to condition on (video2world needs dataset clips)")
        clips = torch.stack([load_clip(r["video"], self.video.num_frames, h, w) for r in rows]).to(self.device)
        return encode_video(self.parts, clips)

    @torch.no_grad()
    def sample(self, rows: list[dict[str, Any]]) -> torch.Tensor:
        """Latents of each row from its own noise: the trainer's evaluation sampler (Euler ODE, guidance against
        the empty prompt), video2world's given frames held clean throughout (wfm.conditioning)."""
        emb = self.embed(rows)
        noise = row_noise(self.plan.seed, [r["name"] for r in rows], self.shape, self.device)
        uncond = self.embed([{"prompt": ""}] * len(rows)) if self.rl.guidance > 0 else None
        cond = self.condition(rows)
        return sample_ode(
            self.parts.transformer, noise, self.sigmas, emb, cond, guidance=self.rl.guidance, uncond_embeds=uncond
        )

    @torch.no_grad()
    def heldout_losses(self) -> tuple[list[float], dict[str, float]]:
        """Per held-out clip, the flow-matching loss averaged over EVAL_SIGMAS (fixed noise per clip); and the mean
        per sigma."""
        per_clip, by_sigma = [], {f"{s:g}": 0.0 for s in EVAL_SIGMAS}
        for start in range(0, len(self.plan.heldout), BATCH):
            rows = self.plan.heldout[start : start + BATCH]
            x0 = self.clips(rows)
            eps = row_noise(self.plan.seed + 1, [r["name"] for r in rows], tuple(x0.shape[1:]), self.device)
            emb = self.embed(rows)
            cond = self.condition(rows, x0)
            losses = torch.zeros(len(rows), device=self.device)
            for s in EVAL_SIGMAS:
                sigma = torch.full((len(rows),), s, device=self.device)
                v = conditioned_velocity(self.parts.transformer, noised(x0, eps, sigma), sigma, emb, cond)
                # flow_matching_loss per clip, over the generated frames only (all of them in text2world)
                each = generated_mean((v - (eps - x0)) ** 2, cond)
                by_sigma[f"{s:g}"] += float(each.sum())
                losses += each / len(EVAL_SIGMAS)
            per_clip += losses.cpu().tolist()
        n = max(1, len(self.plan.heldout))
        return per_clip, {k: v / n for k, v in by_sigma.items()}


def check_models(models: list[str], text_encoder: bool = True) -> None:
    """ModelError naming the --model that is not a complete diffusers world-model folder (a Hub id is fetched
    when it is loaded)."""
    for model in models:
        path = Path(model).expanduser()
        if is_s3(model) or not looks_local(model):  # S3: checked when fetched (fetch_models)
            continue
        if not path.is_dir():
            raise ModelError(
                f"--model {model}: {'not a folder but a file' if path.exists() else 'no such folder'} (a diffusers "
                "world-model folder: the base model, or a run's RUN/diffusers/final)"
            )
        try:
            check_folder(path, text_encoder)
        except ModelError as e:
            raise ModelError(f"--model {model}: {e}") from None


def fetch_models(models: list[str], env: Mapping[str, str]) -> list[str]:
    """`models` with each s3:// folder (a run's export in the bucket) replaced by its downloaded local copy
    (run_sync.fetch_folder; credentials PROD_S3_CHECKPOINT_* / AWS_* from `env`)."""
    if not any(is_s3(m) for m in models):
        return list(models)
    settings = s3_settings(env)
    return [str(fetch_folder(m, settings)) if is_s3(m) else m for m in models]


def model_labels(models: list[str]) -> list[str]:
    """Result-folder names: '<algorithm>@<run>-<export>' for a run's RUN/diffusers/<export> (the run's
    result.json names the algorithm), else the shortest distinct path tails (evaluation.report.unique_labels)."""
    labels = unique_labels(models)
    for i, model in enumerate(models):
        path = Path(model.rstrip("/"))
        run = path.parent.parent
        if path.parent.name == "diffusers" and (run / "config.toml").is_file():
            try:
                algorithm = json.loads((run / "result.json").read_text()).get("algorithm") or "wfm_rl"
            except (OSError, ValueError, AttributeError):
                algorithm = "wfm_rl"
            labels[i] = f"{algorithm}@{run.name}-{path.name}"
    return labels if len(set(labels)) == len(labels) else unique_labels(models)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def evaluate_wfm_model(
    plan: EvalPlan,
    model: str,
    label: str,
    out_dir: Path,
    device: torch.device | None = None,
    log: Callable[[str], Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Sample the plan's prompts with `model` (a diffusers folder or Hub id), score them, and compute the held-out
    diffusion loss; writes OUT/<label>/samples.npy (uint8 [N, 3, T, H, W]), prompts.json and result.json, and
    returns result.json's content. env: where a [reward] backend = "service" finds WFM_REWARD_* (default: this
    process's environment)."""
    device = device or default_device()
    say = log or (lambda _msg: None)
    m = _Model(plan, model, device)
    cfg, rows = plan.cfg, plan.rows
    scorer = VideoScorer.from_config(cfg.reward, env=os.environ if env is None else env)
    videos: list[np.ndarray] = []
    totals: list[float] = []
    parts: dict[str, list[float]] = {name: [] for name in cfg.reward.fns}
    try:
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            latents = m.sample(batch)
            video = decode_latents(m.parts, latents).cpu().numpy()
            total, part = scorer.score(video, latents.float().cpu().numpy(), [r["prompt"] for r in batch])
            videos.append(video)
            totals += total.tolist()
            for name in parts:
                parts[name] += part[name].tolist()
            say(f"{label}: {min(start + BATCH, len(rows))}/{len(rows)} prompts sampled and scored")
    finally:
        scorer.close()
    samples = np.concatenate(videos)
    heldout, by_sigma = m.heldout_losses() if plan.heldout else ([], {})
    del m  # the next model loads into the memory this one held
    if device.type == "cuda":
        torch.cuda.empty_cache()
    spread = sample_spread(samples)
    folder = Path(out_dir) / label
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "samples.npy", samples)
    write_json_atomic(folder / "prompts.json", [r["prompt"] for r in rows])
    result: dict[str, Any] = {
        "label": label,
        "model": str(model),
        "weights": dict(cfg.reward.fns),
        "num_prompts": len(rows),
        "num_heldout_clips": len(heldout),
        "prompts": [r["prompt"] for r in rows],
        "prompt_names": [r["name"] for r in rows],
        "prompt_source": plan.source,
        "seed": plan.seed,
        "rewards": {name: t_interval(v) for name, v in parts.items()},
        "reward_total": t_interval(totals),
        "per_prompt": {"total": totals, **parts},
        "heldout_diffusion_loss": t_interval(heldout) if heldout else None,
        "heldout_by_sigma": by_sigma,
        "heldout_per_clip": heldout,
        "sample_spread": spread,
        "flags": collapse_flags(spread),
        "samples": str(folder / "samples.npy"),
        "result_json": str(folder / "result.json"),
    }
    write_json_atomic(folder / "result.json", result)
    say(f"{label}: reward {result['reward_total']['mean']:.4f}, flags {result['flags'] or 'none'}")
    return result


def write_comparison(out_dir: Path, results: list[dict[str, Any]], rows: list[dict[str, Any]]) -> Path:
    """OUT/results.json: every model's result and the comparison rows."""
    path = Path(out_dir) / "results.json"
    write_json_atomic(path, {"models": results, "table": rows})
    return path
