/* libseccomp's <seccomp.h>. The build puts policy/ on the include path, where
 * our own seccomp.h shadows the library's header of the same name, so reach it
 * by searching the directories after this one. Include as <libseccomp.h>. */
#pragma once

#include_next <seccomp.h>
