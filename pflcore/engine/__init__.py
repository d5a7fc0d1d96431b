"""Runs a federation: sampling, drop-out, rounds, the one evaluation, checkpoints, results."""
from .results import ResultsConflictError, RunResult
from .simulation import DivergenceError, Simulation, build_data, run, sweep

__all__ = ["DivergenceError", "ResultsConflictError", "RunResult", "Simulation", "build_data", "run", "sweep"]
