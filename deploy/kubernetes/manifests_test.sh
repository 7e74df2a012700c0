#!/bin/sh
# Parses deploy/kubernetes/*.yaml and checks what docs/OPERATIONS.md and
# deploy/kubernetes/README.md promise of them: the DaemonSet in the node's
# PID and network namespaces (lineage works there), the sidecar sharing the
# pod's PID namespace and the socket with the runner, lineage off.
set -eu
# Under bazel test the manifests are runfiles; run by hand, they sit next to
# this script.
if [ -n "${TEST_SRCDIR:-}" ]; then
  dir="$TEST_SRCDIR/${TEST_WORKSPACE:-runreaper}/deploy/kubernetes"
else
  dir="$(dirname "$0")"
fi
exec python3 - "$dir" <<'PY'
import glob, os, sys
import yaml

d = sys.argv[1]
docs = {}
for path in sorted(glob.glob(os.path.join(d, "*.yaml"))):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            assert isinstance(doc, dict) and "kind" in doc, path
            docs.setdefault(os.path.basename(path), []).append(doc)

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

ds = [x for x in docs["daemonset.yaml"] if x["kind"] == "DaemonSet"][0]
spec = ds["spec"]["template"]["spec"]
if spec.get("hostPID") is not True: fail("DaemonSet without hostPID")
if spec.get("hostNetwork") is not True:
    fail("DaemonSet without hostNetwork (the proc connector needs it)")

pod = [x for x in docs["runner-sidecar.yaml"] if x["kind"] == "Pod"][0]
spec = pod["spec"]
if spec.get("shareProcessNamespace") is not True:
    fail("sidecar pod without shareProcessNamespace")
if spec.get("hostPID") or spec.get("hostNetwork"):
    fail("the sidecar must not need node namespaces")
containers = {c["name"]: c for c in spec["containers"]}
if set(containers) != {"runner", "runreaperd"}: fail(sorted(containers))
def mount(c, vol):
    return [m["mountPath"] for m in c.get("volumeMounts", []) if m["name"] == vol]
if mount(containers["runner"], "socket") != mount(containers["runreaperd"], "socket"):
    fail("runner and runreaperd do not share the socket directory")
args = containers["runreaperd"]["args"]
sock = [a.split("=", 1)[1] for a in args if a.startswith("--socket=")][0]
shared = mount(containers["runreaperd"], "socket")[0]
# An emptyDir is 0777, which runreaperd refuses as the socket's directory:
# the socket goes in a directory runreaperd makes inside it, which the
# runner cannot rename (its mount is read-only).
if os.path.dirname(os.path.dirname(sock)) != shared:
    fail("--socket is not in a directory of its own inside the shared one")
if not all(m.get("readOnly") for m in containers["runner"]["volumeMounts"]
           if m["name"] == "socket"):
    fail("the runner may write the socket's volume")
env = {e["name"]: e["value"] for e in containers["runner"].get("env", [])}
if env.get("RUNREAPER_SOCKET") != sock: fail("the runner's RUNREAPER_SOCKET is not --socket")
probe = containers["runreaperd"]["readinessProbe"]["exec"]["command"]
if "--socket=" + sock not in probe: fail("the readiness probe asks another socket")
if "--lineage=false" not in args: fail("sidecar without --lineage=false")
if containers["runreaperd"].get("securityContext", {}).get("privileged"):
    fail("the sidecar should not need privileged")
print("ok:", ", ".join(sorted(docs)))
PY
