"""Build a labelled corpus of this machine's man pages for ``longbert probe``: label = man section.

For each section (default 1, 3, 5, 8), the pages under /usr/share/man/manS are shuffled with a fixed
seed and rendered one by one (``man -l FILE | col -b``, 80 columns) until ``--per-section`` pages of at
least ``--min-chars`` characters are found (fewer when the section has fewer). Pages already in
examples/labelled.csv (its ``source`` column) are skipped, so the two corpora do not share documents.

    python bench/make_man_corpus.py -o out/man_corpus.csv            # 100 pages x sections 1, 3, 5, 8
    longbert probe out/man_corpus.csv --label-col label --out out/man_probe.csv

Writes a CSV with the columns id, label, source, text (out/ is git-ignored).
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import subprocess
from pathlib import Path

MAN_ROOT = Path("/usr/share/man")


def render(page: Path) -> str:
    """The text of one man page file as ``man -l`` formats it at 80 columns, overstrikes removed, without its
    header and footer lines; "" on failure."""
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0", "LC_ALL": "C.UTF-8"}
    try:
        shown = subprocess.run(["man", "-l", str(page)], capture_output=True, env=env, timeout=60, check=False)
        plain = subprocess.run(["col", "-b"], input=shown.stdout, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return ""
    lines = plain.stdout.decode("utf-8", "replace").strip().splitlines()
    # the first and last lines are the page's header and footer, e.g. "LS(1)  User Commands  LS(1)": they
    # name the section (the label), so they are dropped, as examples/labelled.csv's texts start at NAME
    return "\n".join(lines[1:-1]).strip()


def known_sources(labelled: Path) -> set[str]:
    """The man page paths named in labelled.csv's source column (the path is its second word)."""
    if not labelled.exists():
        return set()
    csv.field_size_limit(1 << 30)
    with labelled.open(newline="", encoding="utf-8") as fh:
        return {row["source"].split()[1] for row in csv.DictReader(fh) if len(row.get("source", "").split()) > 1}


def pick(section: str, per_section: int, min_chars: int, seed: int, skip: set[str]) -> list[tuple[Path, str]]:
    """Up to per_section (path, text) pairs of section's pages with >= min_chars characters, in a seeded random order."""
    folder = MAN_ROOT / f"man{section}"
    pages = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and str(p) not in skip)
    random.Random(f"{seed}:{section}").shuffle(pages)
    found: list[tuple[Path, str]] = []
    for page in pages:
        text = render(page)
        if len(text) >= min_chars:
            found.append((page, text))
            if len(found) == per_section:
                break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("out/man_corpus.csv"))
    parser.add_argument("--sections", default="1,3,5,8")
    parser.add_argument("--per-section", type=int, default=100)
    parser.add_argument("--min-chars", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    skip = known_sources(Path(__file__).resolve().parent.parent / "examples" / "labelled.csv")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "label", "source", "text"])
        for section in args.sections.split(","):
            pages = pick(section, args.per_section, args.min_chars, args.seed, skip)
            print(f"section {section}: {len(pages)} pages of >= {args.min_chars} characters")
            for i, (page, text) in enumerate(pages):
                writer.writerow([f"man{section}_{i:03d}", f"man{section}", str(page), text])


if __name__ == "__main__":
    main()
