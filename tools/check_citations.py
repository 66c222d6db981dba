#!/usr/bin/env python3
"""check_citations: the docs' `path:line` citations still point at what they name.

    python3 tools/check_citations.py [--root DIR]

The teaching pages cite code by file and line (`dist/shm/reduction_buffer.h:55`: Note [Allgather
in a shared buffer]) and code moves. For each citation -- `path:N`, or `:N` for the path cited last
in the same paragraph -- the text that follows it up to the next citation names what is there:
`identifiers` in backticks and Note [...] titles. That name must occur within 3 lines of
line N of the file (an identifier's last `::` component, without call parentheses or template
arguments); of several names, one is enough. A citation followed by no name is counted, not
checked. Exit status 1 when any
citation is off, each named as page:line.
"""
import argparse
import pathlib
import re
import sys

CITE = re.compile(r"`([A-Za-z0-9_./-]+\.(?:h|cpp|cu|cuh|py|sh|cmake|txt)):(\d+)`|`:(\d+)`")
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_:<>,. ]*?)(?:\(\))?`|Note \[([^\]]+)\]")
WINDOW = 3


def wanted(name):
    """What to look for in the file: a Note's title, or an identifier's last component."""
    if name.startswith("Note ["):
        return name
    ident = re.sub(r"<.*>", "", name).split("::")[-1].split(".")[-1].strip()
    return ident if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident) else None


# A citation's label: the name right after it ("`p:N`: `name`", "`p:N` -- Note [X]") or right
# before it ("`name` (`p:N`)", "`name` is at `p:N`", "Note [X], `p:N`").
AFTER = re.compile(r"\s*(?::|--|—|,)?\s*(" + NAME.pattern + r")")
BEFORE = re.compile(r"(" + NAME.pattern + r")\s*(?:\(|is at|at|in|,|:)?\s*$")


def labels(para, m, previous_end):
    out = []
    after = AFTER.match(para, m.end())
    if after:
        out.append(after.group(1))
    before = BEFORE.search(para[max(previous_end, m.start() - 60) : m.start()])
    if before:
        out.append(before.group(1))
    names = []
    for text in out:
        if text.startswith("Note ["):
            names.append(re.sub(r"\s+", " ", text))
        else:
            t = wanted(text.strip("`").removesuffix("()"))
            if t:
                names.append(t)
    return names


def paragraphs(text):
    """(first line number, paragraph text) for blank-line or bullet separated paragraphs."""
    start, lines = 1, []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip() or re.match(r"\s*[-*] |\s*\d+\. ", line):
            if lines:
                yield start, "\n".join(lines)
            start, lines = n, ([line] if line.strip() else [])
            if not line.strip():
                start = n + 1
        else:
            lines.append(line)
    if lines:
        yield start, "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    root = pathlib.Path(ap.parse_args().root)
    pages = sorted(root.glob("docs/**/*.md")) + sorted(root.glob("learn/**/*.md")) + [root / "README.md"]
    checked = unchecked = 0
    errors = []
    for page in pages:
        if not page.is_file():
            continue
        for first_line, para in paragraphs(page.read_text()):
            cites = list(CITE.finditer(para))
            last_path = None
            for i, m in enumerate(cites):
                path = m.group(1) or last_path
                line_no = int(m.group(2) or m.group(3))
                last_path = path
                where = f"{page.relative_to(root)}:{first_line + para.count(chr(10), 0, m.start())}"
                if path is None or not (root / path).is_file():
                    continue  # not a file of this repository (a peer's, a generated one)
                source = (root / path).read_text(errors="replace").split("\n")
                if not 1 <= line_no <= len(source):
                    errors.append(f"{where}: {path}:{line_no} is past the end ({len(source)} lines)")
                    continue
                targets = labels(para, m, cites[i - 1].end() if i > 0 else 0)
                if not targets:
                    unchecked += 1
                    continue
                window = "\n".join(source[max(0, line_no - 1 - WINDOW) : line_no + WINDOW])
                flat = re.sub(r"\s*(//|#)\s*", " ", window.replace("\n", " "))

                def shows(t):
                    if t.startswith("Note ["):
                        return re.sub(r"\s+", " ", t) in flat
                    return re.search(r"\b" + re.escape(t) + r"_?\b", window) is not None  # rank: rank_

                checked += 1
                if not any(shows(t) for t in targets):
                    errors.append(f"{where}: {path}:{line_no} shows none of {targets} within {WINDOW} lines")
    for e in errors:
        print(e)
    print(f"check_citations: {checked} citations checked, {unchecked} without a name to check, {len(errors)} off")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
