/* SPDX-License-Identifier: Apache-2.0 */
/* Headless Chromium in a sandbox of a browser image: browser.start,
 * browser.navigate, browser.screenshot (docs/browser.md). */
#pragma once

#include <jansson.h>

#include "rpc.h"

struct sandbox;

/* browser.start {sandbox_id, timeout_seconds?}: Chromium runs (started, or
 * found running) and its CDP endpoint is exposed on the host's loopback. */
void browser_method_start(struct rpc_request *req, struct sandbox *sb);
/* browser.navigate {sandbox_id, url, timeout_seconds?} */
void browser_method_navigate(struct rpc_request *req, struct sandbox *sb);
/* browser.screenshot {sandbox_id, url?, full_page?, width?, height?, timeout_seconds?}: a PNG, base64 */
void browser_method_screenshot(struct rpc_request *req, struct sandbox *sb);
/* sandbox.info's "browser" block (new reference), or NULL: the sandbox's image has no browser. */
json_t *browser_info(const struct sandbox *sb);
