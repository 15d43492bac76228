#!/bin/sh
# sluice chat's commands over a pipe: /help, /system, /save and /load (the
# conversation as JSON messages), /stats, /reset, /bye, """ multi-line
# messages, and the context shift when the conversation no longer fits.
. tests/cli_lib.sh
need_python "chat"
chat() { "$BIN" chat -m "$MODEL" --temp 0 -n 8 "$@" 2>"$T/err"; }

printf 'Hello.\n/save %s\n/bye\nnever read\n' "$T/conv.json" | chat --system 'Be brief.' >"$T/out"
python3 -c "
import json, sys
m = json.load(open(sys.argv[1]))
assert [x['role'] for x in m] == ['system', 'user', 'assistant'], m
assert m[0]['content'] == 'Be brief.' and m[1]['content'] == 'Hello.', m" "$T/conv.json" 2>"$T/py" &&
    ok "chat: /save writes the conversation as JSON messages; /bye quits" || notok "chat: /save" "$(cat "$T/py" "$T/err")"

# /load continues it: the next reply is the one a single session would give
printf 'Hello.\nAnd then?\n' | chat --system 'Be brief.' >"$T/one"
printf '/load %s\nAnd then?\n' "$T/conv.json" | chat >"$T/two"
[ "$(tail -n 1 "$T/one")" = "$(tail -n 1 "$T/two")" ] && grep -q "3 messages loaded" "$T/err" &&
    ok "chat: /load continues a saved conversation (same reply as one session)" ||
    notok "chat: /load continues a saved conversation" "$(tail -n 1 "$T/one") vs $(tail -n 1 "$T/two"); $(head -c 200 "$T/err")"

printf '/help\n/stats\nHi.\n/stats\n/system You are terse.\n/reset\n/nope\n' | chat >"$T/out"
grep -q '/save FILE' "$T/err" && grep -q 'no reply yet' "$T/err" && grep -q 'cached tokens reused' "$T/err" &&
    grep -q 'system message set' "$T/err" && grep -q 'conversation reset' "$T/err" && grep -q 'unknown command /nope' "$T/err" &&
    ok "chat: /help, /stats, /system, /reset, unknown commands" || notok "chat: commands" "$(head -c 400 "$T/err")"

# """ joins lines into one message, either form
printf '"""First line.\nSecond line."""\n/save %s\n' "$T/m1.json" | chat >/dev/null
printf '"""\nFirst line.\nSecond line.\n"""\n/save %s\n' "$T/m2.json" | chat >/dev/null
python3 -c "
import json, sys
for f in sys.argv[1:]:
    m = json.load(open(f))
    assert m[0] == {'role': 'user', 'content': 'First line.\nSecond line.'}, m" "$T/m1.json" "$T/m2.json" 2>"$T/py" &&
    ok 'chat: """ multi-line messages' || notok 'chat: """ multi-line messages' "$(cat "$T/py")"

# context shift: a small context, several turns; the oldest go and it says so
printf 'Tell me a story about the sea.\nAnd another about the land.\nAnd one about the sky.\nMore.\nMore.\n' |
    "$BIN" chat -m "$MODEL" --temp 0 -n 40 -c 160 >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 0 ] && grep -q 'context full: dropped the oldest' "$T/err" && [ "$(grep -c . "$T/out")" -ge 5 ] &&
    ok "chat: context shift drops the oldest turns and keeps answering" || notok "chat: context shift" "exit $rc: $(head -c 300 "$T/err")"
# Ctrl-C during a reply stops that reply only: the turn's stats say so and the
# next message is answered (the signal is sent once the reply has started)
mkfifo "$T/in"
"$BIN" chat -m "$MODEL" --temp 0 -c 512 -n 480 --ignore-eos <"$T/in" >"$T/int.out" 2>"$T/int.err" &
pid=$!
exec 7>"$T/in"
printf 'Tell me a long story.\n' >&7
i=0
while [ ! -s "$T/int.out" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid
sleep 0.5
printf '/stats\nHi.\n/bye\n' >&7
exec 7>&-
wait $pid
rc=$?
grep -q '(interrupted)' "$T/int.err" && [ $rc -eq 0 ] && [ "$(grep -c 'cached tokens reused' "$T/int.err")" -ge 1 ] &&
    ok "chat: Ctrl-C stops the reply, the chat goes on" || notok "chat: Ctrl-C during a reply" "exit $rc: $(head -c 400 "$T/int.err")"
[ $fails = 0 ]
