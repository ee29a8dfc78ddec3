/* Images under the image dir: NAME/rootfs + NAME/manifest.json. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

bool image_exists(const char *name);
/* [{name, python_version, build_date, ...}] of the images present (new reference). */
json_t *images_list(void);
/* The modules the image's Python fork server imports (manifest
 * "python_preload", new reference), or NULL: the image has no fork server. */
json_t *image_python_preload(const char *name);
