"""``Beside``: one call run on a thread beside the caller, its value, error and time kept for later.

The compile runs numpy and Arrow work this way (both leave Python's lock): hashing the inputs while the
release is read, and the ICD mapping while descriptions, relationships and language rows are read.
"""

from __future__ import annotations

import threading
import time


class Beside:
    """``fn(*args)`` on a daemon thread, started at once; :meth:`result` waits for it and returns its value
    or raises its error; ``seconds`` is how long the call took (set when it ends)."""

    def __init__(self, fn, *args) -> None:
        self._out: list = []
        self.seconds = 0.0
        self._thread = threading.Thread(
            target=self._run, args=(fn, args), name=f"beside-{fn.__name__}", daemon=True
        )
        self._thread.start()

    def _run(self, fn, args) -> None:
        t = time.perf_counter()
        try:
            self._out[:] = [fn(*args), None]
        except BaseException as e:  # raised again by result()
            self._out[:] = [None, e]
        self.seconds = round(time.perf_counter() - t, 3)

    def result(self):
        self._thread.join()
        value, error = self._out
        if error is not None:
            raise error
        return value
