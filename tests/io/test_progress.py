"""r2med.io.progress: a real tqdm bar with rate and ETA on stderr, or a silent stand-in that writes nothing."""

from __future__ import annotations

import re

from progress_helpers import forbid_bars
from r2med.io.progress import SilentBar, progress_bar


def test_a_bar_shows_count_eta_and_rate_in_its_unit(capsys):
    with progress_bar(10, desc="tiny: BM25 index", unit="doc", leave=True) as bar:
        for _ in range(5):
            bar.update(2)
    err = capsys.readouterr().err
    assert "tiny: BM25 index" in err
    # tqdm's default format: n/total [elapsed<remaining, rate unit/s]; the rate and ETA are there, whatever they are
    assert re.search(r"10/10 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+doc/s\]", err), err


def test_the_first_line_already_names_the_unit(capsys):
    bar = progress_bar(4, desc="encoding queries (fake)", unit="query")
    first = capsys.readouterr().err
    bar.close()
    assert "encoding queries (fake)" in first and "0/4 [00:00<?, ?query/s]" in first


def test_off_writes_nothing_and_imports_no_tqdm(monkeypatch, capsys):
    forbid_bars(monkeypatch)
    with progress_bar(3, desc="x", unit="pair", enabled=False) as bar:
        bar.update(2)
        bar.update()
        bar.set_postfix(retries=1, refresh=False)
    assert isinstance(bar, SilentBar) and (bar.n, bar.total) == (3, 3)
    assert capsys.readouterr() == ("", "")
