#!/usr/bin/env python3
"""Distinct test names in the log of a CI run (issue 16: coverage is counted by name, not by
the summed `passed` count, since one test may run once per feature set).

    python3 .ci/test-names.py LOG                  # the distinct names, one a line
    python3 .ci/test-names.py --compare OLD NEW    # counts, and names of OLD missing in NEW

A name is `<binary>::<test path>`. An integration test in a crate's one binary
`tests/it/main.rs` is named as the file it was before the merge: `it` and the module
`conformance_sqlite::sqlite::x` read as binary `conformance_sqlite`, test `sqlite::x`, so
runs before and after the merge compare name for name. A doctest is `<file> - <item> #k`
(the k-th of that item in the file) without its line number, which moves with every edit.
Only tests that ran and passed count (`... ok`); ignored ones do not.
"""

import re
import sys

RUNNING = re.compile(r"^\s*Running (?:unittests )?(\S+) \((?:[^)]*/)?([^/)]+?)(?:-[0-9a-f]+)?\)$")
DOCTESTS = re.compile(r"^\s*Doc-tests (\S+)$")
RESULT = re.compile(r"^test (.+?) \.\.\. ok$")
DOCNAME = re.compile(r"^(.+?) - (.*?) ?\(line \d+\)(?: - compile(?: fail)?)?$")
# Files a doctest moved to without changing (issue 16's import layering).
MOVED = {
    "idem-runtime/src/context.rs": "idem-runtime/src/context/mod.rs",
    "idem-runtime/src/attempt.rs": "idem-runtime/src/context/attempt.rs",
}


def names(path):
    found = set()
    binary, doc = None, False
    docs = {}  # (crate, file, item) -> the line numbers of its doctests
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        m = RUNNING.match(line)
        if m:
            source, stem = m.groups()
            # Unit tests are named by the crate's library or binary, integration tests by file.
            binary, doc = stem, False
            if source.endswith("tests/it/main.rs"):
                binary = "it"
            elif source.startswith("tests/") and source.endswith(".rs"):
                binary = source.rsplit("/", 1)[1][:-3]
            continue
        m = DOCTESTS.match(line)
        if m:
            binary, doc = m.group(1), True
            continue
        m = RESULT.match(line)
        if not m or binary is None:
            continue
        name = m.group(1)
        if doc:
            d = DOCNAME.match(name)
            if d:
                file, item = d.groups()
                docs.setdefault((binary, MOVED.get(file, file), item), set()).add(line_no(name))
            else:
                found.add(f"doc:{binary}::{name}")
        elif binary == "it" and "::" in name:
            found.add(name)  # module::test reads as the former file's binary::test
        else:
            found.add(f"{binary}::{name}")
    # The k-th doctest of an item, in line order: names that survive edits above it.
    for (binary, file, item), lines in docs.items():
        for k in range(1, len(lines) + 1):
            found.add(f"doc:{binary}::{file} - {item} #{k}")
    return found


def line_no(name):
    m = re.search(r"\(line (\d+)\)", name)
    return int(m.group(1)) if m else 0


def main():
    args = sys.argv[1:]
    if args and args[0] == "--compare":
        old, new = names(args[1]), names(args[2])
        print(f"distinct test names: {len(old)} in {args[1]}, {len(new)} in {args[2]}")
        gone = sorted(old - new)
        print(f"  in both: {len(old & new)}; only in the first: {len(gone)}; only in the second: {len(new - old)}")
        for name in gone:
            print(f"  missing: {name}")
        return 1 if gone else 0
    for name in sorted(names(args[0])):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
