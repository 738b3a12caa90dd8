"""Launching experiments locally: hardware affinity codes, hyperparameter variants, and the
launcher that queues a sweep's runs over a machine's run slots."""
from rlfast.utils.launching.affinity import (affinity_from_code, encode_affinity,
                                             get_n_run_slots, make_affinity, prepend_run_slot,
                                             validate_affinity)
from rlfast.utils.launching.exp_launcher import launch_experiment, run_experiments
from rlfast.utils.launching.variant import (VariantLevel, load_variant, make_random_variants,
                                            make_variants, save_variant, update_config)

__all__ = ["encode_affinity", "make_affinity", "affinity_from_code", "get_n_run_slots",
           "prepend_run_slot", "validate_affinity", "VariantLevel", "make_variants",
           "make_random_variants", "update_config", "load_variant", "save_variant",
           "run_experiments", "launch_experiment"]
