#!/usr/bin/python3
"""mutate.py - how many injected bugs do npusan's tests catch?

Generates small mutants of one C source file (a flipped comparison, a
negated condition, a swapped logical operator, an off-by-one, a deleted
state update, an early return), and for each: writes it over the file,
rebuilds only the targets of the tests that cover the file (in a build
directory of its own, with AddressSanitizer and UndefinedBehaviorSanitizer,
so that a leak or a memory error a mutant causes counts as caught), runs
those tests with a timeout, and puts the original back. It prints each
mutant's fate and, at the end, the kill rate over the mutants that
compiled and every survivor as FILE:LINE: ORIGINAL -> MUTANT.

    tools/mutate.py engine/launch.c --tests 'test_engine|fuzz_engine'
    tools/mutate.py daemon/store.c --tests 'test_store|test_server' --max 40

Not part of the suite: it rebuilds and reruns tests once per mutant, which
takes tens of minutes. The file is restored on every exit path, also on
Ctrl-C; a run that was killed outright leaves FILE.mutate-orig beside it,
which the next run puts back first.

Mutants a test cannot tell from the original (equivalent mutants) are
listed with --equivalent FILE, one `LINE: ORIGINAL -> MUTANT # reason` per
line as this tool prints survivors; they are left out of the rate.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Token swaps, applied one occurrence at a time. Order matters only for
# finding tokens: longer operators are matched before their prefixes.
SWAPS = [
    ("<=", "<"), (">=", ">"), ("==", "!="), ("!=", "=="),
    ("&&", "||"), ("||", "&&"),
    ("<", "<="), (">", ">="),
    ("+ 1", "- 1"), ("- 1", "+ 1"), ("+ 1", ""), ("- 1", ""),
    ("++", "--"), ("--", "++"),
]
TOKEN = re.compile(r"<=|>=|==|!=|&&|\|\||->|<<|>>|\+\+|--|\+ 1\b|- 1\b|<|>")
CONDITION = re.compile(r"\b(if|while)\s*\(")
# A statement that updates state: an assignment, a compound assignment or
# an increment, alone on its line and ending the statement.
UPDATE = re.compile(r"^\s*[A-Za-z_][\w.\->\[\]* ]*(\+\+|--|[-+*/|&^]?=)[^=].*;\s*$|"
                    r"^\s*(\+\+|--)[A-Za-z_][\w.\->\[\]]*;\s*$")
# A declaration with an initializer (`size_t n = 0;`): deleting it does not
# compile, so it is no mutant worth building.
DECLARATION = re.compile(r"^\s*(const\s+)?((struct|enum|union)\s+)?\w+[\s*]+\w+(\[[^]]*\])?\s*=")
FUNC_START = re.compile(r"^\{\s*$")


def code_mask(lines):
    """For each line, the text with comments and string and character
    literals blanked out, so that mutants never land inside them."""
    out, in_block = [], False
    for line in lines:
        buf, i = [], 0
        while i < len(line):
            c = line[i]
            if in_block:
                if line.startswith("*/", i):
                    in_block = False
                    buf.append("  ")
                    i += 2
                    continue
                buf.append(" ")
            elif line.startswith("/*", i):
                in_block = True
                buf.append("  ")
                i += 2
                continue
            elif line.startswith("//", i):
                buf.append(" " * (len(line) - i))
                break
            elif c in "\"'":
                j = i + 1
                while j < len(line) and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                buf.append(c + " " * (min(j, len(line) - 1) - i))
                i = j + 1
                continue
            else:
                buf.append(c)
            i += 1
        out.append("".join(buf))
    return out


def skip_line(masked):
    s = masked.strip()
    return (not s or s.startswith("#") or "assert" in s or
            "static_assert" in s or s.startswith("case ") or "__attribute__" in s)


def early_return(lines, idx):
    """The statement that returns at once from the function whose body
    opens at lines[idx], judged from the return type before its name."""
    start = idx
    while start > 0 and lines[start - 1].strip() and not \
            lines[start - 1].rstrip().endswith((";", "}", "*/")):
        start -= 1
    head = " ".join(lines[start:idx]).split("(")[0]
    if re.search(r"\bvoid\s+\w+\s*$", head) and "*" not in head.split()[-1]:
        return "return;"
    if "*" in head:
        return "return NULL;"
    if re.search(r"\bbool\b", head):
        return "return false;"
    if re.search(r"\b(int|long|size_t|ssize_t|u?int\d+_t|unsigned|double|enum \w+)\b",
                 head):
        return "return 0;"
    return None


def mutants(path):
    with open(path) as f:
        lines = f.read().split("\n")
    masked = code_mask(lines)
    out = []
    for n, (line, m) in enumerate(zip(lines, masked)):
        if skip_line(m):
            continue
        for tok in TOKEN.finditer(m):
            for old, new in SWAPS:
                if tok.group(0) != old:
                    continue
                mutated = line[:tok.start()] + new + line[tok.end():]
                out.append((n, line, mutated))
        for cond in CONDITION.finditer(m):
            open_at = cond.end() - 1
            depth, j = 0, open_at
            while j < len(m):
                depth += {"(": 1, ")": -1}.get(m[j], 0)
                if depth == 0:
                    break
                j += 1
            if j < len(m):
                mutated = (line[:open_at + 1] + "!(" + line[open_at + 1:j] +
                           ")" + line[j:])
                out.append((n, line, mutated))
        if (UPDATE.match(m) and not DECLARATION.match(m) and
                not m.lstrip().startswith(("return", "if", "for", "while", "}"))):
            indent = line[:len(line) - len(line.lstrip())]
            if not lines[n - 1].rstrip().endswith((")", "else")):
                out.append((n, line, indent + ";"))
        if FUNC_START.match(m) and n > 0 and ")" in lines[n - 1]:
            ret = early_return(lines, n)
            if ret:
                out.append((n, line, "{ " + ret))
    return lines, out


def run(cmd, timeout=None, **kw):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, text=True, **kw)
        return r.returncode, r.stdout
    except subprocess.TimeoutExpired as e:
        return "timeout", e.stdout or ""


class Mutator:
    def __init__(self, args):
        self.args = args
        self.path = os.path.join(TOP, args.file) if not os.path.isabs(args.file) else args.file
        self.rel = os.path.relpath(self.path, TOP)
        self.backup = self.path + ".mutate-orig"
        self.build = args.build
        self.targets = None

    def restore(self):
        if os.path.exists(self.backup):
            shutil.move(self.backup, self.path)

    def configure(self):
        rc, out = run(["cmake", "-S", TOP, "-B", self.build,
                       "-DCMAKE_BUILD_TYPE=Debug", "-DNPUSAN_SANITIZE=ON"])
        if rc != 0:
            sys.exit("mutate: cmake failed:\n" + out)
        rc, out = run(["ctest", "--test-dir", self.build, "-N", "-R", self.args.tests])
        names = re.findall(r"Test\s+#\d+:\s+(\S+)", out)
        if not names:
            sys.exit(f"mutate: no test matches '{self.args.tests}'")
        # A Check test is named after its target; the others (scripts) need
        # the whole build.
        rc, out = run(["cmake", "--build", self.build, "--target", "help"])
        known = set(re.findall(r"^\.\.\. (\S+)", out, re.M))
        self.targets = [n for n in names if n in known]
        self.whole = len(self.targets) != len(names)
        print(f"mutate: tests {', '.join(names)}", flush=True)

    def build_and_test(self):
        cmd = ["cmake", "--build", self.build, "-j", str(self.args.jobs)]
        if not self.whole:
            cmd += ["--target"] + self.targets
        rc, out = run(cmd)
        if rc != 0:
            return "uncompilable", out
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        rc, out = run(["ctest", "--test-dir", self.build, "-R", self.args.tests,
                       "--timeout", str(self.args.timeout), "-j", str(self.args.jobs)],
                      timeout=self.args.timeout * 4, env=env)
        return ("survived" if rc == 0 else "killed"), out

    def load_equivalent(self):
        eq = {}
        if self.args.equivalent:
            with open(self.args.equivalent) as f:
                for line in f:
                    line = line.rstrip("\n")
                    if not line.strip() or line.lstrip().startswith("#"):
                        continue
                    key, _, reason = line.partition(" # ")
                    eq[key.strip()] = reason.strip()
        return eq

    def main(self):
        self.restore()
        self.configure()
        status, out = self.build_and_test()
        if status != "survived":
            sys.exit(f"mutate: the tests fail without a mutant ({status}):\n{out[-3000:]}")
        lines, all_mutants = mutants(self.path)
        chosen = list(all_mutants)
        if self.args.max and len(chosen) > self.args.max:
            chosen = sorted(random.Random(self.args.seed).sample(chosen, self.args.max))
        equivalent = self.load_equivalent()
        print(f"mutate: {self.rel}: {len(chosen)} of {len(all_mutants)} mutants", flush=True)
        fates = {"killed": [], "survived": [], "uncompilable": [], "equivalent": []}
        shutil.copy2(self.path, self.backup)
        original = "\n".join(lines)
        start = time.monotonic()
        try:
            for i, (n, old, new) in enumerate(chosen, 1):
                key = f"{n + 1}: {old.strip()} -> {new.strip()}"
                if key in equivalent:
                    fates["equivalent"].append((key, equivalent[key]))
                    continue
                mutated = lines[:n] + [new] + lines[n + 1:]
                with open(self.path, "w") as f:
                    f.write("\n".join(mutated))
                status, _ = self.build_and_test()
                fates[status].append((key, ""))
                print(f"[{i}/{len(chosen)}] {status:12} {self.rel}:{key}", flush=True)
        finally:
            with open(self.path, "w") as f:
                f.write(original)  # a new mtime: make rebuilds it
            os.unlink(self.backup)
            # Rebuild the original so the build directory matches the tree.
            self.build_and_test()
        self.summary(fates, time.monotonic() - start)
        return 0

    def summary(self, fates, seconds):
        k, s = len(fates["killed"]), len(fates["survived"])
        rate = 100.0 * k / (k + s) if k + s else 0.0
        print(f"\nmutate: {self.rel}: {k} killed, {s} survived, "
              f"{len(fates['uncompilable'])} did not compile, "
              f"{len(fates['equivalent'])} equivalent: kill rate {rate:.1f}% "
              f"({seconds / 60:.1f} min)")
        for key, _ in fates["survived"]:
            print(f"survived: {self.rel}:{key}")
        for key, reason in fates["equivalent"]:
            print(f"equivalent: {self.rel}:{key} # {reason}")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", help="the C file to mutate, relative to the top")
    ap.add_argument("--tests", required=True, help="ctest -R regex of the tests to run")
    ap.add_argument("--build", default=os.path.join(TOP, "build", "mutate"))
    ap.add_argument("--max", type=int, default=0, help="sample at most N mutants")
    ap.add_argument("--seed", type=int, default=1, help="the sample's seed")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--equivalent", help="file of equivalent mutants to leave out")
    ap.add_argument("--list", action="store_true", help="print the mutants and stop")
    return ap.parse_args()


def main():
    args = parse_args()
    m = Mutator(args)
    if args.list:
        _, all_mutants = mutants(m.path)
        for n, old, new in all_mutants:
            print(f"{m.rel}:{n + 1}: {old.strip()} -> {new.strip()}")
        print(f"{len(all_mutants)} mutants")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        return m.main()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
