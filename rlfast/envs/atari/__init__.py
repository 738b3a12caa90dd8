"""Atari 2600 games through the Arcade Learning Environment (ale-py), with the classic DQN
frame processing, and the trajectory statistics that report their raw game score."""
from rlfast.envs.atari.atari_env import OBS_TYPES, AtariEnv, AtariTrajInfo, EnvInfo, resolve_game

__all__ = ["AtariEnv", "AtariTrajInfo", "EnvInfo", "OBS_TYPES", "resolve_game"]
