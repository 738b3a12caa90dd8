"""rlfast.utils.checks.check_action_index, the action check of AtariEnv and MinAtarEnv."""
import numpy as np
import pytest

from rlfast.utils.checks import check_action_index


def test_integer_indices_in_range_pass_as_ints():
    for action in (0, 5, np.int64(3), np.array(2), np.array([4], dtype=np.uint8)):
        index = check_action_index(action, 6, "Env('x')")
        assert type(index) is int and index == int(np.asarray(action).reshape(()))


@pytest.mark.parametrize("action", [-1, 6, 2.0, np.array([1, 2]), "1", None])
def test_anything_else_names_the_owner_and_the_range(action):
    with pytest.raises(ValueError, match=r"Env\('x'\) action must be an int in \[0, 6\), got"):
        check_action_index(action, 6, "Env('x')")
