"""Everything that talks to a running Triton: the admin client (model control, what is loaded), start-up and
supervision of the embedded server (``generator serve``), rollout and rollback, the served-vs-reference check, and
the GPU host's selftest. The only part of ``generator`` that imports ``clients``; the builder imports none of it.
"""
