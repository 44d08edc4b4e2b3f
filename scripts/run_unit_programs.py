#!/usr/bin/env python3
"""Runs a build tree's tests labelled `unit` one program at a time instead of one ctest
process per test: scripts/run_unit_programs.py BUILD_DIR [JOBS]

ctest starts each GoogleTest case in a process of its own; under AddressSanitizer that
start-up costs about 0.25 s, which over the ~600 unit tests is minutes of the suite. The
cases are the ones ctest would run (its --show-only=json-v1 listing, label `unit`), grouped
by program, each program run once with the cases joined into one --gtest_filter. Programs
holding a RUN_SERIAL case run alone, after the others. Non-GoogleTest commands run as ctest
would run them. Prints one line per program, the output of any that fails, and exits 1 if
one did.
"""
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def listing(build_dir):
    out = subprocess.run(
        ["ctest", "--test-dir", build_dir, "-L", "unit", "--show-only=json-v1"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def props(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def programs(tests):
    """[(label, argv, cwd, serial, cases)]: one per GoogleTest program, one per other test."""
    groups, others = {}, []
    for t in tests:
        cmd, p = t["command"], props(t)
        cwd = p.get("WORKING_DIRECTORY")
        serial = bool(p.get("RUN_SERIAL", False))
        filters = [a[len("--gtest_filter="):] for a in cmd if a.startswith("--gtest_filter=")]
        if not filters:
            others.append((t["name"], cmd, cwd, serial, 1))
            continue
        g = groups.setdefault((cmd[0], cwd), {"cases": [], "serial": False})
        g["cases"].append(filters[0])
        g["serial"] |= serial
    out = []
    for (exe, cwd), g in groups.items():
        # A filter's first '-' starts its negative patterns: a case name holding one
        # could not be joined.
        assert not any("-" in c or ":" in c for c in g["cases"]), g["cases"]
        argv = [exe, "--gtest_filter=" + ":".join(g["cases"]), "--gtest_also_run_disabled_tests"]
        name = exe.rsplit("/", 1)[-1]
        out.append((f"{name} ({len(g['cases'])} tests)", argv, cwd, g["serial"], len(g["cases"])))
    return out + others


def run(entry):
    label, argv, cwd = entry[0], entry[1], entry[2]
    start = time.monotonic()
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    return label, r.returncode, time.monotonic() - start, r.stdout + r.stderr


def report(res, note=""):
    status = "ok    " if res[1] == 0 else "FAILED"
    print(f"  {res[2]:7.1f} s  {status}  {res[0]}{note}", flush=True)


def main():
    build_dir = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    entries = programs(listing(build_dir))
    if not entries:
        print(f"no unit tests in {build_dir}")
        return 1
    results = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for res in pool.map(run, [e for e in entries if not e[3]]):
            results.append(res)
            report(res)
    for e in [e for e in entries if e[3]]:
        res = run(e)
        results.append(res)
        report(res, " (alone)")
    failed = [r for r in results if r[1] != 0]
    for label, rc, _, output in failed:
        print(f"\n==== {label}: exit {rc}\n{output}")
    cases = sum(e[4] for e in entries)
    print(f"{cases} unit tests in {len(entries)} programs: "
          f"{len(entries) - len(failed)} programs passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
