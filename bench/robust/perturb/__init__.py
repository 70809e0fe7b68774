"""Perturbations of queries and documents: registered by name, seeded, composable."""
from bench.robust.perturb.base import (Compose, Generator, LLMPerturbation, NotApplicable, Perturbation, get,
                                       names, register)

__all__ = ["Compose", "Generator", "LLMPerturbation", "NotApplicable", "Perturbation", "get", "names", "register"]
