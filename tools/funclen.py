#!/usr/bin/env python3
"""Function and file lengths of the C sources, for the house's limits.

    tools/funclen.py [--top N] [DIR...]     (default: agent common engine daemon cli)

Prints the median function length, the N longest functions and the N
longest files (lines, from universal-ctags' start and end lines), and
exits 1 when a function in daemon/, engine/ or cli/ is over 80 lines or a
C file anywhere is over 1,200 lines (the limits of issue 13).
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

FUNC_LIMIT = 80
FILE_LIMIT = 1200
FUNC_LIMITED = ("daemon/", "engine/", "cli/")


def functions(files):
    out = subprocess.run(
        ["ctags", "--output-format=json", "--fields=+ne", "--c-kinds=f",
         "-f", "-"] + [str(f) for f in files],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("kind") == "function" and "end" in tag:
            yield tag["path"], tag["name"], tag["end"] - tag["line"] + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("dirs", nargs="*",
                    default=["agent", "common", "engine", "daemon", "cli"])
    args = ap.parse_args()
    files = sorted(f for d in args.dirs for f in Path(d).rglob("*.c"))
    funcs = list(functions(files))
    sizes = [(sum(1 for _ in open(f, encoding="utf-8")), str(f)) for f in files]
    print(f"functions: {len(funcs)}, median "
          f"{statistics.median(n for _, _, n in funcs)} lines")
    print(f"longest {args.top} functions:")
    for path, name, n in sorted(funcs, key=lambda t: -t[2])[:args.top]:
        print(f"  {n:5d}  {path}:{name}")
    print(f"longest {args.top} files:")
    for n, path in sorted(sizes, reverse=True)[:args.top]:
        print(f"  {n:5d}  {path}")
    over = [f"{p}:{name} ({n} lines)" for p, name, n in funcs
            if n > FUNC_LIMIT and p.startswith(FUNC_LIMITED)]
    over += [f"{p} ({n} lines)" for n, p in sizes if n > FILE_LIMIT]
    for o in over:
        print(f"over the limit: {o}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
