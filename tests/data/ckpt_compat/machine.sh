#!/usr/bin/env bash
# One line naming what decides a CPU build's floating-point bits on this
# machine: GCC's -march=native target (RATCHET_NATIVE: the element-wise
# loops' vector width and where a·b + c becomes an FMA; the name and a hash
# of the target options it enables) and OpenBLAS's kernels
# (OPENBLAS_CORETYPE when set, else its own pick for the CPU).
# make_fixtures.sh writes it to MACHINE; test_ckpt_compat.cpp compares
# bytes only on a machine that prints the same line.
target=$(gcc -march=native -Q --help=target 2>/dev/null)
arch=$(awk '$1 == "-march=" {print $2; exit}' <<<"$target")
hash=$(grep -w enabled <<<"$target" | md5sum | cut -c1-8)
echo "march=${arch:-unknown} ($hash) openblas=${OPENBLAS_CORETYPE:-auto}"
