# cgroup v2 suite under qemu (make test-vm).
.PHONY: test-vm
test-vm:
	@echo "test-vm: not built yet"
