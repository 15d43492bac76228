#!/bin/sh
# The fault hooks (util/fault.h) live in the test build only: build/sluice
# has no fault symbol and ignores SLUICE_FAULT; build/sluice-test honours it
# (a failed expert read there is an error naming the file and offset).
. tests/cli_lib.sh
P="The old man"
if ! command -v nm >/dev/null 2>&1; then
    skip "faults: release binary has no fault hook" "nm not found"
elif nm "$BIN" | grep -i fault | grep -vi default | grep -q .; then
    notok "faults: release binary has no fault hook" "$(nm "$BIN" | grep -i fault | grep -vi default | head -3 | tr '\n' ' ')"
elif ! nm "$TBIN" | grep -q sl_fault_hit; then
    notok "faults: release binary has no fault hook" "the test build $TBIN lacks sl_fault_hit"
else
    ok "faults: release binary has no fault hook, the test build has"
fi
# the same fault through the environment: the release run is untouched
want=$("$BIN" run -m "$MODEL" --temp 0 -n 8 -p "$P" --mem 64M --io pread 2>/dev/null)
got=$(SLUICE_FAULT=read:40:EIO SLUICE_FAULT_READ=3 "$BIN" run -m "$MODEL" --temp 0 -n 8 -p "$P" --mem 64M --io pread 2>"$T/rel.err")
if [ $? -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then
    ok "faults: SLUICE_FAULT means nothing to the release binary"
else
    notok "faults: SLUICE_FAULT means nothing to the release binary" "$(head -c 300 "$T/rel.err")"
fi
SLUICE_FAULT=read:40:EIO "$TBIN" run -m "$MODEL" --temp 0 -n 8 -p "$P" --mem 64M --io pread --prefetch off >/dev/null 2>"$T/t.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "tinymoe-q8_0.gguf.*offset [0-9]*.*Input/output error" "$T/t.err"; then
    ok "faults: SLUICE_FAULT=read:40:EIO in the test build is an error naming file and offset"
else
    notok "faults: SLUICE_FAULT=read:40:EIO in the test build is an error naming file and offset" "exit $rc: $(head -c 300 "$T/t.err")"
fi
got=$(SLUICE_FAULT=read:40:EINTR "$TBIN" run -m "$MODEL" --temp 0 -n 8 -p "$P" --mem 64M --io pread 2>"$T/i.err")
if [ $? -eq 0 ] && [ "$got" = "$want" ]; then
    ok "faults: SLUICE_FAULT=read:40:EINTR is retried, the same text"
else
    notok "faults: SLUICE_FAULT=read:40:EINTR is retried, the same text" "$(head -c 300 "$T/i.err")"
fi
[ $fails -eq 0 ]
