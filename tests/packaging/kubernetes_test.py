#!/usr/bin/env python3
"""Static checks of the Kubernetes manifests (packaging/kubernetes/*.yaml).

No Kubernetes runs here, so the manifests are checked against what can be
known without one (docs/OPERATIONS.md, "Kubernetes", says they are untested
on a live cluster):

- every flag a container passes to a Parallax program is one that program
  accepts (its real `--help`, run from the build), and every flag its help
  marks REQUIRED is passed;
- every `$(NAME)` in the arguments is an env var of the container;
- every absolute path an argument names lies under one of the container's
  volume mounts, and each mount has a volume (or a claim template);
- the ports: `--listen` and `--http` are container ports, each Service's
  target port is a port of the pods it selects, and the agents' --coordinator
  is the coordinator Service's name and port;
- secrets: the Secrets the volumes name exist, and they are mounted with no
  permission for group or others (the programs refuse such a secret file);
- agents: the worker DaemonSet and the PS one select different node labels,
  and only the PS one passes --role ps; the coordinator is one replica.

  kubernetes_test.py SOURCE_DIR BIN_DIR   check the manifests
  kubernetes_test.py --self-test BIN_DIR  check that the checks find planted faults
"""
import copy
import glob
import os
import re
import subprocess
import sys

import yaml

PROGRAMS = ("parallax-coordinator", "parallax-agent")


def load(source_dir):
    docs = []
    for path in sorted(glob.glob(os.path.join(source_dir, "packaging/kubernetes/*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    docs.append((os.path.basename(path), doc))
    return docs


_help_cache = {}


def help_flags(bin_dir, program):
    """The flags `program --help` lists, and those it marks REQUIRED."""
    if program not in _help_cache:
        text = subprocess.run([os.path.join(bin_dir, program), "--help"], capture_output=True,
                              text=True, check=True).stdout
        flags, required = set(), set()
        for line in text.splitlines():
            # CLI11: "  -v,--verbose ..." or "  --db TEXT REQUIRED  what it is".
            m = re.match(r"\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", line)
            if m:
                flags.add(m.group(1))
                if " REQUIRED " in line.split("  ", 2)[1] + " ":
                    required.add(m.group(1))
        _help_cache[program] = (flags, required)
    return _help_cache[program]


def pod_specs(docs):
    for file, doc in docs:
        template = doc.get("spec", {}).get("template")
        if template:
            yield file, doc, template["spec"]


def check(docs, bin_dir):
    errors = []
    services = {d["metadata"]["name"]: d for _, d in docs if d.get("kind") == "Service"}
    secrets = {d["metadata"]["name"] for _, d in docs if d.get("kind") == "Secret"}
    coordinator_addresses = set()
    for svc_name, svc in services.items():
        ns = svc["metadata"].get("namespace", "default")
        for p in svc["spec"]["ports"]:
            coordinator_addresses.add("%s.%s.svc:%d" % (svc_name, ns, p["port"]))
    roles = {}
    for file, doc, spec in pod_specs(docs):
        where = "%s: %s %s" % (file, doc["kind"], doc["metadata"]["name"])
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for t in doc["spec"].get("volumeClaimTemplates", []):
            volumes[t["metadata"]["name"]] = {"claim": True}
        for v in volumes.values():
            if "secret" in v:
                if v["secret"]["secretName"] not in secrets:
                    errors.append("%s: volume names Secret %s, which no manifest makes"
                                  % (where, v["secret"]["secretName"]))
                if v["secret"].get("defaultMode", 0o644) & 0o077:
                    errors.append("%s: Secret %s is mounted readable by group or others (mode "
                                  "%o); the programs refuse such a secret file"
                                  % (where, v["secret"]["secretName"], v["secret"]["defaultMode"]))
        for c in spec["containers"]:
            program = os.path.basename(c["command"][0])
            if program not in PROGRAMS:
                errors.append("%s: container %s runs %s, not a Parallax daemon" %
                              (where, c["name"], program))
                continue
            flags, required = help_flags(bin_dir, program)
            args = c.get("args", [])
            passed = {a.split("=")[0] for a in args if a.startswith("--")}
            for flag in sorted(passed - flags):
                errors.append("%s: %s has no flag %s (see %s --help)" %
                              (where, program, flag, program))
            for flag in sorted(required - passed):
                errors.append("%s: %s needs %s, which the manifest does not pass" %
                              (where, program, flag))
            value = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
            env = {e["name"] for e in c.get("env", [])}
            for a in args:
                for name in re.findall(r"\$\((\w+)\)", a):
                    if name not in env:
                        errors.append("%s: argument %s uses $(%s), not an env var of the "
                                      "container" % (where, a, name))
            mounts = c.get("volumeMounts", [])
            for m in mounts:
                if m["name"] not in volumes:
                    errors.append("%s: mount %s has no volume" % (where, m["name"]))
            for a in args:
                if a.startswith("/") and not any(
                        a == m["mountPath"] or a.startswith(m["mountPath"].rstrip("/") + "/")
                        for m in mounts):
                    errors.append("%s: %s is under no volume mount of the container" %
                                  (where, a))
            ports = {p["containerPort"] for p in c.get("ports", [])}
            names = {p.get("name") for p in c.get("ports", [])}
            for flag in ("--listen", "--http"):
                if flag in value and int(value[flag].rsplit(":", 1)[1]) not in ports:
                    errors.append("%s: %s %s is not a containerPort" % (where, flag, value[flag]))
            if program == "parallax-agent":
                if value.get("--coordinator") not in coordinator_addresses:
                    errors.append("%s: --coordinator %s is no Service's name and port (%s)" %
                                  (where, value.get("--coordinator"),
                                   ", ".join(sorted(coordinator_addresses))))
                roles[doc["metadata"]["name"]] = (value.get("--role", "worker"),
                                                  spec.get("nodeSelector", {}).get(
                                                      "parallax.io/role"))
            else:
                if doc["spec"].get("replicas") != 1:
                    errors.append("%s: the coordinator must be one replica (one SQLite writer)"
                                  % where)
            labels = doc["spec"]["template"]["metadata"]["labels"]
            for svc_name, svc in services.items():
                if all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()):
                    for p in svc["spec"]["ports"]:
                        target = p.get("targetPort", p["port"])
                        if target not in ports and target not in names:
                            errors.append("%s: Service %s's port %s is no port of the pod" %
                                          (where, svc_name, target))
    if sorted(r for r, _ in roles.values()) != ["ps", "worker"]:
        errors.append("expected one worker and one PS agent DaemonSet, got roles %s" % roles)
    for name, (role, label) in roles.items():
        if label != role:
            errors.append("DaemonSet %s: --role %s on nodes labelled parallax.io/role=%s" %
                          (name, role, label))
    return errors


def containers(docs, program):
    for _, _, spec in pod_specs(docs):
        for c in spec["containers"]:
            if os.path.basename(c["command"][0]) == program:
                yield c


def self_test(source_dir, bin_dir):
    """Each planted fault is found."""
    base = load(source_dir)
    assert check(base, bin_dir) == [], check(base, bin_dir)

    def planted(mutate, expect):
        docs = copy.deepcopy(base)
        mutate(docs)
        errors = check(docs, bin_dir)
        assert any(expect in e for e in errors), (expect, errors)

    def bad_flag(docs):
        next(containers(docs, "parallax-agent"))["args"].append("--no-such-flag")
    planted(bad_flag, "has no flag --no-such-flag")

    def drop_required(docs):
        c = next(containers(docs, "parallax-agent"))
        i = c["args"].index("--workdir")
        del c["args"][i:i + 2]
    planted(drop_required, "needs --workdir")

    def unmounted(docs):
        c = next(containers(docs, "parallax-coordinator"))
        c["args"][c["args"].index("--db") + 1] = "/nowhere/state.db"
    planted(unmounted, "/nowhere/state.db is under no volume mount")

    def wrong_port(docs):
        c = next(containers(docs, "parallax-coordinator"))
        c["args"][c["args"].index("--listen") + 1] = "0.0.0.0:7999"
    planted(wrong_port, "--listen 0.0.0.0:7999 is not a containerPort")

    def open_secret(docs):
        for _, _, spec in pod_specs(docs):
            for v in spec.get("volumes", []):
                if "secret" in v:
                    v["secret"]["defaultMode"] = 0o444
    planted(open_secret, "readable by group or others")

    def wrong_coordinator(docs):
        c = next(containers(docs, "parallax-agent"))
        c["args"][c["args"].index("--coordinator") + 1] = "coordinator:7070"
    planted(wrong_coordinator, "--coordinator coordinator:7070 is no Service")

    def undefined_env(docs):
        c = next(containers(docs, "parallax-agent"))
        c["args"][c["args"].index("--name") + 1] = "$(HOSTNAME_TYPO)"
    planted(undefined_env, "uses $(HOSTNAME_TYPO)")
    print("self-test: every planted fault found")


def main():
    if sys.argv[1] == "--self-test":
        source_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
        self_test(source_dir, sys.argv[2])
        return 0
    docs = load(sys.argv[1])
    if len(docs) < 5:
        print("expected the namespace, 2 secrets, the coordinator's Service and StatefulSet and "
              "2 DaemonSets; found %d documents" % len(docs))
        return 1
    errors = check(docs, sys.argv[2])
    for e in errors:
        print(e)
    print("%d manifests checked, %d problems" % (len(docs), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
