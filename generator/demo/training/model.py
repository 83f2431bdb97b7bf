"""A tiny anchor-free YOLOv8-style detector (torch; only needed to retrain the demo model).

Backbone and PAN neck with C2f blocks, decoupled box/class heads on strides 8/16/32. Boxes are regressed
as left/top/right/bottom distances from each anchor point (softplus, in strides), classes as independent
sigmoids without objectness -- the decoded output has the Ultralytics v8 layout ``[N, 4 + nc, A]``.
"""

from __future__ import annotations

import torch
from torch import nn

STRIDES = (8, 16, 32)
# Channels of the stem (strides 2, 4) and of strides 8, 16, 32; head branch widths and C2f depths per level.
# Chosen for ONNX Runtime on a 2-core CPU at 640x640: the stride-2..8 layers cost most of the time, so the
# capacity sits at strides 16 and 32 (see generator/demo/README.md).
WIDTHS = (16, 24, 32, 64, 96)
HEAD_WIDTHS = (32, 48, 64)
DEPTHS = (1, 2, 1)


class ConvBN(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, k, s, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03),
            nn.SiLU(inplace=True),
        )


class Bottleneck(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.a, self.b = ConvBN(c, c, 3), ConvBN(c, c, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(self.a(x))


class C2f(nn.Module):
    """Split, refine one half through bottlenecks, concatenate every stage, fuse (as in YOLOv8)."""

    def __init__(self, c_in: int, c_out: int, n: int = 1) -> None:
        super().__init__()
        self.h = c_out // 2
        self.stem = ConvBN(c_in, 2 * self.h, 1)
        self.blocks = nn.ModuleList(Bottleneck(self.h) for _ in range(n))
        self.fuse = ConvBN((2 + n) * self.h, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.stem(x).split(self.h, dim=1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        return self.fuse(torch.cat(parts, dim=1))


class SPPF(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.reduce = ConvBN(c, c // 2, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.fuse = ConvBN(c * 2, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.reduce(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.fuse(torch.cat(y, dim=1))


class Head(nn.Module):
    """Decoupled per-level branches; depthwise-separable convs keep the parameter count small."""

    box: nn.Sequential
    cls: nn.Sequential

    def __init__(self, c: int, nc: int, width: int) -> None:
        super().__init__()

        def branch(c_out: int) -> nn.Sequential:
            return nn.Sequential(
                ConvBN(c, c, 3, groups=c),
                ConvBN(c, width, 1),
                ConvBN(width, width, 3, groups=width),
                ConvBN(width, width, 1),
                nn.Conv2d(width, c_out, 1),
            )

        self.box, self.cls = branch(4), branch(nc)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.box(x), self.cls(x)


class TinyYolo(nn.Module):
    points: torch.Tensor
    strides: torch.Tensor

    def __init__(
        self,
        nc: int,
        imgsz: int = 640,
        widths: tuple[int, ...] = WIDTHS,
        head_widths: tuple[int, ...] = HEAD_WIDTHS,
        depths: tuple[int, ...] = DEPTHS,
    ) -> None:
        super().__init__()
        w0, w1, w2, w3, w4 = widths
        d3, d4, d5 = depths
        self.nc, self.imgsz = nc, imgsz
        # No block at stride 4: on 2 CPU threads the large early activations cost more than they give.
        self.stem = nn.Sequential(ConvBN(3, w0, 3, 2), ConvBN(w0, w1, 3, 2))
        self.down3 = nn.Sequential(ConvBN(w1, w2, 3, 2), C2f(w2, w2, d3))
        self.down4 = nn.Sequential(ConvBN(w2, w3, 3, 2), C2f(w3, w3, d4))
        self.down5 = nn.Sequential(ConvBN(w3, w4, 3, 2), C2f(w4, w4, d5), SPPF(w4))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top4 = C2f(w4 + w3, w3)
        self.top3 = C2f(w3 + w2, w2)
        self.bot4_down, self.bot4 = ConvBN(w2, w2, 3, 2), C2f(w2 + w3, w3)
        self.bot5_down, self.bot5 = ConvBN(w3, w3, 3, 2), C2f(w3 + w4, w4)
        self.heads = nn.ModuleList(
            Head(c, nc, hw) for c, hw in zip((w2, w3, w4), head_widths, strict=True)
        )
        self.export = False
        points, strides = make_anchors(imgsz)
        self.register_buffer("points", points, persistent=False)  # (A, 2) anchor centres in pixels
        self.register_buffer("strides", strides, persistent=False)  # (A, 1)
        self._init_biases()

    def _init_biases(self) -> None:
        for head, s in zip(self.heads, STRIDES, strict=True):
            assert isinstance(head, Head)
            cls_out = head.cls[-1]
            assert isinstance(cls_out, nn.Conv2d) and cls_out.bias is not None
            # Prior: ~5 objects per image spread over the level's cells (YOLOv8's choice).
            nn.init.constant_(
                cls_out.bias, float(torch.log(torch.tensor(5 / self.nc / (self.imgsz / s) ** 2)))
            )
            box_out = head.box[-1]
            assert isinstance(box_out, nn.Conv2d) and box_out.bias is not None
            nn.init.constant_(box_out.bias, 1.0)

    def raw(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (ltrb distances in pixels [N, A, 4], class logits [N, A, nc])."""
        c2 = self.stem(x)
        p3 = self.down3(c2)
        p4 = self.down4(p3)
        p5 = self.down5(p4)
        n4 = self.top4(torch.cat([self.up(p5), p4], 1))
        o3 = self.top3(torch.cat([self.up(n4), p3], 1))
        o4 = self.bot4(torch.cat([self.bot4_down(o3), n4], 1))
        o5 = self.bot5(torch.cat([self.bot5_down(o4), p5], 1))
        boxes, logits = [], []
        for head, feat in zip(self.heads, (o3, o4, o5), strict=True):
            b, c = head(feat)
            boxes.append(b.flatten(2))
            logits.append(c.flatten(2))
        dist = nn.functional.softplus(torch.cat(boxes, 2)).transpose(1, 2) * self.strides
        return dist, torch.cat(logits, 2).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if not self.export:
            return self.raw(x)
        dist, logits = self.raw(x)
        # Export layout [N, 4 + nc, A]: cx, cy, w, h in input pixels, then per-class sigmoid scores.
        lt, rb = dist[..., :2], dist[..., 2:]
        centre = self.points + (rb - lt) / 2
        return torch.cat([centre, lt + rb, logits.sigmoid()], dim=2).transpose(1, 2)


def make_anchors(imgsz: int) -> tuple[torch.Tensor, torch.Tensor]:
    points, strides = [], []
    for s in STRIDES:
        n = imgsz // s
        ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        points.append((torch.stack([xs, ys], -1).reshape(-1, 2).float() + 0.5) * s)
        strides.append(torch.full((n * n, 1), float(s)))
    return torch.cat(points), torch.cat(strides)


def dist_to_xyxy(points: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    return torch.cat([points - dist[..., :2], points + dist[..., 2:]], dim=-1)
