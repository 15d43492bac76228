// The official clients against sluice serve: the `openai` and
// `@anthropic-ai/sdk` npm packages (installed by tests/cli/serve.sh into
// $SLUICE_NPM_DIR).  Expects a server at $SLUICE_URL with key $SLUICE_KEY,
// the bundled model and --max-body 1M.
import {createRequire} from "node:module";
import {URL_, KEY, test, assert, eq, post, failed, skip} from "./lib.mjs";

const req = createRequire(process.env.SLUICE_NPM_DIR + "/package.json");
const OpenAI = req("openai").default || req("openai");
const AnthropicMod = req("@anthropic-ai/sdk");
const Anthropic = AnthropicMod.default || AnthropicMod;

const oa = new OpenAI({baseURL: URL_ + "/v1", apiKey: KEY, maxRetries: 0});
const an = new Anthropic({baseURL: URL_, apiKey: KEY, maxRetries: 0});
const msgs = [{role: "system", content: "You are a storyteller."}, {role: "user", content: "Tell me about the old house."}];

await test("openai: models.list names the served model", async () => {
  const list = await oa.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  eq(ids, ["tinymoe"], "model ids");
});

let greedy;
await test("openai: chat non-stream (greedy), usage", async () => {
  const r = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 24, temperature: 0});
  greedy = r.choices[0].message.content;
  assert(typeof greedy === "string" && greedy.length > 0, "empty content");
  eq(r.choices[0].finish_reason, "length", "finish_reason");
  eq(r.usage.completion_tokens, 24, "completion tokens");
  assert(r.usage.prompt_tokens > 10 && r.usage.total_tokens === r.usage.prompt_tokens + 24, "usage sums");
  assert(r.usage.prompt_tokens_details && typeof r.usage.prompt_tokens_details.cached_tokens === "number",
         "cached_tokens missing");
});

await test("openai: chat stream equals non-stream, usage chunk with include_usage", async () => {
  const s = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 24, temperature: 0,
                                              stream: true, stream_options: {include_usage: true}});
  let text = "", usage = null, finish = null, role = null;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta.role) role = ch.delta.role;
    if (ch.delta.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  eq(role, "assistant", "role");
  eq(text, greedy, "streamed text");
  eq(finish, "length", "finish_reason");
  assert(usage && usage.completion_tokens === 24, "usage in stream: " + JSON.stringify(usage));
  assert(usage.prompt_tokens_details.cached_tokens > 0, "the repeated prompt reused no prefix");
});

await test("openai: stop strings (string and list) end the text before them", async () => {
  const words = greedy.trim().split(/\s+/);
  const stop = words[Math.min(3, words.length - 1)];
  const r = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 24, temperature: 0, stop});
  const want = greedy.slice(0, greedy.indexOf(stop));
  eq(r.choices[0].message.content, want, "text before the stop string");
  eq(r.choices[0].finish_reason, "stop", "finish_reason");
  const r2 = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 24, temperature: 0,
                                               stop: ["\u2603never", stop]});
  eq(r2.choices[0].message.content, want, "list of stop strings");
});

await test("openai: seed reproducibility at temperature 0.7", async () => {
  const ask = (seed) => oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 32,
                                                    temperature: 0.7, seed}).then((r) => r.choices[0].message.content);
  const a = await ask(42), b = await ask(42), c = await ask(7);
  eq(a, b, "same seed");
  assert(a !== c, "another seed gave the same 32 tokens: " + a);
});

await test("openai: completions (text, echo, logprobs, stream)", async () => {
  const prompt = "Once upon a time";
  const r = await oa.completions.create({model: "tinymoe", prompt, max_tokens: 12, temperature: 0, logprobs: 2});
  const t = r.choices[0].text;
  assert(t.length > 0, "no text");
  eq(r.choices[0].logprobs.tokens.join(""), t, "logprob tokens spell the text");
  assert(r.choices[0].logprobs.token_logprobs.every((x) => x <= 0), "log probabilities above 0");
  assert(r.choices[0].logprobs.top_logprobs.every((o) => Object.keys(o).length >= 1), "top logprobs");
  const e = await oa.completions.create({model: "tinymoe", prompt, max_tokens: 12, temperature: 0, echo: true});
  eq(e.choices[0].text, prompt + t, "echo");
  const s = await oa.completions.create({model: "tinymoe", prompt, max_tokens: 12, temperature: 0, stream: true});
  let st = "";
  for await (const c of s) st += c.choices[0] ? c.choices[0].text : "";
  eq(st, t, "streamed completion");
});

await test("openai: chat logprobs / top_logprobs", async () => {
  const r = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 8, temperature: 0,
                                              logprobs: true, top_logprobs: 3});
  const lp = r.choices[0].logprobs.content;
  eq(lp.length, 8, "one entry per token");
  eq(lp.map((x) => x.token).join(""), r.choices[0].message.content, "tokens spell the content");
  for (const x of lp) {
    assert(x.top_logprobs.length === 3, "3 alternatives");
    assert(Math.abs(x.top_logprobs[0].logprob - x.logprob) < 1e-6, "greedy token is the most likely");
  }
});

// A tool-call round trip on a template with tools (the server runs Qwen3's
// template here via --chat-template-file): the tools and an assistant
// tool-call turn plus its result render as transformers renders them, and
// the reply to the tool result comes back.
await test("openai: tool-call round trip (tools, tool_calls, tool result)", async () => {
  const tools = [{type: "function", function: {name: "get_weather", description: "Weather of a city",
                  parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}}}];
  const conv = [{role: "user", content: "Weather in Bern?"}];
  const r1 = await oa.chat.completions.create({model: "tinymoe", messages: conv, tools, max_tokens: 8, temperature: 0});
  const m = r1.choices[0].message;
  assert(m.role === "assistant", "reply role");
  const call = m.tool_calls && m.tool_calls.length ? m.tool_calls[0]
    : {id: "call_1", type: "function", function: {name: "get_weather", arguments: "{\"city\":\"Bern\"}"}};
  const conv2 = conv.concat([{role: "assistant", content: null, tool_calls: [call]},
                             {role: "tool", tool_call_id: call.id, content: "{\"temp_c\": 3}"}]);
  const tpl = await post("/apply-template", {messages: conv2, tools});
  eq(tpl.status, 200, "apply-template status");
  const p = tpl.json.prompt;
  assert(p.includes("<tools>\n" + JSON.stringify(tools[0]).replace(/,/g, ", ").replace(/:/g, ": ") + "\n</tools>"),
         "tools not rendered as the template's <tools> block: " + p.slice(0, 300));
  const args = JSON.parse(call.function.arguments);
  assert(p.includes("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " +
                    JSON.stringify(args).replace(/,/g, ", ").replace(/:/g, ": ") + "}\n</tool_call>"),
         "the tool call is not rendered in the template's syntax");
  assert(p.includes("<tool_response>\n{\"temp_c\": 3}\n</tool_response>"), "tool result not rendered");
  assert(p.endsWith("<|im_start|>assistant\n"), "no generation prompt");
  const r2 = await oa.chat.completions.create({model: "tinymoe", messages: conv2, tools, max_tokens: 8, temperature: 0});
  assert(typeof r2.choices[0].message.content === "string", "no answer to the tool result");
});

// tool_choice "required" and a named tool: a grammar makes the reply one call
// in the template's syntax (Qwen3's, here) whose arguments fit the schema.
await test("openai: tool_choice required / named forces a call that fits the tool's schema", async () => {
  const tools = [{type: "function", function: {name: "pick_city", description: "Pick a city",
                  parameters: {type: "object", properties: {city: {enum: ["Oslo", "Paris"]}}, required: ["city"]}}},
                 {type: "function", function: {name: "now", parameters: {type: "object", properties: {}}}}];
  for (const choice of ["required", {type: "function", function: {name: "pick_city"}}]) {
    const r = await oa.chat.completions.create({model: "tinymoe", messages: msgs, tools, tool_choice: choice,
                                                max_tokens: 200, temperature: 0});
    const c = r.choices[0];
    eq(c.finish_reason, "tool_calls", "finish_reason for " + JSON.stringify(choice) + " (" +
       JSON.stringify(c.message).slice(0, 160) + ")");
    const call = c.message.tool_calls[0].function;
    if (typeof choice === "object") eq(call.name, "pick_city", "name");
    const args = JSON.parse(call.arguments);
    if (call.name === "pick_city") assert(["Oslo", "Paris"].includes(args.city), "arguments " + call.arguments);
    else eq(call.name, "now", "name");
  }
});

// The tiny model does not close a free-form object reliably (it writes one
// string forever), so json_object is held to "the output is the start of an
// object, and a whole one when it stopped"; a bounded json_schema must close.
await test("openai: response_format json_object constrains the reply to a JSON object", async () => {
  const r = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 60, temperature: 0,
                                              response_format: {type: "json_object"}});
  const c = r.choices[0];
  assert(/^\s*\{/.test(c.message.content), "does not start an object: " + c.message.content.slice(0, 80));
  if (c.finish_reason === "stop") {
    const o = JSON.parse(c.message.content);
    assert(o && typeof o === "object" && !Array.isArray(o), "not an object");
  } else eq(c.finish_reason, "length", "finish_reason");
});

await test("openai: response_format json_schema gives JSON valid under the schema", async () => {
  const schema = {type: "object", properties: {name: {type: "string", maxLength: 12}, age: {type: "integer"},
                                               pet: {enum: ["cat", "dog"]}}, required: ["name", "age", "pet"]};
  const r = await oa.chat.completions.create({model: "tinymoe", messages: msgs, max_tokens: 300, temperature: 0,
                                              response_format: {type: "json_schema", json_schema: {name: "p", schema}}});
  const c = r.choices[0];
  eq(c.finish_reason, "stop", "finish_reason (the object did not close: " + c.message.content.slice(0, 80) + ")");
  const o = JSON.parse(c.message.content);
  assert(typeof o.name === "string" && o.name.length <= 12, "name: " + JSON.stringify(o));
  assert(Number.isInteger(o.age) && ["cat", "dog"].includes(o.pet), "age / pet: " + JSON.stringify(o));
  eq(Object.keys(o).join(","), "name,age,pet", "properties");
});

async function expectError(name, fn, status, param) {
  await test(name, async () => {
    try { await fn(); } catch (e) {
      eq(e.status, status, "status");
      if (param !== undefined) eq(e.param ?? (e.error && e.error.param), param, "error param");
      return;
    }
    throw new Error("no error");
  });
}

await expectError("openai: wrong API key is 401", () =>
  new OpenAI({baseURL: URL_ + "/v1", apiKey: "wrong", maxRetries: 0}).models.list(), 401);
await test("openai: missing API key is 401", async () => {
  const r = await fetch(URL_ + "/v1/chat/completions", {method: "POST", body: JSON.stringify({model: "m", messages: msgs})});
  eq(r.status, 401, "status");
  eq((await r.json()).error.code, "invalid_api_key", "error code");
});
await expectError("openai: 400 names the field (temperature)", () =>
  oa.chat.completions.create({model: "tinymoe", messages: msgs, temperature: "hot"}), 400, "temperature");
await expectError("openai: 400 names the field (messages[1].role)", () =>
  oa.chat.completions.create({model: "tinymoe", messages: [msgs[0], {role: "wizard", content: "x"}]}), 400, "messages[1].role");
await expectError("openai: 400 for empty messages", () =>
  oa.chat.completions.create({model: "tinymoe", messages: []}), 400, "messages");
await expectError("openai: 400 for n = 2", () =>
  oa.chat.completions.create({model: "tinymoe", messages: msgs, n: 2}), 400, "n");
await expectError("openai: 400 for a prompt longer than the context", () =>
  oa.chat.completions.create({model: "tinymoe", messages: [{role: "user", content: "word ".repeat(2000)}]}), 400, "messages");
await expectError("openai: 413 over --max-body", () =>
  oa.chat.completions.create({model: "tinymoe", messages: [{role: "user", content: "x".repeat(1100000)}]}), 413);

await test("anthropic: messages non-stream", async () => {
  const r = await an.messages.create({model: "tinymoe", max_tokens: 16, temperature: 0, system: "You are a storyteller.",
                                      messages: [{role: "user", content: "Tell me about the old house."}]});
  eq(r.type, "message", "type");
  eq(r.role, "assistant", "role");
  eq(r.stop_reason, "max_tokens", "stop_reason");
  eq(r.content[0].type, "text", "block type");
  eq(r.usage.output_tokens, 16, "output tokens");
  assert(r.content[0].text === greedy.slice(0, r.content[0].text.length) && r.content[0].text.length > 0,
         "the same greedy text as the OpenAI route: " + r.content[0].text);
});

await test("anthropic: messages stream (message_start .. message_stop), stop_sequences", async () => {
  const stream = an.messages.stream({model: "tinymoe", max_tokens: 16, temperature: 0, system: "You are a storyteller.",
                                     messages: [{role: "user", content: "Tell me about the old house."}]});
  const types = [];
  let text = "";
  stream.on("streamEvent", (e) => types.push(e.type));
  stream.on("text", (t) => { text += t; });
  const final = await stream.finalMessage();
  eq(types[0], "message_start", "first event");
  eq(types[types.length - 1], "message_stop", "last event");
  assert(types.includes("content_block_start") && types.includes("content_block_delta") &&
         types.includes("content_block_stop") && types.includes("message_delta"), "events: " + types.join(","));
  eq(final.content[0].text, text, "final text");
  const word = text.trim().split(/\s+/)[2];
  const r = await an.messages.create({model: "tinymoe", max_tokens: 16, temperature: 0, system: "You are a storyteller.",
                                      stop_sequences: [word],
                                      messages: [{role: "user", content: "Tell me about the old house."}]});
  eq(r.stop_reason, "stop_sequence", "stop_reason");
  eq(r.stop_sequence, word, "stop_sequence");
});

await test("anthropic: tool_use / tool_result blocks render through the template", async () => {
  const r = await an.messages.create({model: "tinymoe", max_tokens: 4, temperature: 0,
    tools: [{name: "get_weather", description: "Weather of a city", input_schema: {type: "object", properties: {city: {type: "string"}}}}],
    messages: [{role: "user", content: "Weather in Bern?"},
               {role: "assistant", content: [{type: "tool_use", id: "toolu_1", name: "get_weather", input: {city: "Bern"}}]},
               {role: "user", content: [{type: "tool_result", tool_use_id: "toolu_1", content: "3 degrees"}]}]});
  eq(r.type, "message", "type");
});

await test("anthropic: errors in Anthropic's shape", async () => {
  const r = await post("/v1/messages", {model: "m", messages: [{role: "user", content: "hi"}]});
  eq(r.status, 400, "status");
  eq(r.json.type, "error", "type");
  eq(r.json.error.type, "invalid_request_error", "error type");
  assert(r.json.error.message.includes("max_tokens"), "message names max_tokens");
});

process.exit(failed() ? 1 : 0);
