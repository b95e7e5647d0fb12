# wattprobe developer targets. `make help` lists them.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# every directory of Python code that ruff and mypy check
SRC := exporter tests alerts dashboards deploy docs

.DEFAULT_GOAL := help
.PHONY: help setup setup-test run test pytest fmt lint bench golden docs estimate-data manifests monitoring image image-multiarch clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## install runtime needs (apt + venv); idempotent
	scripts/setup-debian.sh run

setup-test: ## install runtime and test needs (apt + venv); idempotent
	scripts/setup-debian.sh test

run: setup ## serve /metrics on :28390 with the sources this machine has (ARGS=... for flags)
	$(VENV)/bin/wattprobe serve $(ARGS)

test: setup-test lint pytest ## lint, type-check and run the whole test suite (what CI runs)

pytest: ## run the test suite only (ARGS=... passes pytest options)
	$(PY) -m pytest $(ARGS)

fmt: ## let ruff fix what it can and format the code (then `make lint` shows what is left)
	$(PY) -m ruff format -q $(SRC)
	$(PY) -m ruff check --fix --exit-zero -q $(SRC)
	$(PY) -m ruff format -q $(SRC)

lint: setup-test ## ruff and mypy, both must be clean (installs the test tools first: `make run` only installs the runtime)
	$(PY) -m ruff check $(SRC)
	$(PY) -m ruff format --check $(SRC)
	$(PY) -m mypy

bench: setup-test ## run the benchmarks and rewrite docs/benchmarks.md
	$(PY) -m tests.benchmarks $(ARGS)

golden: ## regenerate tests/fixtures/golden/*.prom after an intended change of the output
	WATTPROBE_UPDATE_GOLDEN=1 $(PY) -m pytest tests/system/test_golden.py

docs: ## regenerate docs/metrics.md from the metric catalogue and the attribution picture
	$(PY) -m exporter.exposition.metrics > docs/metrics.md
	$(PY) docs/diagrams/attribution.py > docs/attribution.svg

estimate-data: ## regenerate exporter/sources/power/cpumodel/boavizta.json from the pinned boaviztapi
	$(PY) -m tests.support.estimatedata

manifests: ## regenerate deploy/base/generated and the Helm chart's files/generated from alerts/, dashboards/ and the edge forwarder
	$(PY) deploy/generate.py

JOB ?= wattprobe
RUNBOOK_BASE ?= https://github.com/wattprobe/wattprobe/blob/main/docs/runbooks.md
OUT ?= build/monitoring
MULTI_CLUSTER ?=
monitoring: ## render rules, PrometheusRule and dashboards for your scrape JOB (and RUNBOOK_BASE, MULTI_CLUSTER=1) into OUT
	$(PY) -m alerts.generate --job '$(JOB)' --runbook-base '$(RUNBOOK_BASE)' --out '$(OUT)'
	$(PY) -m dashboards.generate --job '$(JOB)' $(if $(MULTI_CLUSTER),--multi-cluster) --out '$(OUT)/dashboards'

image: ## build the agent image (needs docker or buildah; not part of `make test`)
	docker build -f deploy/Dockerfile -t ghcr.io/wattprobe/wattprobe:$$($(PY) -c 'import exporter; print(exporter.__version__)') .

PLATFORMS ?= linux/amd64,linux/arm64
image-multiarch: ## build and push the image for PLATFORMS (docker buildx; QEMU binfmt for foreign ones)
	docker buildx build --platform '$(PLATFORMS)' -f deploy/Dockerfile --push -t ghcr.io/wattprobe/wattprobe:$$($(PY) -c 'import exporter; print(exporter.__version__)') .

clean: ## remove the venv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
