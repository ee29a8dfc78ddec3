/* SPDX-License-Identifier: Apache-2.0 */
/* The desktop calls: a virtual screen in a sandbox (Xvfb, a window manager,
 * x11vnc, noVNC) started on request, its screenshots and xdotool input. */
#pragma once

#include "rpc.h"

struct sandbox;

/* desktop.start: start the sandbox's desktop (or find it running), wait
 * until it answers, expose noVNC and VNC when the sandbox has network. */
void desktop_method_start(struct rpc_request *req, struct sandbox *sb);
/* desktop.screenshot: the screen as a base64 PNG. */
void desktop_method_screenshot(struct rpc_request *req, struct sandbox *sb);
/* desktop.click, desktop.move, desktop.scroll, desktop.type, desktop.key:
 * xdotool, run with an argv built here from checked params. */
void desktop_method_click(struct rpc_request *req, struct sandbox *sb);
void desktop_method_move(struct rpc_request *req, struct sandbox *sb);
void desktop_method_scroll(struct rpc_request *req, struct sandbox *sb);
void desktop_method_type(struct rpc_request *req, struct sandbox *sb);
void desktop_method_key(struct rpc_request *req, struct sandbox *sb);
