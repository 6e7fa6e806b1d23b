#!/usr/bin/env python3
"""Run every ARM Linux corpus program under qemu-user and record what it did.

Reads corpus/linux/*.programs.json (lists of program entries: name, path
relative to the cache, args, stdin, cwd, ...), runs each program as

    env -i PATH=/usr/bin:/bin HOME=/ LANG=C qemu-arm -L $CACHE/sysroot PROGRAM ARGS...

with stdin from the entry's file (or /dev/null), in the entry's cwd (or the
repository root), 120 s at most, and writes corpus/linux/manifest.json: the
sysroot's package versions and, per program, the entry plus its exit status
and the SHA-256 of its stdout and stderr.  The harness later checks that its
own emulation of each program ends the same way.

    record.py            run everything, write the manifest
    record.py --check    run everything, compare with the manifest, exit 1 on
                         any difference (the manifest is not written)
    record.py PATTERN..  only the programs whose name matches a shell pattern;
                         the manifest keeps the other entries as they were

An exit status below 0 means the program was killed by that signal.
Standard library only.
"""
import argparse
import concurrent.futures
import fnmatch
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "manifest.json")
TIMEOUT = 120
RESULT_KEYS = ("exit_status", "stdout_sha256", "stdout_bytes", "stderr_sha256")
REQUIRED_KEYS = ("name", "path", "args", "stdin", "cwd")


class Failure(Exception):
    pass


def cache_dir():
    base = os.environ.get("UNWIND_HARNESS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "unwind-harness")
    return os.path.join(base, "linux")


def repo_path(rel, what, name):
    """A repository-relative path from an entry, refused if it leaves the repo."""
    if not isinstance(rel, str) or os.path.isabs(rel) or ".." in rel.split("/"):
        raise Failure(f"{name}: {what} must be a relative path inside the repository: {rel!r}")
    return os.path.join(REPO, rel)


def load_entries():
    entries = {}
    files = sorted(glob.glob(os.path.join(HERE, "*.programs.json")))
    if not files:
        raise Failure(f"no *.programs.json in {HERE}: run build.sh first")
    for path in files:
        with open(path) as f:
            listed = json.load(f)
        if not isinstance(listed, list):
            raise Failure(f"{path}: not a JSON list")
        for e in listed:
            missing = [k for k in REQUIRED_KEYS if not isinstance(e, dict) or k not in e]
            if missing:
                raise Failure(f"{os.path.basename(path)}: entry without {', '.join(missing)}: {e!r:.200}")
            if e["name"] in entries:
                raise Failure(f"{os.path.basename(path)}: program {e['name']} is listed twice")
            if not isinstance(e["args"], list) or not all(isinstance(a, str) for a in e["args"]):
                raise Failure(f"{e['name']}: args must be a list of strings")
            entries[e["name"]] = e
    return entries


def read_versions(sysroot):
    path = os.path.join(sysroot, "VERSIONS")
    if not os.path.isfile(path):
        raise Failure(f"{path} is missing: run sysroot.sh first")
    packages = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                pkg, version = line.split()
                packages[pkg] = version
    return dict(sorted(packages.items()))


def command(sysroot, program, args):
    # An empty environment but for these three: the output must not depend
    # on whoever runs this.
    return ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/", "LANG=C",
            "qemu-arm", "-L", sysroot, program] + list(args)


def run(entry, cache, sysroot):
    name = entry["name"]
    rel = entry["path"]
    if not isinstance(rel, str) or os.path.isabs(rel) or ".." in rel.split("/"):
        raise Failure(f"{name}: path must be relative to the cache: {rel!r}")
    program = os.path.join(cache, rel)
    if not os.path.isfile(program):
        raise Failure(f"{name}: {program} does not exist (not built?)")
    stdin = repo_path(entry["stdin"], "stdin", name) if entry["stdin"] is not None else os.devnull
    cwd = repo_path(entry["cwd"], "cwd", name) if entry["cwd"] is not None else REPO
    with open(stdin, "rb") as inp:
        try:
            p = subprocess.run(command(sysroot, program, entry["args"]), stdin=inp,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=cwd, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure(f"{name}: still running after {TIMEOUT} s") from None
    result = {k: v for k, v in entry.items() if k not in RESULT_KEYS}
    result["exit_status"] = p.returncode
    result["stdout_sha256"] = hashlib.sha256(p.stdout).hexdigest()
    result["stdout_bytes"] = len(p.stdout)
    result["stderr_sha256"] = hashlib.sha256(p.stderr).hexdigest()
    return result


def differences(old, new):
    """Lines naming what changed between two manifests."""
    out = []
    if old.get("sysroot") != new["sysroot"]:
        out.append(f"sysroot packages: {old.get('sysroot')} -> {new['sysroot']}")
    before = {p["name"]: p for p in old.get("programs", [])}
    after = {p["name"]: p for p in new["programs"]}
    for name in sorted(before.keys() | after.keys()):
        if name not in after:
            out.append(f"{name}: in the manifest, not run")
        elif name not in before:
            out.append(f"{name}: not in the manifest")
        elif before[name] != after[name]:
            keys = sorted(k for k in before[name].keys() | after[name].keys()
                          if before[name].get(k) != after[name].get(k))
            out.append(name + ": " + ", ".join(
                f"{k} {before[name].get(k)!r} -> {after[name].get(k)!r}" for k in keys))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with manifest.json instead of writing it")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("patterns", nargs="*", help="only the programs matching these names")
    opts = ap.parse_args()

    start = time.monotonic()
    cache = cache_dir()
    sysroot = os.path.join(cache, "sysroot")
    entries = load_entries()
    packages = read_versions(sysroot)
    chosen = [n for n in sorted(entries)
              if not opts.patterns or any(fnmatch.fnmatchcase(n, p) for p in opts.patterns)]
    if not chosen:
        raise Failure("no program matches " + " ".join(opts.patterns))

    old = {}
    if os.path.exists(MANIFEST):
        with open(MANIFEST) as f:
            old = json.load(f)
    elif opts.check:
        raise Failure(f"{MANIFEST} does not exist: run record.py without --check first")

    with concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        futures = {n: pool.submit(run, entries[n], cache, sysroot) for n in chosen}
    results, errors = {}, []
    for n in chosen:
        try:
            results[n] = futures[n].result()
        except Failure as e:
            errors.append(str(e))
    for e in errors:
        print("record.py: " + e, file=sys.stderr)
    if errors:
        raise Failure(f"{len(errors)} of {len(chosen)} programs did not run; nothing written")

    # Programs not chosen keep their recorded results (if still listed).
    programs = {p["name"]: p for p in old.get("programs", []) if p.get("name") in entries}
    programs.update(results)
    new = {"sysroot": {"packages": packages},
           "programs": [programs[n] for n in sorted(programs)]}
    if opts.patterns:  # compare only what was run
        old = {"sysroot": old.get("sysroot"),
               "programs": [p for p in old.get("programs", []) if p["name"] in results]}
        cmp_new = {"sysroot": new["sysroot"], "programs": [results[n] for n in chosen]}
    else:
        cmp_new = new

    nonzero = sum(1 for r in results.values() if r["exit_status"] != 0)
    by_source = {}
    for r in results.values():
        by_source[r.get("source", "?")] = by_source.get(r.get("source", "?"), 0) + 1
    sources = ", ".join(f"{v} {k}" for k, v in sorted(by_source.items()))
    took = time.monotonic() - start
    if opts.check:
        diff = differences(old, cmp_new)
        for line in diff:
            print("record.py: differs: " + line, file=sys.stderr)
        verdict = f"{len(diff)} differences" if diff else "same as manifest.json"
        print(f"record.py --check: {len(results)} programs ({sources}), {nonzero} with nonzero exit, "
              f"{verdict}, {took:.1f} s")
        return 1 if diff else 0
    tmp = MANIFEST + ".tmp"
    with open(tmp, "w") as f:
        json.dump(new, f, indent=1)
        f.write("\n")
    os.replace(tmp, MANIFEST)
    changed = len(differences(old, cmp_new)) if old else len(results)
    print(f"record.py: {len(results)} programs ({sources}), {nonzero} with nonzero exit, "
          f"{changed} changed, wrote {os.path.relpath(MANIFEST, REPO)} in {took:.1f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"record.py: {e}", file=sys.stderr)
        sys.exit(1)
