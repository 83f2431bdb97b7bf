"""Task-aligned assignment (a small TAL, as in YOLOv8) and the detection loss for the demo model.

Each ground-truth box picks the ``topk`` anchors (among those whose centre lies inside it, or within one
stride of its centre for tiny boxes) with the best alignment ``score**alpha * iou**beta``; an anchor claimed
by several boxes keeps the one it overlaps most. Class targets are IoU-aware soft labels, so the sigmoid
scores rank boxes by localisation quality -- what NMS and mAP reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

_EPS = 1e-9


def box_iou_pairwise(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of broadcastable xyxy boxes a[..., 4] and b[..., 4]."""
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    return inter / (area_a + area_b - inter + _EPS)


def giou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    iou = box_iou_pairwise(a, b)
    hull = (torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2])).prod(-1)
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    union = (a[..., 2:] - a[..., :2]).prod(-1) + (b[..., 2:] - b[..., :2]).prod(-1) - inter
    return iou - (hull - union) / (hull + _EPS)


@dataclass(frozen=True)
class Targets:
    fg: torch.Tensor  # (B, A) bool
    boxes: torch.Tensor  # (B, A, 4) xyxy
    scores: torch.Tensor  # (B, A, nc) soft labels


@torch.no_grad()
def assign(
    scores: torch.Tensor,
    boxes: torch.Tensor,
    points: torch.Tensor,
    strides: torch.Tensor,
    gt_boxes: torch.Tensor,
    gt_classes: torch.Tensor,
    gt_valid: torch.Tensor,
    topk: int = 10,
    alpha: float = 0.5,
    beta: float = 6.0,
) -> Targets:
    """scores (B,A,nc) sigmoid, boxes (B,A,4) xyxy, points (A,2), strides (A,1); gt_* padded to (B,M,...)."""
    nc = scores.shape[-1]
    pts = points[None, None]  # (1,1,A,2)
    gtb = gt_boxes[:, :, None]  # (B,M,1,4)
    inside = ((pts - gtb[..., :2]).min(-1).values > 0) & ((gtb[..., 2:] - pts).min(-1).values > 0)
    centre = (gtb[..., :2] + gtb[..., 2:]) / 2
    near = ((pts - centre).abs() < strides[None, None]).all(-1)
    candidates = (inside | near) & gt_valid[:, :, None]  # (B,M,A)

    iou = box_iou_pairwise(boxes[:, None], gtb).clamp(min=0)  # (B,M,A)
    cls_idx = gt_classes.clamp(min=0).long()[:, :, None].expand(-1, -1, scores.shape[1])
    cls_score = scores.transpose(1, 2).gather(1, cls_idx)  # (B,M,A): each anchor's score for the gt's class
    align = cls_score.pow(alpha) * iou.pow(beta) * candidates

    k = min(topk, align.shape[-1])
    top = align.topk(k, dim=-1).indices
    chosen = torch.zeros_like(candidates).scatter_(-1, top, True) & candidates
    # An anchor claimed by several boxes keeps the box it overlaps most.
    multi = chosen.sum(1, keepdim=True) > 1
    best = torch.nn.functional.one_hot(iou.argmax(1), chosen.shape[1]).transpose(1, 2).bool()
    chosen = torch.where(multi, best & candidates, chosen)

    fg = chosen.any(1)  # (B,A)
    gt_idx = chosen.float().argmax(1)  # (B,A)
    target_boxes = gt_boxes.gather(1, gt_idx[..., None].expand(-1, -1, 4))
    target_cls = gt_classes.long().gather(1, gt_idx).clamp(min=0)

    align = align * chosen
    norm = align * (iou * chosen).amax(-1, keepdim=True) / (align.amax(-1, keepdim=True) + _EPS)
    quality = norm.amax(1)  # (B,A)
    target_scores = torch.nn.functional.one_hot(target_cls, nc).float() * (quality * fg)[..., None]
    return Targets(fg=fg, boxes=target_boxes, scores=target_scores)


class DetectionLoss(nn.Module):
    """BCE on IoU-aware soft class targets, GIoU + L1 (in strides) on the assigned anchors' boxes.

    Written with masks instead of boolean indexing, so a step never waits for the GPU to say how many
    anchors were assigned; the statistics come back as tensors, read only when they are logged.
    """

    def __init__(self, cls_weight: float = 1.0, giou_weight: float = 5.0, l1_weight: float = 1.0) -> None:
        super().__init__()
        self.cls_weight, self.giou_weight, self.l1_weight = cls_weight, giou_weight, l1_weight

    def forward(
        self,
        dist: torch.Tensor,
        logits: torch.Tensor,
        points: torch.Tensor,
        strides: torch.Tensor,
        gt_boxes: torch.Tensor,
        gt_classes: torch.Tensor,
        gt_valid: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        dist, logits = dist.float(), logits.float()
        boxes = torch.cat([points - dist[..., :2], points + dist[..., 2:]], -1)
        t = assign(logits.detach().sigmoid(), boxes.detach(), points, strides, gt_boxes, gt_classes, gt_valid)
        total = t.scores.sum().clamp(min=1.0)
        cls_loss = nn.functional.binary_cross_entropy_with_logits(logits, t.scores, reduction="sum") / total
        fg = t.fg.float()
        weight = t.scores.sum(-1) * fg  # (B, A): zero off the assigned anchors
        giou_loss = ((1 - giou(boxes, t.boxes)) * weight).sum() / total
        target_dist = torch.cat([points - t.boxes[..., :2], t.boxes[..., 2:] - points], -1)
        l1_loss = ((((dist - target_dist) / strides).abs().sum(-1)) * weight).sum() / total
        loss = self.cls_weight * cls_loss + self.giou_weight * giou_loss + self.l1_weight * l1_loss
        with torch.no_grad():
            count = fg.sum().clamp(min=1.0)
            stats = {
                "cls": cls_loss.detach(),
                "giou": giou_loss.detach(),
                "l1": l1_loss.detach(),
                # Interpretable progress: how well the assigned anchors already fit, and their target score.
                "fg_iou": (box_iou_pairwise(boxes.detach(), t.boxes) * fg).sum() / count,
                "fg_score": weight.sum() / count,
            }
        return loss, stats
