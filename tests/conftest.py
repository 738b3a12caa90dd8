"""Suite-wide settings: one torch thread (small models; avoids oversubscribing CI's cores)."""
import torch

torch.set_num_threads(1)
