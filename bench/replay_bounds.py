#!/usr/bin/env python3
"""How much of Belady's lead over online policies any online policy could
take, on a routing trace (shared/traces schema):
  static top-C: keep the C experts most used over the whole trace (the best
                fixed cache, knowing the true popularity; on routing that is
                independent from token to token no online policy beats it);
  top-(C-K):    the same with K slots kept free: a store must hold a
                layer's K experts while they compute, so a miss takes a
                slot (static top-C never caches a miss);
  opt:          Belady's MIN on the trace as it is;
  opt shuffled: Belady's MIN on the same tokens in a random order (temporal
                locality destroyed, popularity kept);
  see K:        an online policy that knows the routing of the current and
                the next K tokens exactly and, beyond them, the true
                popularity of every expert (the whole trace's counts): it
                evicts an expert not used within that window, the least
                popular first, else the one used farthest in it.  A pilot
                predicts one layer ahead with ~80% precision, far less than
                K = 1 token of exact foresight, so see 1 / see 2 bound what
                any engine's cache can reach from predictions.
If opt shuffled is close to opt, MIN's lead comes from knowing which experts
the next tokens pick (clairvoyance), not from locality a policy could learn.
  python3 bench/replay_bounds.py TRACE [--seed N] [--see 1,2]"""
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

def foresight(toks, freq, cap, k):
    """Misses of the policy that sees tokens t..t+k exactly (see K above)."""
    flat = [x for t in toks for x in t]
    start, pos = [], 0
    for t in toks:
        start.append(pos)
        pos += len(t)
    start.append(pos)
    nxt, seen = [0] * len(flat), {}
    for i in range(len(flat) - 1, -1, -1):
        nxt[i] = seen.get(flat[i], 1 << 62)
        seen[flat[i]] = i
    nu, miss, i = {}, 0, 0
    for t, row in enumerate(toks):
        end = start[min(t + k + 1, len(toks))]
        for x in row:
            if x not in nu:
                miss += 1
                if len(nu) >= cap:
                    out = [y for y in nu if nu[y] >= end]
                    v = min(out, key=lambda y: freq[y]) if out else max(nu, key=nu.get)
                    del nu[v]
            nu[x] = nxt[i]
            i += 1
    return miss

def main():
    path = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1
    see = [int(x) for x in sys.argv[sys.argv.index("--see") + 1].split(",")] if "--see" in sys.argv else [1, 2]
    d = json.load(open(path))
    E, L, X = d["n_expert"], d["n_layer"], d["experts"]
    toks = [[l * E + e for l in range(L) for e in X[t][l]] for t in range(len(X))]
    flat = [k for t in toks for k in t]
    order = list(range(len(toks)))
    random.Random(seed).shuffle(order)
    shuf = [k for i in order for k in toks[i]]
    count = Counter(flat)
    freq = sorted(count.values(), reverse=True)
    print("%s: %d tokens, %d x %d experts" % (path, len(X), L, E))
    print("hit rates; the last columns: misses / opt's")
    K = d["n_expert_used"]
    head = "%6s %6s %9s %12s %8s %13s" % ("slots", "share", "top-(C-K)", "static top-C", "opt", "opt shuffled")
    head += "".join(" %7s" % ("see %d" % k) for k in see) + " %8s" % "static/"
    head += "".join(" %7s" % ("see %d/" % k) for k in see)
    print(head)
    for pct in (10, 20, 30, 40, 50):
        c = max(1, round(L * E * pct / 100))
        st = sum(freq[:c]) / len(flat)
        sk = sum(freq[:max(0, c - K)]) / len(flat)
        om = belady(flat, c)
        o = 1 - om / len(flat)
        s = 1 - belady(shuf, c) / len(shuf)
        fm = [foresight(toks, count, c, k) for k in see]
        row = "%6d %5d%% %8.1f%% %11.1f%% %7.1f%% %12.1f%%" % (c, pct, 100 * sk, 100 * st, 100 * o, 100 * s)
        row += "".join(" %6.1f%%" % (100 - 100 * m / len(flat)) for m in fm)
        row += " %7.2fx" % ((1 - st) / (1 - o)) + "".join(" %6.2fx" % (m / om) for m in fm)
        print(row)

main()
