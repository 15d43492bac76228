#!/bin/sh
# sluice serve (docs/SERVER.md): the official openai and @anthropic-ai/sdk
# clients, hostile clients, the web page in headless Chromium, greedy output
# equal to `sluice run` token for token (also with prefix reuse and after a
# --kv-dir restore), SIGTERM mid-generation, --timeout.  The test set-up
# installs what is missing: Debian nodejs, npm and chromium (as root), and
# the npm clients into $SLUICE_NPM_DIR (default build/npm, gitignored).
. tests/cli_lib.sh
need_python "serve"
NPM_DIR=${SLUICE_NPM_DIR:-$(pwd)/build/npm}
export SLUICE_NPM_DIR="$NPM_DIR"
SERVER_PID=

# Debian package PKG providing command CMD, installed when missing and root.
apt_updated=
need_deb() {
    command -v "$2" >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || return 1
    export DEBIAN_FRONTEND=noninteractive
    [ -n "$apt_updated" ] || { apt-get update -q >/dev/null 2>&1; apt_updated=1; }
    apt-get install -y -q "$1" >/dev/null 2>&1
    command -v "$2" >/dev/null 2>&1
}

npm_ready() {
    [ -d "$NPM_DIR/node_modules/openai" ] && [ -d "$NPM_DIR/node_modules/@anthropic-ai/sdk" ] &&
        [ -d "$NPM_DIR/node_modules/puppeteer-core" ] && return 0
    mkdir -p "$NPM_DIR" || return 1
    # puppeteer-core downloads no browser: Debian's chromium is used
    (cd "$NPM_DIR" && timeout 600 npm install --no-audit --no-fund --loglevel=error --prefix . \
        openai @anthropic-ai/sdk puppeteer-core >"$T/npm.log" 2>&1)
}

# Starts `sluice serve ARGS...` on a free port; sets URL and SERVER_PID.
start() {
    rm -f "$T/port"
    "$BIN" serve --port 0 --ready-file "$T/port" "$@" >"$T/server.log" 2>&1 &
    SERVER_PID=$!
    i=0
    while [ $i -lt 600 ]; do
        if [ -s "$T/port" ] && curl -sf "http://127.0.0.1:$(cat "$T/port")/health" >/dev/null 2>&1; then
            URL="http://127.0.0.1:$(cat "$T/port")"
            return 0
        fi
        kill -0 $SERVER_PID 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    echo "server did not come up:" >&2
    cat "$T/server.log" >&2
    return 1
}

# Stops the server with SIGTERM; fails unless it exits 0 (and, under ASan,
# without a report).
stop() {
    kill -TERM $SERVER_PID 2>/dev/null
    wait $SERVER_PID
    rc=$?
    SERVER_PID=
    cat "$T/server.log" >>"$T/all-servers.log"
    if grep -q "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$T/server.log"; then
        grep -m3 "ERROR: \|runtime error:" "$T/server.log" >&2
        return 1
    fi
    return $rc
}
trap '[ -n "$SERVER_PID" ] && kill $SERVER_PID 2>/dev/null; rm -rf "$T"' EXIT

post() { curl -s -H "Content-Type: application/json" -H "Authorization: Bearer ${KEY:-}" "$URL$1" -d "$2"; }
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(eval('d' + sys.argv[1])))" "$1"; }
run_ids() { "$BIN" run -m "$MODEL" --temp 0 --json "$@" 2>/dev/null | jget '["ids"]'; }

if [ ! -f "$MODEL" ]; then skip "serve" "bundled model $MODEL not found"; exit 0; fi

# ---- exactness: the server's greedy tokens are `sluice run`'s -------------
KEY=
start -m "$MODEL" --log-format json || { notok "serve: starts" "see the log above"; exit 1; }
P1="Once upon a time, in a little house by the sea, there lived"
P2=" an old man who had a dog."
got=$(post /v1/completions "{\"prompt\": \"$P1\", \"max_tokens\": 40, \"temperature\": 0, \"return_tokens\": true}" |
      jget '["choices"][0]["tokens"]')
want=$(run_ids -p "$P1" -n 40)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "serve: greedy completion equals sluice run token for token" ||
    notok "serve: greedy completion equals sluice run token for token" "server $got vs run $want"
r=$(post /v1/completions "{\"prompt\": \"$P1$P2\", \"max_tokens\": 40, \"temperature\": 0, \"return_tokens\": true}")
got=$(printf "%s" "$r" | jget '["choices"][0]["tokens"]')
cached=$(printf "%s" "$r" | jget '["usage"]["prompt_tokens_details"]["cached_tokens"]')
want12=$(run_ids -p "$P1$P2" -n 40)
[ "${cached:-0}" -gt 5 ] && [ "$got" = "$want12" ] &&
    ok "serve: with prefix reuse ($cached cached tokens) still equal to sluice run" ||
    notok "serve: with prefix reuse still equal to sluice run" "cached $cached, server $got vs run $want12"
S="You are a storyteller."
U="Tell me about the old house."
got=$(post /v1/chat/completions "{\"messages\": [{\"role\": \"system\", \"content\": \"$S\"}, {\"role\": \"user\", \"content\": \"$U\"}], \"max_tokens\": 40, \"temperature\": 0, \"return_tokens\": true}" |
      jget '["choices"][0]["tokens"]')
want=$(run_ids --chat --system "$S" -p "$U" -n 40)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "serve: greedy chat equals sluice run --chat token for token" ||
    notok "serve: greedy chat equals sluice run --chat token for token" "server $got vs run $want"
grep -q '"path": *"/v1/chat/completions".*"status": *200' "$T/server.log" &&
    ok "serve: --log-format json access log line" || notok "serve: --log-format json access log line" "$(tail -2 "$T/server.log")"
stop && ok "serve: SIGTERM when idle exits 0" || notok "serve: SIGTERM when idle exits 0" "exit status $rc"

# ---- --kv-dir: a conversation survives a restart ---------------------------
KV="$T/kv"
start -m "$MODEL" --kv-dir "$KV" || exit 1
post /v1/completions "{\"prompt\": \"$P1\", \"max_tokens\": 20, \"temperature\": 0}" >/dev/null
stop
n_files=$(ls "$KV"/*.slkv 2>/dev/null | wc -l)
start -m "$MODEL" --kv-dir "$KV" || exit 1
r=$(post /v1/completions "{\"prompt\": \"$P1$P2\", \"max_tokens\": 40, \"temperature\": 0, \"return_tokens\": true}")
got=$(printf "%s" "$r" | jget '["choices"][0]["tokens"]')
cached=$(printf "%s" "$r" | jget '["usage"]["prompt_tokens_details"]["cached_tokens"]')
[ "$n_files" -eq 1 ] && [ "${cached:-0}" -gt 5 ] && [ "$got" = "$want12" ] &&
    ok "serve: --kv-dir restore after a restart ($cached cached tokens) still equal to sluice run" ||
    notok "serve: --kv-dir restore after a restart" "files $n_files, cached $cached, server $got vs run $want12"
stop
# a damaged file and one of another model are ignored with a warning
for f in "$KV"/*.slkv; do
    python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=1; open(p,'wb').write(b)" "$f"
done
start -m "$MODEL" --kv-dir "$KV" || exit 1
r=$(post /v1/completions "{\"prompt\": \"$P1$P2\", \"max_tokens\": 40, \"temperature\": 0, \"return_tokens\": true}")
got=$(printf "%s" "$r" | jget '["choices"][0]["tokens"]')
cached=$(printf "%s" "$r" | jget '["usage"]["prompt_tokens_details"]["cached_tokens"]')
stop
[ "$cached" = 0 ] && [ "$got" = "$want12" ] && grep -q "warning: --kv-dir: not restoring .*checksum" "$T/server.log" &&
    ok "serve: --kv-dir: a damaged file is refused with a warning, output unchanged" ||
    notok "serve: --kv-dir: a damaged file is refused with a warning" "cached $cached; $(grep kv-dir "$T/server.log" | head -2)"
if [ -f models/tinydraft-f16.gguf ]; then
    start -m models/tinydraft-f16.gguf --kv-dir "$KV" || exit 1
    stop
    grep -q "warning: --kv-dir: ignoring .*another model" "$T/server.log" &&
        ok "serve: --kv-dir: another model's file is ignored with a warning" ||
        notok "serve: --kv-dir: another model's file is ignored with a warning" "$(grep -i kv "$T/server.log" | head -3)"
fi

# ---- SIGTERM mid-generation, --timeout --------------------------------------
start -m "$MODEL" || exit 1
curl -sN -H "Content-Type: application/json" "$URL/v1/chat/completions" \
    -d '{"messages": [{"role": "user", "content": "Go on."}], "max_tokens": 470, "temperature": 0, "stream": true}' \
    >"$T/stream.out" 2>/dev/null &
CURL=$!
i=0
while [ $i -lt 200 ] && ! grep -q '"content":"[^"]' "$T/stream.out" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
stop && rc=0
wait $CURL
n=$(grep -c '"content":"' "$T/stream.out")
[ $rc = 0 ] && [ "$n" -lt 460 ] && ok "serve: SIGTERM mid-generation cancels it and exits 0 ($n chunks sent)" ||
    notok "serve: SIGTERM mid-generation" "exit $rc, $n chunks"
# 470 tokens take tinymoe at least 0.2 s (it decodes ~1,500 tokens/s on a
# quiet machine; 0.3 s was not always enough to time out)
start -m "$MODEL" --timeout 0.05 || exit 1
code=$(curl -s -o "$T/t.out" -w '%{http_code}' -H "Content-Type: application/json" "$URL/v1/chat/completions" \
    -d '{"messages": [{"role": "user", "content": "Go on."}], "max_tokens": 470, "temperature": 0, "ignore_eos": true}')
stop
[ "$code" = 504 ] && ok "serve: --timeout cancels a long request (504)" || notok "serve: --timeout" "status $code: $(cat "$T/t.out")"

# ---- the official clients, the nasty cases, the page --------------------------
if ! need_deb nodejs node || ! need_deb npm npm; then
    skip "serve: openai / anthropic clients, hostile clients, web page" "node and npm not found (not root: cannot apt-get install nodejs npm)"
    exit $((fails > 0))
fi
if ! npm_ready; then
    skip "serve: openai / anthropic clients, hostile clients, web page" "npm install openai @anthropic-ai/sdk puppeteer-core failed (no network?): $(tail -1 "$T/npm.log")"
    exit $((fails > 0))
fi
export SLUICE_KEY=sekrit
start -m "$MODEL" --api-key sekrit --max-body 1M --queue 4 --chat-template-file tests/fixtures/chat/qwen3.jinja || exit 1
export SLUICE_URL="$URL"
node tests/server/clients.mjs || fails=$((fails + 1))
SLUICE_QUEUE=4 node tests/server/nasty.mjs || fails=$((fails + 1))
stop && ok "serve: the server survived the clients and exits 0" || notok "serve: the server survived the clients" "exit $rc"
if need_deb chromium chromium; then
    start -m "$MODEL" --api-key sekrit || exit 1
    SLUICE_URL="$URL" SLUICE_CHROMIUM=$(command -v chromium) SLUICE_SHOT="$(dirname "$BIN")/serve-page.png" \
        node tests/server/page.mjs || fails=$((fails + 1))
    stop || notok "serve: page server exits 0" "exit $rc"
else
    skip "serve: web page in headless chromium" "chromium not found (not root: cannot apt-get install chromium)"
fi
exit $((fails > 0))
