"""r2med.io.progress: a real tqdm bar with rate and ETA on stderr, or a silent stand-in that writes nothing."""

from __future__ import annotations

import re
import sys

import pytest

from conftest import DATA
from progress_helpers import forbid_bars
from r2med.io.progress import SilentBar, library_bars_off, progress_bar


def test_a_bar_shows_count_eta_and_rate_in_its_unit(capsys):
    with progress_bar(10, desc="tiny: BM25 index", unit="doc", leave=True) as bar:
        for _ in range(5):
            bar.update(2)
    err = capsys.readouterr().err
    assert "tiny: BM25 index" in err
    # tqdm's default format: n/total [elapsed<remaining, rate unit/s]; the rate and ETA are there, whatever they are
    assert re.search(r"10/10 \[\d\d:\d\d<(\d\d:\d\d|\?), +([\d.]+|\?)doc/s\]", err), err


def test_the_first_line_already_names_the_unit(capsys):
    bar = progress_bar(4, desc="encoding queries (fake)", unit="query")
    first = capsys.readouterr().err
    bar.close()
    assert "encoding queries (fake)" in first and re.search(r"0/4 \[\d\d:\d\d<\?, \?query/s\]", first), first


def test_off_writes_nothing_and_imports_no_tqdm(monkeypatch, capsys):
    forbid_bars(monkeypatch)
    with progress_bar(3, desc="x", unit="pair", enabled=False) as bar:
        bar.update(2)
        bar.update()
        bar.set_postfix(retries=1, refresh=False)
    assert isinstance(bar, SilentBar) and (bar.n, bar.total) == (3, 3)
    assert capsys.readouterr() == ("", "")


class FakeTransformersLogging:
    """transformers.utils.logging's bar switch; like the real one, switching it switches the hub's too."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def is_progress_bar_enabled(self) -> bool:
        return self.on

    def enable_progress_bar(self) -> None:
        from huggingface_hub import utils as hub

        self.on = True
        hub.enable_progress_bars()

    def disable_progress_bar(self) -> None:
        from huggingface_hub import utils as hub

        self.on = False
        hub.disable_progress_bars()


@pytest.fixture
def hub():
    from huggingface_hub import utils as hub

    was_on = not hub.are_progress_bars_disabled()
    yield hub
    hub.enable_progress_bars() if was_on else hub.disable_progress_bars()


@pytest.mark.parametrize("hub_on", [True, False])
def test_library_bars_off_and_back_as_they_were(monkeypatch, hub, hub_on):
    hub.enable_progress_bars() if hub_on else hub.disable_progress_bars()
    fake = FakeTransformersLogging(on=True)
    monkeypatch.setitem(sys.modules, "transformers.utils.logging", fake)
    with library_bars_off():
        assert hub.are_progress_bars_disabled() and not fake.on
    assert hub.are_progress_bars_disabled() is not hub_on and fake.on


def test_transformers_imported_inside_the_block_gets_its_bars_back(monkeypatch, hub):
    hub.enable_progress_bars()
    monkeypatch.delitem(sys.modules, "transformers.utils.logging", raising=False)
    fake = FakeTransformersLogging(on=True)
    with library_bars_off():
        fake.on = not hub.are_progress_bars_disabled()  # what transformers copies when it is imported
        monkeypatch.setitem(sys.modules, "transformers.utils.logging", fake)
        assert not fake.on
    assert fake.on and not hub.are_progress_bars_disabled()


def test_a_quiet_command_leaves_the_bars_as_they_were(cli, hub, tmp_path):
    hub.enable_progress_bars()
    assert cli("run", "--data-dir", DATA / "tiny", "--output", tmp_path, "-q").code == 0
    assert not hub.are_progress_bars_disabled()


def test_the_terminal_bar_is_tqdms_own_and_the_notebook_one_only_under_ipython(monkeypatch, capsys):
    import types

    import tqdm.asyncio
    import tqdm.auto
    import tqdm.std

    from r2med.io import progress

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    bar = progress.progress_bar(2, desc="plain", unit="doc")
    bar.close()
    assert type(bar) is tqdm.std.tqdm  # not tqdm.auto's asyncio subclass: no asyncio import for it
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))  # an IPython without a kernel
    bar = progress.progress_bar(2, desc="ipython", unit="doc")
    bar.close()
    assert type(bar) is tqdm.auto.tqdm and tqdm.auto.tqdm is tqdm.asyncio.tqdm  # tqdm.auto's choice, as before


def test_a_bar_imports_no_asyncio():
    import subprocess

    code = ("import sys; from r2med.io.progress import progress_bar; progress_bar(1, desc='x', unit='doc').close(); "
            "print(sorted(m for m in ('asyncio', 'tqdm.asyncio', 'tqdm.auto') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]" and "x" in done.stderr


def test_other_bars_are_off_while_r2meds_is_drawn_and_back_after_the_last(monkeypatch, hub, capsys):
    """Issue 38, finding 10: a second bar (a model's download, transformers' "Loading weights") under r2med's leaves
    a stale line, a blank line and ESC[A on a stream that is not a terminal; r2med's bar is the only one drawn."""
    hub.enable_progress_bars()
    fake = FakeTransformersLogging(on=True)
    monkeypatch.setitem(sys.modules, "transformers.utils.logging", fake)
    outer = progress_bar(2, desc="encoding documents (x)", unit="doc")
    assert hub.are_progress_bars_disabled() and not fake.on
    with progress_bar(1, desc="inner", unit="doc"):  # nested: the first to close does not switch them back
        pass
    assert hub.are_progress_bars_disabled() and not fake.on
    outer.close()
    outer.close()  # (tqdm's __del__ closes again: released once)
    assert not hub.are_progress_bars_disabled() and fake.on
    with progress_bar(1, desc="off", unit="doc", enabled=False):  # a silent bar draws nothing: nothing switched
        assert not hub.are_progress_bars_disabled()
    capsys.readouterr()
