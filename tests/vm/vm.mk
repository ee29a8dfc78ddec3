# SPDX-License-Identifier: Apache-2.0
# cgroup v2 suite under qemu (make test-vm): Debian's kernel booted with TCG
# and cgroup2 as the only hierarchy; see tests/vm/run-vm.sh.
.PHONY: test-vm
test-vm: all
	tests/vm/run-vm.sh $(BUILD) $(IMAGE_DIR) $(CACHE_DIR)
