#!/usr/bin/env python3
"""Build examples/corpus.csv and examples/labelled.csv from real, freely
licensed text already present on a Debian 12 (bookworm) machine.

Nothing here is generated: every ``text`` value is copied (and, for man
pages, rendered to plain text) from a file installed by a Debian package.
The ``source`` column records package, version and path of each document.

Requirements (not needed by the longbert tool itself, only to rebuild):
  * Debian 12 with man-db, groff-base, bsdextrautils (col), manpages,
    manpages-dev, passwd, login and the other packages whose files are named
    below installed; /usr/bin/python3 (Debian's python3.11);
  * pandas (any recent version) for writing the CSVs.

Run:  python examples/build_corpus.py            (writes next to this file)

The selection is deterministic for a given set of installed packages:
inputs are sorted and every random choice uses a fixed seed.  Re-running on a
machine with different packages installed gives a different labelled.csv
(the sampled man pages depend on what is installed).
"""

from __future__ import annotations

import ast
import codecs
import gzip
import hashlib
import os
import random
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
MAN = Path("/usr/share/man")
DOC = Path("/usr/share/doc")
LIC = Path("/usr/share/common-licenses")
PYLIB = Path("/usr/lib/python3.11")
SYSPY = "/usr/bin/python3"

MAX_CHARS = 40_000          # cut longer texts at a paragraph boundary
LABELLED_PER_CLASS = 60
SEED = 20240601

# --------------------------------------------------------------------------
# package metadata helpers
# --------------------------------------------------------------------------

_owner_cache: dict[str, str] = {}


def _build_owner_index() -> None:
    info = Path("/var/lib/dpkg/info")
    for lst in sorted(info.glob("*.list")):
        pkg = lst.name[:-5].split(":")[0]
        for line in lst.read_text(errors="replace").splitlines():
            if line.startswith(("/usr/share/man/", "/usr/share/doc/",
                                "/usr/share/common-licenses/",
                                "/usr/lib/python3.11/")):
                _owner_cache.setdefault(line, pkg)


def owner(path: Path | str) -> str:
    if not _owner_cache:
        _build_owner_index()
    return _owner_cache.get(str(path), "unknown")


_ver_cache: dict[str, str] = {}


def version(pkg: str) -> str:
    if pkg not in _ver_cache:
        try:
            out = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", pkg],
                capture_output=True, text=True, check=True).stdout.strip()
        except subprocess.CalledProcessError:
            out = "?"
        _ver_cache[pkg] = out.splitlines()[0] if out else "?"
    return _ver_cache[pkg]


def pkgref(path: Path | str) -> str:
    pkg = owner(path)
    return f"deb:{pkg}={version(pkg)}"


def spdx_of_manpage(path: Path) -> str | None:
    """man-pages 6.x sources carry an SPDX-License-Identifier comment."""
    try:
        head = gzip.open(path, "rt", errors="replace").read(4000)
    except OSError:
        return None
    m = re.search(r"SPDX-License-Identifier:\s*(\S+)", head)
    return m.group(1) if m else None


# --------------------------------------------------------------------------
# text extraction
# --------------------------------------------------------------------------

def read_any(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def is_so_stub(path: Path) -> bool:
    try:
        src = gzip.open(path, "rt", errors="replace").read(20000)
    except OSError:
        return True
    lines = [l for l in src.splitlines() if l.strip() and not l.startswith(('.\\"', "'\\\""))]
    return bool(lines) and lines[0].startswith(".so ") and len(lines) <= 3


def render_man(path: Path) -> str:
    """Render a man page to plain UTF-8 text, drop header and footer lines."""
    env = dict(os.environ, MANWIDTH="80", LANG="C.UTF-8", LC_ALL="C.UTF-8",
               MAN_KEEP_FORMATTING="", MANPAGER="cat", PAGER="cat")
    p = subprocess.run(
        f"man --nh --nj -E UTF-8 -l {sh_quote(str(path))} 2>/dev/null | col -bx",
        shell=True, capture_output=True, env=env)
    text = p.stdout.decode("utf-8", errors="replace")
    lines = [l.rstrip() for l in text.splitlines()]
    # drop leading / trailing blank lines, then the header (first line, e.g.
    # "LS(1)  User Commands  LS(1)") and the footer (last line, e.g.
    # "GNU coreutils 9.1  September 2022  LS(1)") which carry the section.
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    if len(lines) >= 2:
        lines = lines[1:-1]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return tidy("\n".join(lines))


def sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def tidy(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\x00", "")
    text = "\n".join(l.rstrip() for l in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def cut(text: str, limit: int = MAX_CHARS) -> tuple[str, bool]:
    """Cut at the last paragraph boundary before ``limit`` characters."""
    if len(text) <= limit:
        return text, False
    i = text.rfind("\n\n", 0, limit)
    if i < limit // 2:
        i = text.rfind("\n", 0, limit)
    return text[:i].rstrip(), True


def rough_tokens(text: str) -> int:
    cjk = len(re.findall(r"[\u3400-\u9fff\uf900-\ufaff]", text))
    words = len(re.findall(r"[^\s\u3400-\u9fff\uf900-\ufaff]+", text))
    return int(round(words * 1.3 + cjk))


# --------------------------------------------------------------------------
# corpus.csv
# --------------------------------------------------------------------------

PY_BUILTIN_DOCS = [  # (title, expression evaluated in Debian's python3)
    ("Python docstring: len", "len.__doc__"),
    ("Python docstring: abs", "abs.__doc__"),
    ("Python docstring: isinstance", "isinstance.__doc__"),
    ("Python docstring: sorted", "sorted.__doc__"),
    ("Python docstring: str.split", "str.split.__doc__"),
    ("Python docstring: print", "print.__doc__"),
    ("Python docstring: zip", "zip.__doc__"),
]

PY_MODULE_DOCS = ["json/__init__.py", "argparse.py", "textwrap.py",
                  "difflib.py", "pickle.py", "heapq.py", "string.py",
                  "re/__init__.py", "optparse.py", "doctest.py"]

EN_MANPAGES = ["man1/ls.1.gz", "man1/cp.1.gz", "man1/grep.1.gz",
               "man1/gzip.1.gz", "man1/tar.1.gz", "man1/find.1.gz",
               "man1/bash.1.gz", "man5/passwd.5.gz", "man7/regex.7.gz",
               "man2/open.2.gz", "man3/printf.3.gz", "man8/useradd.8.gz"]

ZH_MANPAGES = ["zh_CN/man1/man.1.gz", "zh_CN/man1/passwd.1.gz",
               "zh_CN/man8/useradd.8.gz", "zh_CN/man5/login.defs.5.gz",
               "zh_TW/man8/usermod.8.gz"]

READMES = ["gzip/README.gz", "base-passwd/README", "libmpfr6/README",
           "zstd/README.md.gz", "libnettle8/README", "e2fsprogs/README"]


def corpus_rows() -> list[dict]:
    rows: list[dict] = []

    def add(title: str, source: str, text: str) -> None:
        rows.append({"id": f"doc{len(rows) + 1:03d}", "title": title,
                     "source": source, "text": text})

    # 1. licence texts shipped by base-files (verbatim copying permitted)
    for p in sorted(LIC.iterdir()):
        if p.is_symlink():
            continue
        add(f"Licence text: {p.name}",
            f"{pkgref(p)} {p} (licence text, verbatim copy)",
            tidy(read_any(p)))

    # 2. short Python builtin docstrings (CPython, PSF licence)
    for title, expr in PY_BUILTIN_DOCS:
        out = subprocess.run([SYSPY, "-c", f"print({expr}, end='')"],
                             capture_output=True, text=True, check=True).stdout
        add(title, f"deb:python3.11={version('python3.11')} {SYSPY} `{expr}` "
                   "(CPython docstring, PSF-2.0)", tidy(out))

    # 3. The Zen of Python (Lib/this.py stores it rot13-encoded)
    this_py = PYLIB / "this.py"
    tree = ast.parse(this_py.read_text())
    s = next(n.value.value for n in tree.body
             if isinstance(n, ast.Assign) and n.targets[0].id == "s")
    add("The Zen of Python (PEP 20)",
        f"{pkgref(this_py)} {this_py} (rot13-decoded string `s`, PSF-2.0)",
        tidy(codecs.decode(s, "rot13")))

    # 4. Python standard library module docstrings
    for rel in PY_MODULE_DOCS:
        p = PYLIB / rel
        doc = ast.get_docstring(ast.parse(p.read_text()), clean=True)
        add(f"Python module docstring: {rel}",
            f"{pkgref(p)} {p} (module docstring, PSF-2.0)", tidy(doc))

    # 5. English man pages rendered to text
    for rel in EN_MANPAGES:
        p = MAN / rel
        text, was_cut = cut(render_man(p))
        lic = spdx_of_manpage(p)
        note = f"; SPDX {lic}" if lic else "; licence: see package copyright"
        note += "; cut at paragraph boundary to <=40000 chars" if was_cut else ""
        add(f"man page {p.name[:-3]}",
            f"{pkgref(p)} {p} (rendered with man -l | col -bx, header/footer "
            f"lines removed{note})", text)

    # 6. Chinese (zh_CN / zh_TW) man pages
    for rel in ZH_MANPAGES:
        p = MAN / rel
        text, was_cut = cut(render_man(p))
        add(f"Chinese man page {rel[:5]} {p.name[:-3]}",
            f"{pkgref(p)} {p} (Chinese translation; rendered with man -l | "
            f"col -bx, header/footer removed"
            f"{'; cut' if was_cut else ''})", text)

    # 7. README files from /usr/share/doc
    for rel in READMES:
        p = DOC / rel
        add(f"README: {rel}", f"{pkgref(p)} {p} (verbatim)", tidy(read_any(p)))

    # 8. one deliberately empty document
    add("Empty document", "none: deliberately empty text for testing", "")

    # interleave so that ids do not simply group by source kind
    rnd = random.Random(SEED)
    empty = rows.pop()
    rnd.shuffle(rows)
    rows.insert(len(rows) // 2, empty)
    for i, r in enumerate(rows, 1):
        r["id"] = f"doc{i:03d}"
    return rows


# --------------------------------------------------------------------------
# labelled.csv: man pages labelled by man section
# --------------------------------------------------------------------------

SECTIONS = {"1": "user_command", "2": "system_call", "3": "library_function",
            "5": "file_format", "8": "admin_command"}


def labelled_rows() -> list[dict]:
    rnd = random.Random(SEED)
    seen_hashes: set[str] = set()
    rows: list[dict] = []
    for sec, label in SECTIONS.items():
        # only plain section pages (e.g. "foo.3.gz", not "foo.3pm.gz"/"3ssl")
        files = sorted(p for p in (MAN / f"man{sec}").glob(f"*.{sec}.gz")
                       if not p.is_symlink())
        by_pkg: dict[str, list[Path]] = defaultdict(list)
        for p in files:
            by_pkg[owner(p)].append(p)
        for lst in by_pkg.values():
            rnd.shuffle(lst)
        pkgs = sorted(by_pkg)
        rnd.shuffle(pkgs)
        # round-robin over packages so that no package (e.g. the thousands
        # of google-cloud-cli pages in section 1) dominates a class
        taken = 0
        while taken < LABELLED_PER_CLASS and any(by_pkg[k] for k in pkgs):
            for pkg in pkgs:
                if taken >= LABELLED_PER_CLASS:
                    break
                while by_pkg[pkg]:
                    p = by_pkg[pkg].pop()
                    if is_so_stub(p):
                        continue
                    raw = render_man(p)
                    if len(raw) < 300:
                        continue
                    h = hashlib.sha1(raw.encode()).hexdigest()
                    if h in seen_hashes:
                        continue
                    seen_hashes.add(h)
                    text, was_cut = cut(raw)
                    lic = spdx_of_manpage(p)
                    src = f"{pkgref(p)} {p}"
                    src += f" (SPDX {lic})" if lic else " (licence: package copyright)"
                    if was_cut:
                        src += f" [cut at paragraph boundary from {len(raw)} to {len(text)} chars]"
                    rows.append({"id": f"man{sec}_{len(rows) + 1:03d}",
                                 "label": label, "source": src, "text": text})
                    taken += 1
                    break
        print(f"section {sec}: {taken} pages", file=sys.stderr)
    rnd.shuffle(rows)
    for i, r in enumerate(rows, 1):
        r["id"] = f"lab{i:03d}"
    return rows


# --------------------------------------------------------------------------

def summarise(name: str, df: pd.DataFrame) -> None:
    n = df["text"].str.len()
    t = df["text"].map(rough_tokens)
    print(f"{name}: {len(df)} rows, chars min/median/max "
          f"{n.min()}/{int(n.median())}/{n.max()}, rough tokens "
          f">512: {(t > 512).sum()}, >2000: {(t > 2000).sum()}", file=sys.stderr)


def licence_summary(pkg: str) -> str:
    """One-line summary of /usr/share/doc/PKG/copyright (for SOURCES.md)."""
    f = DOC / pkg / "copyright"
    if not f.exists():
        return "?"
    t = f.read_text(errors="replace")
    if re.search(r"^Format:", t, re.M):
        lics: list[str] = []
        for m in re.finditer(r"^License:\s*(.+)$", t, re.M):
            if m.group(1).strip() not in lics:
                lics.append(m.group(1).strip())
        more = f" (+{len(lics) - 4} more)" if len(lics) > 4 else ""
        return "; ".join(lics[:4]) + more
    keys = [("Python Software Foundation", "PSF-2.0"),
            ("GNU General Public License", "GPL"),
            ("Lesser General Public", "LGPL"),
            ("Permission is hereby granted", "MIT/X11-style"),
            ("Permission to use, copy, modify", "MIT/X11-style"),
            ("BSD", "BSD-style"), ("public domain", "public domain"),
            ("Artistic", "Artistic")]
    found: list[str] = []
    for k, v in keys:
        if k.lower() in t.lower() and v not in found:
            found.append(v)
    return "non-DEP5 file mentioning: " + ", ".join(found)


def sources_table() -> None:
    """Print a markdown table: package, version, docs per CSV, licences."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for i, name in enumerate(["corpus.csv", "labelled.csv"]):
        df = pd.read_csv(HERE / name, dtype=str, keep_default_na=False)
        for s in df["source"]:
            m = re.match(r"deb:([^=]+)=", s)
            if m:
                counts[m.group(1)][i] += 1
    print("| package | version | corpus.csv | labelled.csv "
          "| licence(s) in /usr/share/doc/PKG/copyright |")
    print("|---|---|---|---|---|")
    for pkg in sorted(counts):
        c, l = counts[pkg]
        print(f"| {pkg} | {version(pkg)} | {c} | {l} | {licence_summary(pkg)} |")


def main() -> None:
    if "--sources-table" in sys.argv:
        sources_table()
        return
    corpus = pd.DataFrame(corpus_rows(), columns=["id", "title", "source", "text"])
    corpus.to_csv(HERE / "corpus.csv", index=False, encoding="utf-8")
    summarise("corpus.csv", corpus)

    labelled = pd.DataFrame(labelled_rows(), columns=["id", "label", "source", "text"])
    labelled.to_csv(HERE / "labelled.csv", index=False, encoding="utf-8")
    summarise("labelled.csv", labelled)
    print(labelled["label"].value_counts().to_string(), file=sys.stderr)


if __name__ == "__main__":
    main()
