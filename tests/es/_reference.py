"""An independent episode loop for the ES tests: gymnasium directly, the module policy
(``EsPolicy.act``), one step at a time, no rlfast environment wrapper or evaluator."""
import gymnasium as gym


def reference_return(env_id, policy, seed):
    """The return of one episode of ``policy`` in a new ``env_id`` reset with ``seed``."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=int(seed))
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
        total += float(reward)
        done = terminated or truncated
    env.close()
    return total
