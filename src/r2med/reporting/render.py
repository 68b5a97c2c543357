"""Template rendering: the jinja2 environments of the packaged ``reporting/templates/*.j2``.

``*.html.j2`` templates are autoescaped; ``*.tex.j2`` templates pass every expression through
``latex_escape``. Both are strict about undefined names. jinja2 (the ``report`` extra) is imported
on first use; without it ``MissingExtraError`` names ``pip install "r2med[report]"``.
"""

from __future__ import annotations

from functools import lru_cache

from r2med.errors import MissingExtraError

_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(value: object) -> str:
    """Text made safe for LaTeX (every expression of a ``.tex`` template goes through this).

    >>> print(latex_escape("gar/hyde_1 & 50% {x}"))
    gar/hyde\\_1 \\& 50\\% \\{x\\}
    """
    return "".join(_TEX.get(ch, ch) for ch in str(value))


@lru_cache(maxsize=2)
def _environment(tex: bool):
    try:
        import jinja2
    except ImportError:
        raise MissingExtraError("jinja2", "report", "HTML and LaTeX output") from None
    loader = jinja2.PackageLoader("r2med", "reporting/templates")
    if tex:
        return jinja2.Environment(loader=loader, autoescape=False, finalize=latex_escape, keep_trailing_newline=True,
                                  undefined=jinja2.StrictUndefined)
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)


def render_template(name: str, **context: object) -> str:
    """Render a packaged template: ``*.html.j2`` autoescaped, ``*.tex.j2`` LaTeX-escaped."""
    return _environment(name.endswith(".tex.j2")).get_template(name).render(**context)
