"""``python -m envharness.cli``: the same command as the ``envharness`` console script."""

from envharness.cli.app import main

if __name__ == "__main__":
    main()
