# SPDX-License-Identifier: Apache-2.0
# The nsbox container image (deploy/kubernetes/): `make container` builds it
# with buildah from what `make all` and `make image` built, tagged
# localhost/nsbox:KEY (a hash of its inputs) and localhost/nsbox:latest; a
# rebuild with unchanged inputs is a no-op. runc runs it here: crun refuses
# hybrid cgroup hosts with a controller on the v2 hierarchy (this VM).
DEPS_CONTAINER := buildah podman runc uidmap

.PHONY: container deps-container
deps-container:
	$(call apt_install,$(DEPS_CONTAINER))

container: deps-container all
	$(MAKE) image
	deploy/kubernetes/build-image.sh --build $(BUILD) --image-dir $(IMAGE_DIR) --cache $(CACHE_DIR)

# make test runs the container under podman (tests/integration/deploy/test_deploy.py).
deps-test: deps-container
