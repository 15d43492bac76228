#!/bin/sh
# tests/test_faults.c over EVERY N of every operation (make test tries 12
# values of N per kind): model open, streaming decode (uring, pread), the
# heat merge, saving and loading a context.  Thousands of engine opens:
# tens of minutes on a quiet machine.
#   sh bench/faults_all.sh
set -eu
make -s build/tests/test_faults
SLUICE_FAULT_EVERY=1 ./build/tests/test_faults
