"""Python-backend ``model.py`` sources copied into generated repositories.

Each is a thin adapter: it stacks every queued request into one array, calls ``pipeline`` (copied next
to it), and splits the results back. Errors are per request and never carry a traceback.
"""
