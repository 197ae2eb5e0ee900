"""The world-model trainer's rows: where they come from (built-in mock prompts, cosmos-rl's mock video dataset, a
local folder with its held-out clips, or S3 shards streamed), which rows a rank takes in an iteration, and their
prompt embeddings and clip latents, cached (wfm/trainer.py reads them)."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cosmos_train.distributed import DistInfo
from cosmos_train.errors import DataError
from cosmos_train.wfm.config_checks import embedding_width
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.data import (
    SCAN_FILE,
    load_clip,
    load_scan,
    load_text_embedding,
    mock_prompts,
    scan_dataset,
)
from cosmos_train.wfm.mock_data import MockVideoRows, width_problem
from cosmos_train.wfm.model import WfmParts, encode_prompts, encode_video
from cosmos_train.wfm.web_data import WebRows, clip_cache_dir

CLIP_CACHE = 64  # dataset clips whose latents stay in memory (the held-out ones are reused every evaluation)


class TrainRows:
    """Rows {name, prompt, video, text_embedding} of one rank: `train` and `heldout` (local type), or `web`'s stream
    (type = "web"), or `mock`'s (cosmos-rl's mock video dataset); `report` says what was read."""

    def __init__(self, cfg: WfmConfig, parts: WfmParts, dist: DistInfo, run_dir: Path):
        self.cfg, self.video, self.parts, self.dist, self.run_dir = cfg, cfg.video, parts, dist, run_dir
        self._embeddings: dict[str, torch.Tensor] = {}
        # dataset latents, most recently used last: a 93-frame 720p clip's are ~20 MB, so only the last few are kept
        self._clips: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.web: WebRows | None = None  # type = "web": the rows stream from S3 shards instead of train
        self.mock: MockVideoRows | None = None  # cosmos-rl's mock video dataset (wfm/mock_data.py): the train rows
        self.train, self.heldout, self.report = self._load()

    def _load(self) -> tuple[Sequence[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
        """The train rows, the held-out ones (local type) and what was read."""
        dl = self.cfg.dataloader_train
        if dl.mock_video is not None:
            self.mock = MockVideoRows(dl.mock_video, seed=self.cfg.trainer.seed)
            problem = width_problem(dl.mock_video.t5_dim, self.embedding_width(), self.cfg.model.model_name_or_path)
            if problem:
                raise DataError(problem)
            return self.mock, [], {"type": "cosmos-rl mock video", "rows": len(self.mock), **vars(dl.mock_video)}
        if dl.type == "mock":
            prompts = mock_prompts(self.video.mock_prompts, seed=self.cfg.trainer.seed)
            return [{"name": f"mock_{i}", "prompt": p} for i, p in enumerate(prompts)], [], {"type": "mock"}
        if dl.type == "web":
            self.web = WebRows.from_config(
                self.video,
                seed=self.cfg.trainer.seed,
                dp_rank=self.dist.dp_rank,
                dp_size=self.dist.dp_size,
                cache_dir=clip_cache_dir(self.run_dir, self.dist.rank),
                env=os.environ,
            )
            return [], [], self.web.report()
        # the flow's check-data task scanned (probing every video) moments ago: reuse it when its settings match
        settings = self.video.scan_settings
        samples, report = load_scan(self.run_dir / SCAN_FILE, settings) or scan_dataset(**settings)
        rows = [
            {"name": s.name, "prompt": s.prompt, "video": s.video, "text_embedding": s.text_embedding} for s in samples
        ]
        n_held = min(self.video.heldout_videos, len(rows) - 1)
        info = {
            "type": "local",
            "rows": len(rows),
            "skipped": report.n_skipped,
            "skipped_by_reason": report.by_reason,
            "heldout": n_held,
            "problems": report.problems[:20],
        }
        return rows[: len(rows) - n_held], rows[len(rows) - n_held :], info

    def embed(self, rows: list[dict[str, Any]]) -> torch.Tensor:
        """[B, L, D] prompt embeddings (the text encoder's, or the dataset's pickles), cached per prompt; cosmos-rl's
        mock rows each have their own (one prompt, "placeholder", for all: nothing to cache by)."""
        if self.mock is not None:
            return torch.stack([self.mock.embedding(r) for r in rows]).to(self.dist.device)
        missing = [r for r in rows if r["prompt"] not in self._embeddings]
        if missing and self.video.offline_text_embedding:
            width = self.embedding_width()
            for r in missing:
                emb = r.get("embedding")  # a web row carries its embedding from the shard
                emb = emb if emb is not None else load_text_embedding(r["text_embedding"], self.video.dataset_dir)
                if emb.shape[-1] != width:
                    raise DataError(
                        f"{r['text_embedding']}: embeddings of width {emb.shape[-1]}; this model's DiT "
                        f"takes {width} (its text encoder's full_concat: layers x hidden). Write them "
                        "with this model's text encoder (`cosmos-train make-synthetic-wfm-data "
                        "--text-embeddings-from MODEL` shows how) or set offline_text_embedding = false"
                    )
                self._embeddings[r["prompt"]] = emb
        elif missing:
            prompts = list(dict.fromkeys(r["prompt"] for r in missing))
            for p, e in zip(prompts, encode_prompts(self.parts, prompts, self.cfg.model.max_prompt_length)):
                self._embeddings[p] = e.cpu()
        return torch.stack([self._embeddings[r["prompt"]] for r in rows]).to(self.dist.device)

    def embedding_width(self) -> int:
        """The width of the prompt embeddings this model's DiT takes."""
        return embedding_width(self.parts.transformer.config)

    def clip_latents(self, rows: list[dict[str, Any]]) -> torch.Tensor:
        """[B, C, T', H', W'] normalised VAE latents of dataset videos (decoded and encoded once per video)."""
        w, h = self.video.video_size
        out = []
        for r in rows:
            if r["name"] not in self._clips:
                mock = self.mock
                clip = mock.clip(r) if mock is not None else load_clip(r["video"], self.video.num_frames, h, w)
                clip = clip.unsqueeze(0).to(self.dist.device)
                self._clips[r["name"]] = encode_video(self.parts, clip)[0].cpu()
            self._clips.move_to_end(r["name"])
            out.append(self._clips[r["name"]])
            while len(self._clips) > CLIP_CACHE:
                self._clips.popitem(last=False)
        return torch.stack(out).to(self.dist.device)

    def rows_for(self, iteration: int, rows: Sequence[dict[str, Any]], n: int, salt: int = 0) -> list[dict[str, Any]]:
        """This rank's n rows of `iteration`: a permutation per pass over the rows, a function of the iteration
        alone (a resumed run takes the same rows as an uninterrupted one)."""
        per_iter = n * self.dist.dp_size
        start = iteration * per_iter + self.dist.dp_rank * n
        out = []
        for k in range(start, start + n):
            epoch, idx = divmod(k, len(rows))
            perm = np.random.default_rng([self.cfg.trainer.seed, salt, epoch]).permutation(len(rows))
            out.append(rows[int(perm[idx])])
        return out
