"""Evaluation with R2MED's conventions."""

from r2med.evaluation.metrics import DEFAULT_CUTOFFS, drop_identical_ids, evaluate, official_key, parse_metrics

__all__ = ["DEFAULT_CUTOFFS", "drop_identical_ids", "evaluate", "official_key", "parse_metrics"]
