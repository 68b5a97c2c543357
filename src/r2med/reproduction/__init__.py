"""Reproduce a published R2MED system: its plan (``plans``: what r2med runs for each of the 93 published systems and
what it needs) and the run itself (``run``: :func:`reproduce`, our numbers beside the paper's).

``r2med.reproduce`` (the package's lazy export) is :func:`reproduce`; ``r2med reproduce SYSTEM`` parses its flags,
calls it and prints the comparison it returns.
"""

from r2med.lazy import lazy_exports

__all__ = ["ENDPOINT_OPTIONS", "AverageCheck", "Plan", "Reproduction", "Row", "check_average", "check_endpoint",
           "check_places", "compare", "list_plans", "llm_server", "load_reference", "plan_for", "published_reference",
           "reproduce"]

_plans = "r2med.reproduction.plans"
__getattr__, __dir__ = lazy_exports(__name__, {
    "AverageCheck": _plans, "Plan": _plans, "Row": _plans, "check_average": _plans, "compare": _plans,
    "list_plans": _plans, "load_reference": _plans, "plan_for": _plans, "published_reference": _plans,
    "ENDPOINT_OPTIONS": "r2med.reproduction.run", "Reproduction": "r2med.reproduction.run",
    "reproduce": "r2med.reproduction.run", "check_endpoint": "r2med.reproduction.run",
    "check_places": "r2med.reproduction.run",
    "llm_server": "r2med.reproduction.run",
})
