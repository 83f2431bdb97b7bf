"""Deployment files (docker compose, Kubernetes, monitoring) rendered from one ``Settings``."""
