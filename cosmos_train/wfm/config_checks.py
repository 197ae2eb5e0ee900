"""The world-model config's combinations that type-check but cannot run, each a problem line with what to change
(`wfm_problems`): parallel sizes, video2world frames, train_on steps, refused conditioner / callback entries, the
data source's keys, shapes the VAE cannot take, object-store and checkpoint settings, rewards, the model's path."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cosmos_train.config.paths import is_s3, looks_local
from cosmos_train.errors import not_a_folder
from cosmos_train.reward_service.handlers import HANDLERS, handler_names
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.config_states import callback_states, conditioner_states
from cosmos_train.wfm.mock_data import KEY as VIDEO_KEY
from cosmos_train.wfm.mock_data import width_problem
from cosmos_train.wfm.rewards import LOCAL_REWARDS


def wfm_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change."""
    out = []
    mp, rl, v = cfg.model_parallel, cfg.model.rl, cfg.video
    out += _context_parallel_problems(cfg, check_paths)
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "pipeline_parallel_size"):
        if getattr(mp, key) > 1:
            out.append(
                f"model_parallel.{key} = {getattr(mp, key)}: only data parallelism (FSDP / HSDP) is "
                "implemented for the DiT; set it to 1"
            )
    out += _conditional_frame_problems(cfg)
    if rl.train_on is not None:
        fixed = [k for k in rl.train_on if k != -1]
        wrong = sorted({k for k in fixed if not 0 <= k < rl.sample_steps})
        if wrong:
            out.append(
                f"model.rl.train_on: {wrong} not denoising-step indices 0 .. {rl.sample_steps - 1} "
                f"(sample_steps = {rl.sample_steps}); -1 draws a random other step"
            )
        elif len(set(fixed)) != len(fixed):
            out.append("model.rl.train_on: a step is listed twice; list each step once")
        elif len(rl.train_on) > rl.sample_steps:
            out.append(f"model.rl.train_on: {len(rl.train_on)} entries, more than sample_steps = {rl.sample_steps}")
    out += [f"{key}: {why}" for key, state, why in conditioner_states(cfg) + callback_states(cfg) if state == "refused"]
    dl = cfg.dataloader_train
    if dl.type == "web":
        out += _web_problems(cfg)
    if dl.type == "local" and not v.dataset_dir:
        out.append(
            'dataloader_train.video_dataloader.dataset_dir: required with type = "local" (a folder with '
            "videos/*.mp4 and metas/*.txt)"
        )
    if rl.algorithm == "ddrl" and rl.data_beta > 0 and dl.type == "mock":
        out.append(
            'model.rl.algorithm = "ddrl" trains on dataset videos (data_beta > 0): set '
            'dataloader_train.type = "local" with a dataset_dir (or "web" with s3:// shards), or data_beta = 0'
        )
    if v.offline_text_embedding and dl.type == "mock":
        out.append(
            'dataloader_train.video_dataloader.offline_text_embedding needs type = "local" or "web" (the '
            "embeddings are the dataset's text_embedding/*.pickle, or the shards' <key>.npy / .pickle)"
        )
    out += _mock_video_problems(cfg, check_paths)
    if v.offline_text_embedding and rl.guidance > 0:
        out.append(
            "model.rl.guidance: classifier-free guidance needs the empty prompt's embedding, which "
            "offline_text_embedding datasets do not have; set guidance = 0 or offline_text_embedding = false"
        )
    if (v.num_frames - 1) % 4:
        out.append(
            f"dataloader_train.video_dataloader.num_frames = {v.num_frames}: must be 1 + 4k (the VAE "
            "compresses time 4x after the first frame), e.g. 5, 9, 93"
        )
    if any(s % 16 for s in v.video_size):
        out.append(
            f"dataloader_train.video_dataloader.video_size = {list(v.video_size)}: width and height must "
            "be multiples of 16 (VAE 8x, DiT patch 2)"
        )
    if (dl.image_dataloader or {}).get("ratio", 0):
        out.append("dataloader_train.image_dataloader.ratio: image batches are not implemented; set it to 0")
    out += _object_store_problems(cfg)
    out += _checkpoint_problems(cfg)
    if cfg.reward.backend == "local":
        unknown = sorted(set(cfg.reward.fns) - set(LOCAL_REWARDS))
        if unknown:
            out.append(
                f"reward.fns: {', '.join(unknown)} not a local reward function (known: "
                f'{", ".join(sorted(LOCAL_REWARDS))}); or set reward.backend = "service"'
            )
    elif cfg.reward.local_service:
        unknown = sorted(set(cfg.reward.fns) - set(handler_names()))
        if unknown:
            out.append(
                f"reward.fns: {', '.join(unknown)} not a reward-service handler (known: {', '.join(handler_names())})"
            )
        # (a name of its own: `wrong` above holds step indices)
        off_payload = sorted(
            n for n in set(cfg.reward.fns) & set(HANDLERS) if cfg.reward.payload not in HANDLERS[n].media_types
        )
        if off_payload:
            out.append(
                f'reward.payload = "{cfg.reward.payload}": the run\'s service scores {", ".join(off_payload)} '
                f'from {" / ".join(HANDLERS[off_payload[0]].media_types)} only; send payload = "video"'
            )
    if not cfg.model.model_name_or_path:
        out.append(
            "model.model_name_or_path / checkpoint.load_path: the recipe names no model (cosmos-rl's form "
            "without load_path would start the DiT from random weights); set checkpoint.load_path (cosmos-rl's "
            "key) or model.model_name_or_path to a diffusers folder or Hub id (`cosmos-train make-tiny-wfm "
            "DIR` writes a tiny one), e.g. --set checkpoint.load_path=DIR"
        )
    elif (
        check_paths
        and looks_local(cfg.model.model_name_or_path)
        and not Path(cfg.model.model_name_or_path).expanduser().exists()
    ):
        out.append(f"model.model_name_or_path: {cfg.model.model_name_or_path} does not exist")
    if check_paths and dl.type == "local" and v.dataset_dir and not Path(v.dataset_dir).expanduser().is_dir():
        out.append(f"dataloader_train.video_dataloader.dataset_dir: {v.dataset_dir} is not a folder")
    if check_paths and (blocked := not_a_folder("job.output_dir", cfg.job.output_dir)):  # run folders go there
        out.append(blocked)
    return out


def _context_parallel_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """context_parallel_size (Ulysses, wfm/context_parallel.py): the launched ranks must hold whole CP groups, and
    the DiT's attention heads must divide by it (read from a local model folder; the trainer checks again, and
    checks that a video's tokens divide too)."""
    cp, m = cfg.model_parallel.context_parallel_size, cfg.model
    if cp == 1:
        return []
    out = []
    if cfg.launch.nproc_per_node != "auto":
        world = int(cfg.launch.nproc_per_node) * cfg.launch.nnodes
        shard = m.fsdp_shard_size if m.fsdp_shard_size != -1 else max(1, world // (m.dp_replicate_size * cp))
        if world != m.dp_replicate_size * shard * cp:
            out.append(
                f"model_parallel.context_parallel_size = {cp}: {world} processes (launch.nproc_per_node x "
                f"nnodes) are not model.dp_replicate_size x fsdp_shard_size x context_parallel_size = "
                f"{m.dp_replicate_size} x {shard} x {cp}; launch a multiple of {m.dp_replicate_size * cp} "
                "processes (fsdp_shard_size = -1 takes the rest) or change the sizes"
            )
    folder = Path(m.model_name_or_path or "").expanduser() / "transformer" / "config.json"
    if check_paths and m.model_name_or_path and looks_local(m.model_name_or_path) and folder.is_file():
        heads = int(json.loads(folder.read_text()).get("num_attention_heads", 1))
        if heads % cp:
            out.append(
                f"model_parallel.context_parallel_size = {cp}: the DiT of {m.model_name_or_path} has {heads} "
                f"attention heads, which do not divide by {cp} (Ulysses context parallel gives each rank "
                "heads / cp of them); use a size that divides the heads"
            )
    return out


def _checkpoint_problems(cfg: WfmConfig) -> list[str]:
    """[checkpoint] load_path / model_id: a diffusers folder or Hub id is the model; cosmos-rl's imaginaire .pt
    checkpoints are not read, and the refusal gives the command that converts one."""
    ck, out = cfg.checkpoint, []
    load_path = ck.load_path or ""
    pt = ck.model_id or (load_path if load_path.endswith(".pt") else "")
    if pt:
        repo = load_path if ck.model_id else "the folder"
        size = next((s for s in ("14B", "2B") if s in load_path), "2B or 14B")
        where = (
            f"`hf download {load_path} {ck.model_id}` (the file's path under the download)"
            if ck.model_id and not looks_local(load_path)
            else pt
        )
        out.append(
            f"checkpoint.{'model_id' if ck.model_id else 'load_path'} = {pt!r}: cosmos-rl's imaginaire .pt "
            f"checkpoint in {repo}; it is not read here (the model trained is a diffusers folder). Convert it "
            "once with diffusers' scripts/convert_cosmos_to_diffusers.py --transformer_type "
            f"Cosmos-2.5-Predict-Base-{size} --transformer_ckpt_path {where} --vae_type wan2.1 "
            '--save_pipeline --output_path DIR, then set checkpoint.load_path = "DIR" and '
            'checkpoint.model_id = "" (or train the Hub\'s diffusers layout, a different starting point: '
            f'load_path = "{load_path if ck.model_id else "nvidia/Cosmos-Predict2.5-2B"}" with '
            'model.model_revision = "diffusers/base/post-trained" and no model_id)'
        )
    elif load_path and cfg.model.model_name_or_path and load_path != cfg.model.model_name_or_path:
        out.append(
            f"checkpoint.load_path = {load_path!r} and model.model_name_or_path = "
            f"{cfg.model.model_name_or_path!r}: two models; the model is one diffusers folder or Hub id: set "
            "one of them (cosmos-rl's recipes: checkpoint.load_path)"
        )
    return out


def _mock_video_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """cosmos-rl's mock video dataset: its rows carry their prompt embeddings (t5_dim wide, no text to encode), so
    the DiT must take that width (read from a local model folder; the trainer checks again) and classifier-free
    guidance has no empty prompt to embed."""
    mock, out = cfg.dataloader_train.mock_video, list[str]()
    if mock is None:
        return out
    here = f"{VIDEO_KEY}.dataloader.dataset"
    if cfg.model.rl.guidance > 0:
        out.append(
            f"model.rl.guidance = {cfg.model.rl.guidance:g}: classifier-free guidance needs the empty prompt's "
            f"embedding, and cosmos-rl's mock dataset ({here}.len_t5 set) has embeddings, no prompts to encode; set "
            "guidance = 0"
        )
    m = cfg.model.model_name_or_path
    folder = Path(m or "").expanduser() / "transformer" / "config.json"
    if check_paths and m and looks_local(m) and folder.is_file():
        problem = width_problem(mock.t5_dim, embedding_width(json.loads(folder.read_text())), m)
        out += [problem] if problem else []
    return out


def embedding_width(transformer_config: Mapping[str, Any]) -> int:
    """The width of the prompt embeddings a Predict DiT takes (its transformer/config.json): the full_concat its
    cross-attention projection maps, or its text_embed_dim without one."""
    c = transformer_config
    return int(c["crossattn_proj_in_channels"] if c.get("use_crossattn_projection") else c["text_embed_dim"])


def _object_store_problems(cfg: WfmConfig) -> list[str]:
    """cosmos-rl's checkpoint.save_to_object_store / load_from_object_store ({enabled, bucket, credentials}): here
    a run on S3 is job.output_dir = "s3://bucket/prefix" (checkpoints uploaded as they complete, resume = true
    from the bucket), with the PROD_S3_CHECKPOINT_* credentials; enabled is accepted when output_dir says so."""
    out = []
    for key in ("save_to_object_store", "load_from_object_store"):
        store = getattr(cfg.checkpoint, key) or {}
        if not store.get("enabled"):
            continue
        bucket = store.get("bucket")
        on_s3 = is_s3(cfg.job.output_dir)
        if on_s3 and (not bucket or cfg.job.output_dir[len("s3://") :].split("/")[0] == bucket):
            continue
        want = f"s3://{bucket or 'BUCKET'}/PREFIX"
        out.append(
            f"checkpoint.{key}.enabled: a run's checkpoints go to S3 when job.output_dir is an s3:// URL; set "
            f'job.output_dir = "{want}" (credentials from PROD_S3_CHECKPOINT_ACCESS_KEY_ID / _SECRET_ACCESS_KEY / '
            "_ENDPOINT_URL / _REGION_NAME; checkpoint.resume = true finds the newest checkpoint there)"
            + (f", or set {key}.enabled = false" if on_s3 else "")
        )
    return out


def _web_problems(cfg: WfmConfig) -> list[str]:
    """type = "web": the shards are dataset_dir (s3://); cosmos-rl's own web keys name a dataset registered in
    its code (dataloader.dataset.dataset_name), which has no meaning here, and its batch keys must agree."""
    v, out = cfg.video, []
    if cfg.dataloader_train.mock_video is not None:  # cosmos-rl's mock video dataset: no shards (read_mock_video)
        return []
    if not v.dataset_dir.strip().startswith("s3://"):
        named = ((v.dataloader or {}).get("dataset") or {}).get("dataset_name")
        said = (
            f" (dataloader.dataset.dataset_name = {named!r} names a dataset registered in cosmos-rl's code; here "
            "the shards are named by URL)"
            if named
            else ""
        )
        out.append(
            f'dataloader_train.type = "web" reads webdataset shards from S3{said}: set '
            f"dataloader_train.video_dataloader.dataset_dir (now {v.dataset_dir!r}) to s3://bucket/prefix/ (every "
            '.tar under it) or a brace pattern s3://bucket/prefix/shard-{000000..000099}.tar; or type = "mock" '
            "for built-in prompts, or dataloader.dataset.len_t5 (and t5_dim, resolution, num_video_frames) for "
            "cosmos-rl's mock video dataset"
        )
        return out
    for key in ("batch_size", "num_workers"):
        theirs = (v.dataloader or {}).get(key)
        if theirs is not None and theirs != getattr(v, key):
            out.append(
                f"dataloader_train.video_dataloader.dataloader.{key} = {theirs}: cosmos-rl's web loader key; here "
                f"dataloader_train.video_dataloader.{key} (= {getattr(v, key)}) is read: set it to {theirs}"
            )
    return out


def _conditional_frame_problems(cfg: WfmConfig) -> list[str]:
    """Video2world settings that cannot run: min > max, no frame left to generate, no clips to condition on."""
    rl, v, out = cfg.model.rl, cfg.video, []
    lo, hi = rl.min_num_conditional_frames, rl.max_num_conditional_frames
    keys = "model.rl.min_num_conditional_frames / max_num_conditional_frames"
    if lo > hi:
        out.append(f"{keys} = {lo} / {hi}: min is above max; cosmos-rl draws k in [min, max]: swap them")
    latent_frames = 1 + (v.num_frames - 1) // 4
    if hi >= latent_frames and (v.num_frames - 1) % 4 == 0:
        out.append(
            f"model.rl.max_num_conditional_frames = {hi}: a {v.num_frames}-frame video has {latent_frames} latent "
            f"frames, so {hi} given would leave none to generate; set it to at most {latent_frames - 1} or raise "
            "dataloader_train.video_dataloader.num_frames (1 + 4k)"
        )
    if hi > 0 and cfg.dataloader_train.type == "mock":
        took = [
            k
            for k in ("min_num_conditional_frames", "max_num_conditional_frames")
            if f"model.rl.{k}" in cfg.cosmos_rl_defaults
        ]
        said = f" ({' and '.join(took)}: cosmos-rl's default, the recipe leaves it out)" if took else ""
        out.append(
            f"{keys} = {lo} / {hi}{said}: video2world continues the first frames of dataset clips, and "
            'dataloader_train.type = "mock" has no videos: set type = "local" with a dataset_dir (or "web"), or '
            "set both to 0 for text2world (--set model.rl.min_num_conditional_frames=0 "
            "--set model.rl.max_num_conditional_frames=0)"
        )
    return out
