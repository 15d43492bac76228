#!/usr/bin/env python3
"""Benchmarks of `sluice serve` (docs/SERVER.md).  Run on a quiet machine:

  python3 bench/serve_bench.py ttft     [--model M] [--ctx 4608] [--tokens 4000]
  python3 bench/serve_bench.py load     [--model M] [--clients 8] [--requests 200]
  python3 bench/serve_bench.py overhead [--model M] [--n 128] [--reps 5]
  python3 bench/serve_bench.py all

ttft: time to first token of a follow-up turn of a TOKENS-token conversation,
      cold (no reuse), with prefix reuse (the server kept the conversation),
      and after a restart with --kv-dir (restored from disk).
load: requests/s and p50 / p99 latency of short requests from CLIENTS
      concurrent clients (the rest wait in the queue: one generation at a time).
overhead: the same greedy generation through `sluice run` and through the
      server (one request at a time), alternating; decode tok/s and wall time.
Only the standard library; the server binary is build/sluice."""
import argparse, json, os, signal, statistics, subprocess, sys, tempfile, threading, time, urllib.request

BIN = os.environ.get("SLUICE_BIN", "build/sluice")


class Server:
    def __init__(self, args, extra=()):
        self.dir = tempfile.mkdtemp(prefix="sluice-bench-")
        port_file = os.path.join(self.dir, "port")
        cmd = [BIN, "serve", "--port", "0", "--ready-file", port_file, "--queue", "64"]
        if args.model: cmd += ["-m", args.model]
        cmd += list(extra)
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.p = subprocess.Popen(cmd, stderr=self.log, stdout=self.log)
        for _ in range(6000):
            if os.path.exists(port_file) and open(port_file).read().strip():
                self.url = "http://127.0.0.1:" + open(port_file).read().strip()
                try:
                    if json.load(urllib.request.urlopen(self.url + "/health")).get("status") == "ok": return
                except Exception:
                    pass
            if self.p.poll() is not None: break
            time.sleep(0.05)
        raise SystemExit("server did not start: " + open(os.path.join(self.dir, "log")).read())

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait()

    def post(self, path, body):
        r = urllib.request.Request(self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(r, timeout=3600))

    def ttft(self, body):
        """Seconds to the first content chunk of a streamed chat request, and the usage."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        r = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps(body).encode(),
                                   {"Content-Type": "application/json"})
        t0 = time.monotonic()
        first, usage = None, None
        with urllib.request.urlopen(r, timeout=3600) as f:
            for line in f:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]": continue
                j = json.loads(line[6:])
                if j.get("usage"): usage = j["usage"]
                ch = j.get("choices") or [{}]
                d = ch[0].get("delta", {}) if ch else {}
                if first is None and (d.get("content") or d.get("reasoning_content")): first = time.monotonic() - t0
        return first, usage


def conversation(srv, tokens):
    """A system + user + assistant history of about TOKENS tokens, and a follow-up user turn."""
    para = ("The keeper of the lighthouse wrote in his log every evening: the wind, the colour of the sea, "
            "the ships that passed and the birds that rested on the rail. ")
    per = len(srv.post("/tokenize", {"content": para})["tokens"])
    reps = max(1, tokens // per // 2)
    hist = [{"role": "system", "content": "You are a patient archivist."},
            {"role": "user", "content": "Here is the log: " + para * reps},
            {"role": "assistant", "content": "Thank you. " + para * reps}]
    return hist, {"role": "user", "content": "What did he write about the birds?"}


def cmd_ttft(a):
    kv = tempfile.mkdtemp(prefix="sluice-bench-kv-")
    ctx = ["-c", str(a.ctx)]
    s = Server(a, ctx + ["--kv-dir", kv])
    hist, q = conversation(s, a.tokens)
    body = {"messages": hist + [q], "max_tokens": 8, "temperature": 0}
    cold, u = s.ttft(body)  # first time: the whole conversation is prefilled
    reply = s.post("/v1/chat/completions", body)["choices"][0]["message"]["content"]
    follow = {"messages": hist + [q, {"role": "assistant", "content": reply},
                                  {"role": "user", "content": "And about the ships?"}], "max_tokens": 8, "temperature": 0}
    reuse, ur = s.ttft(follow)
    s.stop()
    s2 = Server(a, ctx)  # no --kv-dir: nothing to reuse
    nore, un = s2.ttft(follow)
    s2.stop()
    s3 = Server(a, ctx + ["--kv-dir", kv])  # restarted: the saved context is restored
    kvt, uk = s3.ttft(follow)
    s3.stop()
    n = un["prompt_tokens"]
    print(f"ttft of a follow-up turn, {n}-token conversation (first turn cold: {cold:.3f} s, {u['prompt_tokens']} tokens)")
    print(f"  without prefix reuse:        {nore:8.3f} s  (cached {un['prompt_tokens_details']['cached_tokens']})")
    print(f"  with prefix reuse:           {reuse:8.3f} s  (cached {ur['prompt_tokens_details']['cached_tokens']})")
    print(f"  after a restart, --kv-dir:   {kvt:8.3f} s  (cached {uk['prompt_tokens_details']['cached_tokens']})")


def cmd_load(a):
    s = Server(a)
    body = {"messages": [{"role": "user", "content": "Say something short."}], "max_tokens": a.max_tokens,
            "temperature": 0}
    s.post("/v1/chat/completions", body)  # warm
    lat, lock, left = [], threading.Lock(), [a.requests]

    def client():
        while True:
            with lock:
                if left[0] == 0: return
                left[0] -= 1
            t0 = time.monotonic()
            s.post("/v1/chat/completions", body)
            with lock: lat.append(time.monotonic() - t0)

    t0 = time.monotonic()
    th = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in th: t.start()
    for t in th: t.join()
    wall = time.monotonic() - t0
    s.stop()
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    print(f"{a.requests} requests of {a.max_tokens} tokens from {a.clients} clients: {a.requests / wall:.2f} req/s, "
          f"p50 {p(0.50) * 1e3:.0f} ms, p99 {p(0.99) * 1e3:.0f} ms")


def cmd_overhead(a):
    prompt = "Once upon a time, in a little house by the sea, there lived"
    s = Server(a)
    run, srv_w, run_tps, srv_tps = [], [], [], []
    for _ in range(a.reps):
        stats = os.path.join(s.dir, "stats.json")
        cmd = [BIN, "run", "-p", prompt, "-n", str(a.n), "--temp", "0", "--ignore-eos", "--stats-json", stats]
        if a.model: cmd += ["-m", a.model]
        t0 = time.monotonic()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        run.append(time.monotonic() - t0)
        run_tps.append(json.load(open(stats)).get("decode_tps", 0))
        t0 = time.monotonic()
        r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": a.n, "temperature": 0, "ignore_eos": True})
        srv_w.append(time.monotonic() - t0)
        srv_tps.append(r["timings"]["predicted_per_second"])
        s.post("/v1/completions", {"prompt": "Unrelated.", "max_tokens": 1})  # no reuse next round
    s.stop()
    m = statistics.median
    print(f"decode tok/s, median of {a.reps}: run {m(run_tps):.2f}, serve {m(srv_tps):.2f} "
          f"(serve overhead {100 * (1 - m(srv_tps) / m(run_tps)):+.2f}%)")
    print(f"wall s (run includes loading the model): run {m(run):.3f}, serve request {m(srv_w):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ttft", "load", "overhead", "all"])
    ap.add_argument("--model")
    ap.add_argument("--ctx", type=int, default=4608)
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    for w in (["ttft", "load", "overhead"] if a.what == "all" else [a.what]):
        {"ttft": cmd_ttft, "load": cmd_load, "overhead": cmd_overhead}[w](a)


if __name__ == "__main__":
    main()
