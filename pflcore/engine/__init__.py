"""Runs a federation: sampling, drop-out, rounds, the one evaluation, checkpoints, results."""
from .results import ResultsConflictError, ResultsError, ResultsInUseError, RunResult
from .simulation import DivergenceError, MethodFailureWarning, RunParked, RunTooSlow, Simulation, build_data, run, sweep

__all__ = ["DivergenceError", "MethodFailureWarning", "ResultsConflictError", "ResultsError", "ResultsInUseError",
           "RunParked", "RunResult", "RunTooSlow", "Simulation", "build_data", "run", "sweep"]
