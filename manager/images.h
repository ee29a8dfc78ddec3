/* Images under the image dir: NAME/rootfs + NAME/manifest.json. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

bool image_exists(const char *name);
/* [{name, python_version, build_date, ...}] of the images present (new reference). */
json_t *images_list(void);
