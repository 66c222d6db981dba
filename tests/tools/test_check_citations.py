#!/usr/bin/env python3
"""tools/check_citations.py against pages and sources made for it: an exact citation passes; a
moved line, a missing file, a citation without a label and a `:N` with no path before it fail,
each named; --fix moves a citation that is a few lines off and then the page passes."""
import pathlib
import subprocess
import sys
import tempfile

CHECKER = pathlib.Path(__file__).resolve().parents[2] / "tools" / "check_citations.py"
SOURCE = """// a.h: a made-up source
//
// Note [The rule]: what the rule is,
// over two lines.
int answer = 42;
void step_once();
"""


def check(root, page, *flags):
    (root / "docs" / "p.md").write_text(page)
    r = subprocess.run([sys.executable, str(CHECKER), "--root", str(root), *flags], capture_output=True, text=True)
    return r.returncode, r.stdout


def main():
    failures = []

    def expect(what, page, code, contains, *flags):
        with tempfile.TemporaryDirectory() as d:
            root = pathlib.Path(d)
            (root / "docs").mkdir()
            (root / "src").mkdir()
            (root / "src" / "a.h").write_text(SOURCE)
            got, out = check(root, page, *flags)
            if got != code or contains not in out:
                failures.append(f"{what}: exit {got}, output {out!r}; expected exit {code} and {contains!r}")

    expect("exact", '- `src/a.h:5`: `answer`. `:3`: Note [The rule]. `:6`: "step_once", quoted.\n', 0, "3 labelled")
    expect("moved line", "- `src/a.h:4`: `answer`.\n", 1, "does not show ['answer']; line 5 does")
    expect("missing file", "- `src/b.h:5`: `answer`.\n", 1, "src/b.h is not a file of this repository")
    expect("no label", "- `src/a.h:5`: the answer.\n", 1, "has no label")
    expect("no path", "- `:5`: `answer`.\n", 1, "follows no `path:N`")
    expect("past the end", "- `src/a.h:60`: `answer`.\n", 1, "is past the end")
    expect("fix", "- `src/a.h:3`: `answer`.\n", 0, "1 moved", "--fix")
    # What --fix wrote, and that the page then passes as it is.
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "docs").mkdir()
        (root / "src").mkdir()
        (root / "src" / "a.h").write_text(SOURCE)
        check(root, "- `src/a.h:3`: `answer`.\n", "--fix")
        text = (root / "docs" / "p.md").read_text()
        if text != "- `src/a.h:5`: `answer`.\n":
            failures.append(f"--fix wrote {text!r}")
        got, out = check(root, text)
        if got != 0:
            failures.append(f"after --fix: exit {got}, {out!r}")
    for f in failures:
        print("FAIL", f)
    print(f"test_check_citations: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
