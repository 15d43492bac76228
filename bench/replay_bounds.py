#!/usr/bin/env python3
"""How much of Belady's lead over online policies any online policy could
take, on a routing trace (shared/traces schema):
  static top-C: keep the C experts most used over the whole trace (the best
                fixed cache, knowing the true popularity; on routing that is
                independent from token to token no online policy beats it);
  opt:          Belady's MIN on the trace as it is;
  opt shuffled: Belady's MIN on the same tokens in a random order (temporal
                locality destroyed, popularity kept).
If opt shuffled is close to opt, MIN's lead comes from knowing which experts
the next tokens pick (clairvoyance), not from locality a policy could learn.
  python3 bench/replay_bounds.py TRACE [--seed N]"""
import heapq, json, random, sys
from collections import Counter

def belady(keys, cap):
    nxt, seen = [0] * len(keys), {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = seen.get(keys[i], 1 << 62)
        seen[keys[i]] = i
    cached, heap, miss = {}, [], 0
    for i, k in enumerate(keys):
        if k not in cached:
            miss += 1
            while len(cached) >= cap:
                w, kk = heapq.heappop(heap)
                if cached.get(kk) == -w:
                    del cached[kk]
        cached[k] = nxt[i]
        heapq.heappush(heap, (-nxt[i], k))
    return miss

def main():
    path = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1
    d = json.load(open(path))
    E, L, X = d["n_expert"], d["n_layer"], d["experts"]
    toks = [[l * E + e for l in range(L) for e in X[t][l]] for t in range(len(X))]
    flat = [k for t in toks for k in t]
    order = list(range(len(toks)))
    random.Random(seed).shuffle(order)
    shuf = [k for i in order for k in toks[i]]
    freq = sorted(Counter(flat).values(), reverse=True)
    print("%s: %d tokens, %d x %d experts" % (path, len(X), L, E))
    print("%6s %6s %12s %8s %13s %22s" % ("slots", "share", "static top-C", "opt", "opt shuffled", "static misses / opt's"))
    for pct in (10, 20, 30, 40, 50):
        c = max(1, round(L * E * pct / 100))
        st = sum(freq[:c]) / len(flat)
        o = 1 - belady(flat, c) / len(flat)
        s = 1 - belady(shuf, c) / len(shuf)
        print("%6d %5d%% %11.1f%% %7.1f%% %12.1f%% %21.2fx" % (c, pct, 100 * st, 100 * o, 100 * s, (1 - st) / (1 - o)))

main()
