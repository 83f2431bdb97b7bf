"""Training code of the bundled demo detector (needs the optional ``torch``; not part of the installed wheel).

``train.py`` trains and exports ``generator/demo/demo_detector.onnx``; ``model.py`` is the network,
``loss.py`` the assignment and loss, ``export.py`` the Ultralytics-shaped ONNX export.
"""
