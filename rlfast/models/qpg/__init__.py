"""Models for Q-value policy gradient agents (DDPG, TD3, SAC)."""
from rlfast.models.qpg.mlp import (EnsembleMlp, MuMlpModel, PiMlpModel, PiSdeMlpModel,
                                   QofMuMlpModel)

__all__ = ["MuMlpModel", "QofMuMlpModel", "PiMlpModel", "PiSdeMlpModel", "EnsembleMlp"]
