"""The stack on one machine: the Docker Engine floor, base images made without a registry, a throwaway CA and
secrets, and ``python -m deploy up|down --local`` (deploy/README.md, "One command on a laptop")."""
