#include "images.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"
#include "policy.h"

bool image_exists(const char *name)
{
        char path[4096];
        struct stat st;
        if (!policy_valid_name(name))
                return false;
        snprintf(path, sizeof(path), "%s/%s/rootfs", nsboxd.config.image_dir, name);
        return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

json_t *images_list(void)
{
        json_t *list = json_array();
        DIR *d = opendir(nsboxd.config.image_dir);
        if (d == NULL)
                return list;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (!image_exists(de->d_name))
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s/manifest.json", nsboxd.config.image_dir, de->d_name);
                json_t *manifest = json_load_file(path, 0, NULL);
                json_t *entry = json_pack("{s:s}", "name", de->d_name);
                if (json_is_object(manifest)) {
                        static const char *const keys[] = { "distribution", "suite", "python_version",
                                                            "build_date" };
                        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                                json_t *v = json_object_get(manifest, keys[i]);
                                if (v != NULL)
                                        json_object_set(entry, keys[i], v);
                        }
                }
                if (manifest)
                        json_decref(manifest);
                json_array_append_new(list, entry);
        }
        closedir(d);
        return list;
}

json_t *image_python_preload(const char *name)
{
        char path[4096];
        if (!image_exists(name))
                return NULL;
        snprintf(path, sizeof(path), "%s/%s/manifest.json", nsboxd.config.image_dir, name);
        json_t *manifest = json_load_file(path, 0, NULL);
        json_t *list = json_object_get(manifest, "python_preload");
        json_t *out = NULL;
        if (json_is_array(list)) {
                out = json_array();
                size_t i;
                json_t *v;
                /* Module names only: each becomes an argument of the server. */
                json_array_foreach(list, i, v)
                {
                        const char *m = json_string_value(v);
                        if (m != NULL && m[0] != '\0' && m[0] != '-' && strlen(m) < 128 &&
                            strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") ==
                                strlen(m))
                                json_array_append(out, v);
                }
        }
        if (manifest)
                json_decref(manifest);
        return out;
}
