"""Top-level functions run in `spawn` (and `fork`) children by tests/utils/test_buffer.py.

Spawned children import their target by module name; the parent puts this file's directory
on sys.path, which multiprocessing hands to the child. Each function reports what it saw (or
the error it hit) on a queue, so the parent can assert on it instead of on the exit code alone.
"""

import numpy as np


def write_arrays(arrays, values, result_queue):
    """Write ``values[i]`` into ``arrays[i]`` in place; report types and shapes seen."""
    try:
        seen = []
        for arr, value in zip(arrays, values):
            seen.append((type(arr).__name__, tuple(arr.shape), str(arr.dtype),
                         np.asarray(arr).copy().tolist()))
            arr[...] = value
        result_queue.put({"seen": seen})
    except BaseException as err:  # report, so the parent sees the failure reason
        result_queue.put({"error": repr(err)})
        raise


def write_buffer_slice(buffer_slice, offset, result_queue):
    """Fill a namedarraytuple slice (fields ``observation``, ``reward``, ``inner.flag``) with
    values derived from ``offset``, through the namedarraytuple's own setitem."""
    try:
        n = buffer_slice.reward.shape[1]
        for t in range(buffer_slice.reward.shape[0]):
            buffer_slice.observation[t] = offset + t + np.arange(n * 3).reshape(n, 3)
            buffer_slice.reward[t] = offset + 10 * t + np.arange(n)
            buffer_slice.inner.flag[t] = True
        result_queue.put({"ok": True, "shape": tuple(buffer_slice.observation.shape)})
    except BaseException as err:
        result_queue.put({"error": repr(err)})
        raise
