"""The GPU letterbox: one CuPy kernel launch places a whole batch of decoded images into the network input.

Each thread writes one output pixel (three BGR bytes): grey 114 outside the image, otherwise the OpenCV
INTER_LINEAR sample computed from the tables of ``geometry`` with the same integer arithmetic (see
``geometry.letterbox_reference``, its NumPy model). Images of any size and row pitch share the launch:
per-image geometry and the resize tables travel as one int32 buffer, the source pointers as another.
``pack_batch`` builds both on the host and is pure, so its layout is tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ._cpu import FILL_VALUE
from .decode import DecodedImage
from .geometry import SIMD_LANES, ImagePlan, axis_taps, simd_end
from .runtime import import_cupy

# Per-image fields of the meta buffer, in order.
META_FIELDS = (
    "slot", "x_offset", "y_offset", "width", "height", "resized_width", "resized_height", "left", "top",
    "factor", "source_width", "source_height", "simd_end",
)
META_LEN = len(META_FIELDS)
_FIELD = {name: i for i, name in enumerate(META_FIELDS)}

_KERNEL_NAME = "letterbox_u8"
_KERNEL_SOURCE = (
    "#define META_LEN " + str(META_LEN) + "\n"
    + "".join(f"#define F_{name.upper()} {i}\n" for i, name in enumerate(META_FIELDS))
    + r"""
__device__ __forceinline__ int sample(const unsigned char* src, long long pitch, int factor,
                                      int source_width, int source_height, int row, int col, int c) {
    if (factor == 1) {
        return src[row * pitch + col * 3 + c];
    }
    // Block average standing in for a reduced-resolution JPEG decode; edges repeat.
    int sum = 0;
    for (int i = 0; i < factor; ++i) {
        const int y = min(row * factor + i, source_height - 1);
        for (int j = 0; j < factor; ++j) {
            const int x = min(col * factor + j, source_width - 1);
            sum += src[y * pitch + x * 3 + c];
        }
    }
    const int area = factor * factor;
    return (sum + area / 2) / area;
}

extern "C" __global__ void letterbox_u8(
        const unsigned long long* __restrict__ sources, const long long* __restrict__ pitches,
        const int* __restrict__ meta, const int* __restrict__ tables,
        unsigned char* __restrict__ out, int out_h, int out_w, int fill) {
    const int ox = blockIdx.x * blockDim.x + threadIdx.x;
    const int oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox >= out_w || oy >= out_h) {
        return;
    }
    const int m = blockIdx.z;
    const int* g = meta + m * META_LEN;
    unsigned char* dst = out + (((long long)g[F_SLOT] * out_h + oy) * out_w + ox) * 3;
    const int rw = g[F_RESIZED_WIDTH], rh = g[F_RESIZED_HEIGHT];
    const int dx = ox - g[F_LEFT], dy = oy - g[F_TOP];
    if (dx < 0 || dy < 0 || dx >= rw || dy >= rh) {
        dst[0] = dst[1] = dst[2] = (unsigned char)fill;
        return;
    }
    const int* xt = tables + g[F_X_OFFSET];
    const int* yt = tables + g[F_Y_OFFSET];
    const int x0 = xt[dx], x1 = xt[rw + dx], a0 = xt[2 * rw + dx], a1 = xt[3 * rw + dx];
    const int y0 = yt[dy], y1 = yt[rh + dy], b0 = yt[2 * rh + dy], b1 = yt[3 * rh + dy];
    const unsigned char* src = (const unsigned char*)sources[m];
    const long long pitch = pitches[m];
    const int factor = g[F_FACTOR], sw = g[F_SOURCE_WIDTH], sh = g[F_SOURCE_HEIGHT];
    const int exact_from = g[F_SIMD_END];
    for (int c = 0; c < 3; ++c) {
        const int h0 = sample(src, pitch, factor, sw, sh, y0, x0, c) * a0
                     + sample(src, pitch, factor, sw, sh, y0, x1, c) * a1;
        const int h1 = sample(src, pitch, factor, sw, sh, y1, x0, c) * a0
                     + sample(src, pitch, factor, sw, sh, y1, x1, c) * a1;
        int v;
        if (dx * 3 + c < exact_from) {  // OpenCV's SIMD rounding
            v = ((((h0 >> 4) * b0) >> 16) + (((h1 >> 4) * b1) >> 16) + 2) >> 2;
        } else {  // its scalar tail
            v = (h0 * b0 + h1 * b1 + (1 << 21)) >> 22;
        }
        dst[c] = (unsigned char)min(max(v, 0), 255);
    }
}
"""
)


@lru_cache(maxsize=1024)
def _plan_rows(plan: ImagePlan, lanes: tuple[int, int]) -> tuple[tuple[int, ...], np.ndarray]:
    """One image's meta fields (slot and offsets left 0) and its tables, cached: camera sizes repeat."""
    xt = axis_taps(plan.width, plan.resized_width, True)
    yt = axis_taps(plan.height, plan.resized_height, False)
    fields = {name: getattr(plan, name) for name in ("width", "height", "resized_width", "resized_height", "left",
                                                     "top", "factor", "source_width", "source_height")}
    fields["simd_end"] = simd_end(plan.resized_width * 3, lanes)
    row = tuple(fields.get(name, 0) for name in META_FIELDS)
    tables = np.concatenate([xt.first, xt.second, xt.weight0, xt.weight1,
                             yt.first, yt.second, yt.weight0, yt.weight1]).astype(np.int32)
    tables.flags.writeable = False
    return row, tables


def pack_batch(plans: Sequence[ImagePlan], slots: Sequence[int],
               lanes: tuple[int, int] = SIMD_LANES) -> tuple[np.ndarray, np.ndarray]:
    """Per-image meta (int32 [N, META_LEN]) and the concatenated resize tables (int32) for one launch.

    Image ``i`` is written to output slot ``slots[i]``. Each image's tables are its x taps (first, second,
    weight0, weight1; ``resized_width`` each) followed by its y taps (``resized_height`` each).
    """
    if len(plans) != len(slots):
        raise ValueError(f"{len(plans)} plans but {len(slots)} slots")
    rows = [_plan_rows(plan, lanes) for plan in plans]
    meta = np.array([row for row, _ in rows], dtype=np.int32).reshape(len(plans), META_LEN)
    sizes = np.array([len(tables) for _, tables in rows], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(rows) else sizes
    meta[:, _FIELD["slot"]] = slots
    meta[:, _FIELD["x_offset"]] = offsets
    meta[:, _FIELD["y_offset"]] = offsets + 4 * meta[:, _FIELD["resized_width"]]
    tables = np.concatenate([t for _, t in rows]) if rows else np.zeros(1, np.int32)
    return meta, tables


class GpuLetterbox:
    """Compiles the kernel once (NVRTC, at the first call) and letterboxes batches into a device array."""

    BLOCK = (32, 8, 1)

    def __init__(self, lanes: tuple[int, int] = SIMD_LANES) -> None:
        self.lanes = lanes
        self._cupy = import_cupy()
        self._kernel: Any = None

    def __call__(self, sources: Sequence[DecodedImage], plans: Sequence[ImagePlan], slots: Sequence[int],
                 out: Any) -> None:
        """Write ``sources[i]`` letterboxed per ``plans[i]`` into ``out[slots[i]]`` on the current stream.

        ``out`` is a C-contiguous CuPy uint8 array [M, H, W, 3]; the sources stay alive until the caller has
        synchronised the stream.
        """
        cp = self._cupy
        if not sources:
            return
        for source, plan in zip(sources, plans, strict=True):
            if (source.width, source.height) != (plan.source_width, plan.source_height):
                raise ValueError(f"decoded image is {source.width}x{source.height}, its plan expects "
                                 f"{plan.source_width}x{plan.source_height}")
        if out.dtype != cp.uint8 or out.ndim != 4 or out.shape[3] != 3 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous uint8 [M, H, W, 3] array, not {out.dtype} {out.shape}")
        if any(not 0 <= slot < out.shape[0] for slot in slots):
            raise ValueError(f"slots {list(slots)} do not fit a batch of {out.shape[0]}")
        if self._kernel is None:
            self._kernel = cp.RawKernel(_KERNEL_SOURCE, _KERNEL_NAME)
        meta, tables = pack_batch(plans, slots, self.lanes)
        pointers = cp.asarray(np.array([s.pointer for s in sources], dtype=np.uint64))
        pitches = cp.asarray(np.array([s.pitch for s in sources], dtype=np.int64))
        out_h, out_w = int(out.shape[1]), int(out.shape[2])
        grid = (-(-out_w // self.BLOCK[0]), -(-out_h // self.BLOCK[1]), len(sources))
        self._kernel(grid, self.BLOCK, (pointers, pitches, cp.asarray(meta), cp.asarray(tables), out,
                                        np.int32(out_h), np.int32(out_w), np.int32(FILL_VALUE)))
