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
# side (nested maps host ids 100000-165535, the rootless user's range is
# 400000-465535), each one test at a time: every nested daemon maps the same
# host ids, and the rootless run makes and removes its user. Tests marked
# serial (they count host-wide things) then run alone, nested first. Each
# run's output is printed when it is done.
USERNS_MARKS_nested   := (core or nested) and not hostroot
USERNS_MARKS_rootless := core and not hostroot
USERNS_LOG := $(BUILD)/test-integration-userns

# $(call userns_run,LAUNCHER,MARKS): pytest under LAUNCHER; output to
# $(USERNS_LOG)/LAUNCHER.log, exit status (5, no tests, counts as 0) to .rc.
define userns_run
( echo "== integration core, NSBOX_TEST_LAUNCHER=$(1): -m \"$(2)\""; \
  NSBOX_TEST_LAUNCHER=$(1) NSBOX_BUILD=$(abspath $(BUILD)) NSBOX_IMAGE_DIR=$(IMAGE_DIR) \
	$(PYTHON) -m pytest -q -p no:cacheprovider -m "$(2)" $(PYTEST_ARGS) tests/integration; \
  r=$$?; [ $$r -ne 5 ] || r=0; echo $$r > $(USERNS_LOG)/$(1).rc ) > $(USERNS_LOG)/$(1).log 2>&1
endef

.PHONY: test-integration-userns
test-integration-userns: all
	@mkdir -p $(USERNS_LOG); rm -f $(USERNS_LOG)/*.rc; rc=0; \
	$(call userns_run,nested,($(USERNS_MARKS_nested)) and not serial) & \
	$(call userns_run,rootless,($(USERNS_MARKS_rootless)) and not serial) & \
	wait; \
	for launcher in nested rootless; do \
		cat $(USERNS_LOG)/$$launcher.log; [ "$$(cat $(USERNS_LOG)/$$launcher.rc)" = 0 ] || rc=1; \
	done; \
	$(call userns_run,nested,($(USERNS_MARKS_nested)) and serial); \
	cat $(USERNS_LOG)/nested.log; [ "$$(cat $(USERNS_LOG)/nested.rc)" = 0 ] || rc=1; \
	$(call userns_run,rootless,($(USERNS_MARKS_rootless)) and serial); \
	cat $(USERNS_LOG)/rootless.log; [ "$$(cat $(USERNS_LOG)/rootless.rc)" = 0 ] || rc=1; \
	exit $$rc
