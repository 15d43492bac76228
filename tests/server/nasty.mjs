// Hostile and unlucky clients: malformed and truncated JSON, wrong types in
// every field, huge bodies, a slowloris, 50 concurrent clients, a client
// that leaves mid-stream.  Expects a server at $SLUICE_URL (key $SLUICE_KEY)
// started with --queue $SLUICE_QUEUE and --max-body 1M.
import {URL_, KEY, test, assert, eq, post, get, rawConnect, sleep, failed} from "./lib.mjs";

const QUEUE = Number(process.env.SLUICE_QUEUE || 4);
const user = [{role: "user", content: "Tell me about the old house."}];
const base = {model: "tinymoe", messages: user, max_tokens: 8, temperature: 0};

await test("nasty: malformed and truncated JSON are 400 with a reason", async () => {
  const full = JSON.stringify(base);
  for (const body of ["", "{", "nope", "[1,2]", "{\"messages\": [}", full.slice(0, full.length - 3), "\"str\"", "null",
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800\"}]}",
                      "{\"a\":1,\"a\":2,\"messages\":[]}", "{\"messages\": \"\u0000\"}"]) {
    const r = await post("/v1/chat/completions", body);
    eq(r.status, 400, `status for ${JSON.stringify(body).slice(0, 40)}`);
    assert(r.json && r.json.error && r.json.error.message.length > 5, "no error message for " + body.slice(0, 40));
  }
});

const wrong = {
  messages: [5, {}, "x", [[]]], model: [1, {}], stream: ["yes", 1], temperature: ["hot", -1, 9, {}],
  top_p: ["a", 2], top_k: ["a", 1.5, -1], max_tokens: ["a", -1, 1.5], max_completion_tokens: ["a", -3],
  seed: ["a", 1.5], stop: [5, [1], [""], {}], n: [2, "a"], presence_penalty: ["a", 5], frequency_penalty: [9],
  response_format: ["json", {type: "xml"}, {type: 5}], logprobs: ["a"], top_logprobs: ["a", 99],
  tools: ["a", [1], [{function: {}}]], tool_choice: [5, "required"], chat_template_kwargs: ["a", [1]],
  stream_options: ["a", {include_usage: "y"}], reasoning_effort: [5], min_p: [2],
};

await test("nasty: a wrong type or value in every field is 400 naming it", async () => {
  for (const [field, values] of Object.entries(wrong)) {
    for (const v of values) {
      const body = {...base, [field]: v};
      if (field === "top_logprobs") body.logprobs = true;
      const r = await post("/v1/chat/completions", body);
      eq(r.status, 400, `${field} = ${JSON.stringify(v)}: status`);
      const p = r.json.error.param || "";
      assert(p === field || p.startsWith(field + "[") || p.startsWith(field + "."),
             `${field} = ${JSON.stringify(v)}: param ${p} (${r.json.error.message})`);
    }
  }
  const msgFields = [{role: 5, content: "x"}, {role: "user", content: 5}, {role: "user"},
                     {role: "assistant", content: "x", tool_calls: "x"}, {role: "user", content: [{type: "image_url"}]},
                     {role: "tool", content: "x", tool_call_id: 5}];
  for (const m of msgFields) {
    const r = await post("/v1/chat/completions", {...base, messages: [m]});
    eq(r.status, 400, `message ${JSON.stringify(m)}`);
    assert((r.json.error.param || "").startsWith("messages[0]"), `param ${r.json.error.param}`);
  }
  const anth = [{max_tokens: "a"}, {max_tokens: 0}, {messages: [{role: "system", content: "x"}]},
                {system: 5}, {stop_sequences: "x"}, {messages: [{role: "user", content: [{type: "bogus"}]}]},
                {tools: [{input_schema: 5}]}];
  for (const a of anth) {
    const r = await post("/v1/messages", {model: "m", max_tokens: 4, messages: user, ...a});
    eq(r.status, 400, `anthropic ${JSON.stringify(a)}`);
    eq(r.json.type, "error", "anthropic error shape");
  }
  for (const [path, body] of [["/v1/completions", {prompt: 5}], ["/v1/completions", {}], ["/tokenize", {content: 5}],
                              ["/detokenize", {tokens: ["a"]}], ["/detokenize", {tokens: [1e9]}],
                              ["/apply-template", {messages: 5}]]) {
    const r = await post(path, body);
    eq(r.status, 400, `${path} ${JSON.stringify(body)}`);
  }
});

await test("nasty: 10 MB bodies are 413 (with and without Content-Length)", async () => {
  const big = JSON.stringify({...base, messages: [{role: "user", content: "x".repeat(10 << 20)}]});
  const r = await post("/v1/chat/completions", big);
  eq(r.status, 413, "status");
  // chunked: no Content-Length, the limit applies as the bytes arrive
  const s = await rawConnect();
  let resp = "";
  s.on("data", (d) => { resp += d; });
  s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
          "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
  const chunk = "x".repeat(1 << 20);
  for (let i = 0; i < 10 && !s.destroyed; i++) s.write(chunk.length.toString(16) + "\r\n" + chunk + "\r\n");
  if (!s.destroyed) s.write("0\r\n\r\n");
  for (let i = 0; i < 100 && !resp.includes("\r\n\r\n"); i++) await sleep(50);
  s.destroy();
  assert(resp.startsWith("HTTP/1.1 413"), "chunked answer: " + resp.slice(0, 60));
});

await test("nasty: 404, 405, and the API's error shape", async () => {
  const r = await post("/v1/nope", {});
  eq(r.status, 404, "404");
  const g = await get("/v1/chat/completions");
  eq(g.status, 405, "405");
  assert(g.json.error.message.includes("POST"), "405 says which method");
});

await test("nasty: a slowloris (a byte a second) does not hold up other clients", async () => {
  const s = await rawConnect();
  const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"mess";
  let i = 0;
  const timer = setInterval(() => { if (!s.destroyed && i < head.length) s.write(head[i++]); }, 1000);
  s.on("error", () => {});
  await sleep(1500);
  const t0 = Date.now();
  const r = await post("/v1/chat/completions", base);
  const dt = Date.now() - t0;
  clearInterval(timer);
  s.destroy();
  eq(r.status, 200, "status");
  assert(dt < 20000, `served in ${dt} ms`);
});

const long = {...base, max_tokens: 400, stream: true};

await test("nasty: a client that disconnects mid-stream stops its generation; the next is served at once", async () => {
  const before = (await get("/metrics")).text.match(/sluice_generated_tokens_total (\d+)/)[1];
  const ctrl = new AbortController();
  const r = await fetch(URL_ + "/v1/chat/completions", {method: "POST", headers: {Authorization: `Bearer ${KEY}`,
    "Content-Type": "application/json"}, body: JSON.stringify(long), signal: ctrl.signal});
  const reader = r.body.getReader();
  await reader.read();
  await reader.read();
  ctrl.abort();
  const t0 = Date.now();
  const n = await post("/v1/chat/completions", base);
  const dt = Date.now() - t0;
  eq(n.status, 200, "next request");
  const after = (await get("/metrics")).text.match(/sluice_generated_tokens_total (\d+)/)[1];
  const spent = Number(after) - Number(before) - n.json.usage.completion_tokens;
  assert(spent < 100, `the abandoned generation went on for ${spent} tokens`);
  assert(dt < 15000, `next request took ${dt} ms`);
});

await test("nasty: a non-stream client that disconnects cancels its generation", async () => {
  const before = (await get("/metrics")).text.match(/sluice_generated_tokens_total (\d+)/)[1];
  const s = await rawConnect();
  const body = JSON.stringify({...base, max_tokens: 400});
  s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  /* leave as soon as the generation runs: on a quiet machine all 400
     tokens of the tiny model take well under a second */
  const t0 = Date.now();
  while (!/sluice_requests_processing 1/.test((await get("/metrics")).text) && Date.now() - t0 < 10000) await sleep(5);
  s.destroy();
  await sleep(300);
  const n = await post("/v1/chat/completions", base);
  eq(n.status, 200, "next request");
  const after = (await get("/metrics")).text.match(/sluice_generated_tokens_total (\d+)/)[1];
  const spent = Number(after) - Number(before) - n.json.usage.completion_tokens;
  assert(spent < 300, `the abandoned generation ran ${spent} tokens`);
});

// One long generation holds the model while 50 clients arrive: QUEUE of
// them wait, the others get 429.  If the long one ended before all 50 had
// arrived (a loaded machine), the round does not count and runs again.
async function fifty(want) {
  const ctrl = new AbortController();
  const hold = await fetch(URL_ + "/v1/chat/completions", {method: "POST", signal: ctrl.signal,
    headers: {Authorization: `Bearer ${KEY}`, "Content-Type": "application/json"},
    body: JSON.stringify({...base, max_tokens: 470, stream: true})});
  const reader = hold.body.getReader();
  await reader.read(); /* it runs */
  let holdEnd = 0;
  const drained = (async () => { for (;;) { const {done} = await reader.read(); if (done) break; } holdEnd = Date.now(); })();
  const rs = await Promise.all(Array.from({length: 50}, () => post("/v1/chat/completions", base)
    .then((r) => ({...r, at: Date.now()}))));
  await drained;
  const busy = rs.filter((r) => r.status === 429);
  const lastBusy = Math.max(0, ...busy.map((r) => r.at));
  return {rs, valid: busy.length > 0 && lastBusy < holdEnd};
}

await test(`nasty: 50 concurrent clients: ${QUEUE} wait, the rest get 429, every accepted answer is right`, async () => {
  const ref = await post("/v1/chat/completions", base);
  eq(ref.status, 200, "reference");
  const want = ref.json.choices[0].message.content;
  let round;
  for (let i = 0; i < 3; i++) if ((round = await fifty(want)).valid) break;
  assert(round.valid, "the long generation never outlasted the 50 arrivals");
  const rs = round.rs;
  const okays = rs.filter((r) => r.status === 200), busy = rs.filter((r) => r.status === 429);
  eq(okays.length + busy.length, 50, "only 200 and 429: " + rs.map((r) => r.status).join(","));
  eq(okays.length, QUEUE, `accepted with --queue ${QUEUE}`);
  for (const r of okays) eq(r.json.choices[0].message.content, want, "accepted answer");
  for (const r of busy) eq(r.json.error.type, "rate_limit_error", "429 body");
});

await test("nasty: /metrics is Prometheus text with the engine's figures", async () => {
  const m = (await get("/metrics")).text;
  for (const k of ["requests_total", "queue_depth", "requests_processing", "prompt_tokens_total", "generated_tokens_total",
                   "decode_tokens_per_second", "expert_bytes_read", "expert_cache_hit_rate", "prefetch_recall",
                   "draft_acceptance"])
    assert(new RegExp(`^# TYPE sluice_${k} (counter|gauge)$`, "m").test(m) && new RegExp(`^sluice_${k} [0-9.e+-]+$`, "m").test(m), k);
});

process.exit(failed() ? 1 : 0);
