"""Regenerate the analyzer's Unicode tables and the reference token files (not run by tests).

Run with the separate Pyserini 0.22.1 environment (Java 17 + pyjnius), from the repository root::

    /work/refenv/bin/python tests/data/analyzer/make_reference.py [tables] [edge] [fuzz] [porter] [collections]

With no argument it does everything.  What it writes:

``src/r2med/retrievers/bm25/_lucene_tables.py``
    The character classes that Lucene 9's ``StandardTokenizer`` really applies (its grammar is
    compiled against Unicode 9 word-break data, newer Pythons ship Unicode 14+), found by running
    the real tokenizer over probe strings for every code point up to U+3FFFF and U+E0000..U+E0FFF
    and grouping code points by their behaviour; plus Java 17's ``Character.toLowerCase`` table.
    Nothing of Lucene's source is copied: the classes are observations of its output.
``tests/data/analyzer/edge_cases.jsonl``
    Hand-written edge cases (numbers, apostrophes, URLs, scripts, emoji, long tokens, ...) with the
    tokens of ``Analyzer(get_lucene_analyzer())``.
``tests/data/analyzer/fuzz_cases.jsonl``
    Random strings over representatives of every character class, with the real tokens.
``tests/data/analyzer/porter_cases.jsonl.gz``
    Random letter strings ending in Porter's suffixes, with Lucene's stems (``[word, stem]`` rows).
``tests/data/analyzer/{cacm,nfcorpus}_{corpus,query}.jsonl.gz``
    The real tokens of every text of ``../shared/data/{cacm,nfcorpus}``: ``{"id", "tokens"}``.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared"
OUT_DIR = Path(__file__).resolve().parent
TABLES = REPO / "src" / "r2med" / "retrievers" / "bm25" / "_lucene_tables.py"

TOK_JAVA = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import org.apache.lucene.analysis.standard.StandardTokenizer;
import org.apache.lucene.analysis.tokenattributes.*;

public class Tok {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream(args[0]), StandardCharsets.UTF_8));
    PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(new FileOutputStream(args[1]), StandardCharsets.UTF_8)));
    StandardTokenizer tok = new StandardTokenizer();
    OffsetAttribute off = tok.addAttribute(OffsetAttribute.class);
    TypeAttribute typ = tok.addAttribute(TypeAttribute.class);
    String line;
    while ((line = in.readLine()) != null) {
      tok.setReader(new StringReader(line));
      tok.reset();
      StringBuilder sb = new StringBuilder();
      while (tok.incrementToken()) {
        int s = line.codePointCount(0, off.startOffset());
        int e = line.codePointCount(0, off.endOffset());
        if (sb.length() > 0) sb.append(' ');
        sb.append(s).append(':').append(e).append(':').append(typ.type().substring(1, typ.type().length() - 1));
      }
      tok.end();
      tok.close();
      out.println(sb);
    }
    out.close();
  }
}
"""

LOWER_JAVA = r"""
public class Lower {
  public static void main(String[] a) {
    StringBuilder sb = new StringBuilder();
    for (int c = 0; c <= 0x10FFFF; c++) {
      int l = Character.toLowerCase(c);
      if (l != c) sb.append(c).append(' ').append(l).append('\n');
    }
    System.out.print(sb);
  }
}
"""

# Probe templates: "C" stands for the code point under test.  Together they separate every
# character class that Lucene's grammar distinguishes.
# fmt: off
PROBES = [
    " C ", "aC", " Ca", "aCa", "1C1", "CC", "\u261dC", "C\U0001F3FB", "#C", "C\u20e3",
    "\u05d0C", "\u05d0C\u05d0", "\U0001F600C", " \u200dC", "\U0001F600\u200dC",
    "\U0001F600C\U000E007F", "\U0001F600\U000E0061C", "\u30abC\u30ab", "\u0e01C", "1C", "C1",
    "_C", "C_", "\u4e2dC", "\u3042C", " C\U0001F600", "C'", 'C"\u05d0', "C\u200d\U0001F600",
    "aC\u200d\U0001F600", "\U0001F600\uFE0FC", "C\uFE0F\u200d\U0001F600", "\u05d0'C",
    "\U0001F600\uFE0FC\U000E007F", "\U0001F600\uFE0F\U000E0061C",
]

# One known member per class; every behaviour group must contain exactly one of these.
REPRESENTATIVES = {
    0x0000: "OTHER", 0x2E80: "HAN", 0x0041: "AL", 0x1100: "AL", 0x00A9: "EC", 0x00AD: "X",
    0x0660: "NU", 0x0E01: "SA", 0x3041: "HIR", 0x3031: "KA", 0x0E31: "SAX", 0x05D0: "HE",
    0x1F1E6: "RI", 0x002C: "MN", 0x005F: "EN", 0x0030: "DIG", 0x003A: "ML", 0x002E: "MNL",
    0x2139: "ALEC", 0x1F3FB: "EMOD", 0x0023: "KCB", 0x0022: "DQ", 0x0027: "SQ", 0x200D: "ZWJ",
    0x20E3: "KC", 0xFE0E: "TS", 0xFE0F: "PS", 0xE0061: "TAGS", 0xE007F: "TAGT",
}
# fmt: on


def fatjar() -> str:
    import pyserini

    jars = Path(pyserini.__file__).parent / "resources" / "jars"
    return str(next(jars.glob("anserini-*-fatjar.jar")))


class Java:
    """Compiles the two helpers once and runs them."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="r2med-analyzer-")
        self.cp = fatjar() + os.pathsep + self.dir
        for name, src in (("Tok", TOK_JAVA), ("Lower", LOWER_JAVA)):
            Path(self.dir, name + ".java").write_text(src)
            subprocess.run(["javac", "-cp", self.cp, "-d", self.dir, Path(self.dir, name + ".java")], check=True)

    def tokenize(self, lines: list[str]) -> list[list[tuple[int, int, str]]]:
        """Tokenize each line with StandardTokenizer: (start, end, type) in code points."""
        for line in lines:
            if "\n" in line or "\r" in line:
                raise ValueError("probe lines cannot hold line breaks")
        src = Path(self.dir, "in.txt")
        dst = Path(self.dir, "out.txt")
        src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        subprocess.run(["java", "-cp", self.cp, "Tok", src, dst], check=True)
        out = dst.read_text(encoding="utf-8").split("\n")[: len(lines)]
        return [[(int(a), int(b), t) for a, b, t in (x.split(":") for x in o.split())] for o in out]

    def lower_table(self) -> dict[int, int]:
        out = subprocess.run(["java", "-cp", self.cp, "Lower"], check=True, capture_output=True, text=True)
        return {int(a): int(b) for a, b in (line.split() for line in out.stdout.splitlines())}


def probe_classes(java: Java) -> dict[str, list[tuple[int, int]]]:
    cps = [
        c
        for c in list(range(0x40000)) + list(range(0xE0000, 0xE1000))
        if not 0xD800 <= c <= 0xDFFF and c not in (10, 13)
    ]
    n = len(PROBES)
    lines = [p.replace("C", chr(c)) for c in cps for p in PROBES]
    results = java.tokenize(lines)
    groups = collections.defaultdict(list)
    for i, c in enumerate(cps):
        groups[repr(results[i * n : (i + 1) * n])].append(c)
    label = {10: "OTHER", 13: "OTHER"}
    for members in groups.values():
        names = {REPRESENTATIVES[c] for c in members if c in REPRESENTATIVES}
        if len(names) != 1:
            raise SystemExit(f"behaviour group without a unique representative: {names} {members[:8]}")
        name = names.pop()
        for c in members:
            label[c] = name
    # Everything else (planes 4-13, 15, 16) must behave like OTHER: check a sample.
    rng = random.Random(0)
    sample = [c for c in range(0x40000, 0x110000, 997) if not 0xE0000 <= c <= 0xE0FFF]
    sample += [0xF0000, 0xFFFFD, 0x100000, 0x10FFFD] + [rng.randrange(0xE1000, 0x110000) for _ in range(200)]
    other_fp = next(fp for fp, m in groups.items() if 0 in m)
    results = java.tokenize([p.replace("C", chr(c)) for c in sample for p in PROBES])
    for i, c in enumerate(sample):
        if repr(results[i * n : (i + 1) * n]) != other_fp:
            raise SystemExit(f"U+{c:04X} is not OTHER")
    ranges: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for c in sorted(label):
        name = label[c]
        if name == "OTHER":
            continue
        r = ranges[name]
        if r and r[-1][1] == c - 1:
            r[-1] = (r[-1][0], c)
        else:
            r.append((c, c))
    return dict(ranges)


def lower_runs(table: dict[int, int]) -> list[tuple[int, int, int, int]]:
    """Compress {code point: lower} into (start, count, stride, delta) runs."""
    runs: list[list[int]] = []
    for c in sorted(table):
        d = table[c] - c
        if runs:
            s, n, stride, delta = runs[-1]
            last = s + (n - 1) * stride
            if delta == d and (n == 1 and c - last in (1, 2) or n > 1 and c - last == stride):
                runs[-1] = [s, n + 1, c - last, delta]
                continue
        runs.append([c, 1, 1, d])
    return [tuple(r) for r in runs]


def write_tables(java: Java) -> None:
    classes = probe_classes(java)
    lower = lower_runs(java.lower_table())
    lines = [
        '"""Character tables of Lucene 9.5\'s StandardTokenizer and of Java 17\'s lower-casing.',
        "",
        "GENERATED by tests/data/analyzer/make_reference.py from the real Pyserini 0.22.1 / Lucene",
        "9.5 runtime; do not edit.  ``CLASSES`` maps a word-break class name to code point ranges",
        "(inclusive, hex, space separated); a code point in no range is OTHER.  ``LOWER_RUNS`` lists",
        "Java's ``Character.toLowerCase`` as (start, count, stride, delta) runs.",
        '"""',
        "",
        "CLASSES = {",
    ]
    for name in sorted(classes):
        text = " ".join(f"{a:X}" if a == b else f"{a:X}-{b:X}" for a, b in classes[name])
        if len(text) <= 100:
            lines.append(f'    "{name}": "{text}",')
            continue
        chunks = []
        while text:
            cut = text.rfind(" ", 0, 100) if len(text) > 100 else len(text)
            chunks.append(text[:cut] + (" " if cut < len(text) else ""))
            text = text[cut + 1 :]
        lines.append(f'    "{name}": (')
        lines.extend(f'        "{ch}"' for ch in chunks)
        lines.append("    ),")
    lines.append("}")
    lines.append("")
    lines.append("LOWER_RUNS = (")
    lines.extend("    (0x{:X}, {}, {}, {}),".format(*run) for run in lower)
    lines.append(")")
    TABLES.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("wrote", TABLES, {k: len(v) for k, v in classes.items()}, len(lower), "lower runs")


# ----------------------------------------------------------------------------------------------
# Reference token files


def edge_cases() -> list[str]:
    """Hand-picked strings for every tricky corner of the analyzer."""
    # fmt: off
    cases = [
        # empty and blank
        "", " ", "   ", "\n", "\t\r\n", "\u3000", "\u00a0", "\u202f", "\u200b", "\ufeff", "\x00", "\x1f",
        # numbers
        "3.5", "1,000", "10.2.3", "1,000.50", "1.000,5", ".5", "5.", "-3.5", "+1", "1e-5", "3x10^5", "50%",
        "$1,000.00", "1/2", "1:2", "12:30", "2020-01-01", "v1.2.3", "1;000", "1..2", "1,,2", "1.a", "a.1",
        "1_000", "0x1F", "3.14159265358979", "1'000", "1’000", "１２３", "٣٤٥", "१२३", "½", "²", "x²", "10⁻⁵",
        "3.5mg", "5mg/kg", "p<0.05", "p=0.001", "95%CI", "(n=12)", "[1,2]", "1-2", "1–2", "1—2", "−5",
        # apostrophes and possessives
        "O'Neil", "O’Neil", "o'neil's", "dogs'", "dog's", "DOG'S", "dog’s", "dog’S", "dog＇s", "it's", "It's",
        "IT'S", "that's", "can't", "won't", "I'm", "they're", "we'll", "shouldn't've", "rock'n'roll", "'90s",
        "'tis", "l'amour", "d'Alembert", "Parkinson's disease", "Alzheimer’s", "Crohn's", "s's", "'s", "x's",
        "James'", "a''b", "a'", "'a", "a'1", "1'a", "a‘b", "a‛b", "a`b", "a´b", "Hodgkin's lymphoma's",
        # hyphens and dashes
        "e-mail", "state-of-the-art", "COVID-19", "SARS-CoV-2", "anti-TNF-α", "2-3", "-5", "co-operate",
        "a–b", "a—b", "a\u2011b", "a\u00adb", "a\u2010b", "a\u2212b", "T-cell", "β-blocker", "IL-1β", "--",
        # URLs, e-mail, handles
        "http://www.example.com/path?x=1&y=2", "https://doi.org/10.1000/xyz123", "www.nih.gov",
        "john.doe@example.com", "user_name@mail.co.uk", "ftp://ftp.ncbi.nlm.nih.gov/pub", "#hashtag",
        "@mention", "C:\\Windows\\System32", "/usr/local/bin", "a.b.c.d", "e.g.", "i.e.", "et al.", "U.S.A.",
        "U.S.", "Ph.D.", "No.5", "Fig.1", "Fig. 1A", "doi:10.1038/nature12373", "PMID:12345678",
        # non-Latin scripts
        "中文字符", "日本語のテキスト", "한국어 텍스트", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "カタカナー", "ー", "ヽヾ",
        "ภาษาไทย", "ພາສາລາວ", "မြန်မာ", "ភាសាខ្មែរ", "اللغة العربية", "العربية٣٤", "Русский текст", "ЁЖИК",
        "Ελληνικά", "ΟΔΟΣ", "Σ", "σς", "α-helix", "TNF-α", "עברית", "צה\"ל", "ג'ירפה", "א'", "א\"", "א\"ב",
        "हिन्दी", "ગુજરાતી", "தமிழ்", "ქართული", "Հայերեն", "አማርኛ", "ᚠᚢᚦ", "ꓮꓯ", "𐌰𐌱", "𝛼𝛽", "𝐀𝐁𝐂",
        "漢字かな交じり文", "中a文", "a中", "中\u0301", "〆", "々", "〇", "㊗", "㍿", "ﾞ", "゛",
        # emoji
        "😀", "😀😀", "a😀b", "👍🏻", "👍 🏻", "a🏻", "🏻", "👨‍👩‍👧", "👨\u200d", "\u200d👨", "🇺🇸", "🇺", "🇺🇸🇬",
        "#️⃣", "#⃣", "1️⃣", "1⃣", "*⃣", "©", "®", "™", "©2020", "❤️", "❤\ufe0e", "☺︎", "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
        "⚕️", "♀", "♂", "↔", "→", "✓", "✔", "★", "☆", "ℹ", "ℹa", "Ⓜ", "🅰", "🅰b", "😀\ufe0f\ufe0f", "☝🏻",
        # combining marks
        "cafe\u0301", "café", "e\u0301\u0301\u0301", " \u0301a", "1\u0301", ".\u0301a", "n\u0303o",
        "Z\u0351\u0352a\u0353l\u0354g\u0355o", "a\u0300.b", "a.\u0300b", "1\u0300.2",
        # digits mixed with letters
        "COVID19", "H1N1", "3D", "2nd", "10mg/kg", "p53", "IL6R", "CD4+", "x86_64", "1a2b3c", "A1.B2", "1a.b",
        "a1.5", "a1.b", "ABC123def", "v2", "β2", "α1-antitrypsin", "5α-reductase",
        # underscores
        "snake_case", "__init__", "_private", "trailing_", "___", "a__b", "_1", "1_", "_", "a_1_b", "カ_a",
        "a_カ", "カ_カ", "カa", "aカ", "ｶ_1",
        # case and lower-casing
        "İstanbul", "ISTANBUL", "ß", "ẞ", "ﬁne", "ＡＢＣ", "Ⅻ", "ⅻ", "µg", "μg", "°C", "±", "×", "Å", "K", "Ω",
        "Σίσυφος", "ǅ", "ǈ", "Ⓐ", "ⓐ", "ΐ", "ẞ's", "THE", "The", "AND", "Not", "NO", "Such", "Will",
        # Porter corner cases
        "gas", "this", "news", "ponies", "ties", "sky", "yay", "syzygy", "generalizations", "oscillators",
        "hopefulness", "electrical", "conditional", "rational", "feudalism", "decisiveness", "hopelessness",
        "formaliti", "sensitiviti", "sensibiliti", "triplicate", "formative", "formalize", "electriciti",
        "hopeful", "goodness", "revival", "allowance", "inference", "airliner", "gyroscopic", "adjustable",
        "defensible", "irritant", "replacement", "adjustment", "dependent", "adoption", "homologou",
        "communism", "activate", "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate",
        "cease", "controll", "roll", "aed", "eed", "ion", "ies", "sses", "bled", "sing", "yyy", "abli",
        "radically", "archaeology", "analogies", "happiness", "relativity", "y", "ys", "yes", "aies",
        "agreed", "disabled", "matting", "mating", "meeting", "milling", "messing", "meetings", "hoping",
        "filing", "falling", "tanned", "fizzed", "sized", "troubled", "motoring", "plastered", "caresses",
        "RUNNING", "Running", "runnings", "naïve", "naïvely", "résumés", "cafés", "señoras", "façade",
        "x\U0001D6FCing", "\U0001D6FC\U0001D6FCed", "a\U0001D6FC\U0001D6FCing", "ho\U0001D6FCed",
        # long tokens
        "a" * 255, "a" * 256, "a" * 300, "a" * 600, "1" * 300, "a" * 253 + "'s", "a" * 254 + "'s",
        "a" * 254 + ".b", "a" * 255 + ".b", "\U0001D6FC" * 130, "a" * 254 + "\U0001D6FC" + "b" * 5,
        "x" + "\u0301" * 300, "_" * 300 + "a", "中" * 300, "ก" * 300, "カ" * 300, "😀" * 200,
        ("word " * 100).strip(), "supercalifragilisticexpialidocious" * 10,
    ]
    sentences = [
        "The dog's 3.5mg dose, in 1,000 U.S. patients.",
        "Patients' outcomes were IMPROVED by the 2nd-line drug (p<0.05; n=1,234).",
        "E-mail john.doe@example.com or visit https://www.nih.gov/health?topic=covid-19 for info.",
        "TNF-α and IL-1β levels rose 2.5-fold after 10μg/kg LPS (see Fig. 3A–C).",
        "We can't say it's O’Neil’s fault; the dogs' owners weren't there.",
        "日本語と English の mixed テキスト with 中文 and 한국어.",
        "Emoji test: 😀👍🏻 🇺🇸 #️⃣ ❤️ done.",
        "Line one\nLine two\r\nLine three\tTabbed\u2028Separated\u2029Paragraph.",
        "  leading and trailing whitespace   ",
        "Mixed\u00a0no-break\u202fnarrow\u2009thin spaces",
        "α-synuclein aggregation in Parkinson's disease (PD) and dementia with Lewy bodies (DLB).",
        "The 5'-UTR and 3'-UTR of the mRNA were sequenced (GenBank: NM_000546.5).",
        "Ca2+ and Mg2+ ions; pH 7.4; 37°C; 5% CO2; 1×10^6 cells/mL.",
    ]
    # fmt: on
    return cases + sentences


def fuzz_cases(n: int, seed: int = 20240601) -> list[str]:
    """Random strings over members of every character class, plus ASCII punctuation."""
    sys.path.insert(0, str(REPO / "src"))
    from r2med.retrievers.bm25 import tokenizer as tk

    rng = random.Random(seed)
    pool = []
    for name, ranges in sorted(tk._CLASSES.items()):
        for _ in range(4):
            lo, hi = rng.choice(ranges)
            pool.append(chr(rng.randint(lo, hi)))
    # fmt: off
    pool += list("aAbzSs09'\".,:;_#*- /@()") + [
        "\ufe0e", "\ufe0f", "\u200d", "\u20e3", "\U000E0061", "\U000E007F", "\U0001F3FB", "\U0001F1E6",
        "\U0001F1FA", "\u05d0", "\u2139", "\u00a9", "\u261d", "\U0001F600", "\u0301", "\u00ad", "\u30ab",
        "\u4e2d", "\u3042", "\u0e01", "\u0e31", "\u202f", "\u2019", "\uff07", "\U0001D6FC", "\u0130",
        "\u03a3", "\n", "\r",
    ]
    # fmt: on
    words = ["the", "dog", "running", "it's", "relational", "3.5", "u.s.a", "O'Neil", "TNF-α", "e-mail"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.3:
                parts.append(rng.choice(words))
            else:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        out.append(rng.choice(["", " ", "  "]).join(parts))
    return out


def write_jsonl(path: Path, rows: list, compress: bool = False) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")  # rows: dicts or lists
    if compress:
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    print("wrote", path, len(rows), "rows", path.stat().st_size, "bytes")


def analyzers() -> dict[str, object]:
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    return {
        "default": Analyzer(get_lucene_analyzer()),
        "no_stem": Analyzer(get_lucene_analyzer(stemming=False)),
        "no_stop": Analyzer(get_lucene_analyzer(stopwords=False)),
        "no_stem_no_stop": Analyzer(get_lucene_analyzer(stemming=False, stopwords=False)),
    }


def write_edge_and_fuzz(what: set[str]) -> None:
    ans = analyzers()
    if "edge" in what:
        rows = [{"text": t, **{k: a.analyze(t) for k, a in ans.items()}} for t in edge_cases()]
        write_jsonl(OUT_DIR / "edge_cases.jsonl", rows)
    if "fuzz" in what:
        rows = [{"text": t, "default": ans["default"].analyze(t)} for t in fuzz_cases(3000)]
        write_jsonl(OUT_DIR / "fuzz_cases.jsonl", rows)


PORTER_SUFFIXES = (
    "", "s", "ed", "ing", "ies", "sses", "eed", "ational", "tional", "enci", "anci", "izer", "bli", "alli",
    "entli", "eli", "ousli", "ization", "ation", "ator", "alism", "iveness", "fulness", "ousness", "aliti",
    "iviti", "biliti", "logi", "icate", "ative", "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence",
    "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "sion", "tion", "ou", "ism", "ate", "iti",
    "ous", "ive", "ize", "e", "ll", "y", "yed", "ying", "ys",
)  # fmt: skip


def write_porter_cases(n: int = 20000, seed: int = 7) -> None:
    """Random lower-case words built to hit every Porter rule, stemmed by Lucene (stop words kept)."""
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    analyzer = Analyzer(get_lucene_analyzer(stopwords=False))
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < n:
        stem = "".join(rng.choice("aeiouybcdlmnstrgzwxkpv") for _ in range(rng.randint(0, 9)))
        word = stem + rng.choice(PORTER_SUFFIXES) + rng.choice(["", "", "s", "ed", "ing"])
        if word:
            words.add(word)
    ordered = sorted(words)
    rows = []
    for i in range(0, len(ordered), 2000):
        batch = ordered[i : i + 2000]
        stems = analyzer.analyze(" ".join(batch))  # letters only: one token per word
        if len(stems) != len(batch):
            raise SystemExit("a random word did not come out as exactly one token")
        rows.extend([w, s] for w, s in zip(batch, stems))
    write_jsonl(OUT_DIR / "porter_cases.jsonl.gz", rows, compress=True)


def write_collections() -> None:
    default = analyzers()["default"]
    for name in ("cacm", "nfcorpus"):
        for part in ("corpus", "query"):
            src = SHARED / "data" / name / f"{part}.jsonl"
            rows = []
            with src.open(encoding="utf-8") as f:
                for line in f:
                    doc = json.loads(line)
                    rows.append({"id": doc["id"], "tokens": default.analyze(doc["text"])})
            write_jsonl(OUT_DIR / f"{name}_{part}.jsonl.gz", rows, compress=True)


if __name__ == "__main__":
    what = set(sys.argv[1:]) or {"tables", "edge", "fuzz", "porter", "collections"}
    if "tables" in what:
        write_tables(Java())
    if what & {"edge", "fuzz"}:
        write_edge_and_fuzz(what)
    if "porter" in what:
        write_porter_cases()
    if "collections" in what:
        write_collections()
