#!/usr/bin/env python3
"""The support matrix in README.md and docs/backends.md must say what the built library says.

Runs `mlakit info --markdown` and compares, for every backend compiled into this build, its column in each
document's table (between the support-matrix markers) with the build's own. A backend the build lacks (e.g.
`cuda` in a CPU-only build) is not compared; every document must still list each backend the build has.
With --write, the documents' sections are regenerated from the build instead.
"""
import re
import subprocess
import sys

BEGIN, END = "<!-- support-matrix:begin -->", "<!-- support-matrix:end -->"


def parse(table_text):
    rows = [line.strip() for line in table_text.splitlines() if line.strip().startswith("|")]
    cells_of = lambda row: [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]  # "\|" is text
    header = cells_of(rows[0])
    backends = header[1:]
    cells = {}
    for row in rows[2:]:
        parts = cells_of(row)
        for backend, cell in zip(backends, parts[1:]):
            cells[(parts[0], backend)] = cell
    return backends, cells


def write(built, docs):
    """--write: replace each document's matrix section with the build's table (run from a CUDA build)."""
    for path in docs:
        text = open(path, encoding="utf-8").read()
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        open(path, "w", encoding="utf-8").write(f"{head}{BEGIN}\n{built.strip()}\n{END}{tail}")
    return 0


def main():
    args = sys.argv[1:]
    do_write = "--write" in args
    args = [a for a in args if a != "--write"]
    cli, docs = args[0], args[1:]
    built = subprocess.run([cli, "info", "--markdown"], check=True, capture_output=True, text=True).stdout
    if do_write:
        return write(built, docs)
    built_backends, built_cells = parse(built)
    failures = []
    for path in docs:
        text = open(path, encoding="utf-8").read()
        if BEGIN not in text or END not in text:
            failures.append(f"{path}: no {BEGIN} ... {END} section")
            continue
        doc_backends, doc_cells = parse(text.split(BEGIN, 1)[1].split(END, 1)[0])
        for backend in built_backends:
            if backend not in doc_backends:
                failures.append(f"{path}: backend '{backend}' is missing from the support matrix")
                continue
            for (op, b), cell in built_cells.items():
                if b == backend and doc_cells.get((op, b)) != cell:
                    failures.append(f"{path}: {op} x {b}: document says {doc_cells.get((op, b))!r}, build says {cell!r}")
    for f in failures:
        print(f)
    print(f"support matrix: {len(built_backends)} backends x {len(built_cells) // max(1, len(built_backends))} "
          f"operations checked in {len(docs)} documents: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
