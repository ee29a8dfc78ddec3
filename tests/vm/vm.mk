# SPDX-License-Identifier: Apache-2.0
# cgroup v2 suite under qemu (make test-vm): Debian's kernel booted with TCG
# and cgroup2 as the only hierarchy; then the same kernel booting a small
# Debian with systemd as PID 1, nsboxd under its shipped unit (live restore
# across restarts and crashes, make test-vm-systemd); see tests/vm/run-vm.sh.
.PHONY: test-vm test-vm-systemd
test-vm: all
	tests/vm/run-vm.sh $(BUILD) $(IMAGE_DIR) $(CACHE_DIR)
	tests/vm/run-vm.sh $(BUILD) $(IMAGE_DIR) $(CACHE_DIR) systemd

test-vm-systemd: all
	tests/vm/run-vm.sh $(BUILD) $(IMAGE_DIR) $(CACHE_DIR) systemd
