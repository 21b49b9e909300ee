#!/usr/bin/env python3
"""Prints the CMake cache variables a Spack package.py or an EasyBuild
easyconfig passes, one per line, after checking that the file is valid Python
(both formats are). Used by tests/unit/packaging/test_packaging.cpp.

    packaging_cmake_options.py FILE

Spack: the first argument of self.define(...) / self.define_from_variant(...);
both: every "-DNAME=..." inside a string (configopts)."""
import ast
import re
import sys

path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)  # SyntaxError: exit 1 with the line
names = set()
for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("define", "define_from_variant") and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        names.add(node.args[0].value)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        names.update(re.findall(r"-D([A-Za-z_][A-Za-z0-9_]*)(?::[A-Z]+)?=", node.value))
print("\n".join(sorted(names)))
