"""The bundled demo detector: a tiny YOLO-style model trained on ``generator.synthetic`` scenes.

``demo_detector.onnx`` is committed; ``training/train.py`` (needs the optional ``torch`` dependency) rebuilds it and
``evaluate.py`` measures it with COCO mAP through the production reference pipeline.
"""

from pathlib import Path

DEMO_ONNX = Path(__file__).with_name("demo_detector.onnx")
INPUT_SIZE = 640
