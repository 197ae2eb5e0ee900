"""cosmos_train.data.media: frame sampling, resizing, patchify, errors, and equivalence with
transformers' Qwen2-VL processors.

Test clips are written with PyAV (lossless libx264, yuv420p). Frame i of a "counter" clip is a
flat grey of level 3 * i, so the decoded frames tell which source frames were picked.
"""

from __future__ import annotations

import math
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.data.media import (
    MediaError,
    VisionSettings,
    VisionSettingsError,
    load_image,
    patchify,
    prepare_image,
    prepare_video,
    preprocess_image,
    preprocess_video,
    read_video,
    resize_frames,
)
from cosmos_train.vision.layout import IMAGE_MEAN, IMAGE_STD
from cosmos_train.vision.settings import VIDEO_MAX_PIXELS, smart_resize

LEVEL_STEP = 3  # grey level per frame index in counter clips


def write_counter_clip(
    path: Path, n_frames: int, fps: int, size: tuple[int, int] = (112, 112), gop: int | None = None, **mux
) -> Path:
    height, width = size
    with av.open(str(path), "w", options=mux) as container:
        stream = container.add_stream("libx264", rate=fps, options={"qp": "0"})  # lossless
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        for i in range(n_frames):
            rgb = np.full((height, width, 3), LEVEL_STEP * i, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def frame_numbers(frames: torch.Tensor) -> list[int]:
    """Source frame index of each decoded counter frame (fails if a frame is not a clean grey)."""
    means = frames.float().mean(dim=(1, 2, 3))
    numbers = [round(m / LEVEL_STEP) for m in means.tolist()]
    for mean, number in zip(means.tolist(), numbers):
        assert abs(mean - LEVEL_STEP * number) < 1.5, f"frame grey {mean} is not a counter level"
    return numbers


def qwen_indices(first: int, last: int, n: int) -> list[int]:
    return torch.linspace(first, last, n).round().long().tolist()


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clips")
    garbage = root / "garbage.mp4"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    empty_track = root / "no_frames.mp4"
    # A fragmented mp4 keeps its (empty) video track; a plain mp4 drops a track with no frames.
    with av.open(str(empty_track), "w", options={"movflags": "frag_keyframe+empty_moov"}) as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        container.start_encoding()
    full = write_counter_clip(root / "full.mp4", 80, 20, gop=10, movflags="faststart")
    # Cut inside a packet (a decode error) and right after packet 40 (the stream just ends early,
    # while the container still promises 80 frames). faststart puts the index before the data.
    with av.open(str(full)) as container:
        packet_ends = [p.pos + p.size for p in container.demux(video=0) if p.size > 0]
    mid_packet, at_packet = root / "cut_mid_packet.mp4", root / "cut_at_packet.mp4"
    mid_packet.write_bytes(full.read_bytes()[: packet_ends[40] - 100])
    at_packet.write_bytes(full.read_bytes()[: packet_ends[40]])
    return {
        "counter": write_counter_clip(root / "counter.mp4", 60, 30),  # 2 s, 112x112
        "counter_mkv": write_counter_clip(root / "counter.mkv", 60, 30),
        "long_gop10": full,  # 4 s at 20 fps, a keyframe every 10 frames
        "single": write_counter_clip(root / "single.mp4", 1, 30),
        "wide": write_counter_clip(root / "wide.mp4", 8, 4, size=(120, 200)),
        "garbage": garbage,
        "no_frames": empty_track,
        "cut_mid_packet": mid_packet,
        "cut_at_packet": at_packet,
    }


SMALL = dict(min_pixels=28 * 28, max_pixels=112 * 112)  # keep the 112x112 clips at their size


# ---------------------------------------------------------------- settings


def test_from_part_reads_vision_keys_and_ignores_part_keys() -> None:
    part = {"type": "video", "video": "/x.mp4", "fps": 1, "max_pixels": 81920, "video_start": 0.5}
    settings = VisionSettings.from_part(part)
    assert settings == VisionSettings(fps=1.0, max_pixels=81920, video_start=0.5)
    assert isinstance(settings.fps, float) and isinstance(settings.max_pixels, int)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("max_pixel", "max_pixels"), ("frames", "nframes"), ("resize_width", "resized_width")],
)
def test_from_part_rejects_misspelt_keys(key: str, suggestion: str) -> None:
    with pytest.raises(VisionSettingsError, match=f"'{key}'.*'{suggestion}'"):
        VisionSettings.from_part({"type": "video", "video": "a.mp4", key: 4})


def test_from_part_layers_part_over_defaults() -> None:
    defaults = VisionSettings(fps=1, max_pixels=81920, resized_height=56, resized_width=56)
    settings = VisionSettings.from_part(
        {"type": "video", "nframes": 8, "resized_height": 84, "resized_width": 28}, defaults
    )
    # nframes replaces the default fps (they are exclusive); the rest is inherited.
    assert settings == VisionSettings(nframes=8, max_pixels=81920, resized_height=84, resized_width=28)
    assert VisionSettings.from_part({"type": "image"}, defaults) == defaults


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"fps": 1, "nframes": 4}, "exclusive"),
        ({"fps": True}, "must be a number"),
        ({"max_pixels": "81920"}, "must be a number"),
        ({"nframes": 4.5}, "whole number"),
        ({"fps": 0}, "must be > 0"),
        ({"video_start": -1}, ">= 0"),
        ({"video_start": 2, "video_end": 1}, "after"),
        ({"resized_height": 56}, "go together"),
        ({"min_pixels": 10000, "max_pixels": 5000}, "exceeds"),
        ({"min_frames": 10, "max_frames": 4}, "exceeds"),
    ],
)
def test_settings_reject_bad_values(values: dict, message: str) -> None:
    with pytest.raises(VisionSettingsError, match=message):
        VisionSettings.from_part({"type": "video", **values})


@pytest.mark.parametrize(
    ("settings", "total", "fps", "expected"),
    [
        (VisionSettings(), 60, 30.0, 4),  # 2 s at the default 2 fps
        (VisionSettings(fps=1), 60, 30.0, 4),  # 2 frames, raised to min_frames 4
        (VisionSettings(fps=10), 60, 30.0, 20),
        (VisionSettings(fps=10), 61, 30.0, 20),  # 20.33 floored to an even count
        (VisionSettings(fps=30, max_frames=11), 60, 30.0, 10),  # max floored to even
        (VisionSettings(fps=1, min_frames=5), 60, 30.0, 6),  # min ceiled to even
        (VisionSettings(fps=1), 3, 30.0, 2),  # min_frames capped by the clip, then even
        (VisionSettings(nframes=7), 60, 30.0, 8),  # round(3.5) * 2, as qwen-vl-utils
        (VisionSettings(nframes=60), 60, 30.0, 60),
    ],
)
def test_num_frames_follows_smart_nframes(settings: VisionSettings, total: int, fps: float, expected: int) -> None:
    assert settings.num_frames(total, fps) == expected


def test_num_frames_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="cannot sample 62 frames from 60"):
        VisionSettings(nframes=62).num_frames(60, 30.0)
    with pytest.raises(ValueError, match="cannot sample 0 frames from 1"):
        VisionSettings().num_frames(1, 30.0)


@pytest.mark.parametrize(("height", "width"), [(112, 112), (480, 640), (720, 1280), (1080, 1920), (50, 600), (30, 40)])
@pytest.mark.parametrize("max_pixels", [81920, 28 * 28 * 16, VIDEO_MAX_PIXELS])
def test_resize_bounds(height: int, width: int, max_pixels: int) -> None:
    settings = VisionSettings(min_pixels=28 * 28 * 4, max_pixels=max_pixels)
    for nframes in (2, 16):
        h, w = settings.video_size(height, width, nframes)
        assert h % 28 == 0 and w % 28 == 0
        assert 28 * 28 * 4 <= h * w <= max_pixels
        assert abs(math.log((h / w) / (height / width))) < 0.5  # aspect roughly kept


def test_extreme_aspect_keeps_one_patch_row_like_upstream() -> None:
    # qwen-vl-utils never goes below one 28-pixel row, even if that overshoots max_pixels.
    assert VisionSettings(max_pixels=28 * 28 * 16).video_size(50, 3000, 2) == (28, 840)
    with pytest.raises(ValueError, match="aspect ratio"):
        VisionSettings().video_size(10, 3000, 2)


def test_total_pixels_is_split_over_frames() -> None:
    settings = VisionSettings(total_pixels=28 * 28 * 64, min_pixels=28 * 28)
    few = settings.video_size(480, 640, 2)  # budget 28*28*64 per frame
    many = settings.video_size(480, 640, 16)  # budget 28*28*8 per frame
    assert few[0] * few[1] <= 28 * 28 * 64 and many[0] * many[1] <= 28 * 28 * 8 < few[0] * few[1]


def test_explicit_size_is_rounded_to_28() -> None:
    settings = VisionSettings(resized_height=100, resized_width=60)
    assert settings.video_size(480, 640, 8) == (112, 56)
    assert settings.image_size(480, 640) == smart_resize(100, 60)


# ---------------------------------------------------------------- decoding


def test_read_video_picks_qwen_frames(clips: dict[str, Path]) -> None:
    frames, sample_fps = read_video(clips["counter"], VisionSettings(fps=10, **SMALL))
    assert frames.dtype == torch.uint8 and tuple(frames.shape) == (20, 3, 112, 112)
    assert frame_numbers(frames) == qwen_indices(0, 59, 20)
    assert sample_fps == pytest.approx(10.0)


def test_read_video_nframes_and_default_fps(clips: dict[str, Path]) -> None:
    frames, sample_fps = read_video(clips["counter"], VisionSettings(nframes=6, **SMALL))
    assert frame_numbers(frames) == qwen_indices(0, 59, 6)
    assert sample_fps == pytest.approx(6 / 60 * 30)
    frames, sample_fps = read_video(clips["counter"], VisionSettings(**SMALL))
    assert frame_numbers(frames) == qwen_indices(0, 59, 4) and sample_fps == pytest.approx(2.0)


def test_read_video_without_container_frame_count(clips: dict[str, Path]) -> None:
    # mkv does not record a frame count: it is counted from packets, with the same result.
    with av.open(str(clips["counter_mkv"])) as container:
        assert container.streams.video[0].frames == 0
    mp4, _ = read_video(clips["counter"], VisionSettings(fps=5, **SMALL))
    mkv, _ = read_video(clips["counter_mkv"], VisionSettings(fps=5, **SMALL))
    assert frame_numbers(mkv) == frame_numbers(mp4) == qwen_indices(0, 59, 10)


def test_read_video_time_range(clips: dict[str, Path]) -> None:
    settings = VisionSettings(video_start=0.5, video_end=1.5, fps=2, **SMALL)
    frames, sample_fps = read_video(clips["counter"], settings)
    # qwen-vl-utils: frames ceil(0.5*30)=15 .. floor(1.5*30)=45, 31 frames -> 2.07 -> min 4.
    assert frame_numbers(frames) == qwen_indices(15, 45, 4) == [15, 25, 35, 45]
    assert sample_fps == pytest.approx(4 / 31 * 30)


def test_read_video_seeks_past_keyframes(clips: dict[str, Path]) -> None:
    # Start at 1.3 s of a 20 fps clip with a keyframe every 10 frames: the decoder seeks to
    # frame 20 and must still number frames exactly (26 .. 79).
    frames, _ = read_video(clips["long_gop10"], VisionSettings(video_start=1.3, nframes=8, **SMALL))
    assert frame_numbers(frames) == qwen_indices(26, 79, 8)
    frames, _ = read_video(clips["long_gop10"], VisionSettings(video_start=2.0, video_end=3.0, nframes=4, **SMALL))
    assert frame_numbers(frames) == qwen_indices(40, 60, 4)


def test_read_video_resizes_within_bounds(clips: dict[str, Path]) -> None:
    settings = VisionSettings(fps=2, min_pixels=28 * 28, max_pixels=28 * 28 * 12)
    frames, _ = read_video(clips["wide"], settings)
    height, width = frames.shape[-2:]
    assert (height, width) == settings.video_size(120, 200, 4) == (56, 112)
    assert height * width <= 28 * 28 * 12


def test_read_video_errors_name_the_file(clips: dict[str, Path], tmp_path: Path) -> None:
    cases = {
        tmp_path / "missing.mp4": "file not found",
        clips["garbage"]: "cannot decode",
        clips["no_frames"]: "no frames",
        clips["single"]: "cannot sample 0 frames from 1",
    }
    (tmp_path / "empty.mp4").touch()
    cases[tmp_path / "empty.mp4"] = "empty file"
    for path, reason in cases.items():
        with pytest.raises(MediaError, match=reason) as info:
            read_video(path, VisionSettings(**SMALL))
        assert info.value.path == str(path) and str(path) in str(info.value)
        assert isinstance(info.value, ValueError)
    with pytest.raises(MediaError, match=r"counter\.mp4: cannot sample 62 frames"):
        read_video(clips["counter"], VisionSettings(nframes=62))
    with pytest.raises(MediaError, match="selects no frames"):
        read_video(clips["counter"], VisionSettings(video_start=5.0))


def test_truncated_video_fails_with_its_name(clips: dict[str, Path]) -> None:
    with pytest.raises(MediaError, match=r"cut_mid_packet\.mp4: decoding failed after frame \d+"):
        read_video(clips["cut_mid_packet"], VisionSettings(nframes=80, **SMALL))
    with pytest.raises(MediaError, match=r"cut_at_packet\.mp4: decoding stopped at frame \d+ but frame \d+ was needed"):
        read_video(clips["cut_at_packet"], VisionSettings(nframes=80, **SMALL))
    # The frames before the cut are still readable.
    frames, _ = read_video(clips["cut_at_packet"], VisionSettings(video_end=1.0, nframes=4, **SMALL))
    assert frame_numbers(frames) == qwen_indices(0, 20, 4)
    # A container over-reporting by up to 2 frames is tolerated: the last decoded frame (40)
    # stands in for frame 42.
    frames, _ = read_video(clips["cut_at_packet"], VisionSettings(video_end=2.1, nframes=4, **SMALL))
    assert frame_numbers(frames) == [0, 14, 28, 40]


# ---------------------------------------------------------------- preprocess and patchify


def test_preprocess_video_shapes_and_timing(clips: dict[str, Path]) -> None:
    settings = VisionSettings(fps=4, **SMALL)
    item = prepare_video(clips["counter"], settings)
    assert item.grid_thw.tolist() == [4, 8, 8]  # 8 frames in pairs, 112 / 14 patches per side
    assert item.pixel_values.shape == (4 * 8 * 8, 3 * 2 * 14 * 14) and item.pixel_values.dtype == torch.float32
    assert item.second_per_grid_t == pytest.approx(2 / 4.0)
    assert item.num_tokens == 4 * 8 * 8 // 4


def test_frames_are_resized_once_with_cosmos_defaults(clips: dict[str, Path]) -> None:
    # Cosmos-Reason parts carry max_pixels=81920, below the default min_pixels (128*28*28):
    # qwen-vl-utils then sizes a 120x200 clip to 252x420 (min wins). Feeding that size back into
    # its rule would shrink it again, so preprocess_video must keep read_video's size.
    settings = VisionSettings.from_part({"type": "video", "video": "x", "fps": 1, "max_pixels": 81920})
    frames, sample_fps = read_video(clips["wide"], settings)
    assert tuple(frames.shape[-2:]) == settings.video_size(120, 200, 4) == (252, 420)
    item = preprocess_video(frames, settings, sample_fps)
    assert item.grid_thw.tolist() == [2, 252 // 14, 420 // 14]
    assert torch.equal(prepare_video(clips["wide"], settings).pixel_values, item.pixel_values)


def test_preprocess_resizes_frames_not_multiple_of_28() -> None:
    settings = VisionSettings(min_pixels=28 * 28, max_pixels=28 * 28 * 20)
    frames = torch.randint(0, 256, (4, 3, 150, 230), dtype=torch.uint8)
    height, width = settings.video_size(150, 230, 4)
    item = preprocess_video(frames, settings, sample_fps=2.0)
    assert item.grid_thw.tolist() == [2, height // 14, width // 14]
    expected = preprocess_video(resize_frames(frames, height, width), settings, sample_fps=2.0)
    assert torch.equal(item.pixel_values, expected.pixel_values)
    image = preprocess_image(frames[0], settings)
    assert image.grid_thw.tolist() == [1, *(n // 14 for n in settings.image_size(150, 230))]


def test_patchify_layout_by_hand() -> None:
    # Label every pixel with (t, c, y, x) and check one row of the output by direct indexing.
    t, c, h, w = 4, 3, 56, 84
    grid = torch.stack(torch.meshgrid(*(torch.arange(n) for n in (t, c, h, w)), indexing="ij"), dim=-1)
    codes = (grid * torch.tensor([1_000_000, 100_000, 1000, 1])).sum(-1).double()
    pixel_values, grid_thw = patchify(codes)
    assert grid_thw.tolist() == [2, 4, 6]
    # Row order: (grid_t, block_y, block_x, in-block y, in-block x); 2x2 blocks of 14-px patches.
    gt, by, bx, iy, ix = 1, 1, 2, 1, 0
    row = (((gt * 2 + by) * 3 + bx) * 2 + iy) * 2 + ix
    py, px = (by * 2 + iy) * 14, (bx * 2 + ix) * 14
    expected = codes[gt * 2 : gt * 2 + 2, :, py : py + 14, px : px + 14].permute(1, 0, 2, 3).reshape(-1)
    assert torch.equal(pixel_values[row], expected)


def test_odd_frame_count_repeats_last_frame() -> None:
    frames = torch.randint(0, 256, (3, 3, 56, 56), dtype=torch.uint8)
    odd = preprocess_video(frames, VisionSettings(**SMALL), sample_fps=2.0)
    even = preprocess_video(torch.cat([frames, frames[-1:]]), VisionSettings(**SMALL), sample_fps=2.0)
    assert odd.grid_thw.tolist() == [2, 4, 4] and torch.equal(odd.pixel_values, even.pixel_values)


def _hf_image_processor(min_pixels: int, max_pixels: int):
    module = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    return module.Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels)


def _smooth_image(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    channels = [np.sin(6 * x * rng.uniform(0.5, 2) + 4 * y * rng.uniform(0.5, 2) + rng.uniform(0, 6)) for _ in range(3)]
    rgb = (np.stack(channels, -1) * 100 + 128 + rng.normal(0, 6, (height, width, 3))).clip(0, 255)
    return rgb.astype(np.uint8)


@pytest.mark.parametrize(
    ("height", "width", "max_pixels"),
    [(100, 150, 28 * 28 * 64), (400, 300, 28 * 28 * 40), (56, 84, 28 * 28 * 64)],
)
def test_preprocess_image_matches_transformers(height: int, width: int, max_pixels: int) -> None:
    processor = _hf_image_processor(56 * 56, max_pixels)
    image = Image.fromarray(_smooth_image(height, width, seed=height))
    expected = processor(images=image, return_tensors="pt")
    ours = prepare_image(image, VisionSettings(min_pixels=56 * 56, max_pixels=max_pixels))
    assert ours.grid_thw.tolist() == expected["image_grid_thw"][0].tolist()
    torch.testing.assert_close(ours.pixel_values, expected["pixel_values"], atol=1e-5, rtol=0)
    assert ours.second_per_grid_t is None


def test_video_patchify_matches_transformers_frame_pairs() -> None:
    # transformers' video processor needs torchvision; its image processor does not, and lays out
    # an image as a video frame pair (t, t) in the same row order. So frame pair (a, b) of a video
    # must equal temporal slot 0 of image(a) beside temporal slot 0 of image(b), row for row.
    # Frames are already at their target size, so no resize kernel is involved on either side.
    processor = _hf_image_processor(28 * 28, 28 * 28 * 64)
    frames = np.stack([_smooth_image(56, 84, seed=i) for i in range(5)])  # odd: last frame repeats
    ours = preprocess_video(torch.from_numpy(frames).permute(0, 3, 1, 2), VisionSettings(min_pixels=28 * 28), 2.0)
    singles = [processor(images=Image.fromarray(f), return_tensors="pt")["pixel_values"] for f in frames]
    singles = [s.reshape(s.shape[0], 3, 2, 14, 14)[:, :, 0] for s in singles]
    singles.append(singles[-1])
    pairs = [torch.stack([singles[i], singles[i + 1]], dim=2).reshape(singles[i].shape[0], -1) for i in (0, 2, 4)]
    assert ours.grid_thw.tolist() == [3, 4, 6]
    torch.testing.assert_close(ours.pixel_values, torch.cat(pairs), atol=1e-5, rtol=0)


def test_normalisation_constants_are_clip() -> None:
    white = preprocess_image(torch.full((3, 28, 28), 255, dtype=torch.uint8), VisionSettings(min_pixels=28 * 28))
    expected = [(1 - m) / s for m, s in zip(IMAGE_MEAN, IMAGE_STD)]
    per_channel = white.pixel_values.reshape(-1, 3, 2 * 14 * 14).mean(dim=(0, 2))
    torch.testing.assert_close(per_channel, torch.tensor(expected), atol=1e-5, rtol=0)


def test_video_resize_kernel_is_close_to_pil() -> None:
    # Video frames use torch's antialiased bicubic (torchvision's kernel), images PIL's: on a
    # natural-looking picture they agree to a level or two.
    image = _smooth_image(120, 200, seed=3)
    for height, width in ((56, 112), (168, 280)):
        ours = resize_frames(torch.from_numpy(image).permute(2, 0, 1)[None], height, width)[0].permute(1, 2, 0)
        pil = np.asarray(Image.fromarray(image).resize((width, height), Image.Resampling.BICUBIC))
        diff = np.abs(ours.numpy().astype(int) - pil.astype(int))
        assert diff.max() <= 3 and diff.mean() < 0.5, (height, width, diff.max(), diff.mean())


def test_preprocess_video_matches_transformers_video_processor() -> None:
    """Only where torchvision loads (transformers' video processor needs it): same frames in,
    same pixel_values_videos and video_grid_thw out, resize included."""
    pytest.importorskip("torchvision")
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    min_pixels, max_pixels = 28 * 28 * 4, 28 * 28 * 40
    processor = Qwen2VLVideoProcessor(min_pixels=min_pixels, max_pixels=max_pixels)
    frames = torch.from_numpy(np.stack([_smooth_image(150, 230, seed=i) for i in range(6)])).permute(0, 3, 1, 2)
    expected = processor(videos=[frames], do_sample_frames=False, return_tensors="pt")
    ours = preprocess_video(frames, VisionSettings(min_pixels=min_pixels, max_pixels=max_pixels), 2.0)
    assert ours.grid_thw.tolist() == expected["video_grid_thw"][0].tolist()
    torch.testing.assert_close(ours.pixel_values, expected["pixel_values_videos"], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- images


def test_load_image_from_file_and_errors(tmp_path: Path) -> None:
    rgba = np.zeros((40, 60, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    rgba[:, :30, 3] = 255  # left half opaque red, right half transparent -> white
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    image = load_image(tmp_path / "a.png", VisionSettings(resized_height=56, resized_width=84))
    assert image.dtype == torch.uint8 and tuple(image.shape) == (3, 56, 84)
    assert image[:, :, 0].tolist() == [[200] * 56, [0] * 56, [0] * 56]
    assert image[:, :, -1].tolist() == [[255] * 56] * 3
    # resized_* go through smart_resize with the image pixel floor (4*28*28), as upstream.
    assert tuple(load_image(tmp_path / "a.png", VisionSettings(resized_height=28, resized_width=56)).shape) == (
        3,
        56,
        84,
    )
    assert torch.equal(
        load_image(f"file://{tmp_path / 'a.png'}", VisionSettings(resized_height=56, resized_width=84)), image
    )

    (tmp_path / "bad.png").write_bytes(b"not an image at all")
    with pytest.raises(MediaError, match=r"bad\.png: cannot decode image"):
        load_image(tmp_path / "bad.png")
    with pytest.raises(MediaError, match=r"nope\.jpg: file not found"):
        load_image(tmp_path / "nope.jpg")
    with pytest.raises(MediaError, match="remote URLs"):
        load_image("https://example.com/a.png")
