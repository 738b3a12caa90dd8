"""rlfast: high-throughput deep RL for PyTorch.

The registration functions are importable from here (``rlfast.register_env_family``,
``register_algorithm``, ``register_sampler``, ``register_es_strategy``); they are loaded on
first use, so that ``import rlfast.utils`` and friends stay light.
"""
__version__ = "0.1.0"

_REGISTRATION = ("register_algorithm", "register_sampler", "register_env_family",
                 "register_es_strategy")


def __getattr__(name: str):
    if name in _REGISTRATION:
        from rlfast.experiments import catalog
        return getattr(catalog, name)
    raise AttributeError(f"module 'rlfast' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_REGISTRATION))
