// Shared by the server tests: the ok / not ok / skip lines tests/run.sh
// counts, and small HTTP helpers (fetch, raw sockets).
import net from "node:net";

export const URL_ = process.env.SLUICE_URL;
export const KEY = process.env.SLUICE_KEY || "";
let fails = 0;

export function ok(name) { console.log(`ok ${name}`); }
export function notok(name, why) { console.log(`not ok ${name}: ${String(why).replace(/\n/g, " ").slice(0, 400)}`); fails++; }
export function skip(name, why) { console.log(`skip ${name}: ${why}`); }
export function failed() { return fails; }

// Runs FN as case NAME: ok when it returns, not ok with the error when it throws.
export async function test(name, fn) {
  try { await fn(); ok(name); } catch (e) { notok(name, e && e.stack ? e.message : e); }
}

export function assert(cond, msg) { if (!cond) throw new Error(msg); }
export function eq(a, b, what) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`${what}: ${sa.slice(0, 200)} != ${sb.slice(0, 200)}`);
}

export function headers(extra = {}) {
  const h = {"Content-Type": "application/json", ...extra};
  if (KEY) h.Authorization = `Bearer ${KEY}`;
  return h;
}

export async function post(path, body, extra = {}) {
  const r = await fetch(URL_ + path, {method: "POST", headers: headers(extra),
                                      body: typeof body === "string" ? body : JSON.stringify(body)});
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return {status: r.status, json, text, headers: r.headers};
}

export async function get(path) {
  const r = await fetch(URL_ + path, {headers: headers()});
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return {status: r.status, json, text};
}

// A raw TCP connection to the server (for slow, truncated and abandoned requests).
export function rawConnect() {
  const u = new URL(URL_);
  return new Promise((res, rej) => {
    const s = net.connect({host: u.hostname, port: Number(u.port)}, () => res(s));
    s.on("error", rej);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Server-sent events of a streaming POST, as parsed JSON objects (and the
// [DONE] marker as the string "[DONE]").
export async function sse(path, body) {
  const r = await fetch(URL_ + path, {method: "POST", headers: headers(), body: JSON.stringify(body)});
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const text = await r.text();
  const events = [];
  for (const block of text.split("\n\n")) {
    const line = block.split("\n").find((l) => l.startsWith("data: "));
    if (!line) continue;
    const d = line.slice(6);
    events.push(d === "[DONE]" ? d : JSON.parse(d));
  }
  return events;
}
