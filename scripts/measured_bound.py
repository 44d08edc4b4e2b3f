#!/usr/bin/env python3
"""The least error the measured runs themselves force on any cost model.

    scripts/measured_bound.py BUILD/tools/tandem [--csv scenarios/measured/vtrain_single_node.csv]
        [--topology dgx-a100-80g] [--half validation] [--vocab 50257] [--heads-rule 4]
        [--ignore-alignment] [--top 10]

Row A is dominated by row B when every op of A's iteration is no larger than B's:
  - the same layers, microbatches per iteration (global batch / (micro batch · dp)), dp, pp,
    sequence length and heads: the same schedule, the same number of each op;
  - A's micro batch, hidden size, hidden / tp and micro batch / tp no larger than B's: every
    GEMM dimension, attention batch (micro batch · heads / tp), head dimension, element count
    and message size of A is at most B's;
  - A's tp at least B's (the output layer's vocabulary / tp rows), A issuing a tensor-parallel
    all-reduce only where B does (tp > 1 for both, or tp 1 for A), and A's all-reduce no slower
    than B's in the topology's nccl-tests table (`tandem nccl-tests`, bytes micro batch ·
    sequence · hidden · 2);
  - A running Megatron's fused causal softmax where B does (micro batch · heads / tp a
    multiple of --heads-rule, as Megatron's kernel requires), so A has no kernel B lacks;
  - A's output-layer rows (vocabulary / tp) at least as aligned as B's (a multiple of 8, 4, 2
    or 1 elements: cuBLAS's narrow-load kernels), unless --ignore-alignment.
Any cost model in which an op does not get faster by growing predicts A no slower than B. If
A was measured slower (mA > mB), the model errs by at least (mA - mB) / (mA + mB) on one of
the two rows: predicting both at 2·mA·mB / (mA + mB) errs by exactly that on each, and any
other pair of predictions with pA <= pB errs more on one of them.

Prints the dominated pairs measured in reverse order, largest forced error first, within the
chosen half (a row is in the calibration half when the FNV-1a 64 hash of its raw CSV line is
even, as `tandem validate` splits) or over all rows (--half both). Nothing is simulated.
"""
import argparse
import csv
import subprocess
import sys

COLUMNS = {"gpus": "# GPUs", "gb": "global batch", "mb": "micro batch", "h": "hidden size",
           "heads": "attention heads", "L": "# layers", "seq": "sequence length",
           "tp": "tensor parallelism", "dp": "data parallelism", "pp": "pipeline parallelism",
           "ms": "iteration time (ms)"}


def fnv1a64(text):
    value = 14695981039346656037
    for byte in text.encode():
        value = ((value ^ byte) * 1099511628211) % (1 << 64)
    return value


def read_rows(path):
    with open(path, newline="") as f:
        lines = [line.rstrip("\r\n") for line in f]
    header = next(csv.reader(lines[:1]), [])
    missing = [v for v in COLUMNS.values() if v not in header]
    if missing:
        raise SystemExit(f"{path}: header lacks the column(s) {', '.join(map(repr, missing))}")
    index = {k: header.index(v) for k, v in COLUMNS.items()}
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = next(csv.reader([line]))
        row = {}
        for k, i in index.items():
            text = cells[i] if i < len(cells) else ""
            try:
                row[k] = float(text) if k == "ms" else int(text)
            except ValueError:
                raise SystemExit(f"{path}:{number}: column {COLUMNS[k]!r} = {text!r}: "
                                 f"must be {'a number' if k == 'ms' else 'an integer'}")
            if row[k] <= 0:
                raise SystemExit(f"{path}:{number}: column {COLUMNS[k]!r} = {text!r}: must be > 0")
        row["line"] = number
        row["half"] = "calibration" if fnv1a64(line) % 2 == 0 else "validation"
        row["m"] = row["gb"] // (row["mb"] * row["dp"])
        rows.append(row)
    return rows


def alignment(n):
    return next(a for a in (8, 4, 2, 1) if n % a == 0)


class AllReduceTable:
    """All-reduce times from `tandem nccl-tests` for the topology, asked for once each."""

    def __init__(self, tandem, topology):
        self.tandem, self.topology, self.cache = tandem, topology, {}

    def seconds(self, ranks, size):
        key = (ranks, size)
        if key not in self.cache:
            done = subprocess.run(
                [self.tandem, "nccl-tests", "--collective", "all_reduce", "--group-size",
                 str(ranks), "--bytes", f"{size}:{size}", "--topology", self.topology],
                capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{self.tandem} nccl-tests (group {ranks}, {size} bytes, "
                                 f"topology {self.topology}) failed: {done.stderr.strip()}")
            out = done.stdout
            times = [float(f[3]) for f in (line.split() for line in out.splitlines())
                     if len(f) > 3 and f[0] == str(size)]
            if not times:
                raise SystemExit(f"no row for {size} bytes in: tandem nccl-tests\n{out}")
            self.cache[key] = times[0] * 1e-6
        return self.cache[key]


def dominated(a, b, args, table):
    """Whether every op of row a's iteration is no larger than row b's (see the module doc)."""
    if any(a[k] != b[k] for k in ("L", "m", "dp", "pp", "seq", "heads")):
        return False
    if a["mb"] > b["mb"] or a["h"] > b["h"] or a["h"] * b["tp"] > b["h"] * a["tp"]:
        return False
    if a["mb"] * b["tp"] > b["mb"] * a["tp"] or a["tp"] < b["tp"]:
        return False
    fused = lambda r: (r["mb"] * r["heads"] // r["tp"]) % args.heads_rule == 0
    if fused(b) and not fused(a):
        return False
    if a["tp"] > 1:
        if b["tp"] == 1:
            return False
        message = lambda r: r["mb"] * r["seq"] * r["h"] * 2
        if table.seconds(a["tp"], message(a)) > table.seconds(b["tp"], message(b)):
            return False
    if not args.ignore_alignment and \
            alignment(args.vocab // a["tp"]) < alignment(args.vocab // b["tp"]):
        return False
    return True


def label(r):
    return (f"line {r['line']}: {r['gpus']} GPUs tp{r['tp']} dp{r['dp']} pp{r['pp']} "
            f"h{r['h']} L{r['L']} mb{r['mb']} gb{r['gb']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("tandem")
    ap.add_argument("--csv", default="scenarios/measured/vtrain_single_node.csv")
    ap.add_argument("--topology", default="dgx-a100-80g")
    ap.add_argument("--half", default="validation", choices=["calibration", "validation", "both"])
    ap.add_argument("--vocab", type=int, default=50257,
                    help="vocabulary of every row (vTrain's GPT-2 tokenizer, unpadded)")
    ap.add_argument("--heads-rule", type=int, default=4,
                    help="Megatron's fused softmax needs micro batch · heads / tp a multiple of this")
    ap.add_argument("--ignore-alignment", action="store_true",
                    help="drop the output layer's alignment rule")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    for name in ("vocab", "heads_rule", "top"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} = {getattr(args, name)}: must be > 0")
    rows = [r for r in read_rows(args.csv) if args.half == "both" or r["half"] == args.half]
    table = AllReduceTable(args.tandem, args.topology)
    table.seconds(2, 1 << 20)  # a bad binary or topology fails here, before any pair
    pairs, reversed_pairs = 0, []
    for a in rows:
        for b in rows:
            if a is b or not dominated(a, b, args, table):
                continue
            pairs += 1
            if a["ms"] > b["ms"]:
                reversed_pairs.append(((a["ms"] - b["ms"]) / (a["ms"] + b["ms"]), a, b))
    reversed_pairs.sort(key=lambda p: -p[0])
    print(f"{args.half} half: {len(rows)} rows, {pairs} dominated pairs, "
          f"{len(reversed_pairs)} measured in reverse order")
    for bound, a, b in reversed_pairs[:args.top]:
        print(f"  {100 * bound:5.1f} %  {label(a)}  {a['ms']:.1f} ms  <=  "
              f"{label(b)}  {b['ms']:.1f} ms")
    top = 100 * reversed_pairs[0][0] if reversed_pairs else 0.0
    print(f"least max |error| any monotone cost model can reach on these rows: >= {top:.1f} %")


if __name__ == "__main__":
    sys.exit(main())
