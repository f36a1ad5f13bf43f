"""A process pool worker's entry point: ``python -m envharness.runtime.executors.pool_worker FD``.

``FD`` is this process's end of the socket pair its driver made; the worker serves it until
the driver closes it (or goes away), then exits.
"""

from __future__ import annotations

import sys

import anyio

from envharness.runtime.executors.streams import socket_channel
from envharness.runtime.executors.worker import serve

__all__ = ["main"]


async def _serve_descriptor(descriptor: int) -> None:
    channel = await socket_channel(descriptor)
    try:
        await serve(channel)
    finally:
        await channel.aclose()


def main(argv: list[str]) -> None:
    if len(argv) != 2 or not argv[1].isdigit():
        raise SystemExit(f"usage: python -m {__spec__.name if __spec__ else 'pool_worker'} FD")
    anyio.run(_serve_descriptor, int(argv[1]))


if __name__ == "__main__":
    main(sys.argv)
