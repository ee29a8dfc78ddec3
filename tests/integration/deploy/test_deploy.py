# SPDX-License-Identifier: Apache-2.0
"""deploy/kubernetes: the manifests validate against the published schemas
(tests/deploy/schemas), and the container image runs under podman with the
security context its SandboxTemplate gives the pod, so the pod's contract is
exercised for real: user namespace, only the listed capabilities, unmasked
/proc, the runtime's default seccomp profile, read-only root, emptyDir
volumes, the HTTP front on ports 8888 and 8080 without tokens."""
import copy
import glob
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import jsonschema
import pytest
import yaml

# serial: podman containers that make uid ranges and sandboxes of their own
pytestmark = [pytest.mark.serial, pytest.mark.xdist_group("host-network"), pytest.mark.slow]  # slow: builds and starts podman containers

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEPLOY = os.path.join(REPO, "deploy", "kubernetes")
SCHEMAS = os.path.join(REPO, "tests", "deploy", "schemas")
BUILD = os.environ.get("NSBOX_BUILD", os.path.join(REPO, "build"))
IMAGE_DIR = os.environ.get("NSBOX_IMAGE_DIR", "/var/lib/nsbox/images")
CACHE_DIR = os.environ.get("NSBOX_CACHE_DIR", "/var/cache/nsbox")
K8S_SCHEMA = "k8s-v1.27.1.json"

# Core kinds and the definition that describes each.
CORE_KINDS = {
    ("apps/v1", "DaemonSet"): "io.k8s.api.apps.v1.DaemonSet",
    ("v1", "Service"): "io.k8s.api.core.v1.Service",
    ("v1", "Secret"): "io.k8s.api.core.v1.Secret",
}


# --- schemas -------------------------------------------------------------------


def strict(node):
    """The schema as kube-apiserver applies it with fieldValidation=Strict
    (kubectl's default): a field no schema names is an error, not dropped.
    A subtree the shipped CRD elided (x-nsbox-elided) accepts nothing, or is
    its $ref."""
    if isinstance(node, list):
        return [strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    if "x-nsbox-elided" in node:
        return {"$ref": node["$ref"]} if "$ref" in node else {"not": {}}
    out = {k: (v if k in ("enum", "required", "default") else strict(v)) for k, v in node.items()}
    if "properties" in node and "additionalProperties" not in node and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def load_k8s():
    with open(os.path.join(SCHEMAS, K8S_SCHEMA)) as f:
        return strict(json.load(f))


def load_crds():
    """(apiVersion, kind) -> openAPIV3Schema of every shipped CRD version."""
    out = {}
    for path in sorted(glob.glob(os.path.join(SCHEMAS, "*.yaml"))):
        with open(path) as f:
            crd = yaml.safe_load(f)
        assert crd["kind"] == "CustomResourceDefinition", path
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            out[(f"{group}/{v['name']}", kind)] = strict(v["schema"]["openAPIV3Schema"])
    return out


K8S = load_k8s()
CRDS = load_crds()


def validation_errors(doc):
    """Every schema error of one manifest document, as strings."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    store = {K8S_SCHEMA: K8S}
    if key in CORE_KINDS:
        schema = {"$ref": f"{K8S_SCHEMA}#/definitions/{CORE_KINDS[key]}"}
    elif key in CRDS:
        schema = CRDS[key]
    else:
        return [f"no schema for apiVersion {key[0]} kind {key[1]}"]
    errors = []
    for sch, part in ((schema, doc), ({"$ref": f"{K8S_SCHEMA}#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                                       doc.get("metadata", {}))):
        resolver = jsonschema.RefResolver(base_uri="", referrer=sch, store=store)
        v = jsonschema.Draft7Validator(sch, resolver=resolver)
        errors += [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in v.iter_errors(part)]
    # The CRD's own CEL rule (x-kubernetes-validations) of the templates.
    name = doc.get("metadata", {}).get("name", "")
    if doc.get("kind") == "SandboxTemplate" and len(name) > 63:
        errors.append("metadata/name: name must not exceed 63 characters")
    return errors


def manifests():
    out = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, "*.yaml"))):
        with open(path) as f:
            for i, doc in enumerate(d for d in yaml.safe_load_all(f) if d is not None):
                out.append(pytest.param(doc, id=f"{os.path.basename(path)}#{i}:{doc.get('kind')}"))
    return out


def manifest(kind):
    docs = [p.values[0] for p in manifests() if p.values[0].get("kind") == kind]
    assert len(docs) == 1, kind
    return copy.deepcopy(docs[0])


def test_the_deploy_directory_has_every_manifest_it_documents():
    kinds = sorted(p.values[0]["kind"] for p in manifests())
    assert kinds == ["DaemonSet", "SandboxClaim", "SandboxTemplate", "SandboxWarmPool", "Secret", "Service"]


@pytest.mark.parametrize("doc", manifests())
def test_every_manifest_validates_against_its_published_schema(doc):
    assert validation_errors(doc) == []


def _set(doc, path, value):
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


def _rename(doc, path, new):
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[new] = node.pop(path[-1])


POD = ["spec", "podTemplate", "spec"]
CTR = POD + ["containers", 0]
DS_CTR = ["spec", "template", "spec", "containers", 0]
BROKEN = [
    # (kind, what is broken, mutation)
    ("SandboxTemplate", "misspelled pod field", lambda d: _rename(d, POD + ["hostUsers"], "hostUser")),
    ("SandboxTemplate", "procMount not one of its values",
     lambda d: _set(d, CTR + ["securityContext", "procMount"], "Unmask")),
    ("SandboxTemplate", "port not a number", lambda d: _set(d, CTR + ["ports", 0, "containerPort"], "8080/tcp")),
    ("SandboxTemplate", "capabilities as a string", lambda d: _set(d, CTR + ["securityContext", "capabilities", "add"],
                                                                    "SYS_ADMIN")),
    ("SandboxTemplate", "podTemplate missing", lambda d: d["spec"].pop("podTemplate")),
    ("SandboxTemplate", "an elided CRD field used", lambda d: _set(d, ["spec", "networkPolicy"], {"ingress": []})),
    ("SandboxTemplate", "name over the CRD's 63", lambda d: _set(d, ["metadata", "name"], "n" * 64)),
    ("SandboxWarmPool", "template reference misspelled", lambda d: _rename(d, ["spec", "sandboxTemplateRef"],
                                                                            "templateRef")),
    ("SandboxWarmPool", "negative replicas", lambda d: _set(d, ["spec", "replicas"], -1)),
    ("SandboxClaim", "shutdown policy not one of its values",
     lambda d: _set(d, ["spec", "lifecycle", "shutdownPolicy"], "Destroy")),
    ("DaemonSet", "selector missing", lambda d: d["spec"].pop("selector")),
    ("DaemonSet", "unknown container field", lambda d: _set(d, DS_CTR + ["securityContxt"], {})),
    ("Service", "port as a list", lambda d: _set(d, ["spec", "ports", 0, "port"], [8080])),
    ("Secret", "metadata label not a string", lambda d: _set(d, ["metadata", "labels"], {"a": 1})),
    ("Secret", "unknown apiVersion", lambda d: _set(d, ["apiVersion"], "v2")),
]


@pytest.mark.parametrize("kind,what,mutate", BROKEN, ids=[f"{k}:{w}" for k, w, _ in BROKEN])
def test_a_broken_manifest_fails_validation(kind, what, mutate):
    doc = manifest(kind)
    assert validation_errors(doc) == []
    mutate(doc)
    assert validation_errors(doc) != [], what


# --- the container under podman ----------------------------------------------------

# What this machine's podman needs, beyond the manifest (README "Podman here"):
# runc, because crun refuses a hybrid cgroup host whose v2 hierarchy has a
# controller; explicit ulimits no higher than ours (no CAP_SYS_RESOURCE to
# raise them). cgroupfs (no systemd session) and the CNI bridge are podman's
# defaults here.
PODMAN = ["podman"]
RUNTIME = ["--runtime", "runc"]
# the agent-sandbox SDK's server_port (its router sends there) and the port
# antwort's acquirer sends POST /execute {code} to
SDK_PORT, EXECUTE_PORT = 8888, 8080
# hostUsers: false as the kubelet does it: a user namespace of its own with
# a host id range nothing else uses (nsboxd's own pools start at 1048576).
USERNS_HOST_BASE = 2_000_000_000


def podman_ok():
    if shutil.which("podman") is None or shutil.which("buildah") is None or shutil.which("runc") is None:
        return "podman, buildah or runc missing (make deps-test installs them)"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def podman_flags_from(template):
    """podman run flags equivalent to the SandboxTemplate's pod security
    context, derived from the manifest so the two cannot drift."""
    pod = template["spec"]["podTemplate"]["spec"]
    (ctr,) = pod["containers"]
    sc = ctr["securityContext"]
    flags = []
    userns = pod.get("hostUsers") is False
    assert not sc.get("privileged"), "the template's pod must not be privileged"
    caps = sc.get("capabilities", {})
    flags += [f"--cap-drop={c}" for c in caps.get("drop", [])]
    if caps.get("add"):
        flags.append("--cap-add=" + ",".join(caps["add"]))
    if sc.get("procMount") == "Unmasked":
        flags += ["--security-opt", "unmask=/proc/*"]
    seccomp = sc.get("seccompProfile", {}).get("type", "RuntimeDefault")
    assert seccomp == "RuntimeDefault", seccomp  # podman's default profile
    if sc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    if "runAsUser" in sc:
        flags += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', 0)}"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in ctr.get("volumeMounts", []):
        v = volumes[m["name"]]
        if "emptyDir" in v:
            if v["emptyDir"].get("medium") == "Memory":
                flags += ["--tmpfs", m["mountPath"]]
            else:
                flags += ["--mount", f"type=volume,destination={m['mountPath']}"]
    for e in ctr.get("env", []):
        flags += ["-e", f"{e['name']}={e['value']}"]
    limits = ctr.get("resources", {}).get("limits", {})
    if "memory" in limits:
        flags += ["--memory", limits["memory"].replace("Gi", "g").replace("Mi", "m")]
    if "cpu" in limits:
        flags += ["--cpus", str(limits["cpu"])]
    return flags, userns


@pytest.fixture(scope="module")
def container_image():
    why = podman_ok()
    if why:
        pytest.fail(why)
    r = subprocess.run([os.path.join(DEPLOY, "build-image.sh"), "--build", BUILD, "--image-dir", IMAGE_DIR,
                        "--cache", CACHE_DIR], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


class Container:
    def __init__(self, image, template, tokens):
        self.name = f"nsbox-deploy-test-{uuid.uuid4().hex[:8]}"
        self.dir = os.path.join("/tmp", self.name)
        os.makedirs(self.dir)
        tokens_path = os.path.join(self.dir, "tokens")
        with open(tokens_path, "w") as f:
            f.write("".join(f"{uid} {tok}\n" for uid, tok in tokens.items()))
        os.chmod(tokens_path, 0o400)
        # As the kubelet makes a secret volume: owned by the pod's root.
        if template["spec"]["podTemplate"]["spec"].get("hostUsers") is False:
            os.chown(self.dir, USERNS_HOST_BASE, USERNS_HOST_BASE)
            os.chown(tokens_path, USERNS_HOST_BASE, USERNS_HOST_BASE)
        flags, userns = podman_flags_from(template)
        pod = template["spec"]["podTemplate"]["spec"]
        (ctr,) = pod["containers"]
        # each port the manifest declares, published on 127.0.0.1
        self.ports = {p["containerPort"]: free_port() for p in ctr["ports"]}
        self.port = self.ports[ctr["ports"][0]["containerPort"]]
        publish = [x for c, h in self.ports.items() for x in ("-p", f"127.0.0.1:{h}:{c}")]
        tokens_mount = next((m["mountPath"] for m in ctr["volumeMounts"] if m["name"] == "tokens"), None)
        self.tokens = tokens_mount is not None
        if self.tokens:
            publish += ["-v", f"{self.dir}:{tokens_mount}:ro"]
        # podman's defaults (nofile 1048576) are above what we may set here;
        # conmon runs with nproc 32768.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        nproc = 4096
        args = [*PODMAN, "run", "-d", "--name", self.name, *RUNTIME,
                "--ulimit", f"nofile={soft}:{hard}", "--ulimit", f"nproc={nproc}:{nproc}",
                *publish, *flags, *EXTRA_FLAGS]
        if userns:
            args += [f"--uidmap=0:{USERNS_HOST_BASE}:{USERNS_IDS}", f"--gidmap=0:{USERNS_HOST_BASE}:{USERNS_IDS}"]
        args.append(image)
        try:
            self.start(args)
        except BaseException:
            self.remove()
            raise

    def start(self, args):
        # build-image.sh puts nsbox-http in the image when the build has it.
        self.has_http = os.access(os.path.join(BUILD, "nsbox-http"), os.X_OK)
        r = subprocess.run(args, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 120
        while True:
            r = self.exec("nsbox-entrypoint", "probe", check=False)
            if r.returncode == 0:
                break
            if not self.running() or time.monotonic() > deadline:
                raise AssertionError("the container did not become ready:\n" + self.logs())
            time.sleep(0.5)

    def running(self):
        r = subprocess.run([*PODMAN, "inspect", "-f", "{{.State.Running}}", self.name], capture_output=True, text=True)
        return r.stdout.strip() == "true"

    def exec(self, *cmd, check=True, timeout=120):
        r = subprocess.run([*PODMAN, "exec", self.name, *cmd], capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{cmd}: {r.stdout}{r.stderr}"
        return r

    def logs(self):
        r = subprocess.run([*PODMAN, "logs", self.name], capture_output=True, text=True)
        return r.stdout + r.stderr

    def stop(self, timeout=60):
        r = subprocess.run([*PODMAN, "stop", "-t", str(timeout), self.name], capture_output=True, text=True,
                           timeout=timeout + 60)
        return r

    def remove(self):
        subprocess.run([*PODMAN, "rm", "-f", "-v", self.name], capture_output=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


# The kubelet gives a hostUsers: false pod 65536 ids; nsboxd runs there as
# root of that namespace (userns mode), with the pod's read-only cgroupfs.
USERNS_IDS = 65536
EXTRA_FLAGS = []

TOKEN = "deploy-test-token-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def container(container_image):
    c = Container(container_image, manifest("SandboxTemplate"), {41001: TOKEN})
    try:
        yield c
    finally:
        c.remove()


def read(container, path):
    """A file in the container (whose image has no cat)."""
    return container.exec("bash", "-c", 'printf "%s\\n" "$(<"$1")"', "-", path).stdout


def sandbox_python(container, code):
    return container.exec("nsbox", "run", "--", "python3", "-c", code, timeout=180)


def test_the_container_runs_python_in_a_sandbox(container):
    r = sandbox_python(container, "import sys, numpy; print('ok', sys.version_info[:2], int(numpy.int64(6) * 7))")
    assert r.stdout.strip() == "ok (3, 11) 42"


def test_the_pod_gets_only_the_manifests_capabilities_in_its_own_user_namespace(container):
    template = manifest("SandboxTemplate")
    sc = template["spec"]["podTemplate"]["spec"]["containers"][0]["securityContext"]
    status = read(container, "/proc/1/status")
    eff = int(re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.M).group(1), 16)
    bnd = int(re.search(r"^CapBnd:\s*([0-9a-f]+)$", status, re.M).group(1), 16)
    numbers = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "SETGID": 6, "SETUID": 7, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_ADMIN": 21,
               "SETFCAP": 31}
    want = sum(1 << numbers[c] for c in sc["capabilities"]["add"])
    assert (eff, bnd) == (want, want)
    uid_map = read(container, "/proc/1/uid_map").split()
    assert uid_map == ["0", str(USERNS_HOST_BASE), str(USERNS_IDS)]
    # Root inside is an unprivileged id outside: nsboxd's processes on the host.
    r = subprocess.run([*PODMAN, "top", container.name, "huser", "comm"], capture_output=True, text=True)
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert ["nsboxd"] in [row[1:] for row in rows] and all(int(row[0]) >= USERNS_HOST_BASE for row in rows), rows
    assert re.search(r"^NoNewPrivs:\s*1$", status, re.M) or sc.get("allowPrivilegeEscalation") is not False
    # The pod's memory limit bounds the container (all its sandboxes together).
    limit = template["spec"]["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    r = subprocess.run([*PODMAN, "inspect", "-f", "{{.HostConfig.Memory}}", container.name], capture_output=True,
                       text=True)
    assert int(r.stdout) == int(limit.rstrip("Gi")) << 30, (r.stdout, limit)
    # Every sandbox nsboxd started (its warm pool's too) started: a missing
    # capability may fail only some of them.
    assert "create failed" not in container.logs(), container.logs()
    # The root filesystem is read-only; the state dir is a volume.
    assert container.exec("mkdir", "/var/lib/nsbox/x", check=False).returncode != 0
    container.exec("mkdir", "/var/lib/nsbox/state/x")


def test_a_sandbox_in_the_pod_sees_none_of_the_containers_processes(container):
    code = ("import os\n"
            "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
            "print(' '.join(open(f'/proc/{p}/comm').read().strip() for p in pids if os.path.exists(f'/proc/{p}/comm')))")
    seen = sandbox_python(container, code).stdout.split()
    outside = container.exec("bash", "-c", 'for f in /proc/[0-9]*/comm; do echo "$(<$f)"; done').stdout.split()
    assert "nsboxd" in outside and "nsbox-entrypoin" in outside, outside
    assert "nsboxd" not in seen and "nsbox-entrypoin" not in seen and "nsbox-http" not in seen, seen
    assert "python3" in seen


def test_sigterm_removes_the_sandboxes_and_the_container_exits_0(container_image):
    c = Container(container_image, manifest("SandboxTemplate"), {41001: TOKEN})
    try:
        sid = c.exec("nsbox", "create").stdout.strip()
        assert c.exec("nsbox", "exec", sid, "--", "true").returncode == 0
        r = c.stop(timeout=60)
        assert r.returncode == 0, r.stderr
        state = subprocess.run([*PODMAN, "inspect", "-f", "{{.State.ExitCode}}", c.name], capture_output=True,
                               text=True).stdout.strip()
        assert state == "0", c.logs()
        assert f"sandbox {sid}" in c.logs()
    finally:
        c.remove()


def test_the_daemonset_pod_copies_the_image_to_the_node_and_gives_each_sandbox_its_own_range(container_image):
    """The DaemonSet's contract: privileged, node disk as a hostPath (a temp
    dir here), the image copied there at start, per-sandbox host uid ranges."""
    ds = manifest("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["securityContext"] == {"privileged": True}
    node = f"/tmp/nsbox-deploy-test-node-{uuid.uuid4().hex[:8]}"
    name = os.path.basename(node)
    volumes = {v["name"]: v for v in pod["volumes"]}
    args = [*PODMAN, "run", "-d", "--name", name, *RUNTIME, "--privileged", "--ulimit", "nproc=4096:4096",
            "--ulimit", "nofile={0}:{1}".format(*resource.getrlimit(resource.RLIMIT_NOFILE))]
    for m in ctr["volumeMounts"]:
        v = volumes[m["name"]]
        # The node's disk is a temp dir; podman --privileged gives the host's cgroupfs itself.
        if "hostPath" in v and v["hostPath"]["path"] == "/var/lib/nsbox":
            os.makedirs(node)
            args += ["-v", f"{node}:{m['mountPath']}"]
    args += [x for e in ctr["env"] if e["name"] != "NSBOX_TOKENS_FILE" for x in ("-e", f"{e['name']}={e['value']}")]
    try:
        r = subprocess.run([*args, container_image], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 120
        while subprocess.run([*PODMAN, "exec", name, "nsbox-entrypoint", "probe"], capture_output=True).returncode:
            assert time.monotonic() < deadline, subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
            time.sleep(0.5)
        assert os.path.exists(os.path.join(node, "images", "python", "manifest.json"))
        ids = [subprocess.run([*PODMAN, "exec", name, "nsbox", "create"], capture_output=True, text=True,
                              check=True).stdout.strip() for _ in range(2)]
        logs = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
        ranges = {re.search(rf"sandbox {i}: created for uid 0 \(host uids (\d+)-", logs.stdout + logs.stderr).group(1)
                  for i in ids}
        assert len(ranges) == 2, logs.stderr
        r = subprocess.run([*PODMAN, "exec", name, "nsbox", "exec", ids[0], "--", "python3", "-c", "print(6*7)"],
                           capture_output=True, text=True, timeout=120)
        assert r.stdout == "42\n", r.stderr
    finally:
        subprocess.run([*PODMAN, "rm", "-f", "-v", "-t", "30", name], capture_output=True, timeout=120)
        shutil.rmtree(node, ignore_errors=True)


# --- the HTTP front on the pod's port ------------------------------------------------


def http(container, method, path, body=None, token=None, port=SDK_PORT):
    """A request to the pod's port (the template's pod has no tokens: what its network policy
    admits is served, as the router's requests and antwort's come, without Authorization)."""
    if not container.has_http:
        pytest.skip("the image has no HTTP front (build/nsbox-http not built)")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"http://127.0.0.1:{container.ports[port]}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=180) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_the_templates_probes_and_ports_are_the_clients_and_need_no_token(container):
    (ctr,) = manifest("SandboxTemplate")["spec"]["podTemplate"]["spec"]["containers"]
    assert {p["containerPort"] for p in ctr["ports"]} == {SDK_PORT, EXECUTE_PORT}
    assert not any(m["name"] == "tokens" for m in ctr["volumeMounts"])
    for probe in (ctr["readinessProbe"], ctr["livenessProbe"]):
        status, body = http(container, "GET", probe["httpGet"]["path"], port=probe["httpGet"]["port"])
        assert status == 200 and body["status"] == "ok", body
    assert "NO AUTHENTICATION" in container.logs()


def test_execute_runs_python_in_a_sandbox_inside_the_container(container):
    status, body = http(container, "POST", "/execute", {"code": "import numpy; print(int(numpy.arange(7).sum()))",
                                                        "files": {"in.txt": "aGk="}}, port=EXECUTE_PORT)
    assert status == 200 and body["status"] == "success" and body["stdout"] == "21\n", body


def test_a_sandbox_behind_execute_sees_none_of_the_containers_processes(container):
    code = ("import os\n"
            "print(' '.join(open(f'/proc/{p}/comm').read().strip() for p in os.listdir('/proc') if p.isdigit()))")
    status, body = http(container, "POST", "/execute", {"code": code}, port=EXECUTE_PORT)
    assert status == 200 and body["status"] == "success", body
    seen = body["stdout"].split()
    assert "python3" in seen
    assert not {"nsboxd", "nsbox-http", "nsbox-entrypoin"} & set(seen), seen


def test_the_agent_sandbox_runtime_contract_answers_on_the_pods_port(container):
    status, body = http(container, "POST", "/execute", {"command": "echo hello; id -u"})
    assert status == 200 and body == {"stdout": "hello\n1000\n", "stderr": "", "exit_code": 0}, body


def test_server_info_through_the_pods_port_says_what_the_pod_cannot_do(container):
    """The pod's nsboxd says it runs in userns mode on the pod's 65536 ids and
    that it cannot limit each sandbox without a delegated cgroup."""
    status, info = http(container, "POST", "/v1/rpc/server.info", {})
    assert status == 200, info
    assert info["uid_isolation"] == "userns" and info["per_sandbox_host_ranges"] is False
    assert info["userns"]["delegated_ids"] == USERNS_IDS
    assert info["limits"] == "limits-not-enforced" and info["limits_reason"]
    assert "network" in {u["feature"] for u in info["userns"]["unavailable"]}
