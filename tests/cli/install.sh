#!/bin/sh
# `make install DESTDIR=... PREFIX=/usr` into a scratch tree, then what a C
# programmer does with it: compile examples/generate.c against the installed
# header and library with the installed sluice.pc (static: libsluice.a and
# Libs.private; shared: libsluice.so through its soname), run both, and
# check the text is llama.cpp's greedy continuation (tests/fixtures).  Also:
# the installed binary finds its bundled model, the man page renders,
# libsluice.so exports only sluice_* names, and `make uninstall` removes
# every file.
. tests/cli_lib.sh
need_python "install"
if ! command -v pkg-config >/dev/null 2>&1; then
    notok "install: pkg-config" "pkg-config not found (mk/deps.sh installs it)"
    exit 1
fi
D=$T/dest
B=${BUILD:-build}
CC=${CC:-cc}
# the sanitizer build's objects need its runtime at link time (make test-asan)
SANF=${SLUICE_SANFLAGS:-}
# the outer make's jobserver is not ours: a plain sub-make
if ! env -u MAKEFLAGS -u MAKELEVEL make -s install DESTDIR="$D" PREFIX=/usr BUILD="$B" \
        SAN="${SANF:+1}" >"$T/make.out" 2>&1; then
    notok "install: make install DESTDIR=... PREFIX=/usr" "$(tail -c 400 "$T/make.out")"
    exit 1
fi
missing=""
for f in bin/sluice lib/libsluice.a lib/libsluice.so lib/pkgconfig/sluice.pc include/sluice.h \
         share/man/man1/sluice.1 share/sluice/models/tinymoe-q8_0.gguf; do
    [ -e "$D/usr/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "install: binary, libraries, header, sluice.pc, man page, bundled model" ||
    notok "install: every file in place" "missing:$missing"

# the soname, and the file names it resolves through
soname=$(readelf -d "$D/usr/lib/libsluice.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
case $soname in
    libsluice.so.[0-9]*) [ -e "$D/usr/lib/$soname" ] && ok "install: libsluice.so has soname $soname" ||
        notok "install: soname link" "$soname not installed" ;;
    *) notok "install: libsluice.so has a soname" "readelf says '$soname'" ;;
esac
if command -v nm >/dev/null 2>&1; then
    leak=$(nm -D --defined-only "$D/usr/lib/libsluice.so" | awk '$2 ~ /^[TDBRW]$/ && $3 !~ /^sluice_/ {print $3}' | head -5)
    [ -z "$leak" ] && ok "install: libsluice.so exports only sluice_* names" ||
        notok "install: libsluice.so exports only sluice_* names" "also: $leak"
else skip "install: exported names" "nm not found"; fi

# sluice.pc as pkg-config reads it, relocated into the scratch tree
PC="env PKG_CONFIG_PATH=$D/usr/lib/pkgconfig pkg-config --define-variable=prefix=$D/usr"
if $PC --exists sluice && [ "$($PC --modversion sluice)" = "$(sed -n 's/.*SLUICE_VERSION "\(.*\)"/\1/p' include/sluice.h)" ] &&
    $PC --static --libs sluice | grep -q -- "-luring.*-ljansson"; then
    ok "install: sluice.pc: version of sluice.h, Libs.private for a static link"
else
    notok "install: sluice.pc" "$($PC --modversion --static --libs sluice 2>&1 | tr '\n' ' ')"
fi

GOLD=tests/fixtures/tinymoe-q8_0-greedy.json
prompt=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][0]["prompt"])' "$GOLD")
# EXE LABEL [ENV...]: runs the example on the bundled model, checks its text
run_example() {
    exe=$1 label=$2
    shift 2
    env "$@" "$exe" "$MODEL" "$prompt" 8 >"$T/ex.out" 2>"$T/ex.err"
    rc=$?
    if python3 - "$T/ex.out" "$GOLD" "$rc" <<'PY' >"$T/why" 2>&1; then ok "$label"; else notok "$label" "$(head -c 300 "$T/why") $(head -c 200 "$T/ex.err")"; fi
import json, sys
out = open(sys.argv[1], encoding="utf-8").read()
assert sys.argv[3] == "0", "exit status " + sys.argv[3]
first, rest = out.split("\n--- continued:\n", 1)
second = rest.rsplit("\n--- ", 1)[0]
gold = json.load(open(sys.argv[2]))["results"][0]["generated_text"]
assert first and gold.startswith(first + second), "%r + %r is not a prefix of %r" % (first, second, gold[:200])
PY
}
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '; }

# static: libsluice.a (named so the linker cannot pick the .so) + Libs.private
libs=$($PC --static --libs sluice | sed 's/-lsluice\b/-l:libsluice.a/')
if $CC -std=c11 $SANF $($PC --cflags sluice) -o "$T/gen-static" examples/generate.c $libs 2>"$T/cc.err"; then
    case " $(needed "$T/gen-static")" in
        *libsluice*) notok "install: static link" "the static example needs $(needed "$T/gen-static")" ;;
        *) run_example "$T/gen-static" "install: the example linked statically with pkg-config --static runs" ;;
    esac
else notok "install: static link with pkg-config --static --cflags --libs sluice" "$(head -c 400 "$T/cc.err")"; fi

# shared: plain pkg-config --libs, found at run time through LD_LIBRARY_PATH
if $CC -std=c11 $SANF $($PC --cflags sluice) -o "$T/gen-shared" examples/generate.c $($PC --libs sluice) 2>"$T/cc.err"; then
    case " $(needed "$T/gen-shared")" in
        *" $soname "*) run_example "$T/gen-shared" "install: the example linked with pkg-config --libs runs on $soname" \
            LD_LIBRARY_PATH="$D/usr/lib" ;;
        *) notok "install: shared link" "NEEDED: $(needed "$T/gen-shared")" ;;
    esac
else notok "install: shared link with pkg-config --cflags --libs sluice" "$(head -c 400 "$T/cc.err")"; fi

# the installed binary runs from anywhere and finds the installed bundled model
out=$(cd "$T" && "$D/usr/bin/sluice" run -p "Once upon a time" -n 4 --temp 0 --no-display-prompt 2>"$T/run.err")
want=$("$BIN" run -m "$MODEL" -p "Once upon a time" -n 4 --temp 0 --no-display-prompt 2>/dev/null)
[ -n "$out" ] && [ "$out" = "$want" ] && ok "install: the installed sluice finds its bundled model" ||
    notok "install: the installed sluice finds its bundled model" "'$out' vs '$want': $(head -c 200 "$T/run.err")"

# the man page: rendered without warnings, one section per command
MAN1=$D/usr/share/man/man1/sluice.1
if command -v groff >/dev/null 2>&1; then
    # -P-cbou: plain text, no overstriking for bold
    groff -man -Tutf8 -ww -P-cbou "$MAN1" >"$T/man.txt" 2>"$T/man.err"
    rc=$?
    cmds=$("$BIN" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
    lost=""
    for c in $cmds; do grep -q "sluice $c" "$T/man.txt" || lost="$lost $c"; done
    [ $rc = 0 ] && [ ! -s "$T/man.err" ] && [ -z "$lost" ] && grep -q -- "--n-predict" "$T/man.txt" &&
        ok "install: sluice.1 renders (groff -man -ww) with every command's options" ||
        notok "install: sluice.1 renders" "exit $rc, missing:$lost; $(head -c 300 "$T/man.err")"
    if command -v man >/dev/null 2>&1; then
        MANWIDTH=100 man -l "$MAN1" >"$T/manl.txt" 2>"$T/manl.err" && grep -q "sluice run" "$T/manl.txt" &&
            ok "install: man -l sluice.1" || notok "install: man -l sluice.1" "$(head -c 300 "$T/manl.err")"
    else skip "install: man -l sluice.1" "man not found"; fi
else
    skip "install: sluice.1 renders" "groff not found"
fi

env -u MAKEFLAGS -u MAKELEVEL make -s uninstall DESTDIR="$D" PREFIX=/usr BUILD="$B" >"$T/make.out" 2>&1
left=$(find "$D" ! -type d | head -5)
[ -z "$left" ] && ok "install: make uninstall removes every installed file" ||
    notok "install: make uninstall" "left: $left $(tail -c 200 "$T/make.out")"
[ $fails = 0 ]
