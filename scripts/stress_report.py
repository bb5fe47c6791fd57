#!/usr/bin/env python3
"""Reads the output of ctest --repeat (scripts/test.sh --stress) and prints,
for each test, how many times it ran and how often it failed; exits 1 when any
test failed.

    stress_report.py CTEST_OUTPUT_FILE
"""
import collections
import re
import sys

# "  3/78 Test #12: name ....   Passed    1.00 sec" (the count only on a test's last run); a
# case of a parameterised GoogleTest suite is followed by its parameter ("name  # GetParam() = ...").
RESULT = re.compile(r"Test\s+#\d+: (\S+)(?:\s+#.*?)? \.{3,}\s*(\*{0,3})(\w+)")


def main(path):
    runs, failures = collections.Counter(), collections.defaultdict(collections.Counter)
    with open(path, errors="replace") as f:
        for line in f:
            m = RESULT.search(line)
            if not m:
                continue
            name, verdict = m.group(1), m.group(3)
            runs[name] += 1
            if verdict != "Passed":
                failures[name][verdict] += 1
    if not runs:
        sys.exit(f"stress_report: no test results in {path}")
    print(f"stress: {len(runs)} tests, {sum(runs.values())} runs, "
          f"{sum(sum(c.values()) for c in failures.values())} failed")
    for name in sorted(failures):
        how = ", ".join(f"{n} {verdict.lower()}" for verdict, n in failures[name].items())
        print(f"stress: FAILED {name}: {how} of {runs[name]} runs")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
