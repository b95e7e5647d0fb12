# wattprobe developer targets. `make help` lists them.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# every directory of Python code that ruff and mypy check
SRC := exporter tests alerts dashboards deploy docs

.DEFAULT_GOAL := help
.PHONY: help setup setup-test run test pytest fmt lint bench mutate golden docs estimate-data manifests monitoring gpu-validate image image-push clean

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

mutate: setup-test ## mutation-test the billing code (mutmut; nice'd, cached in build/mutate; ARGS='attribution idle' or --list); not in `make test`
	nice -n 19 $(PY) -m tests.mutate $(ARGS)

golden: ## regenerate tests/fixtures/golden/*.prom after an intended change of the output
	WATTPROBE_UPDATE_GOLDEN=1 $(PY) -m pytest tests/system/test_golden.py

docs: ## regenerate docs/metrics.md from the metric catalogue and the attribution picture
	$(PY) -m exporter.exposition.metrics > docs/metrics.md
	$(PY) docs/diagrams/attribution.py > docs/attribution.svg

estimate-data: ## regenerate exporter/sources/power/cpumodel/boavizta.json from the pinned boaviztapi
	$(PY) -m tests.support.estimatedata

manifests: ## regenerate deploy/base/generated and the Helm chart's files/generated from alerts/, dashboards/ and the edge forwarder, and the chart README's values table
	$(PY) deploy/generate.py
	$(PY) deploy/helm/readme.py

JOB ?= wattprobe
RUNBOOK_BASE ?= https://github.com/wattprobe/wattprobe/blob/main/docs/runbooks.md
OUT ?= build/monitoring
MULTI_CLUSTER ?=
monitoring: ## render rules, PrometheusRule and dashboards for your scrape JOB (and RUNBOOK_BASE, MULTI_CLUSTER=1) into OUT
	$(PY) -m alerts.generate --job '$(JOB)' --runbook-base '$(RUNBOOK_BASE)' --out '$(OUT)'
	$(PY) -m dashboards.generate --job '$(JOB)' $(if $(MULTI_CLUSTER),--multi-cluster) --out '$(OUT)/dashboards'

# OUT from the command line or the environment (the device machine sets it), else build/gpu-validate
GPU_OUT = $(if $(filter file,$(origin OUT)),build/gpu-validate,$(OUT))
BUDGET_S ?= 420
gpu-validate: ## validate the NVML path on this machine's GPU into OUT (docs/gpu.md; PY=python3 where there is no venv)
	PYTHONPATH=. $(PY) tests/gpu_real/validate.py --out '$(GPU_OUT)' --budget-s $(BUDGET_S) $(ARGS)

# Images: OCI archives in build/image, built from Debian's archive by mmdebstrap (root; a foreign
# architecture through qemu-user-static), no container engine; docs/install.md "Building the image".
IMAGES ?= agent,forwarder
IMAGE_ARCHES ?= amd64,arm64
VERSION ?=
REGISTRY ?=
image: setup-test ## build the agent and forwarder images for IMAGE_ARCHES into build/image (OCI archives + SBOMs; VERSION=x.y.z checks the tag; REGISTRY=ghcr.io/you names the per-platform archives' images)
	$(PY) -m deploy.image.build --images '$(IMAGES)' --arches '$(IMAGE_ARCHES)' $(if $(VERSION),--version '$(VERSION)') $(if $(REGISTRY),--registry '$(REGISTRY)')

image-push: ## push build/image's multi-arch images with their digests (skopeo; REGISTRY=ghcr.io/you to rename)
	$(PY) -m deploy.image.push $(if $(REGISTRY),--registry '$(REGISTRY)') --digests-file build/image/pushed.txt

clean: ## remove the venv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
