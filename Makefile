# sluice build.  `make` builds build/sluice and build/libsluice.a; `make test`
# runs every test and ends with "N passed, N failed"; `make demo` runs the
# bundled model; `make install PREFIX=/usr/local [DESTDIR=...]` adds
# libsluice.so, sluice.pc and the sluice.1 man page (`make uninstall`).  Sources are found by wildcard, so adding a module needs no
# edit here.  Files named *_avx2.c / *_avx512.c get their ISA flags; the
# binary picks a path at run time by CPU feature detection.

BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WERROR  ?=
SAN     ?=
WARN     = -Wall -Wextra $(if $(WERROR),-Werror)
SANITIZE = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SANFLAGS = $(if $(SAN),$(SANITIZE))
CPPFLAGS = -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP
LDLIBS   = -luring -lpcre2-8 -lutf8proc -lmicrohttpd -ljansson -lxxhash -ledit -lm -pthread
ALLFLAGS = $(CPPFLAGS) $(CFLAGS) $(WARN) $(SANFLAGS) -pthread

AVX2_FLAGS   = -mavx2 -mfma -mf16c -mbmi2
AVX512_FLAGS = $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

LIB_SRC  = $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRC  = $(sort $(wildcard src/cli/*.c))
TEST_SRC = $(sort $(wildcard tests/test_*.c))
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
DEPS_OK  = $(BUILD)/.deps-ok

# The test build (util/fault.h): sources that mention SLUICE_TEST_FAULTS are
# compiled a second time with it, into build/tobj, and linked with the other
# objects into libsluice-test.a and sluice-test; the test programs use those.
# build/sluice and libsluice.a never contain a fault hook.
FAULT_DEF  = -DSLUICE_TEST_FAULTS
FAULT_SRC := $(shell grep -lE 'SLUICE_TEST_FAULTS|util/fault\.h' $(LIB_SRC) $(CLI_SRC) 2>/dev/null)
tobj       = $(if $(filter $(1),$(FAULT_SRC)),$(BUILD)/tobj/$(1:.c=.o),$(BUILD)/obj/$(1:.c=.o))
LIB_TOBJ   = $(foreach f,$(LIB_SRC),$(call tobj,$(f)))
CLI_TOBJ   = $(foreach f,$(CLI_SRC),$(call tobj,$(f)))
TEST_LIB   = $(BUILD)/libsluice-test.a

# Fuzz harnesses (tests/fuzz/fuzz_*.c): `make test` links each with
# tests/fuzz/driver.c to replay its regression inputs and seeds
# (tests/cli/fuzz.sh); `make fuzz FUZZ_S=N` builds them with clang's
# libFuzzer, ASan and UBSan and runs each for N seconds (mk/fuzz.sh).
FUZZ_SRC    = $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY = $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_S     ?= 60

.PHONY: all test test-asan demo clean bench bench-kernels bench-model bench-prefetch examples test-build fuzz \
        install uninstall shared man
all: $(BUILD)/sluice $(BUILD)/libsluice.a
test-build: $(TEST_LIB) $(BUILD)/sluice-test $(FUZZ_REPLAY) shared man

$(DEPS_OK): mk/deps.sh
	@sh mk/deps.sh
	@mkdir -p $(BUILD) && touch $@

$(BUILD)/obj/%_avx2.o:   EXTRA = $(AVX2_FLAGS)
$(BUILD)/obj/%_avx512.o: EXTRA = $(AVX512_FLAGS)

# The commit the binary reports (bench records, --version).  The header is
# rewritten only when the commit changes, so only build_info.o follows it.
COMMIT_H = $(BUILD)/gen/sluice_commit.h
$(COMMIT_H): FORCE
	@mkdir -p $(dir $@)
	@c=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	if [ "$$c" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then c="$$c-dirty"; fi; \
	l="#define SLUICE_COMMIT \"$$c\""; \
	[ "$$(cat $@ 2>/dev/null)" = "$$l" ] || echo "$$l" >$@
$(BUILD)/obj/src/cli/build_info.o $(BUILD)/tobj/src/cli/build_info.o: $(COMMIT_H)
$(BUILD)/obj/src/cli/build_info.o $(BUILD)/tobj/src/cli/build_info.o: EXTRA = -I$(BUILD)/gen
FORCE:

$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(EXTRA) -c $< -o $@

$(BUILD)/tobj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(FAULT_DEF) $(EXTRA) -c $< -o $@

# libsluice.so: the library sources again, position-independent (build/pic);
# libsluice.a keeps the non-PIC objects the binary links.  Only the public
# sluice_* names are exported (mk/libsluice.map).  While the version is 0.x
# every minor release may change the ABI (the option structs grow), so the
# soname carries major.minor: libsluice.so.0.2.
VERSION   := $(shell awk -F'"' '/define SLUICE_VERSION/ {print $$2}' include/sluice.h)
SOVERSION := $(word 1,$(subst ., ,$(VERSION))).$(word 2,$(subst ., ,$(VERSION)))
SONAME     = libsluice.so.$(SOVERSION)
PIC_OBJ    = $(LIB_SRC:%.c=$(BUILD)/pic/%.o)

$(BUILD)/pic/%_avx2.o:   EXTRA = $(AVX2_FLAGS)
$(BUILD)/pic/%_avx512.o: EXTRA = $(AVX512_FLAGS)

$(BUILD)/pic/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -fPIC $(EXTRA) -c $< -o $@

$(BUILD)/libsluice.so: $(PIC_OBJ) mk/libsluice.map
	$(CC) -shared $(CFLAGS) $(SANFLAGS) -Wl,-soname,$(SONAME) -Wl,--version-script=mk/libsluice.map \
	    $(if $(SAN),,-Wl,-z,defs) -o $@ $(PIC_OBJ) $(LDLIBS)

# The man page, generated from the commands' own --help texts (mk/man.sh).
$(BUILD)/sluice.1: $(BUILD)/sluice mk/man.sh
	sh mk/man.sh $(BUILD)/sluice >$@.tmp && mv $@.tmp $@

shared: $(BUILD)/libsluice.so
man: $(BUILD)/sluice.1

$(BUILD)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(TEST_LIB): $(LIB_TOBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/sluice: $(CLI_OBJ) $(BUILD)/libsluice.a
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libsluice.a $(LDLIBS)

$(BUILD)/sluice-test: $(CLI_TOBJ) $(TEST_LIB)
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $(CLI_TOBJ) $(TEST_LIB) $(LDLIBS)

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/driver.c tests/fuzz/fuzz.h tests/fuzz/vocabs.h $(TEST_LIB) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(FAULT_DEF) -Itests/fuzz -o $@ $< tests/fuzz/driver.c $(TEST_LIB) $(LDLIBS)

fuzz:
	@FUZZ_S=$(FUZZ_S) MAKE="$(MAKE)" sh mk/fuzz.sh

print-ldlibs:
	@echo $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/t.h $(TEST_LIB) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(FAULT_DEF) -Itests -o $@ $< $(TEST_LIB) $(LDLIBS)

# ---- install ----
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
PCDIR      ?= $(LIBDIR)/pkgconfig
DATADIR    ?= $(PREFIX)/share/sluice

# sluice.pc: paths relative to ${prefix} where they lie under it (so that
# pkg-config --define-variable=prefix=... relocates them); a static link
# needs the Debian libraries the binary links (LDLIBS), hence Libs.private.
pcrel = $(patsubst $(PREFIX)%,$${prefix}%,$(1))
define SLUICE_PC
prefix=$(PREFIX)
libdir=$(call pcrel,$(LIBDIR))
includedir=$(call pcrel,$(INCLUDEDIR))

Name: sluice
Description: Mixture-of-Experts inference on GGUF models larger than RAM
Version: $(VERSION)
Cflags: -I$${includedir}
Libs: -L$${libdir} -lsluice
Libs.private: $(LDLIBS)
endef

INSTALLED = $(BINDIR)/sluice $(LIBDIR)/libsluice.a $(LIBDIR)/libsluice.so.$(VERSION) $(LIBDIR)/$(SONAME) \
            $(LIBDIR)/libsluice.so $(INCLUDEDIR)/sluice.h $(PCDIR)/sluice.pc $(MANDIR)/man1/sluice.1 \
            $(DATADIR)/models/tinymoe-q8_0.gguf

install: all shared man
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PCDIR) $(DESTDIR)$(INCLUDEDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DATADIR)/models
	install -m 755 $(BUILD)/sluice $(DESTDIR)$(BINDIR)/sluice
	install -m 644 $(BUILD)/libsluice.a $(DESTDIR)$(LIBDIR)/libsluice.a
	install -m 755 $(BUILD)/libsluice.so $(DESTDIR)$(LIBDIR)/libsluice.so.$(VERSION)
	ln -sf libsluice.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libsluice.so
	install -m 644 include/sluice.h $(DESTDIR)$(INCLUDEDIR)/sluice.h
	$(file >$(BUILD)/sluice.pc,$(SLUICE_PC))
	install -m 644 $(BUILD)/sluice.pc $(DESTDIR)$(PCDIR)/sluice.pc
	install -m 644 $(BUILD)/sluice.1 $(DESTDIR)$(MANDIR)/man1/sluice.1
	install -m 644 models/tinymoe-q8_0.gguf $(DESTDIR)$(DATADIR)/models/tinymoe-q8_0.gguf
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(DATADIR)/models $(DESTDIR)$(DATADIR) 2>/dev/null

# Programs under examples/ use nothing but the public header (include/sluice.h)
# and link as `pkg-config --static --cflags --libs sluice` says (Libs.private = LDLIBS).
EXAMPLE_SRC = $(sort $(wildcard examples/*.c))
EXAMPLE_BIN = $(EXAMPLE_SRC:examples/%.c=$(BUILD)/examples/%)
examples: $(EXAMPLE_BIN)

$(BUILD)/examples/%: examples/%.c include/sluice.h $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(SANFLAGS) -Iinclude -o $@ $< -L$(BUILD) -l:libsluice.a $(LDLIBS)

# tests/cli/install.sh compiles examples/ against an installed tree with the
# sanitizer flags of this build (SLUICE_SANFLAGS).
test: all examples test-build $(TEST_BIN)
	@BUILD=$(BUILD) SLUICE_SANFLAGS='$(SANFLAGS)' sh tests/run.sh

test-asan:
	$(MAKE) BUILD=build-asan SAN=1 OPT=-O1 test

# The bundled tinymoe is a tiny, weak model (42 M parameters, trained for 40
# minutes on Project Gutenberg books): greedy decoding loops (", and the same,
# and the same"), so the demo samples.  A dialogue prompt plays to what it
# learned best (quoted speech, "said Tom"); temperature 0.7 with llama.cpp's
# other defaults (top-k 40, top-p 0.95, min-p 0.05) keeps the words English
# without looping; the fixed seed makes the text the same on every run.
demo: all
	./$(BUILD)/sluice run -n 96 --temp 0.7 --seed 1 --echo --stats \
	    -p "“Good morning,” said the old man, as he opened the door of the little house by the sea."

bench: all
	sh bench/run.sh

# Kernel benchmark (bench/bench_kernels.c): memory bandwidth, decode GB/s,
# prefill GFLOP/s.  Pass arguments with BENCH_ARGS="-q q4_K".
$(BUILD)/bench_kernels: bench/bench_kernels.c $(BUILD)/libsluice.a
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

bench-kernels: $(BUILD)/bench_kernels
	./$(BUILD)/bench_kernels $(BENCH_ARGS)

# Model benchmark (bench/bench_model.c): prefill and decode tokens/s.
# BENCH_ARGS="models/tinymoe-q8_0.gguf -t 2".
$(BUILD)/bench_model: bench/bench_model.c $(BUILD)/libsluice.a
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

# Memory bandwidth (bench/membw.c): read and memcpy, 4 KiB and huge pages;
# bench/compare_llama.sh uses it for decode bandwidth utilisation.
$(BUILD)/membw: bench/membw.c | $(DEPS_OK)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -pthread -o $@ $<

bench-model: $(BUILD)/bench_model
	./$(BUILD)/bench_model $(or $(BENCH_ARGS),models/tinymoe-q8_0.gguf)

# Expert prediction benchmark (bench/bench_prefetch.c): per-layer recall /
# precision of each predictor on held-out text, store I/O with prefetch off /
# next / auto.  BENCH_ARGS="--slots 24 --mbps 200".
$(BUILD)/bench_prefetch: bench/bench_prefetch.c $(BUILD)/libsluice.a
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

bench-prefetch: $(BUILD)/bench_prefetch
	./$(BUILD)/bench_prefetch $(BENCH_ARGS)

# Long streaming run (bench/long_run.c, public API): RSS and tok/s every 100
# tokens; bench/long_run.sh runs it on the 17 GB synthetic model at --mem 6G.
$(BUILD)/long_run: bench/long_run.c include/sluice.h $(BUILD)/libsluice.a
	$(CC) -std=c11 -D_GNU_SOURCE $(CFLAGS) $(WARN) -Iinclude -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

# Recurrent-state rollback cost (bench/bench_rollback.c): verification with
# and without snapshots, rewind, and recompute.  BENCH_ARGS="MODEL -k 4".
$(BUILD)/bench_rollback: bench/bench_rollback.c $(BUILD)/libsluice.a
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

# The most any choice of K could gain from drafting on a text (bench/draft_bound.c,
# bench/draft.sh bound).
$(BUILD)/draft_bound: bench/draft_bound.c $(BUILD)/libsluice.a
	$(CC) $(ALLFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJ:.o=.d) $(PIC_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(patsubst %.c,$(BUILD)/tobj/%.d,$(FAULT_SRC))
