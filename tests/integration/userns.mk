# The integration suite's core run again against nsboxd without host root
# (issue 20): nested (root of a 65536-id user namespace the test makes, as a
# pod with hostUsers: false) and rootless (`nsboxd --rootless` as a user with
# an /etc/subuid range the test adds and removes). Tests whose claim needs
# host root by design are marked @pytest.mark.hostroot("why") and left out
# here; they still run in test-integration. See tests/integration/conftest.py.
USERNS_CORE := $(addprefix tests/integration/test_,$(addsuffix .py, \
	exec exec_stdin fs python shell_sessions isolation protocol addressing pty cli cli_exec))

.PHONY: test-integration-userns
test-integration-userns: all
	@set -e; for launcher in nested rootless; do \
		echo "== integration core, NSBOX_TEST_LAUNCHER=$$launcher"; \
		NSBOX_TEST_LAUNCHER=$$launcher NSBOX_BUILD=$(abspath $(BUILD)) NSBOX_IMAGE_DIR=$(IMAGE_DIR) \
			$(PYTHON) -m pytest -q -p no:cacheprovider -m "not hostroot" $(USERNS_CORE); \
	done
