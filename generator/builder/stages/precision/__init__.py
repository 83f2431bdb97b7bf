"""Precision decided in the ONNX graph (FP16 conversion, explicit INT8 Q/DQ).

TensorRT 11 builds strongly typed networks only, so the precision a plan runs in is the
precision its ONNX carries. The same graphs run on ONNX Runtime CPU, which is what lets the
accuracy gate measure here what TensorRT compiles on a GPU host.
"""
