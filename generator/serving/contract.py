"""The ensemble's contract: tensor names, dtypes, layouts and parameter names, written down once.

The config templates, the Python-backend models (this file is copied next to them), the clients, the load
tests and the deploy health check all read these names from here. Imports nothing, so every one of them
can use it.
"""

from __future__ import annotations

# Ensemble input: one encoded image (JPEG/PNG/BMP/WebP/TIFF) per batch item, dims [1].
IMAGE = "IMAGE"
IMAGE_DATATYPE = "BYTES"  # TYPE_STRING in a config

# Ensemble outputs, padded to max detections (EfficientNMS names, so existing clients fit).
NUM_DETECTIONS = "num_detections"  # INT32 [1]
BOXES = "detection_boxes"  # FP32 [max_det, 4], x1, y1, x2, y2 in source-image pixels
SCORES = "detection_scores"  # FP32 [max_det]
CLASSES = "detection_classes"  # INT32 [max_det]
OUTPUTS = (NUM_DETECTIONS, BOXES, SCORES, CLASSES)
OUTPUT_DATATYPES = {NUM_DETECTIONS: "INT32", BOXES: "FP32", SCORES: "FP32", CLASSES: "INT32"}

# Ultralytics tasks (the export's metadata ``task``) and what each adds to the four outputs above; rows past
# num_detections are zero like theirs (masks: empty strings). ``detection_boxes`` stays the axis-aligned box of
# every detection (obb: the rotated box's bounding box), so a detection client reads any of them.
TASKS = ("detect", "segment", "pose", "obb", "classify")
KEYPOINTS = "detection_keypoints"  # pose: FP32 [max_det, K, D] (the export's kpt_shape), x, y in source pixels
# (clipped to the image), then the visibility probability when D = 3
ROTATED_BOXES = "detection_rotated_boxes"  # obb: FP32 [max_det, 5], cx, cy, w, h in source pixels (unclipped), the
# angle in radians as the head gives it, in [-pi/4, 3pi/4) (Ultralytics predict's xywhr)
MASKS = "detection_masks"  # segment: BYTES [max_det], one COCO compressed RLE ("counts") of the
# source-sized mask per detection, column-major as pycocotools; size is [source_height, source_width]
MASK_SIZE = "mask_size"  # segment: INT32 [2], the masks' height and width (the source image's)
# classify has no detections: the top-k classes by probability, best first (k = min(--top-k, nc)). Its preprocess
# step sends the centre crop instead of the letterbox (generator/serving/crop.py); LETTERBOX still says where it lies.
TOP_CLASSES = "top_classes"  # INT32 [top_k]
TOP_SCORES = "top_scores"  # FP32 [top_k], the softmax probabilities the export ends with
TASK_OUTPUTS: dict[str, tuple[str, ...]] = {
    "detect": OUTPUTS,
    "segment": (*OUTPUTS, MASKS, MASK_SIZE),
    "pose": (*OUTPUTS, KEYPOINTS),
    "obb": (*OUTPUTS, ROTATED_BOXES),
    "classify": (TOP_CLASSES, TOP_SCORES),
}
TASK_OUTPUT_DATATYPES = {**OUTPUT_DATATYPES, KEYPOINTS: "FP32", ROTATED_BOXES: "FP32", MASKS: "BYTES",
                         MASK_SIZE: "INT32", TOP_CLASSES: "INT32", TOP_SCORES: "FP32"}
TASK_PARAMETER = "task"  # ensemble and post-processing step: the task the ensemble serves (absent: detect)

# Two-stage builds (build --classifier): a detection ensemble whose kept boxes are cropped from the source image
# and classified by a classify export, in two more steps. The detection outputs stay as they are; two are added,
# row i for detection i (score order) while i < min(num_detections, --classify-boxes), zero past it, as the
# detection rows are. Best class first, k = min(--top-k, the classifier's nc).
BOX_CLASSES = "detection_box_classes"  # INT32 [classify_boxes, top_k]
BOX_SCORES = "detection_box_scores"  # FP32 [classify_boxes, top_k], the classifier's softmax probabilities
TWO_STAGE_OUTPUTS = (*OUTPUTS, BOX_CLASSES, BOX_SCORES)
TWO_STAGE_OUTPUT_DATATYPES = {**OUTPUT_DATATYPES, BOX_CLASSES: "INT32", BOX_SCORES: "FP32"}
CLASSIFIER_NAMES_PARAMETER = "classifier_class_names"  # ensemble: JSON list of the classifier's class names
# Between the crop and classifier steps: each image's crops (BGR uint8 [classify_boxes, S, S, 3], the
# classifier's input size) and how many of them are boxes.
CROPS = "CROPS"
CROP_COUNT = "CROP_COUNT"  # INT32 [1]

# Between the steps: the letterboxed batch, and how each image was placed into it.
PREPROCESSED = "PREPROCESSED"  # uint8 [H, W, 3] BGR (normalised in the graph) or float [3, H, W] RGB /255
LETTERBOX = "LETTERBOX"  # FP32 [6], the fields below
LETTERBOX_FIELDS = ("pad_x", "pad_y", "gain_x", "gain_y", "source_width", "source_height")

# Composing models are "<ensemble>_<step>".
STEPS = ("preprocess", "detector", "nms")
SECOND_STAGE_STEPS = ("crop", "classifier")  # a two-stage build's further steps

# Head layouts the NMS step decodes; carried in its config, never inferred from a shape. ``graph_nms``: the
# detector graph ran NMS itself (--nms-in-graph) and sends [N, max_det, 6] padded rows, like ``end2end``.
GRAPH_NMS_LAYOUT = "graph_nms"
LAYOUTS = ("v8", "v8_reduced", "v5", "end2end", GRAPH_NMS_LAYOUT)

# Config parameters.
CLASS_NAMES_PARAMETER = "class_names"  # ensemble: JSON list of class names

# Request priorities (every composing model has two levels; the ensemble passes a request's priority on).
# Health and readiness probes send PROBE_PRIORITY so they never wait behind user traffic; a request that
# names no priority gets USER_PRIORITY.
PRIORITY_LEVELS = 2
PROBE_PRIORITY = 1
USER_PRIORITY = 2
# The watchdog's probes also carry this request parameter (true), which the ensemble forwards to every step
# (Triton >= 23.10): the steps leave probe images out of the quality metrics, so an idle server's empty probe
# answers never move the empty-output share (issue 37). A step sees parameters, not the priority.
PROBE_PARAMETER = "tde_probe"

# The key that opens the restricted admin APIs (generator/server/hardening.py restricts them): HTTP clients send
# the header ADMIN_HEADER, gRPC clients the metadata key GRPC_HEADER_PREFIX + ADMIN_HEADER (Triton's
# kRestrictedProtocolHeaderTemplate); servers and tools read the key from ADMIN_TOKEN_ENV.
ADMIN_HEADER = "admin-key"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
ADMIN_TOKEN_ENV = "TRITON_ADMIN_TOKEN"

# Quality telemetry: Prometheus metrics the preprocess and NMS steps export on Triton's metrics endpoint
# (Python-backend custom metrics), labelled with the composing model's name and version (METRIC_LABELS).
# Both steps count the images that reached them (the denominator); NMS the outputs, preprocess the rejections.
METRIC_LABELS = ("model", "version")
IMAGES_METRIC = "ensemble_images_total"
EMPTY_OUTPUTS_METRIC = "ensemble_empty_outputs_total"  # images with zero detections
CAPPED_OUTPUTS_METRIC = "ensemble_capped_outputs_total"  # images whose detections hit --max-detections
DETECTIONS_METRIC = "ensemble_detections_per_image"  # histogram: _bucket{le}, _sum, _count
SCORE_METRIC = "ensemble_detection_score"  # histogram of every returned detection's score
REJECTED_METRIC = "ensemble_rejected_images_total"  # label "reason", one of REJECTION_REASONS
DETECTIONS_BUCKETS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 300.0, 1000.0)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# Where each step's execute spends its wall time, per phase (label "phase"), and the batches it ran: Triton's own
# compute time of a Python step less the sum of its phases is the stub's messaging around execute
# (generator/serving/phases.py names every step's phases).
PHASE_SECONDS_METRIC = "ensemble_step_phase_seconds_total"
BATCHES_METRIC = "ensemble_step_batches_total"
# Why the preprocess step refused an image (generator/serving/images.py: one exception class per reason).
REJECTION_REASONS = ("empty", "format", "truncated", "too_large", "decode_budget", "other")

# OpenCV refuses to decode more pixels than this environment variable says; it reads it once, when cv2 is
# imported. A backstop behind the header checks: the server environment and the preprocess model set it.
OPENCV_PIXEL_LIMIT_ENV = "OPENCV_IO_MAX_IMAGE_PIXELS"
OPENCV_PIXEL_LIMIT = 1 << 28  # 268 MP: 16384 x 16384, the largest --max-image-pixels accepted


def step_model_name(ensemble: str, step: str) -> str:
    if step not in STEPS + SECOND_STAGE_STEPS:
        raise ValueError(f"unknown step {step!r}; the ensemble's steps are {', '.join(STEPS + SECOND_STAGE_STEPS)}")
    return f"{ensemble}_{step}"
