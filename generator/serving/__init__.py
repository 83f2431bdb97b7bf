"""Pure numpy/OpenCV math shared by the Triton models, the reference pipeline and tests.

This package is copied verbatim next to each Python-backend ``model.py`` in a generated repository,
so it must only import numpy, cv2 and its own modules (relative imports).
"""
