"""``stage_parity.py compare``: two OUT trees, file by file, after each file's volatile parts are set aside.

Each tree's own root and its fake servers' URLs (``servers.json``) are replaced by placeholders in every file
(``<root>``, ``<chat>``, ...); where that changes a manifest's configuration, its hash is recomputed over the
replaced form (the canonical JSON r2med hashes). A file is then split into its *configuration part* (a manifest's
``config`` and ``config_sha256``; an expansion or agent ``summary.json``'s ``config`` and ``search``) and *the
rest*; both must be equal, unless ``config_may_differ``, where a differing configuration part is a note.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: what each kind of file holds that changes from run to run (wall-clock times, the machine), by dotted key
VOLATILE_MANIFEST = ("timings_s", "environment", "created", "details.agent.seconds")
VOLATILE_SUMMARY = ("report.seconds", "written_at")  # an expansion folder's / the agent's summary.json
VOLATILE_RECORD = ("seconds", "started_at", "finished_at")  # a line of generations.jsonl / agent-cache.jsonl
RECORD_FILES = ("generations.jsonl", "agent-cache.jsonl")  # keyed stores appended in answer order: lines sorted
#: the seconds in r2med expand's summary line ("...; 130 prompt + 164 completion tokens; 1.5 s -> ...")
_EXPAND_SECONDS = re.compile(r"(completion tokens; )\d+\.\d s\b")
EXPANSIONS = "expansions"  # the folder under each R2MED_HOME (work/home*/) whose files are compared
KEPT = ("results", "reproduce", "stdout", "pipelines")
SKIPPED = (("pipelines", "data"),)  # the harness's own copies of ../shared


def _drop(data: Any, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data.get(key) if isinstance(data, dict) else None
    if isinstance(data, dict):
        data.pop(last, None)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).encode()


@dataclass(frozen=True)
class Tree:
    """One OUT tree: its root and the placeholders of the strings that differ between runs."""

    root: Path
    subs: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def open(cls, root: Path) -> Tree:
        root = root.resolve()
        servers = root / "servers.json"
        urls = json.loads(servers.read_text()) if servers.is_file() else {}
        return cls(root, ((str(root), "<root>"), *((url, f"<{name}>") for name, known in sorted(urls.items())
                                                   for url in known)))

    def replaced(self, text: str) -> str:
        for old, new in self.subs:
            text = text.replace(old, new)
        return text

    def files(self) -> dict[str, Path]:
        """The compared files by path relative to the root: results, stdout, pipelines and expansion folders."""
        found = {}
        for path in sorted(self.root.rglob("*")):
            parts = path.relative_to(self.root).parts
            in_home = len(parts) > 2 and parts[0] == "work" and parts[1].startswith("home")
            expansions = in_home and parts[2] == EXPANSIONS
            kept = parts[0] in KEPT and not any(parts[:len(skip)] == skip for skip in SKIPPED)
            if path.is_file() and (kept or expansions):
                found["/".join(parts)] = path
        return found

    def _manifest(self, path: Path, data: dict[str, Any], original: str) -> tuple[bytes, bytes]:
        for key in VOLATILE_MANIFEST:
            _drop(data, key)
        if isinstance(data.get("config"), dict) and self.replaced(original) != original:
            canonical = json.dumps(data["config"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            data["config_sha256"] = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        # a member's digest is checked against the member here; the member itself is compared as a file
        members = data.get("files") or {}
        data["files"] = {name: self._member(path.with_name(name), entry) for name, entry in members.items()}
        config = {key: data.pop(key, None) for key in ("config", "config_sha256")}
        return _dumps(data), _dumps(config)

    @staticmethod
    def _member(member: Path, entry: Any) -> Any:
        if not member.is_file():
            return {"missing": entry}
        raw = member.read_bytes()
        if entry == {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}:
            return "<matches the file>"
        return {"does not match the file": entry}

    def normalised(self, name: str, path: Path) -> tuple[bytes, bytes | None]:
        """``(the rest, the configuration part or None)`` of the file ``path`` (``name``: relative to the root)."""
        raw = path.read_bytes()
        try:
            original = raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw, None
        text = self.replaced(original)
        if path.name.endswith(".manifest.json"):
            return self._manifest(path, json.loads(text), original)
        if name.startswith("stdout/"):
            return _EXPAND_SECONDS.sub(r"\1<seconds> s", text).encode(), None
        if path.name.endswith(".windows.jsonl"):  # query order since r2med 0.1.0's stages; answer order before
            return "".join(sorted(text.splitlines(keepends=True))).encode(), None
        if path.name in RECORD_FILES:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
            for record in records:
                for key in VOLATILE_RECORD:
                    record.pop(key, None)
            return b"\n".join(sorted(json.dumps(r, sort_keys=True, ensure_ascii=False).encode() for r in records)), None
        if path.name == "summary.json" and EXPANSIONS in name.split("/"):
            data = json.loads(text)
            for key in VOLATILE_SUMMARY:
                _drop(data, key)
            config = {key: data.pop(key, None) for key in ("config", "search")}
            return _dumps(data), _dumps(config)
        if path.suffix == ".json" and "evaluation_time" in text:
            data = json.loads(text)
            if isinstance(data, dict) and "evaluation_time" in data:
                data["evaluation_time"] = "<minutes>"
                return _dumps(data), None
        return text.encode(), None


@dataclass
class Outcome:
    same: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _diff(name: str, a: bytes, b: bytes, lines: int) -> list[str]:
    delta = difflib.unified_diff(a.decode("utf-8", "replace").splitlines(), b.decode("utf-8", "replace").splitlines(),
                                 f"before/{name}", f"after/{name}", n=1, lineterm="")
    return [f"    {line}" for line in list(delta)[:lines]]


def compare_trees(before: Path, after: Path, *, config_may_differ: bool = False, allow_new: tuple[str, ...] = (),
                  diff_lines: int = 0) -> Outcome:
    """Compare two OUT trees; ``allow_new``: patterns of files that may exist only in ``after`` (notes)."""
    a_tree, b_tree = Tree.open(before), Tree.open(after)
    a, b = a_tree.files(), b_tree.files()
    outcome = Outcome()
    outcome.problems += [f"only in {before}: {name}" for name in sorted(set(a) - set(b))]
    for name in sorted(set(b) - set(a)):
        allowed = any(fnmatch.fnmatchcase(name, pattern) for pattern in allow_new)
        (outcome.notes if allowed else outcome.problems).append(f"only in {after}: {name}")
    for name in sorted(set(a) & set(b)):
        (rest_a, config_a), (rest_b, config_b) = a_tree.normalised(name, a[name]), b_tree.normalised(name, b[name])
        if rest_a != rest_b:
            outcome.problems.append(f"differs: {name}")
            outcome.problems += _diff(name, rest_a, rest_b, diff_lines)
        elif config_a != config_b:
            where = outcome.notes if config_may_differ else outcome.problems
            where.append(f"configuration differs: {name}")
            where += _diff(name, config_a or b"", config_b or b"", diff_lines)
        else:
            outcome.same += 1
    return outcome


def compare(before: Path, after: Path, *, config_may_differ: bool = False, allow_new: tuple[str, ...] = (),
            diff_lines: int = 0) -> int:
    """Print the comparison; 0 when every file matches (configuration notes aside), else 1."""
    outcome = compare_trees(before, after, config_may_differ=config_may_differ, allow_new=allow_new,
                            diff_lines=diff_lines)
    names = Tree.open(before).files()
    kinds: dict[str, int] = {}
    for name in names:
        kind = "manifest" if name.endswith(".manifest.json") else Path(name).suffix or name
        kinds[kind] = kinds.get(kind, 0) + 1
    total = len(set(names) | set(Tree.open(after).files()))
    print(f"{outcome.same} of {total} files identical ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    for line in outcome.notes:
        print(f"note: {line}")
    for line in outcome.problems:
        print(line)
    return 1 if outcome.problems else 0
