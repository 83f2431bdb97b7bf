"""Lab code for the lent GPU: what proves the GPU paths there. Not installed; see tools/gpu/README.md."""
