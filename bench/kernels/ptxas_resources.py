#!/usr/bin/env python3
"""ptxas resource usage of every kernel in kernels/*.cu, per architecture.

Compiles each .cu with nvcc as the build does (C++17, -O3) plus `-Xptxas -v`
for sm_80 and sm_90, and reads ptxas's report per kernel: registers per
thread, spill stores/loads, stack frame, static shared memory. From the
registers it derives the most threads a block of that kernel can have on
these architectures (64K registers per SM and per block, allocated per warp
in units of 256; at most 1024 threads).

  ptxas_resources.py [--nvcc PATH] [--arch 80,90] [--markdown] [--json]
                     [--launches FILE_OR_EXE] [--check]

--markdown prints the table for bench/kernels/README.md.
--launches reads "<kernel> <threads per block> <dynamic smem bytes>" lines (a
file, or the output of an executable such as build/tests/simt/simt_launch_table):
the launch configurations of every kernel at the largest shapes.
--check exits 1 when any kernel spills registers (spill stores or loads > 0)
on any architecture, or when a launch needs more threads per block than the
kernel's registers allow, or more shared memory (static + dynamic) than a
block may have without opt-in (48 KiB); it prints what failed.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGS_PER_SM = 65536          # sm_80 and sm_90: per SM and per block
REG_ALLOC_UNIT = 256         # registers are allocated per warp in units of 256
MAX_THREADS = 1024
SMEM_NO_OPT_IN = 48 * 1024   # static + dynamic shared memory per block without opt-in


def max_threads_for_regs(regs):
    """Most threads per block a kernel using `regs` registers per thread can launch."""
    if regs <= 0:
        return MAX_THREADS
    per_warp = -(-regs * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    warps = REGS_PER_SM // per_warp
    return min(MAX_THREADS, warps * 32)


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.splitlines()
        return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def base_name(demangled):
    """'void ratchet::kernels::foo_kernel<float>(float*, ...)' -> 'foo_kernel'."""
    head = demangled.split("(")[0]
    head = re.sub(r"<.*>$", "", head)  # template arguments
    head = head.split("<")[0]
    return head.split("::")[-1].replace("void ", "").strip()


def ptxas_report(nvcc, cu, arch):
    # -cubin: device code only (ptxas runs as in the build; no host compile).
    cmd = [nvcc, "-std=c++17", "-O3", "-I" + ROOT, "-I" + os.path.join(ROOT, "src"),
           "-cubin", "-o", os.devnull, "-Xptxas", "-v", f"-arch=sm_{arch}", cu]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ptxas_resources: nvcc failed on {cu} for sm_{arch}:\n{r.stderr}")
    kernels, cur = {}, None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for 'sm_(\d+)'", line)
        if m:
            cur = m.group(1)
            kernels[cur] = {"regs": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0,
                            "smem": 0}
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1) if m.group(1) in kernels else cur
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            k = kernels[cur]
            k["stack"], k["spill_stores"], k["spill_loads"] = map(int, m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            kernels[cur]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            if s:
                kernels[cur]["smem"] = int(s.group(1))
    return kernels


def read_launches(src):
    if os.access(src, os.X_OK) and not src.endswith(".txt"):
        text = subprocess.run([src], capture_output=True, text=True, check=True).stdout
    else:
        text = open(src).read()
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    ap.add_argument("--arch", default="80,90")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--launches")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    kdir = os.path.join(ROOT, "kernels")
    sources = sorted(f for f in os.listdir(kdir) if f.endswith(".cu"))
    rows = []  # (file, arch, mangled, info)
    jobs = [(f, arch) for f in sources for arch in a.arch.split(",")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        reports = pool.map(lambda j: ptxas_report(a.nvcc, os.path.join(kdir, j[0]), j[1]), jobs)
        for (f, arch), report in zip(jobs, reports):
            for mangled, info in report.items():
                rows.append((f, arch, mangled, info))
    names = demangle(sorted({r[2] for r in rows}))
    for f, arch, mangled, info in rows:
        info["name"] = names[mangled]
        info["base"] = base_name(names[mangled])
        info["max_threads"] = max_threads_for_regs(info["regs"])

    problems = []
    for f, arch, _, k in rows:
        if k["spill_stores"] or k["spill_loads"]:
            problems.append(f"sm_{arch} {k['name']}: spills ({k['spill_stores']} bytes stored, "
                            f"{k['spill_loads']} loaded)")
    launches = read_launches(a.launches) if a.launches else []
    for kernel, threads, dyn in launches:
        mine = [(arch, k) for _, arch, _, k in rows if k["base"] == kernel]
        if not mine:
            problems.append(f"launched kernel {kernel} has no ptxas report (renamed? not in kernels/)")
            continue
        for arch, k in mine:
            if threads > k["max_threads"]:
                problems.append(f"sm_{arch} {k['name']}: launched with {threads} threads per block "
                                f"but {k['regs']} registers per thread allow {k['max_threads']}")
            if k["smem"] + dyn > SMEM_NO_OPT_IN:
                problems.append(f"sm_{arch} {k['name']}: {k['smem']} static + {dyn} dynamic bytes "
                                f"of shared memory exceed 48 KiB")

    if a.json:
        print(json.dumps([dict(file=f, arch=arch, **k) for f, arch, _, k in rows], indent=1))
    if a.markdown:
        launched = {}
        for kernel, threads, _ in launches:
            launched[kernel] = max(threads, launched.get(kernel, 0))
        archs = a.arch.split(",")
        print("| file | kernel | " + " | ".join(f"sm_{x} regs / spills / smem / max threads"
                                              for x in archs) + " | launched with |")
        print("| --- | --- | " + " | ".join("---" for _ in archs) + " | --- |")
        by_kernel = {}
        for f, arch, _, k in rows:
            by_kernel.setdefault((f, k["name"]), {})[arch] = k
        for (f, name), per in sorted(by_kernel.items()):
            short = re.sub(r"ratchet::kernels::", "", name)
            short = re.sub(r"\(.*\)$", "", short).replace("__nv_bfloat16", "bf16")
            cells = []
            for x in archs:
                k = per.get(x)
                cells.append("-" if k is None else
                             f"{k['regs']} / {k['spill_stores'] + k['spill_loads']} / "
                             f"{k['smem']} B / {k['max_threads']}")
            base = base_name(name)
            print(f"| {f} | `{short}` | " + " | ".join(cells) +
                  f" | {launched.get(base, '-')} |")
    if not a.json and not a.markdown:
        print(f"ptxas_resources: {len(rows)} kernel builds ({len(sources)} files, sm {a.arch}), "
              f"{len(launches)} launch configurations checked")
    for p in problems:
        print("PROBLEM: " + p, file=sys.stderr)
    if a.check and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
