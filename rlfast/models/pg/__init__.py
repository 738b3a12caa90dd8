"""Policy-gradient models for vector observations (feedforward and LSTM)."""
from rlfast.models.pg.categorical_ff_model import CategoricalPgFfModel
from rlfast.models.pg.categorical_lstm_model import CategoricalPgLstmModel
from rlfast.models.pg.lstm_common import RnnState
from rlfast.models.pg.mujoco_ff_model import MujocoFfModel
from rlfast.models.pg.mujoco_lstm_model import MujocoLstmModel

__all__ = ["CategoricalPgFfModel", "CategoricalPgLstmModel", "MujocoFfModel", "MujocoLstmModel", "RnnState"]
