"""Policy-gradient models: vector observations and Atari images (feedforward and LSTM), and
the multi-agent actor-critic."""
from rlfast.models.pg.atari_ff_model import AtariFfModel
from rlfast.models.pg.atari_lstm_model import AtariLstmModel
from rlfast.models.pg.categorical_ff_model import CategoricalPgFfModel
from rlfast.models.pg.categorical_lstm_model import CategoricalPgLstmModel
from rlfast.models.pg.recurrent_body import RnnState
from rlfast.models.pg.mujoco_ff_model import MujocoFfModel
from rlfast.models.pg.mujoco_lstm_model import MujocoLstmModel
from rlfast.models.pg.multiagent_model import MultiAgentPgModel

__all__ = [
    "AtariFfModel", "AtariLstmModel", "CategoricalPgFfModel", "CategoricalPgLstmModel",
    "MujocoFfModel", "MujocoLstmModel", "RnnState", "MultiAgentPgModel",
]
