# SPDX-License-Identifier: Apache-2.0
# The integration suite's core run again against nsboxd without host root:
# nested (root of a 65536-id user namespace the test makes, as a
# pod with hostUsers: false) and rootless (`nsboxd --rootless` as a user with
# an /etc/subuid range the test adds and removes). Tests whose claim needs
# host root by design are marked @pytest.mark.hostroot("why") and left out
# here; they still run in test-integration. See tests/integration/conftest.py.
#
# Which tests: the ones marked core; nested (the Kubernetes case) also runs
# those marked nested. Rootless runs the core only. The two runs go side by
# side (they share nothing: nested maps host ids 100000-165535, the rootless
# user's range is 400000-465535), each one test at a time: every nested
# daemon maps the same host ids, and the rootless run makes and removes its
# user. Each run's output is printed when both are done.
USERNS_MARKS_nested   := (core or nested) and not hostroot
USERNS_MARKS_rootless := core and not hostroot
USERNS_LOG := $(BUILD)/test-integration-userns

.PHONY: test-integration-userns
test-integration-userns: all
	@mkdir -p $(USERNS_LOG); rm -f $(USERNS_LOG)/*.rc; \
	for launcher in nested rootless; do \
		if [ $$launcher = nested ]; then marks="$(USERNS_MARKS_nested)"; else marks="$(USERNS_MARKS_rootless)"; fi; \
		( echo "== integration core, NSBOX_TEST_LAUNCHER=$$launcher: -m \"$$marks\""; \
		  NSBOX_TEST_LAUNCHER=$$launcher NSBOX_BUILD=$(abspath $(BUILD)) NSBOX_IMAGE_DIR=$(IMAGE_DIR) \
			$(PYTHON) -m pytest -q -p no:cacheprovider -m "$$marks" $(PYTEST_ARGS) tests/integration; \
		  echo $$? > $(USERNS_LOG)/$$launcher.rc ) > $(USERNS_LOG)/$$launcher.log 2>&1 & \
	done; \
	wait; rc=0; \
	for launcher in nested rootless; do \
		cat $(USERNS_LOG)/$$launcher.log; r=$$(cat $(USERNS_LOG)/$$launcher.rc); [ "$$r" = 0 ] || rc=1; \
	done; \
	exit $$rc
