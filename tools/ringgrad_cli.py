"""The command line every Python tool shares with the project's programs (scripts/cli.sh,
examples/common/command_line.h): --help prints the usage and --version the library's version, both
exit 0; a mistake prints what is wrong and the usage, exit 2 (argparse's own convention).

    import ringgrad_cli                        # tools/ is the script's directory, or on sys.path
    ringgrad_cli.add_version(parser)           # an argparse parser
    ringgrad_cli.answer_help_and_version(argv, __doc__)   # a hand-written parser, first
    ringgrad_cli.usage_error("--steps takes an integer", __doc__)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def version():
    """'ringgrad 0.1.0', from project() in CMakeLists.txt, where the library's version is set."""
    text = (ROOT / "CMakeLists.txt").read_text()
    found = re.search(r"^project\(ringgrad VERSION ([0-9.]+)", text, re.M)
    return f"ringgrad {found.group(1) if found else 'unknown'}"


def add_version(parser):
    parser.add_argument("--version", action="version", version=version())


def answer_help_and_version(argv, usage):
    for arg in argv:
        if arg == "--":
            return
        if arg in ("-h", "--help"):
            print(usage.strip())
            sys.exit(0)
        if arg == "--version":
            print(version())
            sys.exit(0)


def usage_error(problem, usage):
    sys.stderr.write(f"{pathlib.Path(sys.argv[0]).name}: {problem}\n{usage.strip()}\n")
    sys.exit(2)
