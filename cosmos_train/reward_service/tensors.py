"""Tensor bytes of an enqueue body, checked before anything is allocated: what a tensor decodes to is known
from its header, so a tiny body cannot make the service allocate gigabytes.

    info = inspect_tensor(data, max_bytes)   # shape, dtype, decoded bytes: reads headers only
    array = decode_tensor(data, info)        # the numpy array (a view of `data` for .npy)

- `.npy` (np.save): the header's shape x dtype must match the bytes that follow exactly; object (pickled)
  arrays are refused. The array is a read-only view of the body: no copy.
- torch.save (zip): read once onto the meta device (shapes and storages, no data) with
  torch.load(weights_only=True); every zip entry must be stored (torch.save never compresses, so a
  deflated archive can only be an expansion bomb); the tensor may not hold more elements than its
  storage has bytes for (a stride-0 `expand` of one pixel to a video is refused) and its storage may not
  be larger than the body.
Every refusal is a ProtocolError naming `tensor` and what to send instead: 400 for a malformed tensor,
413 for one that decodes past `max_bytes`.
"""

from __future__ import annotations

import io
import math
import pickle
import warnings
import zipfile
from dataclasses import dataclass

import numpy as np
import torch

from cosmos_train.reward_service.errors import ProtocolError

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"  # torch.save's (zip) format
NPY_MAX_HEADER = 10_000  # numpy's own default bound on a header's size
FINITE_CHUNK = 1 << 22  # elements checked at a time: the check's scratch memory stays a few MB


@dataclass(frozen=True)
class TensorInfo:
    """What a tensor's bytes decode to, read from its header."""

    format: str  # "npy" | "torch"
    shape: tuple[int, ...]
    dtype_name: str  # as the sender had it: "torch.bfloat16", "torch.uint8"
    nbytes: int  # bytes of the decoded numpy array (bf16 / fp16 from torch arrive as float32)
    npy_offset: int = 0
    npy_dtype: np.dtype | None = None
    npy_fortran: bool = False


def _bad(message: str) -> ProtocolError:
    return ProtocolError(400, f"tensor: {message}")


def _too_big(nbytes: int, max_bytes: int, what: str) -> ProtocolError:
    return ProtocolError(
        413,
        f"tensor: {what} decodes to {nbytes / 2**20:.1f} MiB, over the service's max_decoded_mb "
        f"({max_bytes / 2**20:.1f} MiB); send smaller batches",
    )


def _check_numeric(dtype: np.dtype) -> None:
    if dtype.hasobject:
        raise _bad("an object (pickled) .npy array is refused; send a numeric array")
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise _bad(f"dtype {dtype} is not numeric; send bool, integer or float elements")


def _inspect_npy(data: bytes, max_bytes: int) -> TensorInfo:
    fp = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=NPY_MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=NPY_MAX_HEADER)
        else:
            raise _bad(f".npy format version {version} is not read; np.save writes 1.0")
    except ProtocolError:
        raise
    except Exception as e:  # numpy parses the header with ast / tokenize: any failure is a malformed header
        raise _bad(f"not a valid .npy header ({type(e).__name__}: {str(e)[:200]})") from None
    _check_numeric(dtype)
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise _bad(f".npy header declares shape {shape}; dimensions must be integers >= 0")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > max_bytes:
        raise _too_big(nbytes, max_bytes, f"the .npy header's shape {list(shape)} of {dtype}")
    offset = fp.tell()
    if len(data) - offset != nbytes:
        raise _bad(
            f"the .npy header declares {nbytes} data bytes ({list(shape)} of {dtype}) but {len(data) - offset} "
            "follow; send the whole file np.save wrote"
        )
    return TensorInfo("npy", tuple(shape), f"torch.{dtype.name}", nbytes, offset, dtype, fortran)


def _inspect_torch(data: bytes, max_bytes: int) -> TensorInfo:
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except Exception as e:  # BadZipFile, NotImplementedError (a mangled version field), EOFError, ...
        raise _bad(f"not a complete torch.save file ({type(e).__name__}: {str(e)[:200]})") from None
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED:
            raise _bad(
                f"the torch.save archive's entry {entry.filename!r} is compressed; torch.save stores entries "
                "uncompressed, send its output unchanged (or an .npy file)"
            )
        if entry.file_size > len(data):
            raise _bad(f"the torch.save archive's entry {entry.filename!r} claims more bytes than the body holds")
    try:
        with warnings.catch_warnings():  # a mangled pickle header warns per request: noise a hostile client controls
            warnings.simplefilter("ignore")
            meta = torch.load(io.BytesIO(data), weights_only=True, map_location="meta")
    except pickle.UnpicklingError as e:
        raise _bad(f"refused by torch.load(weights_only=True): {str(e).splitlines()[0][:200]}") from None
    except Exception as e:  # a corrupt archive surfaces as RuntimeError, KeyError and others
        raise _bad(f"not a complete torch.save file ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(meta, torch.Tensor):
        raise _bad(f"the torch.save file holds a {type(meta).__name__}, not a tensor")
    if meta.is_sparse or meta.is_quantized or meta.is_complex():
        raise _bad(f"a {meta.layout} / {meta.dtype} tensor is refused; send a dense real tensor")
    numel, itemsize = meta.numel(), meta.element_size()
    storage_bytes = meta.untyped_storage().nbytes()
    if storage_bytes > len(data):
        raise _bad(f"its storage declares {storage_bytes} bytes, more than the {len(data)}-byte body holds")
    if numel * itemsize > storage_bytes:
        raise _bad(
            f"a view of {numel} elements ({list(meta.shape)}, strides {list(meta.stride())}) over a storage of "
            f"{storage_bytes} bytes is refused (an expanded / stride-0 tensor); send a contiguous tensor "
            "(.contiguous() before torch.save)"
        )
    widened = 4 if meta.dtype in (torch.bfloat16, torch.float16) else itemsize  # numpy has no bfloat16
    nbytes = numel * widened
    if nbytes > max_bytes:
        raise _too_big(nbytes, max_bytes, f"the torch.save tensor {list(meta.shape)} of {meta.dtype}")
    return TensorInfo("torch", tuple(meta.shape), str(meta.dtype), nbytes)


def inspect_tensor(data: bytes, max_bytes: int) -> TensorInfo:
    """The tensor's shape, dtype and decoded size from its headers; ProtocolError when it is malformed,
    refused or would decode past `max_bytes`."""
    if data.startswith(NPY_MAGIC):
        return _inspect_npy(data, max_bytes)
    if data.startswith(ZIP_MAGIC):
        return _inspect_torch(data, max_bytes)
    raise _bad("neither a .npy (np.save) nor a torch.save file; pickles and other formats are refused")


def decode_tensor(data: bytes, info: TensorInfo) -> np.ndarray:
    """The array `info` describes (from `inspect_tensor` on the same bytes), its values checked finite."""
    if info.format == "npy":
        assert info.npy_dtype is not None
        flat = np.frombuffer(data, dtype=info.npy_dtype, offset=info.npy_offset)
        arr = flat.reshape(info.shape, order="F" if info.npy_fortran else "C")
    else:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as e:  # inspected already: only a corrupt storage record can fail here
            raise _bad(f"not a complete torch.save file ({type(e).__name__}: {str(e)[:200]})") from None
        if obj.dtype in (torch.bfloat16, torch.float16):
            obj = obj.float()
        arr = obj.detach().contiguous().numpy()
    check_finite(arr)
    return arr


def check_finite(arr: np.ndarray) -> None:
    """400 naming the first non-finite element (inf scores as the brightest pixel; NaN poisons a mean)."""
    if arr.dtype.kind != "f":
        return
    flat = arr.reshape(-1, order="A")
    for start in range(0, flat.size, FINITE_CHUNK):
        chunk = flat[start : start + FINITE_CHUNK]
        bad = np.flatnonzero(~np.isfinite(chunk))
        if bad.size:
            where = np.unravel_index(start + int(bad[0]), arr.shape, order="F" if arr.flags.f_contiguous else "C")
            total = int((~np.isfinite(flat)).sum())
            raise _bad(
                f"{total} non-finite value(s) (inf / nan), the first {float(chunk[bad[0]])} at "
                f"{[int(i) for i in where]}; send finite values"
            )
