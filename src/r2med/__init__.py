"""r2med: run the R2MED benchmark end to end, exactly as published.

Importing this package has no side effects and imports no heavy dependency.
"""

__version__ = "0.1.0"
