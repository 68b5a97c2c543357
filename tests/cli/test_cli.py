"""The CLI front: help, exit codes, and no heavy imports."""

from __future__ import annotations

import subprocess
import sys


def test_help_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from r2med.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'huggingface_hub', 'pytrec_eval', 'scipy') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_no_command_is_a_usage_error(cli):
    result = cli()
    assert result.code == 2 and "usage: r2med" in result.err


def test_unknown_dataset_is_a_usage_error_with_suggestion(cli):
    result = cli("datasets", "stats", "Biolgy")
    assert result.code == 2
    assert "unknown dataset 'Biolgy'; did you mean 'Biology'?" in result.err


def test_datasets_list_json(cli):
    result = cli("datasets", "list", "--json")
    rows = result.json()
    assert result.code == 0 and len(rows) == 8
    assert rows[0]["name"] == "Biology" and rows[0]["cached"] is False and "Stack-Biology" in rows[0]["aliases"]


def test_console_script_version():
    out = subprocess.run([sys.executable, "-m", "r2med.cli", "--version"], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "r2med 0.1.0"
