#!/usr/bin/env python3
"""check_citations: the docs' `path:line` citations still point at what they name.

    python3 tools/check_citations.py [--root DIR]

The teaching pages cite code by file and line (`dist/shm/reduction_buffer.h:55`: Note [Allgather
in a shared buffer]) and code moves. A citation is `path:N`, or `:N` for the path cited last in the
same paragraph. Its label is the name right after it ("`p:N`: `name`", "`p:N` -- Note [X]") or right
before it ("`name` (`p:N`)", "`name` is at `p:N`"): an `identifier` in backticks or a Note [...]
title. A label must occur within 3 lines of line N of the file (an identifier's last `::`
component, without call parentheses or template arguments; of two labels, one is enough). A
citation without a label is counted, not checked. Exit status 1 when any citation is off, each
named as page:line.
"""
import argparse
import pathlib
import re
import sys

CITE = re.compile(r"`([A-Za-z0-9_./-]+\.(?:h|cpp|cu|cuh|py|sh|cmake|txt)):(\d+)`|`:(\d+)`")
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_:<>,. ]*?)(?:\(\))?`|Note \[([^\]]+)\]")
WINDOW = 3


def identifier(name):
    """What to look for in the file for a backticked name: its last component, or None."""
    ident = re.sub(r"<.*>", "", name).split("::")[-1].split(".")[-1].strip()
    return ident if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident) else None


# A citation's label, right after it or right before it (the docstring's forms).
AFTER = re.compile(r"\s*(?::|--|—|,)?\s*(" + NAME.pattern + r")")
BEFORE = re.compile(r"(" + NAME.pattern + r")\s*(?:\(|is at|at|in|,|:)?\s*$")


def labels(para, m, previous_end):
    """The names labelling citation m of para, in the form shows() looks for."""
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
            t = identifier(text.strip("`").removesuffix("()"))
            if t:
                names.append(t)
    return names


def shows(target, window):
    """Whether source lines `window` show a label: a Note's title, spread over comment lines, or
    an identifier as a whole word (with a member's trailing underscore: rank, rank_)."""
    if target.startswith("Note ["):
        return target in re.sub(r"\s*(//|#)\s*", " ", window.replace("\n", " "))
    return re.search(r"\b" + re.escape(target) + r"_?\b", window) is not None


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
    sources = {}  # path -> its lines, read once
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
                if path not in sources:
                    sources[path] = (root / path).read_text(errors="replace").split("\n")
                source = sources[path]
                if not 1 <= line_no <= len(source):
                    errors.append(f"{where}: {path}:{line_no} is past the end ({len(source)} lines)")
                    continue
                targets = labels(para, m, cites[i - 1].end() if i > 0 else 0)
                if not targets:
                    unchecked += 1
                    continue
                window = "\n".join(source[max(0, line_no - 1 - WINDOW) : line_no + WINDOW])
                checked += 1
                if not any(shows(t, window) for t in targets):
                    errors.append(f"{where}: {path}:{line_no} shows none of {targets} within {WINDOW} lines")
    for e in errors:
        print(e)
    print(f"check_citations: {checked} citations checked, {unchecked} without a name to check, {len(errors)} off")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
