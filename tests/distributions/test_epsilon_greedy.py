"""Tests for epsilon-greedy action selection (rlfast.distributions.epsilon_greedy)."""
import numpy as np
import pytest
import torch

from rlfast.distributions import CategoricalEpsilonGreedy, EpsilonGreedy

A = 4
N = 20000  # samples per frequency estimate: std of a frequency <= 0.0036, tolerances are >= 5 std


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(7)


def random_q(*lead, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*lead, A, generator=g)


def test_epsilon_zero_is_always_greedy():
    q = random_q(500, 3)
    actions = EpsilonGreedy(epsilon=0, dim=A).sample(q)
    assert actions.shape == (500, 3) and actions.dtype == torch.long
    expected = np.argmax(q.numpy(), axis=-1)  # independent reference
    np.testing.assert_array_equal(actions.numpy(), expected)


def test_epsilon_one_is_uniform_and_ignores_q():
    q = torch.zeros(N, A)
    q[:, 2] = 100.0  # a strongly preferred action that must not matter at epsilon = 1
    actions = EpsilonGreedy(epsilon=1, dim=A).sample(q)
    freq = np.bincount(actions.numpy(), minlength=A) / N
    np.testing.assert_allclose(freq, np.full(A, 1 / A), atol=0.02)


def test_intermediate_epsilon_greedy_frequency():
    eps = 0.3
    q = random_q(N)
    actions = EpsilonGreedy(epsilon=eps, dim=A).sample(q)
    greedy = (actions == q.argmax(-1)).float().mean().item()
    # Greedy with prob 1 - eps, plus the random draw hitting the greedy action.
    assert greedy == pytest.approx(1 - eps + eps / A, abs=0.02)


@pytest.mark.parametrize("lead", [(N // 10,), (10, N // 10)], ids=["BA", "TBA"])
def test_vector_epsilon_applies_across_B(lead):
    B = 3
    eps = torch.tensor([0.0, 1.0, 0.5])
    q = random_q(*lead, B, seed=3)
    actions = EpsilonGreedy(epsilon=eps, dim=A).sample(q)
    assert actions.shape == (*lead, B)
    greedy = (actions == q.argmax(-1)).float().reshape(-1, B).mean(0)
    expected = 1 - eps + eps / A
    assert greedy[0].item() == 1.0
    np.testing.assert_allclose(greedy.numpy(), expected.numpy(), atol=0.03)


def test_set_epsilon_scalar_and_vector_and_no_leading_dims():
    dist = EpsilonGreedy(dim=A)
    assert float(dist.epsilon) == 1.0
    dist.set_epsilon(0.0)
    q = random_q()
    assert dist.sample(q).shape == () and dist.sample(q).item() == q.argmax().item()
    dist.set_epsilon(np.array([0.0, 0.0]))
    q2 = random_q(2)
    assert torch.equal(dist.sample(q2), q2.argmax(-1))
    assert dist.epsilon.shape == (2,)


def test_vector_epsilon_shape_mismatch_raises():
    dist = EpsilonGreedy(epsilon=torch.tensor([0.1, 0.2, 0.3]), dim=A)
    with pytest.raises(ValueError, match="vector epsilon of length 3"):
        dist.sample(random_q(5))
    with pytest.raises(ValueError, match="vector epsilon"):
        dist.sample(random_q())


@pytest.mark.parametrize("bad", [-0.1, 1.5, [0.2, 2.0], float("nan"), [[0.1]]])
def test_invalid_epsilon_raises(bad):
    with pytest.raises(ValueError):
        EpsilonGreedy(epsilon=bad, dim=A)


def test_wrong_number_of_actions_raises():
    with pytest.raises(ValueError, match="trailing dim"):
        EpsilonGreedy(epsilon=0, dim=A).sample(torch.zeros(3, A + 1))


def categorical_example():
    """Probabilities where the most likely atom and the largest expected value disagree."""
    z = torch.tensor([-10.0, 0.0, 10.0])
    p = torch.tensor([
        [[0.0, 0.9, 0.1],    # action 0: expected 1, mode at atom 0.0
         [0.4, 0.0, 0.6]],   # action 1: expected 2, mode at atom 10.0
        [[0.0, 0.1, 0.9],    # action 0: expected 9 ... but
         [0.0, 0.0, 1.0]],   # action 1: expected 10, the larger
    ])
    return p, z


def test_categorical_acts_greedily_on_expected_value():
    p, z = categorical_example()
    expected_q = (p.numpy() * z.numpy()).sum(-1)  # independent reference
    dist = CategoricalEpsilonGreedy(z=z, epsilon=0, dim=2)
    actions = dist.sample(p)
    np.testing.assert_array_equal(actions.numpy(), expected_q.argmax(-1))
    assert actions.tolist() == [1, 1]


def test_categorical_z_argument_and_set_z():
    p, z = categorical_example()
    dist = CategoricalEpsilonGreedy(epsilon=0, dim=2)
    with pytest.raises(ValueError, match="set_z"):
        dist.sample(p)
    # A reversed support flips the preference: passing z to sample() overrides.
    assert dist.sample(p, z=-z).tolist() == (-(p * z).sum(-1)).argmax(-1).tolist()
    dist.set_z(z.tolist())
    assert dist.sample(p).tolist() == [1, 1]
    with pytest.raises(ValueError, match="atoms"):
        dist.sample(torch.ones(2, 2, 5) / 5)


def test_categorical_vector_epsilon_and_leading_dims():
    torch.manual_seed(0)
    T, B, P = 50, 2, 5
    p = torch.softmax(torch.randn(T, B, A, P), dim=-1)
    z = torch.linspace(-1, 1, P)
    dist = CategoricalEpsilonGreedy(z=z, epsilon=torch.tensor([0.0, 1.0]), dim=A)
    actions = dist.sample(p)
    assert actions.shape == (T, B)
    assert torch.equal(actions[:, 0], (p[:, 0] * z).sum(-1).argmax(-1))


def test_set_epsilon_updates_device_copies_in_place_and_sample_reads_no_host_value():
    """A CUDA graph that captured a sampling step reads the epsilon copy it saw: set_epsilon
    updates that copy in place (same storage) while the shape stays, drops it when the shape
    changes; and sampling reads no value back to the host (epsilon == 0 is known at set time)."""
    from rlfast.utils.host_sync import HostSyncCounter

    dist = EpsilonGreedy(dim=3, epsilon=0.5)
    other = torch.zeros(())  # stands in for the copy on another device
    dist._epsilon_on["other-device"] = other
    dist.set_epsilon(0.25)
    assert dist._epsilon_on["other-device"] is other and float(other) == 0.25
    dist.set_epsilon([0.1, 0.2])
    assert "other-device" not in dist._epsilon_on
    q = torch.randn(2, 3)
    for eps in (0.0, 0.3, [0.1, 0.2]):
        dist.set_epsilon(eps)
        with HostSyncCounter() as reads:
            dist.sample(q)
        assert reads.count == 0, reads.report()
    dist.set_epsilon(0.0)
    assert torch.equal(dist.sample(q), q.argmax(-1))
    atoms = CategoricalEpsilonGreedy(dim=2, z=[0.0, 1.0, 2.0])
    copy_of_z = atoms.z.clone()
    atoms._z_on["other-device"] = copy_of_z
    atoms.set_z([1.0, 2.0, 4.0])
    assert atoms._z_on["other-device"] is copy_of_z and copy_of_z.tolist() == [1.0, 2.0, 4.0]
