#!/usr/bin/env python3
"""Replays K policies over build/draft_bound's per-step dump (issue 9;
docs/DRAFT.md, "A new machine, and what a K policy can know").

    THREADS=1 DUMP=build/bench/dump sh bench/draft.sh bound
    python3 bench/draft_policy.py build/bench/dump.ngram.jsonl [SEQS]

Every step of a dump has the target's plain step, the n-gram lookup's
proposal length, its match length (draft_proposal.match) and how many of
its ids the greedy text keeps, and the verification's time for each K.
Each policy walks the text as the engine would (a verification that keeps
j drafts moves j + 1 tokens on) and is scored as the plain steps' sum over
its time, the speedup `sluice run --draft ngram` would measure with these
costs.  Costs are each K's median over the dump (a policy prices a pass
before it runs), the times charged are the step's own.

  oracle       knows how many drafts every step keeps (draft_bound's bound)
  K=k          k drafts whenever the lookup has some
  class table  the best K per match class, fitted in hindsight over the
               same steps (optimistic: it is fitted where it is scored)
  hindsight    the engine's rule (most expected tokens per predicted second,
               3% margin over a plain step) with every class's true mean
               tokens per K known: the most learning could give it
  learned      the engine's rule with what it learns as the text comes
               (src/decode/spec.c: decayed per-depth counts per class,
               shadows of plain steps, a plain step every 16 drafted)

Only the lookup's proposals are replayed (a dump made with --draft holds
the model's too, for the tool's own bounds).  With SEQS (the "P id id ..."
lines draft.sh feeds the tool, kept as OUT/bound.SET.seqs) it also
prints the mean run a lookup's proposal keeps when the earlier occurrence
is the latest (sluice's) or the one whose preceding text agrees longest.
"""
import json
import statistics
import sys

KMAX, DECAY, MARGIN, PLAIN_EVERY = 16, 0.97, 1.03, 16


def match_class(m):
    return 0 if m <= 1 else 1 if m < 8 else 2 if m < 16 else 3


def load(path):
    return [json.loads(line)["steps"] for line in open(path)]


def median_costs(seqs):
    by_k = {k: [s["verify"][0][k - 1] for q in seqs for s in q if s["have"][0] >= k] for k in range(1, KMAX + 1)}
    c = {k: statistics.median(v) for k, v in by_k.items() if v}
    c[0] = statistics.median(s["plain"] for q in seqs for s in q)
    return c


def walk(seq, choose, observe=None):
    """Time of one text under CHOOSE(step) -> K (0: a plain step)."""
    t, j = 0.0, 0
    while j < len(seq):
        s = seq[j]
        k = min(choose(s), s["have"][0]) if s["have"][0] else 0
        if observe:
            observe(s, k)
        t += s["verify"][0][k - 1] if k else s["plain"]
        j += 1 + min(k, s["keep"][0]) if k else 1
    return t


def oracle(seq):
    f = [0.0] * (len(seq) + 1)
    for j in range(len(seq) - 1, -1, -1):
        s, n = seq[j], len(seq)
        f[j] = s["plain"] + f[j + 1]
        for k in range(1, s["have"][0] + 1):
            f[j] = min(f[j], s["verify"][0][k - 1] + f[min(n, j + 1 + min(k, s["keep"][0]))])
    return f[0]


def best_k(tokens, costs):
    """The engine's rule: the most tokens per second, a plain step unless drafting promises MARGIN more."""
    best, bk = MARGIN / costs[0], 0
    for k in range(1, KMAX + 1):
        if k in costs and tokens[k] / costs[k] > best:
            best, bk = tokens[k] / costs[k], k
    return bk


class Learner:
    """Decayed counts of acceptance per class and depth, as src/decode/spec.c keeps them."""

    def __init__(self):
        self.kept = [[0.0] * KMAX for _ in range(4)]
        self.tried = [[0.0] * KMAX for _ in range(4)]
        self.since_plain = 0

    def tokens(self, c):
        prior = (sum(k[0] for k in self.kept) + 1) / (sum(t[0] for t in self.tried) + 2)
        out, run = [1.0], 1.0
        for d in range(KMAX):
            a = (self.kept[c][d] + 2 * prior) / (self.tried[c][d] + 2)
            run *= a
            out.append(out[-1] + run)
            prior = a
        return out

    def see(self, c, n, keep):
        for d in range(n):
            self.kept[c][d] = self.kept[c][d] * DECAY + (d < keep)
            self.tried[c][d] = self.tried[c][d] * DECAY + 1
            if d >= keep:
                break


def learned_time(seq, costs):
    lr = Learner()

    def choose(s):
        k = best_k(lr.tokens(match_class(s["match"])), costs)
        if k:
            lr.since_plain += 1
            if lr.since_plain >= PLAIN_EVERY:
                lr.since_plain, k = 0, 0
        return k

    def observe(s, k):  # a plain step's lookup is checked as a shadow, to its full length
        if s["have"][0]:
            lr.see(match_class(s["match"]), k or s["have"][0], s["keep"][0])

    return walk(seq, choose, observe)


def class_table(seqs, plain):
    """Coordinate ascent over one K per match class."""
    table = {c: 4 for c in range(4)}

    def score():
        return plain / sum(walk(q, lambda s: table[match_class(s["match"])]) for q in seqs)

    for _ in range(3):
        for c in range(4):
            best = (0.0, 0)
            for k in range(KMAX + 1):
                table[c] = k
                best = max(best, (score(), k))
            table[c] = best[1]
    return score(), table


def lookup_runs(path):
    """Mean kept run over every step: the latest earlier occurrence against the best-agreeing one."""
    runs = {"latest": [], "longest context": []}
    for line in open(path):
        v = list(map(int, line.split()))
        p, h = v[0], v[1:]
        for n in range(p + 1, len(h)):
            for size in range(4, 0, -1):
                occ = [j for j in range(n - size - 1, -1, -1) if h[j:j + size] == h[n - size:n]]
                if not occ:
                    continue
                back = lambda j: next((e for e in range(size, 64) if j + size <= e or h[j + size - 1 - e] != h[n - 1 - e]), 64)
                for how, j in (("latest", occ[0]), ("longest context", max(occ, key=lambda o: (back(o), o)))):
                    out = []
                    for k in range(KMAX):
                        at = j + size + k
                        out.append(h[at] if at < n else out[at - n])
                    keep = 0
                    while keep < KMAX and n + keep < len(h) and out[keep] == h[n + keep]:
                        keep += 1
                    runs[how].append(keep)
                break
    for how, r in runs.items():
        print("  lookup, %-15s mean kept run %.2f, first draft kept %.3f (%d steps)" %
              (how, statistics.mean(r), sum(x > 0 for x in r) / len(r), len(r)))


def main():
    seqs = load(sys.argv[1])
    costs = median_costs(seqs)
    plain = sum(s["plain"] for q in seqs for s in q)
    print("%d texts, %d steps; median pass / plain step:" % (len(seqs), sum(map(len, seqs))),
          " ".join("%d:%.2f" % (k, costs[k] / costs[0]) for k in sorted(costs) if k))
    print("  oracle      %.3fx" % (plain / sum(oracle(q) for q in seqs)))
    print("  fixed K     " + " ".join("K=%d %.3fx" % (k, plain / sum(walk(q, lambda s: k) for q in seqs)) for k in (1, 2, 4, 8, 16)))
    score, table = class_table(seqs, plain)
    print("  class table %.3fx  K by match class (1, 2-7, 8-15, 16+): %s" % (score, [table[c] for c in range(4)]))
    keeps = {c: [s["keep"][0] for q in seqs for s in q if s["have"][0] and match_class(s["match"]) == c] for c in range(4)}
    mean_tok = {c: [1 + statistics.mean(min(x, k) for x in v) if v else 1 for k in range(KMAX + 1)] for c, v in keeps.items()}
    hind = sum(walk(q, lambda s: best_k(mean_tok[match_class(s["match"])], costs)) for q in seqs)
    print("  hindsight   %.3fx" % (plain / hind))
    print("  learned     %.3fx" % (plain / sum(learned_time(q, costs) for q in seqs)))
    if len(sys.argv) > 2:
        lookup_runs(sys.argv[2])


if __name__ == "__main__":
    main()
