"""Code that is not installed: lab tools for the lent GPU machines (tools/gpu/)."""
