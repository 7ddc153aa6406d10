"""``python -m blink.cli``: the same as the ``blink`` console script."""

from blink.cli.main import main

main()
