# Two entry points for a fresh machine (Python 3.11 + apt): `make run`, `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: setup toolchains run test fixtures

$(STAMP): pyproject.toml setup.py harness/abi.py $(wildcard harness/verify/csrc/*.c harness/verify/csrc/*.h harness/thumb/csrc/*.c harness/thumb/csrc/*.h)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# The main job.
run: setup linux-slice
	$(VENV)/bin/unwind-harness run --linux slice

# Cross toolchains: tests assemble ARM snippets and rebuild fixtures with them.
toolchains:
	bash corpus/toolchains.sh

# The armhf sysroot Linux programs run against: Debian's libc6, libstdc++6...
# fetched with apt-get download and unpacked into the cache, never installed.
.PHONY: linux-sysroot linux-slice linux-corpus
linux-sysroot:
	bash corpus/linux/sysroot.sh

# Our own Linux programs (corpus/linux/src), among them the slice the main
# job runs (corpus/linux/ci-slice.txt): about 40 s on two cores.
linux-slice: toolchains linux-sysroot
	bash corpus/linux/build.sh

# The Linux corpus: our programs and Debian's (built from source, and as
# shipped), their outputs under qemu-user checked against the manifest.
linux-corpus: toolchains linux-sysroot
	bash corpus/linux/build.sh
	bash corpus/linux/debian.sh
	python3 corpus/linux/record.py --check

# The whole Linux corpus as a profiler samples it: every unwinder verified at
# seeded random strides of mean 1000 instructions, the shadow stack kept from
# block entries (harness.verify.sampling); one generated program alongside.
.PHONY: linux-sampled
linux-sampled: setup linux-corpus
	$(VENV)/bin/unwind-harness run --programs 1 --no-elf --linux all --linux-every 1000 --json reports/linux-sampled.json

# A real program of over a billion instructions (Debian's gzip -9 on 4 MB of
# generated text) verified by verify-elf with its default options, to its
# end; its exit status and stdout checked against qemu-user's; wall time and
# peak memory printed (docs/robustness.md). Not CI: a few minutes.
.PHONY: long-run
long-run: setup linux-sysroot
	bash corpus/linux/long-run.sh

# The hostile guest programs (tests/hostile: one class of attack on the
# host each, static armhf) built into the cache for
# tests/test_hostile_guests.py; up-to-date outputs are kept.
.PHONY: hostile
hostile: toolchains
	bash tests/hostile/build.sh

# The test suite, then the main job checked against the committed baseline
# (CI runs exactly this).
test: setup toolchains linux-slice hostile
	$(VENV)/bin/python -m pytest
	$(VENV)/bin/unwind-harness run --linux slice --check-baseline

# The committed record of the main job (reports/latest.*, where the README's
# figures come from: make readme); make run writes to out/, which git ignores.
.PHONY: record
record: setup linux-slice
	$(VENV)/bin/unwind-harness run --linux slice --reports reports

# Rebuild the committed ARM32 Thumb-2 ELF fixtures (installs GCC/clang with apt when missing).
fixtures:
	bash corpus/fixtures/build.sh

# Compiled corpus: gcc/clang x -O0/-O2/-Os x fp/nofp ELFs of the C programs in
# generators/compiled/src (installs the toolchains with apt when missing),
# then run each in Unicorn and check its checksums against the host build.
.PHONY: corpus
corpus: setup
	bash generators/compiled/build.sh
	$(VENV)/bin/python generators/compiled/check.py

# The long fuzz run: the fuzz properties with 5,000 examples each (hypothesis
# profile `fuzz`), the hostile guest programs (each class timed and measured:
# docs/robustness.md), then the mutation check on 10 programs x 30 mutants.
.PHONY: fuzz
fuzz: setup hostile
	$(VENV)/bin/python -m pytest tests/test_fuzz.py --hypothesis-profile=fuzz --hypothesis-show-statistics -q
	$(VENV)/bin/python -m pytest tests/test_hostile_guests.py tests/test_guest_runs.py tests/test_guest_bounds.py -q
	$(VENV)/bin/unwind-harness mutants --programs 10 --per-program 30

# The full bench, recorded for the README's figures (about two minutes; some five more where `make
# chromium` fetched Chrome's binary, whose rows from code it measures).
.PHONY: bench readme
bench: setup
	$(VENV)/bin/unwind-harness bench --json reports/bench.json

# The rows from code beside the compiler's CFI, judged by running every
# compiled build and every built Linux corpus program with CFI (about 6
# minutes): reports/compare.json.
.PHONY: compare
compare: setup
	$(VENV)/bin/python -m harness.compare_corpus --json reports/compare.json

# Function starts without symbols (docs/synthesis.md): our builds read as
# `strip` leaves them, the starts found against their symbols', and v2-code
# verified at samples on each as built and stripped: reports/stripped.json.
.PHONY: stripped
stripped: setup toolchains
	$(VENV)/bin/python -m harness.stripped --verify --every 50 --json reports/stripped.json

# The rows from code beside the compiler's CFI on csmith's random programs:
# COUNT programs from seed SEED, each built by gcc and clang in six flag sets,
# judged by running where they disagree (docs/synthesis.md): reports/synth-fuzz.{json,md}.
.PHONY: synth-fuzz
SEED ?= 0
COUNT ?= 300
JOBS ?= 2
synth-fuzz: setup toolchains linux-slice
	$(VENV)/bin/python -m harness.synth_fuzz --seed $(SEED) --count $(COUNT) --jobs $(JOBS)

# One finding of synth-fuzz shown by a small program: creduce cuts seed SEED's
# program down while its build COMPILER FLAGS keeps a finding of key KEY (the
# report's); the result in OUT (minutes to an hour: each candidate is built,
# compared and run).
.PHONY: synth-reduce
OUT ?= reduced.c
synth-reduce: setup toolchains linux-slice
	$(VENV)/bin/python -m harness.synth_fuzz_reduce --seed $(SEED) --compiler $(COMPILER) --flags $(FLAGS) \
		--key "$(KEY)" --jobs $(JOBS) --out $(OUT)

# Debian's armhf Chromium and its library closure (about 380 packages, 240 MB
# of downloads) unpacked into the cache, and its two runs under qemu-user
# (--version; a headless render of corpus/chromium/page.html) checked
# against corpus/chromium/runs.json (docs/chromium.md). Not CI: a download.
.PHONY: chromium
chromium:
	bash corpus/chromium/fetch.sh
	python3 corpus/chromium/check.py

# Both runs verified by the harness with every unwinder at samples of mean
# stride EVERY, each run's output held to qemu-user's: reports/chromium-*.json
# and .txt (corpus/chromium/verify.py; docs/chromium.md).
EVERY ?= 10000
.PHONY: chromium-verify
chromium-verify: setup chromium
	python3 corpus/chromium/verify.py --every $(EVERY)

# The README's figure tables (and those of docs/: bench.md, synthesis.md, comparators.md), regenerated
# from reports/latest.json, reports/bench.json and reports/compare.json.
readme: setup
	$(VENV)/bin/python -m harness.report.figures
