"""An RGB(A) or grey frame as a PNG file, with zlib and struct only.

Frames (Gymnasium's ``rgb_array`` renders) are kept as artifacts the viewer shows inline; an
imaging library would be a dependency for twenty lines of a well-specified format (PNG, RFC
2083: a signature, an ``IHDR`` chunk, the zlib-compressed rows each led by a filter byte, and
``IEND``).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

__all__ = ["png"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_TYPES = {1: 0, 3: 2, 4: 6}
"""Channels → PNG colour type: grey, RGB, RGBA (8 bits each)."""


def png(frame: Any) -> bytes:
    """``frame`` (a numpy array, height x width x 3 or 4, or height x width) as PNG bytes."""
    shape = tuple(frame.shape)
    if len(shape) == 2:
        shape = (*shape, 1)
    if len(shape) != 3 or shape[2] not in _COLOUR_TYPES or shape[0] < 1 or shape[1] < 1:
        raise ValueError(
            f"a frame must be height x width x 3 (RGB) or 4 (RGBA), or height x width (grey); "
            f"got shape {tuple(frame.shape)}"
        )
    height, width, channels = shape
    if str(frame.dtype) != "uint8":
        raise ValueError(f"a frame must hold uint8 values, not {frame.dtype}")
    rows = frame.reshape(height, width * channels).tobytes()
    stride = width * channels
    # Each row is led by its filter type: 0, none (the rows are stored as they are).
    raw = b"".join(b"\x00" + rows[i * stride : (i + 1) * stride] for i in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOUR_TYPES[channels], 0, 0, 0)
    return (
        _SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 6))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )
