#!/usr/bin/env python3
"""The include-rule checker itself: a tree that follows the layering passes, and each kind
of crossing (sim/ including exec/, exec/ including sim/, model/ including MPI) fails and is
named. Usage: test_check_includes.py CHECKER"""
import pathlib
import subprocess
import sys
import tempfile

checker = sys.argv[1]


def run(files: dict[str, str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            p = pathlib.Path(d, name)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        return subprocess.run([sys.executable, checker, d], capture_output=True, text=True)


ok = run({"sim/a.cpp": '#include "train/trainer.hpp"\n#include "core/tensor.hpp"\n',
          "exec/b.cpp": '#include "train/trainer.hpp"\n#include <mpi.h>\n'})
assert ok.returncode == 0, ok.stdout
for files, needle in [
    ({"sim/a.cpp": '#include "exec/cpu/cpu_device.hpp"\n'}, "sim/a.cpp:1"),
    ({"exec/b.cpp": '  #  include "sim/sim_device.hpp"\n'}, "exec/b.cpp:1"),
    ({"model/c.hpp": '#include <mpi.h>\n'}, "model/c.hpp:1"),
    ({"train/d.cpp": '\n#include "exec/mpi/mpi_runtime.hpp"\n'}, "train/d.cpp:2"),
]:
    bad = run(files)
    assert bad.returncode == 1, (files, bad.stdout)
    assert needle in bad.stdout, (needle, bad.stdout)
print("check_includes: 1 clean tree passes, 4 crossings caught")
