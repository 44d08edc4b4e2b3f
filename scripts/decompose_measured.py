#!/usr/bin/env python3
"""Split measured and predicted iteration times into their parts, per layout.

    scripts/decompose_measured.py OUT.json [--half calibration]

OUT.json is `tandem validate FILE.csv --json OUT.json`. Within one layout (tp, dp, pp,
hidden size, micro batch) vTrain's measured times are exactly c + d·L + m·(b + a·L) for L
layers and m microbatches (its ground truth composes measured parts), so a least-squares
fit over the layout's rows recovers:
  a  a layer's forward, recomputation and backward per microbatch (ms),
  b  the rest of a microbatch: embedding, logits, loss (ms),
  d  a layer's share of the step after the microbatches: optimizer, dp all-reduce (ms),
  c  the rest of the step (ms),
for the measured and the predicted times side by side, with the largest residual of each
fit (about 1e-9 ms for the measured pp 1 rows: the form is exact there). Layouts with
fewer than 5 distinct (L, m) pairs are skipped. Only the half named by --half is read
(default: calibration; the validation half is not for choosing parameters).
"""
import argparse
import json
import re
import sys


def parse(label):
    f = {k: int(v) for k, v in re.findall(r"(tp|dp|pp|h|L|mb|gb)(\d+)", label)}
    f["m"] = f["gb"] // (f["mb"] * f["dp"])
    return f


def least_squares(x, y):
    """Solves the normal equations of x·p ≈ y by Gauss-Jordan; None when singular."""
    n = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(n)] for i in range(n)]
    b = [sum(r[i] * v for r, v in zip(x, y)) for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(a[r][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        if abs(a[i][i]) < 1e-9:
            return None
        for r in range(n):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [a[r][c] - f * a[i][c] for c in range(n)]
                b[r] -= f * b[i]
    p = [b[i] / a[i][i] for i in range(n)]
    residual = max(abs(sum(ri * pi for ri, pi in zip(r, p)) - v) for r, v in zip(x, y))
    return p, residual


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--half", default="calibration", choices=["calibration", "validation"])
    a = ap.parse_args()
    with open(a.report) as f:
        rows = [r for r in json.load(f)["rows"] if r["half"] == a.half]
    layouts = {}
    for r in rows:
        f = parse(r["run"])
        layouts.setdefault((f["tp"], f["dp"], f["pp"], f["h"], f["mb"]), []).append((f, r))
    print(f"{a.half} half, ms: c + d·L + m·(b + a·L)")
    print(f"{'tp dp pp hidden mb':>20} {'rows':>4} | {'measured c d b a':>30} (resid) |"
          f" {'predicted c d b a':>30} (resid)")
    for key in sorted(layouts):
        group = layouts[key]
        if len({(f["L"], f["m"]) for f, _ in group}) < 5:
            continue
        x = [[1, f["L"], f["m"], f["m"] * f["L"]] for f, _ in group]
        fits = [least_squares(x, [r[k] for _, r in group]) for k in ("measured_ms", "predicted_ms")]
        if None in fits:
            continue
        parts = " | ".join("%7.2f %6.3f %6.2f %6.3f (%.1g)" % (*p, res) for p, res in fits)
        print(f"{' '.join(map(str, key)):>20} {len(group):>4} | {parts}")


if __name__ == "__main__":
    sys.exit(main())
