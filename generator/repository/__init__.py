"""The built model repository as an artifact: its manifest, its version layout and index, the atomic write, and
the check that it still matches its build and will load on this host (with the host's TensorRT and GPU facts).

Standard library only (and, from the project, the version, the exception tree and the dependency-free serving
contract): ``python -S -m generator check`` runs in a Triton image with nothing but this source on the path, and
the builder, deploy, load tests and the tools that drive a running server all read a repository through here.
"""
