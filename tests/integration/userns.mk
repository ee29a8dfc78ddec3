# SPDX-License-Identifier: Apache-2.0
# The integration suite's core run again against nsboxd without host root:
# nested (root of a 65536-id user namespace the test makes, as a
# pod with hostUsers: false) and rootless (`nsboxd --rootless` as a user with
# an /etc/subuid range the test adds and removes). Tests whose claim needs
# host root by design are marked @pytest.mark.hostroot("why") and left out
# here; they still run in test-integration. See tests/integration/conftest.py.
#
# Which tests: the ones marked core; nested (the Kubernetes case) also runs
# those marked nested. Rootless runs the core only, to keep both together
# near five minutes on a 2-core box. One pytest at a time, serially: every
# nested daemon maps the same host ids, and the rootless user is made and
# removed by the run.
USERNS_MARKS_nested   := (core or nested) and not hostroot
USERNS_MARKS_rootless := core and not hostroot

.PHONY: test-integration-userns
test-integration-userns: all
	@set -e; for launcher in nested rootless; do \
		if [ $$launcher = nested ]; then marks="$(USERNS_MARKS_nested)"; else marks="$(USERNS_MARKS_rootless)"; fi; \
		echo "== integration core, NSBOX_TEST_LAUNCHER=$$launcher: -m \"$$marks\""; \
		NSBOX_TEST_LAUNCHER=$$launcher NSBOX_BUILD=$(abspath $(BUILD)) NSBOX_IMAGE_DIR=$(IMAGE_DIR) \
			$(PYTHON) -m pytest -q -p no:cacheprovider -m "$$marks" $(PYTEST_ARGS) tests/integration; \
	done
