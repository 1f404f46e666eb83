#!/usr/bin/env python3
"""flag-docs.py: the flag tables in docs/ are generated from each binary's option table.

A generated table sits between two markers in a Markdown file:

    <!-- flags: microview-agent --standalone -->
    | Flag | Default | Description |
    ...
    <!-- /flags -->

The words after `flags:` are the binary (in BUILD_DIR/bin) and its arguments before
`--help-markdown`; what it prints (pkg/common/opts, mv_opts_markdown) is the table.

Usage: scripts/flag-docs.py [--write] [BUILD_DIR]   (default: build; build the binaries first)
Without --write it checks: prints each file whose table differs, with a diff, and exits 1.
With --write it rewrites the tables in place.
"""
import difflib
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- flags: ([^>]*?) -->\n)(.*?)(<!-- /flags -->)", re.S)


def generate(build, words):
    binary, *args = words.split()
    path = os.path.join(build, "bin", binary)
    out = subprocess.run([path, *args, "--help-markdown"], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        sys.exit(f"flag-docs: {binary} {' '.join(args)} --help-markdown: exit status "
                 f"{out.returncode}: {out.stderr.strip()}")
    return out.stdout


def main():
    argv = sys.argv[1:]
    write = "--write" in argv
    argv = [a for a in argv if a != "--write"]
    build = os.path.abspath(argv[0] if argv else os.path.join(ROOT, "build"))
    files = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")) + [os.path.join(ROOT, "README.md")])
    tables = differ = 0
    for f in files:
        text = open(f).read()

        def fill(m):
            nonlocal tables
            tables += 1
            return m.group(1) + generate(build, m.group(2)) + m.group(4)

        new = BLOCK.sub(fill, text)
        if new == text:
            continue
        rel = os.path.relpath(f, ROOT)
        if write:
            open(f, "w").write(new)
            print(f"flag-docs: wrote {rel}")
        else:
            differ += 1
            print(f"flag-docs: {rel}: a flag table differs from --help-markdown "
                  f"(scripts/flag-docs.py --write {os.path.relpath(build, ROOT)}):")
            sys.stdout.writelines(difflib.unified_diff(
                text.splitlines(True), new.splitlines(True), rel, rel + " (generated)"))
    print(f"flag-docs: {tables} tables, {differ} files differ")
    if tables == 0:
        print("flag-docs: no table found: the markers are gone")
        return 1
    return 1 if differ and not write else 0


if __name__ == "__main__":
    sys.exit(main())
