"""The ``blink`` command: one module per sub-command, assembled in ``main.py``."""
