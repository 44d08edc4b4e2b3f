#!/usr/bin/env python3
"""Checks that every #include between tandem's folders follows the layering:

    core <- topology, schedules, model, kernels, data <- train <- sim, exec <- tools

sim/ (the SimGrid binding) and exec/ (the real bindings) both build on train/ and never
include each other; core/, schedules/ and model/ include no SimGrid, MPI, CUDA or NCCL
header. Exits 1 and names every file and include that crosses a rule.
Usage: check_includes.py [REPO_ROOT]
"""
import pathlib
import re
import sys

# folder -> the tandem folders its files may include (besides its own).
ALLOWED = {
    "core": set(),
    "topology": {"core"},
    "schedules": {"core"},
    "model": {"core"},
    "kernels": {"core"},
    "data": {"core"},
    "train": {"core", "schedules", "model", "data"},
    "sim": {"core", "topology", "schedules", "model", "train", "data"},
    "exec": {"core", "topology", "schedules", "model", "kernels", "train", "data"},
    "python": {"core", "topology", "schedules", "model", "train", "data", "sim", "tools"},
    "tools": None,  # the command line may include everything
    "tests": None,
}
# Third-party headers that only bindings may see: folder -> forbidden include prefixes.
BINDING_HEADERS = ("simgrid/", "mpi.h", "cuda", "cublas", "nccl.h")
PURE = {"core", "schedules", "model", "train", "data", "topology"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc", ".in"}


def check(root: pathlib.Path) -> list[str]:
    problems = []
    for folder, allowed in ALLOWED.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root)
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, header = m.groups()
                top = header.split("/", 1)[0]
                if kind == '"' and "/" in header and top in ALLOWED and top != folder:
                    if allowed is not None and top not in allowed:
                        problems.append(f"{rel}:{n}: includes \"{header}\": {folder}/ may "
                                        f"include only {sorted(allowed) or 'nothing of ours'}")
                if folder in PURE and header.startswith(BINDING_HEADERS):
                    problems.append(f"{rel}:{n}: includes <{header}>: {folder}/ is binding-"
                                    f"neutral and may not include SimGrid, MPI, CUDA or NCCL")
    return problems


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"include rules: {len(problems)} violation(s)")
        return 1
    print("include rules: every include follows the layering")
    return 0


if __name__ == "__main__":
    sys.exit(main())
