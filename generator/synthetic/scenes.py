"""Deterministic synthetic detection scenes: coloured shapes on cluttered backgrounds.

They give the project a labelled, license-free image source for tests, INT8 calibration, accuracy gates and
benchmarks, and the bundled demo detector is trained on them. Everything is drawn with numpy + OpenCV from
one ``np.random.Generator``, so a seed reproduces a scene bit for bit.

Boxes are tight around the *visible* pixels of each shape (later shapes may partly cover earlier ones; a
placement that would hide more than ``_MAX_HIDDEN`` of an earlier shape is rejected). Background clutter
(lines, squiggles, dots, blotches) is drawn under the shapes and is never one of the classes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

CLASS_NAMES: tuple[str, ...] = ("circle", "square", "triangle", "cross", "star", "ring")

_MIN_SIZE, _MAX_SIZE = 0.04, 0.40  # object extent as a fraction of the shorter image side
_MAX_HIDDEN = 0.4  # largest fraction of an earlier shape a later one may cover
_PLACEMENT_TRIES = 12
_MIN_CONTRAST = 140  # L1 distance (sum over RGB) between a shape and the background under it


@dataclass(frozen=True)
class Scene:
    """One image (H x W x 3 uint8 RGB) and its ground truth: K xyxy pixel boxes and class indices."""

    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray


# --- shapes: each returns an int32 polygon (or draws directly) in a local patch of side `size` -----------


def _regular_points(n: int, radius: float, angle: float, center: float) -> np.ndarray:
    t = angle + np.arange(n) * (2 * np.pi / n)
    return np.stack([center + radius * np.cos(t), center + radius * np.sin(t)], axis=1)


def _rotated(points: np.ndarray, angle: float, center: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    rel = points - center
    return np.stack([center + rel[:, 0] * c - rel[:, 1] * s, center + rel[:, 0] * s + rel[:, 1] * c], axis=1)


def _fill(mask: np.ndarray, points: np.ndarray) -> None:
    # Sub-pixel (shift=4) coordinates keep small rotated shapes accurate.
    cv2.fillPoly(mask, [np.round(points * 16).astype(np.int32)], (1,), lineType=cv2.LINE_8, shift=4)


def _draw_circle(mask: np.ndarray, rng: np.random.Generator) -> None:
    r = mask.shape[0] / 2
    cv2.circle(mask, (round(r * 16), round(r * 16)), round((r - 0.5) * 16), (1,), -1, cv2.LINE_8, shift=4)


def _draw_ring(mask: np.ndarray, rng: np.random.Generator) -> None:
    r = mask.shape[0] / 2
    center = (round(r * 16), round(r * 16))
    cv2.circle(mask, center, round((r - 0.5) * 16), (1,), -1, cv2.LINE_8, shift=4)
    inner = (r - 0.5) * rng.uniform(0.45, 0.65)
    cv2.circle(mask, center, round(inner * 16), (0,), -1, cv2.LINE_8, shift=4)


def _draw_square(mask: np.ndarray, rng: np.random.Generator) -> None:
    r = mask.shape[0] / 2
    _fill(mask, _regular_points(4, r - 0.5, rng.uniform(0, np.pi / 2), r))


def _draw_triangle(mask: np.ndarray, rng: np.random.Generator) -> None:
    r = mask.shape[0] / 2
    _fill(mask, _regular_points(3, r - 0.5, rng.uniform(0, 2 * np.pi), r))


def _draw_star(mask: np.ndarray, rng: np.random.Generator) -> None:
    r = mask.shape[0] / 2
    angle = rng.uniform(0, 2 * np.pi)
    outer = _regular_points(5, r - 0.5, angle, r)
    inner = _regular_points(5, (r - 0.5) * 0.42, angle + np.pi / 5, r)  # half a step between tips
    _fill(mask, np.stack([outer, inner], axis=1).reshape(-1, 2))


def _draw_cross(mask: np.ndarray, rng: np.random.Generator) -> None:
    r = mask.shape[0] / 2
    h = (r - 0.5) / np.sqrt(2)  # arms reach the patch's inscribed circle at any rotation
    a = h * rng.uniform(0.28, 0.38)
    outline = np.array(
        [
            (a, h),
            (a, a),
            (h, a),
            (h, -a),
            (a, -a),
            (a, -h),
            (-a, -h),
            (-a, -a),
            (-h, -a),
            (-h, a),
            (-a, a),
            (-a, h),
        ]
    )
    _fill(mask, _rotated(outline + r, rng.uniform(0, np.pi / 2), r))


_DRAWERS: tuple[Callable[[np.ndarray, np.random.Generator], None], ...] = (
    _draw_circle,
    _draw_square,
    _draw_triangle,
    _draw_cross,
    _draw_star,
    _draw_ring,
)
assert len(_DRAWERS) == len(CLASS_NAMES)


# --- backgrounds -----------------------------------------------------------------------------------------


def _random_color(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 256, size=3).astype(np.float32)


def _blend(t: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Map t in [0, 1] (H x W or H x W x 3) to colours between a and b through a lookup table (fast)."""
    t8 = cv2.convertScaleAbs(t, alpha=255.0)
    if t8.ndim == 2:
        t8 = cv2.merge([t8, t8, t8])
    ramp = np.linspace(0, 1, 256, dtype=np.float32)[:, None]
    table = np.clip(a * (1 - ramp) + b * ramp, 0, 255).astype(np.uint8).reshape(256, 1, 3)
    return cv2.LUT(t8, table)


def _background(rng: np.random.Generator, width: int, height: int, clutter: bool) -> np.ndarray:
    kind = rng.integers(0, 4)
    a, b = _random_color(rng), _random_color(rng)
    if kind == 0:  # linear gradient at a random angle
        theta = rng.uniform(0, 2 * np.pi)
        xs = np.linspace(-0.5, 0.5, width, dtype=np.float32) * np.float32(np.cos(theta))
        ys = np.linspace(-0.5, 0.5, height, dtype=np.float32) * np.float32(np.sin(theta))
        img = _blend(xs[None, :] + ys[:, None] + np.float32(0.5), a, b)
    elif kind == 1:  # low-frequency colour noise
        cells = int(rng.integers(3, 12))
        longest = max(width, height)
        small = rng.random(
            (max(2, height * cells // longest), max(2, width * cells // longest), 3), dtype=np.float32
        )
        img = _blend(cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC), a, b)
    elif kind == 2:  # hard or soft stripes at a random angle
        theta = rng.uniform(0, np.pi)
        step = np.float32(2 * np.pi / rng.uniform(8, 60))
        xs = np.arange(width, dtype=np.float32) * np.float32(np.cos(theta)) * step
        ys = np.arange(height, dtype=np.float32) * np.float32(np.sin(theta)) * step
        wave = np.sin(xs[None, :] + ys[:, None])
        t = (wave > 0).astype(np.float32) if rng.random() < 0.5 else wave * np.float32(0.5) + np.float32(0.5)
        img = _blend(t, a, b)
    else:  # flat colour
        img = np.empty((height, width, 3), dtype=np.uint8)
        img[...] = a.astype(np.uint8)
    if clutter:
        _clutter(rng, img)
    return img


def _clutter(rng: np.random.Generator, img: np.ndarray) -> None:
    """Draw distractors that are not shapes of any class: lines, squiggles, specks, soft blotches."""
    height, width = img.shape[:2]
    side = min(width, height)
    for _ in range(int(rng.integers(0, 12))):
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        kind = rng.integers(0, 4)
        if kind == 0:
            p1 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
            p2 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
            cv2.line(img, p1, p2, color, int(rng.integers(1, 4)), cv2.LINE_AA)
        elif kind == 1:
            start = rng.uniform((0, 0), (width, height))
            steps = rng.normal(0, side * 0.04, size=(int(rng.integers(4, 12)), 2)).cumsum(axis=0)
            pts = (start + steps).astype(np.int32)
            cv2.polylines(img, [pts], False, color, int(rng.integers(1, 4)), cv2.LINE_AA)
        elif kind == 2:
            for _ in range(int(rng.integers(5, 30))):
                c = (int(rng.integers(0, width)), int(rng.integers(0, height)))
                cv2.circle(img, c, int(rng.integers(1, max(2, side // 120))), color, -1, cv2.LINE_AA)
        else:
            # An irregular, blurred blotch: no crisp outline, so it never reads as a class shape.
            centre = rng.uniform((0, 0), (width, height))
            pts = (centre + rng.normal(0, side * 0.05, size=(8, 2))).astype(np.int32)
            k = max(3, (side // 30) | 1)
            x, y, w, h = cv2.boundingRect(cv2.convexHull(pts))
            x0, y0 = max(0, x - k), max(0, y - k)
            x1, y1 = min(width, x + w + k), min(height, y + h + k)
            if x1 <= x0 or y1 <= y0:
                continue
            roi = img[y0:y1, x0:x1]
            layer = roi.copy()
            cv2.fillPoly(layer, [cv2.convexHull(pts) - (x0, y0)], color, cv2.LINE_AA)
            cv2.addWeighted(cv2.GaussianBlur(layer, (k, k), 0), 0.5, roi, 0.5, 0, dst=roi)


# --- scenes ----------------------------------------------------------------------------------------------


def _shape_color(rng: np.random.Generator, under: np.ndarray) -> np.ndarray:
    mean = under.reshape(-1, 3).mean(axis=0)
    color = _random_color(rng)
    for _ in range(10):
        if np.abs(color - mean).sum() >= _MIN_CONTRAST:
            break
        color = _random_color(rng)
    else:
        color = np.where(mean > 127, 0.0, 255.0).astype(np.float32)  # fall back to the opposite extreme
    return color


def make_scene(
    rng: np.random.Generator,
    width: int = 640,
    height: int = 480,
    max_objects: int = 8,
    *,
    clutter: bool = True,
) -> Scene:
    """Draw one scene with 1..max_objects labelled shapes (fewer if placements keep failing).

    ``clutter=False`` leaves out distractors and pixel noise: clean scenes whose only non-background
    pixels are the shapes, for checks that need to see exactly what was drawn.
    """
    if width < 32 or height < 32:
        raise ValueError(f"scene size must be at least 32x32, got {width}x{height}")
    if max_objects < 1:
        raise ValueError(f"max_objects must be >= 1, got {max_objects}")
    image = _background(rng, width, height, clutter)
    owner = np.full((height, width), -1, dtype=np.int16)  # which object owns each visible pixel
    areas: list[int] = []
    visible: list[int] = []
    rects: list[tuple[int, int, int, int]] = []
    classes: list[int] = []
    side = min(width, height)
    for _ in range(int(rng.integers(1, max_objects + 1))):
        cls = int(rng.integers(0, len(CLASS_NAMES)))
        # Uniform in sqrt(size): small objects are common (~1 in 5 below 8%) without dominating.
        size = max(8, round(side * rng.uniform(np.sqrt(_MIN_SIZE), np.sqrt(_MAX_SIZE)) ** 2))
        mask = np.zeros((size, size), dtype=np.uint8)
        _DRAWERS[cls](mask, rng)
        for _ in range(_PLACEMENT_TRIES):
            x0 = int(rng.integers(-size // 4, width - size + size // 4 + 1))
            y0 = int(rng.integers(-size // 4, height - size + size // 4 + 1))
            # Clip the patch to the image (shapes may run a little off the edge).
            sx0, sy0 = max(0, -x0), max(0, -y0)
            sx1, sy1 = min(size, width - x0), min(size, height - y0)
            patch = mask[sy0:sy1, sx0:sx1].astype(bool)
            if patch.sum() < 0.6 * mask.sum():  # most of the shape must stay in view
                continue
            region = owner[y0 + sy0 : y0 + sy1, x0 + sx0 : x0 + sx1]
            covered = region[patch]
            covered = covered[covered >= 0]
            hidden = np.bincount(covered, minlength=len(areas))
            if covered.size and np.any(np.array(visible) - hidden < (1 - _MAX_HIDDEN) * np.array(areas)):
                continue
            visible = [v - int(h) for v, h in zip(visible, hidden, strict=True)]
            region[patch] = len(areas)
            areas.append(int(patch.sum()))
            visible.append(areas[-1])
            rects.append((x0 + sx0, y0 + sy0, x0 + sx1, y0 + sy1))
            classes.append(cls)
            pix = image[y0 + sy0 : y0 + sy1, x0 + sx0 : x0 + sx1]
            color = _shape_color(rng, pix[patch])
            # A gentle shading across the shape so colour alone is not a perfect cue.
            shade = np.linspace(1 - rng.uniform(0, 0.25), 1, patch.shape[1], dtype=np.float32)[None, :, None]
            pix[patch] = np.clip(color * np.broadcast_to(shade, (*patch.shape, 1))[patch], 0, 255).astype(
                np.uint8
            )
            break
    boxes = np.zeros((len(areas), 4), dtype=np.float32)
    keep = np.ones(len(areas), dtype=bool)
    for i, (x0, y0, x1, y1) in enumerate(rects):
        mine = owner[y0:y1, x0:x1] == i
        cols, rows = np.flatnonzero(mine.any(axis=0)), np.flatnonzero(mine.any(axis=1))
        if cols.size == 0:
            keep[i] = False
            continue
        boxes[i] = (x0 + cols[0], y0 + rows[0], x0 + cols[-1] + 1, y0 + rows[-1] + 1)
    if clutter and rng.random() < 0.7:  # sensor-like noise, added with saturating uint8 arithmetic
        amp = int(rng.integers(2, 14))
        small = rng.integers(-amp, amp + 1, size=(height // 2 + 1, width // 2 + 1, 3), dtype=np.int16)
        noise = cv2.resize(small, (width, height), interpolation=cv2.INTER_NEAREST)
        image = cv2.subtract(
            cv2.add(image, np.maximum(noise, 0).astype(np.uint8)), np.maximum(-noise, 0).astype(np.uint8)
        )
    return Scene(image=image, boxes=boxes[keep], classes=np.asarray(classes, dtype=np.int32)[keep])
