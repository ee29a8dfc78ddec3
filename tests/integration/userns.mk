# SPDX-License-Identifier: Apache-2.0
# The integration suite's core run again against nsboxd without host root
#: nested (root of a 65536-id user namespace the test makes, as a
# pod with hostUsers: false) and rootless (`nsboxd --rootless` as a user with
# an /etc/subuid range the test adds and removes). Tests whose claim needs
# host root by design are marked @pytest.mark.hostroot("why") and left out
# here; they still run in test-integration. See tests/integration/conftest.py.
USERNS_CORE := $(addprefix tests/integration/test_,$(addsuffix .py, \
	exec exec_stdin fs python shell_sessions isolation protocol addressing pty cli cli_exec))
# nested (the Kubernetes case) also runs these; rootless runs the core only,
# to keep both together near five minutes on a 2-core box.
USERNS_NESTED_MORE := $(addprefix tests/integration/test_,$(addsuffix .py, \
	fs_rename cli_cp python_script seccomp_in_init hardening_runtime))

.PHONY: test-integration-userns
test-integration-userns: all
	@set -e; for launcher in nested rootless; do \
		files="$(USERNS_CORE)"; [ $$launcher = rootless ] || files="$$files $(USERNS_NESTED_MORE)"; \
		echo "== integration core, NSBOX_TEST_LAUNCHER=$$launcher"; \
		NSBOX_TEST_LAUNCHER=$$launcher NSBOX_BUILD=$(abspath $(BUILD)) NSBOX_IMAGE_DIR=$(IMAGE_DIR) \
			$(PYTHON) -m pytest -q -p no:cacheprovider -m "not hostroot" $$files; \
	done
