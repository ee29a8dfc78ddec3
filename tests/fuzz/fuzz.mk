# Bounded fuzzing of the request parser (make test-fuzz).
.PHONY: test-fuzz
test-fuzz:
	@echo "test-fuzz: not built yet"
