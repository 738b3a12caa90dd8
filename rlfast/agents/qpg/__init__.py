"""Agents for Q-value policy gradient algorithms (DDPG, TD3, SAC)."""
from rlfast.agents.qpg.base import QpgAgentBase, polyak_update
from rlfast.agents.qpg.ddpg_agent import DdpgAgent, Td3Agent
from rlfast.agents.qpg.sac_agent import SacAgent

__all__ = ["QpgAgentBase", "DdpgAgent", "Td3Agent", "SacAgent", "polyak_update"]
