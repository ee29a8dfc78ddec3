/* Placeholder until the file API lands. */
#include "fs.h"

#include <errno.h>

#define NOT_YET(name)                                                                  \
        void fs_method_##name(struct rpc_request *req, struct sandbox *sb)             \
        {                                                                              \
                rpc_reply_fail(req, "unavailable", "fs." #name " is not implemented"); \
        }
NOT_YET(list)
NOT_YET(read)
NOT_YET(write)
NOT_YET(remove)
NOT_YET(mkdir)
NOT_YET(stat)

int fs_write_file(struct sandbox *sb, const char *path, const void *data, size_t len, mode_t mode,
                  nsbox_error_t **err)
{
        return nsbox_error(err, ENOSYS, "fs_write_file");
}

int fs_read_file(struct sandbox *sb, const char *path, size_t max_bytes, char **data, size_t *len,
                 nsbox_error_t **err)
{
        return nsbox_error(err, ENOSYS, "fs_read_file");
}
