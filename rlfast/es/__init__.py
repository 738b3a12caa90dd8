"""Evolution strategies: ask/tell optimizers that maximize a black-box return."""
from rlfast.es.base import BaseES, ESResult
from rlfast.es.cem import CEM
from rlfast.es.cmaes import CMAES
from rlfast.es.openai_es import OpenAIES

__all__ = ["BaseES", "ESResult", "CEM", "CMAES", "OpenAIES"]
