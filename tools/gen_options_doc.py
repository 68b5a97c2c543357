"""Write docs/options.md from the components' option declarations (``r2med.cli.flags.options_markdown``).

Run after adding or changing an option: ``python tools/gen_options_doc.py``; ``tests/test_options.py`` fails while
the page differs from the declarations.
"""

from __future__ import annotations

from pathlib import Path

from r2med.cli.options_doc import options_markdown

if __name__ == "__main__":
    page = Path(__file__).resolve().parents[1] / "docs" / "options.md"
    page.write_text(options_markdown() + "\n", encoding="utf-8")
    print(f"wrote {page}")
