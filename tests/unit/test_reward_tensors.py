"""The reward service's tensor decoding is bounded from the headers: what a body decodes to is checked
before anything is allocated (expanded storages, compressed archives, huge declared shapes), and
non-finite values are refused by name."""

from __future__ import annotations

import io
import json
import random
import zipfile

import numpy as np
import pytest
import torch

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.errors import ProtocolError
from cosmos_train.reward_service.handlers import HANDLERS
from cosmos_train.reward_service.latents import LatentDecoder
from cosmos_train.reward_service.protocol import inspect_enqueue, parse_enqueue
from cosmos_train.reward_service.tensors import decode_tensor, inspect_tensor

MiB = 1 << 20


def _torch_bytes(t: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(t, buf)
    return buf.getvalue()


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _refused(data: bytes, max_bytes: int = 64 * MiB) -> ProtocolError:
    with pytest.raises(ProtocolError) as e:
        decode_tensor(data, inspect_tensor(data, max_bytes))
    assert e.value.message.startswith("tensor:")
    return e.value


def test_a_stride_zero_expand_is_refused_before_allocating() -> None:
    # 1,577 bytes that torch.load would turn into a 201 M-element video
    data = _torch_bytes(torch.zeros(1, 3, 1, 1, 1, dtype=torch.uint8).expand(1, 3, 64, 1024, 1024))
    assert len(data) < 2000
    err = _refused(data, max_bytes=1 << 40)
    assert err.status == 400 and "expanded" in err.message and "contiguous" in err.message


def test_a_deflated_torch_archive_is_refused() -> None:
    stored = _torch_bytes(torch.zeros(1, 3, 4, 64, 64, dtype=torch.uint8))
    deflated = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(stored)) as src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for entry in src.infolist():
            dst.writestr(entry.filename, src.read(entry.filename))
    assert len(deflated.getvalue()) < len(stored) / 4  # the expansion a bomb relies on
    err = _refused(deflated.getvalue())
    assert err.status == 400 and "compressed" in err.message


def test_a_tensor_larger_than_the_limit_is_413_from_its_header() -> None:
    arr = np.zeros((1, 3, 4, 64, 64), dtype=np.uint8)
    for data in (_npy_bytes(arr), _torch_bytes(torch.from_numpy(arr))):
        err = _refused(data, max_bytes=arr.nbytes - 1)
        assert err.status == 413 and "max_decoded_mb" in err.message
        assert decode_tensor(data, inspect_tensor(data, arr.nbytes)).shape == arr.shape
    # bfloat16 arrives as float32 (numpy has no bfloat16): it weighs twice its bytes
    bf16 = _torch_bytes(torch.zeros(1, 16, 2, 8, 8, dtype=torch.bfloat16))
    assert inspect_tensor(bf16, 1 << 30).nbytes == 16 * 2 * 8 * 8 * 4


def test_an_npy_header_declaring_a_huge_shape_is_refused_not_a_500() -> None:
    header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 20, 1 << 20, 1 << 20)}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    err = _refused(buf.getvalue() + b"\0" * 64, max_bytes=1 << 40)
    assert err.status == 413 and "[1048576, 1048576, 1048576]" in err.message
    # a small declared shape with too few / too many bytes following
    whole = _npy_bytes(np.zeros((2, 3), dtype=np.float32))
    assert "declares 24 data bytes" in _refused(whole[:-4]).message
    assert "but 28 follow" in _refused(whole + b"\0" * 4).message
    assert "not a valid .npy header" in _refused(whole[:20]).message


def test_npy_is_decoded_without_a_copy_fortran_order_kept() -> None:
    arr = np.asfortranarray(np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    data = _npy_bytes(arr)
    out = decode_tensor(data, inspect_tensor(data, MiB))
    assert np.array_equal(out, arr) and not out.flags.owndata


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_values_are_refused_naming_the_first(bad: float) -> None:
    arr = np.full((1, 3, 2, 4, 4), 100.0, dtype=np.float32)
    arr[0, 1, 1, 2, 3] = bad
    for data in (_npy_bytes(arr), _torch_bytes(torch.from_numpy(arr).to(torch.bfloat16))):
        err = _refused(data)
        assert err.status == 400 and "non-finite" in err.message and "[0, 1, 1, 2, 3]" in err.message


def test_object_and_structured_arrays_are_refused() -> None:
    obj = np.array([{"a": 1}], dtype=object)
    buf = io.BytesIO()
    np.save(buf, obj, allow_pickle=True)
    assert "pickled" in _refused(buf.getvalue()).message
    structured = np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])
    assert "not numeric" in _refused(_npy_bytes(structured)).message


def _body(meta: dict, tensor: bytes = b"") -> bytes:
    return json.dumps(meta).encode() + b"\n" + tensor


def test_a_deeply_nested_json_line_is_a_400() -> None:
    handlers = {name: cls(name, ServiceConfig()) for name, cls in HANDLERS.items()}
    decoder = LatentDecoder(ServiceConfig().latent_decoder)
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ProtocolError) as e:
        parse_enqueue(deep + b"\n", handlers, decoder, MiB)
    assert e.value.status == 400 and "nests too deep" in e.value.message


def test_a_missing_media_type_is_read_as_latent_and_says_so() -> None:
    config = ServiceConfig()
    handlers = {name: cls(name, config) for name, cls in HANDLERS.items()}
    decoder = LatentDecoder(config.latent_decoder)
    pixels = np.zeros((1, 3, 4, 8, 8), dtype=np.uint8)
    with pytest.raises(ProtocolError) as e:  # 3 channels: not Wan latents; the sender probably meant pixels
        inspect_enqueue(_body({"reward_fn": {"brightness": 1.0}}, _npy_bytes(pixels)), handlers, decoder, MiB)
    assert e.value.status == 400 and "no media_type sent" in e.value.message and '"video"' in e.value.message
    named = inspect_enqueue(
        _body({"reward_fn": {"brightness": 1.0}, "media_type": "video"}, _npy_bytes(pixels)), handlers, decoder, MiB
    )
    assert named.media_type == "video" and named.weight == pixels.nbytes


def test_mangled_bodies_are_refused_as_protocol_errors_never_a_crash() -> None:
    """Seeded fuzz: truncated, overwritten and padded JSON lines and tensors (npy and torch.save, uint8 /
    float32 / bfloat16, video and image) answer a ProtocolError (400 / 413 naming the field), never another
    exception (a bare 500)."""
    config = ServiceConfig()
    handlers = {name: cls(name, config) for name, cls in HANDLERS.items()}
    decoder = LatentDecoder(config.latent_decoder)
    rng = random.Random(0)
    metas = [
        json.dumps({"reward_fn": {"brightness": 1.0}, "media_type": "video", "prompts": ["a"], "video_infos": [{}]}),
        json.dumps({"reward_fn": {"format": 1.0}, "media_type": "text", "completions": ["a"], "samples": [{}]}),
    ]
    tensors = [
        _npy_bytes(np.zeros((1, 3, 2, 4, 4), np.uint8)),
        _npy_bytes(np.zeros((1, 3, 2, 4, 4), np.float32)),
        _npy_bytes(np.zeros((1, 4, 4, 3), np.uint8)),
        _torch_bytes(torch.zeros(1, 3, 2, 4, 4, dtype=torch.uint8)),
        _torch_bytes(torch.zeros(1, 3, 2, 4, 4, dtype=torch.bfloat16)),
    ]
    crashes: list[str] = []
    for _ in range(1500):
        meta, tensor = bytearray(rng.choice(metas).encode()), bytearray(rng.choice(tensors))
        target = meta if rng.random() < 0.3 else tensor
        op = rng.random()
        if op < 0.3:
            del target[rng.randrange(len(target)) :]
        elif op < 0.8:
            for _ in range(rng.randint(1, 8)):
                target[rng.randrange(len(target))] = rng.randrange(256)
        else:
            at = rng.randrange(len(target))
            target[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 30)))
        try:
            parse_enqueue(bytes(meta) + b"\n" + bytes(tensor), handlers, decoder, 1 << 24)
        except ProtocolError as e:
            assert e.status in (400, 413) and ":" in e.message
        except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
            crashes.append(f"{type(e).__name__}: {e}")
    assert not crashes, crashes[:5]
