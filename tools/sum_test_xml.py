#!/usr/bin/env python3
"""Sums individual test cases from Bazel's test.xml files.

Usage: sum_test_xml.py --testlogs DIR //pkg:target ... [--testlogs DIR2 //pkg:t ...]
(one group per Bazel run, e.g. the normal one and the --config=asan one; the
old form "sum_test_xml.py DIR //pkg:target ..." still works). Prints "N passed, N failed" as its last line; exits 1 when anything failed or
a target has no XML (a target that did not run counts as one failure).
"""
import os
import sys
import xml.etree.ElementTree as ET


def count(xml_path):
    """Returns (passed, failed) for one target's test.xml."""
    root = ET.parse(xml_path).getroot()
    passed = failed = 0
    cases = list(root.iter("testcase"))
    for case in cases:
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        else:
            passed += 1
    # A binary that crashed or timed out may leave a suite-level error and no
    # failing case: count the target as one failure.
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    suite_errors = sum(int(s.get("errors", "0") or 0) + int(s.get("failures", "0") or 0)
                       for s in suites[:1])
    if failed == 0 and suite_errors > 0:
        failed = 1
    return passed, failed


def groups(args):
    """Yields (testlogs_dir, target) pairs from the command line."""
    if args and args[0] != "--testlogs":
        args = ["--testlogs"] + args
    testlogs = None
    i = 0
    while i < len(args):
        if args[i] == "--testlogs":
            testlogs = args[i + 1]
            i += 2
            continue
        yield testlogs, args[i]
        i += 1


def main(argv):
    passed = failed = 0
    for testlogs, target in groups(argv[1:]):
        pkg, _, name = target.lstrip("/").partition(":")
        xml_path = os.path.join(testlogs, pkg, name, "test.xml")
        if not os.path.exists(xml_path):
            print(f"no test.xml for {target}", file=sys.stderr)
            failed += 1
            continue
        try:
            p, f = count(xml_path)
        except ET.ParseError as e:
            print(f"unreadable {xml_path}: {e}", file=sys.stderr)
            p, f = 0, 1
        if f:
            print(f"FAILED cases in {target}: {f}", file=sys.stderr)
        passed += p
        failed += f
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
