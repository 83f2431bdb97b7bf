"""What turns deploy/settings.py into files on the user's machine: every generated file and its drift
(``files``), the alert rules (``alerts``) and the Grafana dashboard (``dashboard``). Run by
``python -m deploy render|check``; nothing here runs inside an image or drives a stack.
"""
