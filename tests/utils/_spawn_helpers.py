"""Top-level functions run in `spawn` child processes by tests/utils/test_collections.py.

Spawned children import their target by module name; the parent puts this file's
directory on sys.path, which multiprocessing hands to the child.
"""

import numpy as np

from rlfast.utils.collections import namedarraytuple

# A classic namedarraytuple defined at module level, so the child finds it by reference.
SpawnPair = namedarraytuple("SpawnPair", ["left", "right"])


def read_and_index(nat, schema, result_queue):
    """Read fields of `nat` (a NamedArrayTuple), index it, build an instance with
    `schema`, write into it, and send the results back."""
    try:
        row = nat[1]
        window = nat[1:3]
        built = schema(np.zeros(3), right=np.ones(3))
        built[0] = schema(5.0, 6.0)
        result_queue.put({
            "typename": row._typename,
            "fields": row._fields,
            "obs_sum": float(nat.observation.sum()),
            "row_obs": row.observation.tolist(),
            "row_reward": float(row.reward),
            "window_shape": window.observation.shape,
            "built": (built.left.tolist(), built.right.tolist()),
            "schema_fields": schema._fields,
            "is_nat_type": type(nat).__name__,
        })
    except BaseException as err:  # report, so the parent sees the failure reason
        result_queue.put({"error": repr(err)})
        raise


def index_classic(pair, result_queue):
    """Index a classic namedarraytuple received from the parent and send back a row."""
    row = pair[2]
    result_queue.put((type(row).__name__, int(row.left), int(row.right)))
