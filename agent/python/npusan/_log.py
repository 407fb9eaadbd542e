"""npusan's only output: one line on stderr, never stdout."""

import sys


def say(msg: str) -> None:
    try:
        sys.stderr.write(f"npusan: {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass  # a closed stderr must not break the job either
