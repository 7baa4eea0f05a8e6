#!/usr/bin/env python3
"""Reduces the per-CTA lines that the diagnostic patches sm90-diag-b1-timeline.patch and
sm90-diag-b1-timeline-fine.patch print (`DG ...`, and `DH ...` for the fine one) to a table: each step's time from the
CTA's entry in microseconds, min / median / max over the CTAs of the last launch that had work.
Usage: mlakit bench --backend cuda_sm90 --kv-format bf16 --batch 1 --heads 16 --ctx L --iters 3 > out.txt
       python3 sm90-diag-b1-timeline.py out.txt"""
import statistics
import sys

DG = ["plan done", "all first-tile TMA issued", "last TMA issued", "producer done", "Q arrived (S)",
      "tile 0 Q K^T done", "S loop end", "S end", "V end", "kernel end", "barriers initialised", "pdl_wait done",
      "producer starts", "first piece begins", "first empty barrier passed", "first table entry read",
      "first part's TMA issued"]
DH = ["producer setmaxnreg done", "tensor-map prefetch issued", "S setmaxnreg done", "V setmaxnreg done",
      "tile 0 half 0 landed (S)", "tile 0 half 1 landed (S)", "tile 0 RoPE landed (S)", "second part's TMA issued"]


def last_launch(rows):
    n = max(int(r[1]) for r in rows) + 1
    last = {int(r[1]): r for r in rows[-n:]}
    if sorted(last) != list(range(n)):
        sys.exit("the last lines are not one whole launch")
    return n, last


def main(path):
    lines = [l.split() for l in open(path)]
    n, dg = last_launch([l for l in lines if l[:1] == ["DG"]])
    dh_rows = [l for l in lines if l[:1] == ["DH"]]
    dh = last_launch(dh_rows)[1] if dh_rows else {}
    g0 = {c: int(r[2]) for c, r in dg.items()}
    g1 = {c: int(r[3]) for c, r in dg.items()}
    cyc = {c: [int(x) for x in r[4:]] for c, r in dg.items()}
    ghz = statistics.median(cyc[c][9] / (g1[c] - g0[c]) for c in cyc)  # cycles per ns from entry to end
    work = [c for c in cyc if cyc[c][1] > 0]  # CTAs that issued a TMA
    print(f"{len(work)} of {n} CTAs with work, SM clock ~{ghz:.2f} GHz, kernel span "
          f"{(max(g1.values()) - min(g0.values())) / 1e3:.2f} us; us from each CTA's entry: min / median / max")
    steps = [(name, [cyc[c][k] for c in work]) for k, name in enumerate(DG)]
    if dh:
        steps += [(name, [int(dh[c][2 + k]) for c in work]) for k, name in enumerate(DH)]
    for name, v in sorted(steps, key=lambda s: statistics.median(s[1])):
        us = [x / ghz / 1e3 for x in v]
        print(f"  {name:30s} {min(us):8.2f} {statistics.median(us):8.2f} {max(us):8.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
