"""The archive formats: the index-first, sha256-verified tar (``indexed_tar``) and its parts and checksums
(``parts``), read and written by the embedded server's offline archive (generator/server/offline.py) and the
deployed stack's site archive (deploy/local/site_archive.py). Standard library only.
"""
