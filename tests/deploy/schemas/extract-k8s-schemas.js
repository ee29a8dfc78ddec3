// Regenerates k8s-v1.27.1.json (test data) from the JSON schemas that the npm
// package kubernetes-models@4.3.1 (MIT; generated from Kubernetes v1.27.1's
// OpenAPI spec) and @kubernetes-models/apimachinery@1.2.1 register at load:
//
//   npm pack kubernetes-models@4.3.1 @kubernetes-models/apimachinery@1.2.1
//   mkdir km am && tar xzf kubernetes-models-4.3.1.tgz -C km && \
//     tar xzf kubernetes-models-apimachinery-1.2.1.tgz -C am
//   node extract-k8s-schemas.js km/package am/package > k8s-v1.27.1.json
//
// Only the definitions reachable from the kinds the manifests use are kept;
// each package's `$ref: "ID#"` becomes `#/definitions/ID`. The schemas are
// otherwise as published.
"use strict";
const Module = require("module");
const path = require("path");
const [models, machinery] = process.argv.slice(2).map((p) => path.resolve(p));
const roots = ["io.k8s.api.apps.v1.DaemonSet", "io.k8s.api.core.v1.Service", "io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.PodSpec",
               "io.k8s.api.core.v1.PodTemplateSpec"];
const registered = {};
const realResolve = Module._resolveFilename;
Module._resolveFilename = function (request, parent, ...rest) {
        if (request === "@kubernetes-models/validate")
                return "validate-stub";
        if (request.startsWith("@kubernetes-models/apimachinery/"))
                return realResolve.call(this, path.join(machinery, request.slice(31)), parent, ...rest);
        return realResolve.call(this, request, parent, ...rest);
};
require.cache["validate-stub"] = { id: "validate-stub", filename: "validate-stub", loaded: true,
        exports: { register: (id, schema) => { registered[id] = schema; }, validate: () => {} } };
const fs = require("fs");
for (const dir of [path.join(models, "_schemas"), path.join(machinery, "_schemas")])
        for (const f of fs.readdirSync(dir).filter((f) => f.endsWith(".js")))
                require(path.join(dir, f)).addSchema();
const rewrite = (v) => {
        if (Array.isArray(v)) return v.map(rewrite);
        if (v && typeof v === "object") {
                const out = {};
                for (const [k, x] of Object.entries(v))
                        out[k] = k === "$ref" ? "#/definitions/" + x.replace(/#$/, "") : rewrite(x);
                return out;
        }
        return v;
};
const keep = {};
const walk = (id) => {
        if (keep[id]) return;
        if (!registered[id]) throw new Error("no schema registered for " + id);
        keep[id] = rewrite(registered[id]);
        JSON.stringify(registered[id], (k, v) => { if (k === "$ref") walk(v.replace(/#$/, "")); return v; });
};
roots.forEach(walk);
const sorted = {};
for (const id of Object.keys(keep).sort()) sorted[id] = keep[id];
process.stdout.write(JSON.stringify({
        $comment: "Kubernetes v1.27.1 API schemas, from kubernetes-models@4.3.1 (MIT); see README.md",
        definitions: sorted }, null, 1) + "\n");
