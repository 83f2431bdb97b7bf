"""What runs inside the images: ``python3 -m deploy.entrypoints.build_models`` (the builder),
``serve_models`` (the Triton container: the repository check, then tritonserver under the watchdog) and
``rollout_job`` (the one-shot rollout and rollback), with the repository check they share
(``repository_check``) and the split the rollout publishes for the proxy and the clients (``routing``).

These modules read the settings the renderer wrote into the images' command lines, never the renderer itself.
"""
