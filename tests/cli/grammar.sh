#!/bin/sh
# Grammar-constrained decoding through sluice run and chat (--grammar,
# --grammar-file, --json-schema): greedy output on the bundled model must be
# a string the grammar accepts, checked here by independent means (Python's
# re and json modules, not sluice's matcher), ending because the grammar was
# complete (stop reason eog); bad grammars and schemas exit 1 naming where.
. tests/cli_lib.sh
need_python "grammar"

# check NAME PYTHON_CONDITION_ON_t ARGS...: run greedy with --json, then
# evaluate the condition on the generated text t (and the stop reason r)
check() {
    name=$1 cond=$2; shift 2
    if ! "$BIN" run -m "$MODEL" --temp 0 --json "$@" >"$T/out.json" 2>"$T/err"; then
        notok "$name" "exit $?: $(head -c 300 "$T/err")"
        return
    fi
    if python3 -c "
import json, re, sys
d = json.load(open(sys.argv[1])); t = d['text']; r = d['stop_reason']
sys.exit(0 if ($cond) else 1)" "$T/out.json"; then ok "$name"
    else notok "$name" "$(head -c 400 "$T/out.json")"; fi
}

# A small arithmetic grammar, bounded so that greedy decoding must finish.
cat >"$T/arith.gbnf" <<'G'
# integer arithmetic, at most four terms
root   ::= expr
expr   ::= term (("+" | "-") term){0,3}
term   ::= factor (("*" | "/") factor){0,2}
factor ::= [0-9]{1,3} | "(" [0-9]{1,3} ("+" [0-9]{1,3})? ")"
G
ARITH_RE='^(\d{1,3}|\(\d{1,3}(\+\d{1,3})?\))([*/](\d{1,3}|\(\d{1,3}(\+\d{1,3})?\))){0,2}([-+](\d{1,3}|\(\d{1,3}(\+\d{1,3})?\))([*/](\d{1,3}|\(\d{1,3}(\+\d{1,3})?\))){0,2}){0,3}$'
for p in "Compute: 12+7=" "The answer is" "(3"; do
    check "grammar: run --grammar-file arithmetic, greedy, prompt '$p'" \
        "r == 'eog' and re.match(r'$ARITH_RE', t) is not None" -n 64 -p "$p" --grammar-file "$T/arith.gbnf"
done
check "grammar: run --grammar (inline) with sampling stays in the grammar" \
    "r == 'eog' and re.match(r'$ARITH_RE', t) is not None" -n 64 -p "x" --temp 1 --seed 3 \
    --grammar "$(cat "$T/arith.gbnf")"

SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["name","age"]}'
VALID="isinstance(j, dict) and set(j) <= {'name','age','tags'} and isinstance(j.get('name'), str) and len(j['name']) <= 12 and type(j.get('age')) is int and all(x in ('a','b') for x in j.get('tags', [])) and len(j.get('tags', [])) <= 3"
for p in "The person:" "{" "Name:"; do
    check "grammar: run --json-schema, greedy, prompt '$p': valid JSON under the schema" \
        "r == 'eog' and (lambda j: $VALID)(json.loads(t))" -n 400 -p "$p" --json-schema "$SCHEMA"
done
printf '%s' "$SCHEMA" >"$T/schema.json"
check "grammar: run --json-schema-file" "r == 'eog' and (lambda j: $VALID)(json.loads(t))" -n 400 -p "Data:" \
    --json-schema-file "$T/schema.json"

# chat: each reply is held to the grammar
out=$(printf 'Pick a colour.\nAnother one.\n' | "$BIN" chat -m "$MODEL" --temp 0 -n 40 --grammar 'root ::= ("red" | "green" | "blue") "."' 2>"$T/err")
if [ "$(printf '%s\n' "$out" | grep -cE '^(red|green|blue)\.$')" = 2 ]; then ok "grammar: chat --grammar holds every reply"
else notok "grammar: chat --grammar holds every reply" "got: $out $(head -c 200 "$T/err")"; fi

# errors: the message names line and column (grammar) or the schema pointer
bad() {
    name=$1 want=$2 code=${CODE:-1}; shift 2
    "$BIN" run -m "$MODEL" -n 4 -p x "$@" >/dev/null 2>"$T/err"
    rc=$?
    if [ $rc = "$code" ] && grep -qF -- "$want" "$T/err"; then ok "$name"
    else notok "$name" "exit $rc, stderr: $(head -c 300 "$T/err")"; fi
}
bad "grammar: an unterminated literal is reported at its line and column" "grammar:2:10: unterminated string literal" \
    --grammar "$(printf 'root ::= a\na    ::= "x')"
bad "grammar: an undefined rule is named" "grammar:1:10: rule 'nope' is used but not defined" --grammar 'root ::= nope'
bad "grammar: left recursion is refused" "is left-recursive" --grammar "$(printf 'root ::= e\ne ::= e "+" "1" | "1"')"
bad "grammar: an unsupported schema keyword names its place" "json_schema: at /properties/p: 'pattern' is not supported" \
    --json-schema '{"properties":{"p":{"type":"string","pattern":"a+"}}}'
bad "grammar: a schema that is not JSON" "json_schema: not JSON" --json-schema '{"type":'
# a file that cannot be read is a bad option value, as --temp abc is: exit 2
CODE=2 bad "grammar: a missing grammar file (exit 2)" "cannot open $T/none.gbnf" --grammar-file "$T/none.gbnf"
[ $fails = 0 ]
