#!/usr/bin/env python3
"""Residuals of `tandem validate FILE.csv --json OUT.json` by factor, for one half.

    scripts/residuals_by_factor.py OUT.json [--half calibration] [--by tp,dp,pp,h,mb,L,m]
        [--cross tp,mb] [--rows FILTER]

Reads the per-row errors (predicted − measured) / measured and the breakdown that
`tandem validate --json` writes, parses each row's label ("8 GPUs tp2 dp2 pp2 h1024 L24 mb4
gb32"), and prints for each factor and each of its values: the number of rows, the median
and mean signed error and the median |error| — what a systematic error looks like — then
the same over the pairs of --cross. m is the number of microbatches, gb / (mb · dp).
Only the half named by --half is read (default: calibration; the validation half is
not for choosing parameters). --rows "tp==8 and mb==1" prints the matching rows with
their breakdown (Python expression over the factor names).
"""
import argparse
import json
import re
import statistics
import sys


def parse(label):
    f = dict((k, int(v)) for v, k in [(m.group(2), m.group(1)) for m in
                                       re.finditer(r"(tp|dp|pp|h|L|mb|gb)(\d+)", label)])
    f["m"] = f["gb"] // (f["mb"] * f["dp"])
    return f


def table(rows, keys):
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r["f"][k] for k in keys), []).append(r["error_percent"])
    out = []
    for key in sorted(groups):
        e = groups[key]
        out.append((key, len(e), statistics.median(e), statistics.mean(e),
                    statistics.median([abs(x) for x in e])))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("json")
    p.add_argument("--half", default="calibration")
    p.add_argument("--by", default="tp,dp,pp,h,mb,L,m")
    p.add_argument("--cross", default="tp,mb")
    p.add_argument("--rows", default="")
    a = p.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    rows = [r for r in data["rows"] if r["half"] == a.half and r.get("error_percent") is not None]
    for r in rows:
        r["f"] = parse(r["run"])
    if not rows:
        sys.exit(f"no rows of the {a.half} half in {a.json}")
    errs = [r["error_percent"] for r in rows]
    ae = sorted(abs(e) for e in errs)
    print(f"{a.half} half: {len(rows)} rows, |error| median {statistics.median(ae):.2f} %, "
          f"p90 {ae[int(0.9 * (len(ae) - 1))]:.2f} %, max {ae[-1]:.2f} %; signed median "
          f"{statistics.median(errs):+.2f} %")
    for k in a.by.split(","):
        print(f"\nby {k}: value rows median mean median|e|")
        for key, n, med, mean, mae in table(rows, [k]):
            print(f"  {k}={key[0]:<6} {n:4d} {med:+7.2f} {mean:+7.2f} {mae:6.2f}")
    if a.cross:
        keys = a.cross.split(",")
        print(f"\nby {'×'.join(keys)}: rows median mean median|e|")
        for key, n, med, mean, mae in table(rows, keys):
            name = " ".join(f"{k}={v}" for k, v in zip(keys, key))
            print(f"  {name:<24} {n:4d} {med:+7.2f} {mean:+7.2f} {mae:6.2f}")
    if a.rows:
        print(f"\nrows with {a.rows}:")
        for r in rows:
            if eval(a.rows, {}, dict(r["f"])):
                b = r.get("breakdown", {})
                comp = {k: round(v * 1e3, 1) for k, v in b.get("compute_seconds", {}).items()}
                exp = {k: round(v * 1e3, 1) for k, v in b.get("exposed_seconds", {}).items() if v}
                print(f"  line {r['line']:5d} {r['run']:<44} meas {r['measured_ms']:8.1f} pred "
                      f"{r['predicted_ms']:8.1f} {r['error_percent']:+6.1f} %  compute {comp} host "
                      f"{b.get('host_bound_seconds', 0) * 1e3:.1f} exposed {exp} bubble "
                      f"{b.get('pipeline_bubble_seconds', 0) * 1e3:.1f} peer "
                      f"{b.get('peer_wait_seconds', 0) * 1e3:.1f}")


if __name__ == "__main__":
    main()
