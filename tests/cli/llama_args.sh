#!/bin/sh
# llama.cpp's spellings: multi-letter short options are whole options, the
# ones that make sense are accepted (run's output unchanged or as --kv says),
# the rest refused by name with a reason and exit 2; unknown options are
# named as typed; -f - reads stdin; escapes in -p / --stop (and --no-escape);
# -r as a stop string; --display-prompt; --chat-template NAME.
. tests/cli_lib.sh
need_python "llama args"

ids() { "$BIN" run -m "$MODEL" --temp 0 -n 6 --json "$@" 2>"$T/err" | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])"; }
base=$(ids -p "Once upon a time")
for f in "-fa on" "-fa auto" "-fa" "-ub 64" "-tb 2" "--no-warmup" "--no-mmap" "-ctk f16 -ctv f16" "--flash-attn on"; do
    # shellcheck disable=SC2086
    got=$(ids -p "Once upon a time" $f)
    [ -n "$base" ] && [ "$got" = "$base" ] && ok "llama args: run $f accepted, same tokens" ||
        notok "llama args: run $f accepted, same tokens" "got '$got' want '$base': $(head -c 200 "$T/err")"
done
want=$(ids -p "Once upon a time" --kv f32)
got=$(ids -p "Once upon a time" -ctk f32 -ctv f32)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "llama args: -ctk/-ctv f32 = --kv f32" || notok "llama args: -ctk/-ctv f32 = --kv f32" "$got vs $want"
want=$(ids -p "Once upon a time" --kv f16-noflash)
got=$(ids -p "Once upon a time" -fa off)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "llama args: -fa off = --kv f16-noflash" || notok "llama args: -fa off" "$got vs $want"

# refused ones: exit 2, the option as typed, its long name and the reason
refused() {
    name=$1 want=$2; shift 2
    "$BIN" "$@" >/dev/null 2>"$T/err"
    rc=$?
    [ $rc = "${CODE:-2}" ] && grep -qF -- "$want" "$T/err" && ok "$name" || notok "$name" "exit $rc: $(head -c 300 "$T/err")"
}
refused "llama args: -ngl refused (no GPU offload)" "error: -ngl (--n-gpu-layers): sluice has no GPU offload" run -m "$MODEL" -p x -ngl 99
refused "llama args: --n-gpu-layers refused" "error: --n-gpu-layers: sluice has no GPU offload" chat -m "$MODEL" --n-gpu-layers 99
refused "llama args: -sm refused" "error: -sm (--split-mode)" bench -m "$MODEL" -sm row
refused "llama args: -cnv points to sluice chat" "use \`sluice chat\`" run -m "$MODEL" -p x -cnv
refused "llama args: -ot refused with where sluice puts tensors" "-ot (--override-tensor): sluice places tensors itself" run -p x -ot exps=CPU
refused "llama args: -ctk q8_0 refused" "sluice's KV cache is f16 or f32" run -m "$MODEL" -p x -ctk q8_0
refused "llama args: -fa on with an f32 cache refused" "needs an f16 KV cache" run -m "$MODEL" -p x -ctk f32 -fa on
refused "llama args: -fa in a command without a model run" "unknown option -fa (sluice tokenize --help)" tokenize -m "$MODEL" -p x -fa on
refused "llama args: an unknown short option is named as typed" "unknown option -q (sluice run --help)" run -m "$MODEL" -p x -q
refused "llama args: an unknown long option is named as typed" "unknown option --frobnicate (sluice chat --help)" chat -m "$MODEL" --frobnicate
refused "llama args: an unknown option in bench is named" "unknown option --nope (sluice bench --help)" bench -m "$MODEL" --nope

# -f - reads the prompt from standard input
a=$(ids -p "The sea")
b=$(printf 'The sea' | "$BIN" run -m "$MODEL" --temp 0 -n 6 --json -f - 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "llama args: run -f - reads stdin" || notok "llama args: run -f - reads stdin" "$b vs $a"

# escapes: on by default, as llama.cpp; --no-escape keeps them
pids() { "$BIN" run -m "$MODEL" --temp 0 -n 1 --json "$@" 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['prompt_ids'])"; }
printf 'a\nb\t"c"\\' >"$T/nl.txt"
want=$(pids -f "$T/nl.txt")
got=$(pids -p 'a\nb\t\"c\"\\')
[ -n "$want" ] && [ "$got" = "$want" ] && ok "llama args: -p escapes processed by default (newline, tab, quote, backslash)" ||
    notok "llama args: -p escapes processed" "$got vs $want"
printf 'a\\nb' >"$T/lit.txt"
want=$(pids -f "$T/lit.txt")
got=$(pids -p 'a\nb' --no-escape)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "llama args: --no-escape takes -p literally" || notok "llama args: --no-escape" "$got vs $want"
got=$(pids -p 'A\x41' -e)
want=$(pids -p 'AA')
[ -n "$want" ] && [ "$got" = "$want" ] && ok "llama args: -e and hex escapes" || notok "llama args: -e and hex escapes" "$got vs $want"

# -r: a stop string, as llama.cpp's reverse prompt ends a non-interactive run
full=$("$BIN" run -m "$MODEL" --temp 0 -n 24 -p "Once upon a time" 2>/dev/null)
word=$(printf '%s' "$full" | python3 -c "import sys; t=sys.stdin.read(); print(t.split()[3] if len(t.split()) > 4 else '')")
got=$("$BIN" run -m "$MODEL" --temp 0 -n 24 -p "Once upon a time" -r "$word" 2>/dev/null)
case $full in "$got$word"*) [ -n "$word" ] && ok "llama args: -r STR stops where STR appears" ;;
*) notok "llama args: -r STR stops where STR appears" "'$got' / '$word' / '$full'" ;; esac

# --display-prompt prints the prompt first (the default on a terminal); --no-display-prompt never
got=$("$BIN" run -m "$MODEL" --temp 0 -n 4 -p "Once upon a time" --display-prompt 2>/dev/null)
case $got in "Once upon a time"*) ok "llama args: --display-prompt echoes the prompt" ;;
*) notok "llama args: --display-prompt echoes the prompt" "$got" ;; esac
got=$("$BIN" run -m "$MODEL" --temp 0 -n 4 -p "Once upon a time" --no-display-prompt 2>/dev/null)
case $got in "Once upon a time"*) notok "llama args: --no-display-prompt" "$got" ;; *) ok "llama args: --no-display-prompt" ;; esac

# --chat-template NAME / FILE overrides the model's template
a=$(pids --chat -p hi --chat-template chatml)
cat >"$T/t.jinja" <<'J'
{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}
J
b=$(pids --chat -p hi --chat-template "$T/t.jinja")
c=$(pids --chat -p hi --chat-template-file "$T/t.jinja")
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$b" = "$c" ] && ok "llama args: --chat-template NAME and FILE" ||
    notok "llama args: --chat-template NAME and FILE" "$a / $b / $c"
CODE=1 refused "llama args: a bad --chat-template name (exit 1)" "is neither Jinja text" run -m "$MODEL" --chat -p hi --chat-template nosuch
# small defects: sluice help CMD, detokenize with nothing to do, warnings for surely-wrong values
"$BIN" help run >"$T/h" 2>&1 && grep -q "usage: sluice run" "$T/h" && ok "llama args: sluice help CMD = sluice CMD --help" ||
    notok "llama args: sluice help CMD" "$(head -3 "$T/h")"
CODE=2 refused "llama args: detokenize with no ids is a usage error" "no token ids given" detokenize -m "$MODEL"
warned() {
    name=$1 want=$2; shift 2
    "$BIN" run -m "$MODEL" -p "Once upon" -n 2 "$@" >/dev/null 2>"$T/err"
    rc=$?
    [ $rc = 0 ] && grep -qF -- "$want" "$T/err" && ok "$name" || notok "$name" "exit $rc: $(head -c 300 "$T/err")"
}
warned "llama args: more threads than CPUs is warned" "more threads than CPUs" -t "$(( $(nproc) + 1 ))"
warned "llama args: a context above the training context is warned" "above the model's training context" -c 4096
warned "llama args: a budget above physical RAM is warned" "above physical RAM" \
    --mem "$(awk '/MemTotal/ {print int($2 / 1048576) + 8}' /proc/meminfo)G"
# Ctrl-C during run: generation stops, --stats are still printed, exit 130
"$BIN" run -m "$MODEL" -n -1 --ignore-eos --temp 0.8 --seed 1 --stats -p "Once upon a time" >"$T/int.out" 2>"$T/int.err" &
pid=$!
i=0
while [ ! -s "$T/int.out" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
[ $rc = 130 ] && grep -q "generated tokens" "$T/int.err" && ok "llama args: Ctrl-C (SIGINT) in run prints --stats and exits 130" ||
    notok "llama args: Ctrl-C in run" "exit $rc: $(tail -c 300 "$T/int.err")"

# a usage error exits 2 in every command, a missing argument as an unknown option
for c in run chat bench serve inspect tokenize detokenize pack replay heat synth; do
    "$BIN" $c --frobnicate </dev/null >/dev/null 2>"$T/u.err"
    rc=$?
    [ $rc = 2 ] && grep -q -- "--frobnicate" "$T/u.err" && ok "usage: $c --frobnicate exits 2, naming it" ||
        notok "usage: $c --frobnicate exits 2" "exit $rc: $(head -c 200 "$T/u.err")"
done
for c in "pack $MODEL -o x.pack" "replay" "tokenize -m $MODEL"; do
    # shellcheck disable=SC2086
    "$BIN" $c </dev/null >/dev/null 2>"$T/u.err"
    rc=$?
    [ $rc = 2 ] && ok "usage: '$c' (a required argument missing) exits 2" || notok "usage: '$c' exits 2" "exit $rc: $(head -c 200 "$T/u.err")"
done
[ $fails = 0 ]
