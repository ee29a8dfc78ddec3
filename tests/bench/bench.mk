# SPDX-License-Identifier: Apache-2.0
# Side-by-side benchmark: nsbox against bubblewrap, crun and podman on the
# same image, interleaved in one run; prints the table and writes it to
# $(BUILD)/bench.md and $(BUILD)/bench.json.  Not a test: nothing here is timed
# in `make test`.
#   make bench                          the full run (30 one-shot, 200 warm rounds, 200 creations,
#                                       then 1000 live sandboxes on their own nsboxd: --scale N, 0 skips;
#                                       then the network egress section: --network-rounds N, 0 skips;
#                                       then the browser image's: --browser-rounds N, 0 skips;
#                                       then snapshots, then E2B's JS SDK through nsbox-http, then
#                                       creates with volumes and host directories, then the desktop
#                                       image's desktop beside the same under bubblewrap)
#   make bench BENCH_ARGS='--warm-rounds 50 --concurrent 50'    a shorter one
BENCH_ARGS ?=

.PHONY: bench
bench: deps-bench
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory image
	$(MAKE) --no-print-directory image IMAGE=browser
	$(MAKE) --no-print-directory image IMAGE=desktop
	$(PYTHON) tests/bench/bench.py --build $(BUILD) --image-dir $(IMAGE_DIR) \
		--reproduce "make bench$(if $(filter-out build,$(BUILD)), BUILD=$(BUILD))$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
		$(BENCH_ARGS)
	$(PYTHON) tests/bench/snapshot.py --build $(BUILD) --image-dir $(IMAGE_DIR)
	$(PYTHON) tests/bench/e2b.py --build $(BUILD) --image-dir $(IMAGE_DIR)
	$(PYTHON) tests/bench/mounts.py --build $(BUILD) --image-dir $(IMAGE_DIR)
	$(PYTHON) tests/bench/restart.py --build $(BUILD) --image-dir $(IMAGE_DIR)
	$(PYTHON) tests/bench/desktop.py --build $(BUILD) --image-dir $(IMAGE_DIR)
