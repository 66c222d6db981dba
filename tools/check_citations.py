#!/usr/bin/env python3
"""check_citations: the docs' `path:line` citations point exactly at what they name.

    python3 tools/check_citations.py [--root DIR] [--fix]

The teaching pages cite code by file and line (`dist/shm/reduction_buffer.h:55`: Note [Allgather
in a shared buffer]) and code moves. A citation is `path:N`, or `:N` for the path cited last in the
same paragraph. Its label is the name right after it ("`p:N`: `name`", "`p:N` -- Note [X]",
"`p:N`: the "quoted words" ...") or right before it ("`name` (`p:N`)", "`name` is at `p:N`"): an
`identifier` in backticks, a Note [...] title, or words in double quotes. Line N itself must show
the label -- an identifier's last `::` component as a whole word (without call parentheses or
template arguments), quoted words as they are, a Note's title on line N and, wrapped, the next;
of two labels one is enough. Every citation needs a label, and every cited path must exist.
Exit status 1 when any citation is off, unlabelled or names no file, each named as page:line.

--fix moves each citation that is off to the nearest line within FIX_REACH that shows its label
(the code moved by a few lines), rewriting the page; what it cannot place is still reported.
"""
import argparse
import pathlib
import re
import sys

CITE = re.compile(r"`([A-Za-z0-9_./-]+\.(?:h|cpp|cu|cuh|py|sh|cmake|txt)):(\d+)`|`:(\d+)`")
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_:<>,. ]*?)(?:\(\))?`|Note \[([^\]]+)\]|\"([^\"\n]{3,80})\"")
FIX_REACH = 12


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
        elif text.startswith('"'):
            names.append(re.sub(r"\s+", " ", text))  # quoted words, quotes kept
        else:
            t = identifier(text.strip("`").removesuffix("()"))
            if t:
                names.append(t)
    return names


def shows(target, source, line_no):
    """Whether line line_no of source (1-based) shows a label: a Note's title there (wrapped onto
    the next comment line at most), quoted words there, or an identifier there as a whole word
    (with a member's trailing underscore: rank, rank_)."""
    line = source[line_no - 1]
    if target.startswith("Note ["):
        two = "\n".join(source[line_no - 1 : line_no + 1])
        return "Note [" in line and target in re.sub(r"\s*(//|#)\s*", " ", two.replace("\n", " "))
    if target.startswith('"'):
        return target.strip('"') in line
    return re.search(r"\b" + re.escape(target) + r"_?\b", line) is not None


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
    import ringgrad_cli  # tools/: --version (imported here: tests import this file as a module)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ringgrad_cli.add_version(ap)
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("--fix", action="store_true", help="move citations that are off by a few lines")
    args = ap.parse_args()
    root = pathlib.Path(args.root)
    pages = sorted(root.glob("docs/**/*.md")) + sorted(root.glob("learn/**/*.md")) + [root / "README.md"]
    checked = fixed = 0
    errors = []
    sources = {}  # path -> its lines, read once
    for page in pages:
        if not page.is_file():
            continue
        text = page.read_text()
        page_lines = text.split("\n")
        for first_line, para in paragraphs(text):
            cites = list(CITE.finditer(para))
            last_path = None
            for i, m in enumerate(cites):
                path = m.group(1) or last_path
                line_no = int(m.group(2) or m.group(3))
                last_path = path
                at = first_line + para.count(chr(10), 0, m.start())
                where = f"{page.relative_to(root)}:{at}"
                if path is None:
                    errors.append(f"{where}: `:{line_no}` follows no `path:N` in its paragraph")
                    continue
                if not (root / path).is_file():
                    errors.append(f"{where}: {path} is not a file of this repository")
                    continue
                if path not in sources:
                    sources[path] = (root / path).read_text(errors="replace").split("\n")
                source = sources[path]
                if not 1 <= line_no <= len(source):
                    errors.append(f"{where}: {path}:{line_no} is past the end ({len(source)} lines)")
                    continue
                targets = labels(para, m, cites[i - 1].end() if i > 0 else 0)
                if not targets:
                    errors.append(f"{where}: {path}:{line_no} has no label (an `identifier`, Note [...] or "
                                  '"quoted words" beside it that the line shows)')
                    continue
                checked += 1
                if any(shows(t, source, line_no) for t in targets):
                    continue
                near = [n for d in range(1, FIX_REACH + 1) for n in (line_no - d, line_no + d)
                        if 1 <= n <= len(source) and any(shows(t, source, n) for t in targets)]
                if args.fix and near:
                    old = m.group(0)
                    new = old.replace(f":{line_no}`", f":{near[0]}`")
                    page_lines[at - 1] = page_lines[at - 1].replace(old, new, 1)
                    fixed += 1
                    continue
                hint = f"; line {near[0]} does" if near else ""
                errors.append(f"{where}: {path}:{line_no} does not show {targets}{hint}")
        if args.fix:
            page.write_text("\n".join(page_lines))
    for e in errors:
        print(e)
    print(f"check_citations: {checked} labelled citations checked, {fixed} moved, {len(errors)} off")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
