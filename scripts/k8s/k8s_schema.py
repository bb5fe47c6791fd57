"""Offline validation of Kubernetes objects against the Kubernetes API schema.

No API server is needed (kubectl's --validate and even its client-side dry
run ask one for discovery and for the OpenAPI document). The schema is the
one Debian's python3-kubernetes package carries: its model classes
(kubernetes.client.models, 22.6.0 = the Kubernetes 1.22 API) are generated
from the Kubernetes OpenAPI specification, and each class keeps that
definition's fields (attribute_map: field -> attribute), their types
(openapi_types: 'str', 'int', 'bool', 'list[V1Container]',
'dict(str, str)', 'object' for int-or-string and free-form values, or
another model) and its required fields (the constructor refuses None for
them). check_schema() walks an object with those: an unknown field, a value
of the wrong type, a missing required field, or an apiVersion/kind that the
API does not serve is an error. What the schema does not say but the API
server refuses is checked by check_api_rules(): names, port names, label
selectors against the template's labels, references from volumeMounts and
probes, enumerations of the fields these manifests use, requests <= limits,
Secret data in base64, downward-API field paths.

Errors are strings "FILE: KIND/NAME: PATH: what is wrong". Nothing is
printed here; the caller reports. Not thread-safe (a module cache).
"""

import base64
import binascii
import os
import re

import yaml
import kubernetes.client as kclient
from kubernetes.client import models as kmodels

SCHEMA_SOURCE = "python3-kubernetes %s (Kubernetes 1.22 API)" % getattr(
    __import__("kubernetes"), "__version__", "?")

_CONFIG = kclient.Configuration()
_CONFIG.client_side_validation = True
_REQUIRED_RE = re.compile(r"Invalid value for `(\w+)`, must not be `None`")
_QUANTITY_MAPS = {"limits", "requests", "capacity", "hard"}
_PRIMITIVES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
               "datetime": (str,), "date": (str,)}


class Doc:
    """One object of a manifest file: where it came from and its content."""

    def __init__(self, source, obj):
        self.source = source
        self.obj = obj

    @property
    def kind(self):
        return self.obj.get("kind", "?") if isinstance(self.obj, dict) else "?"

    @property
    def name(self):
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        return meta.get("name", "?") if isinstance(meta, dict) else "?"

    def where(self):
        return "%s: %s/%s" % (self.source, self.kind, self.name)


# ----------------------------------------------------------------------------
# Loading


def load_file(path):
    """Every non-empty YAML document of a file, as Docs."""
    with open(path) as f:
        objs = list(yaml.safe_load_all(f))
    return [Doc(path, o) for o in objs if o is not None]


def _merge(base, patch):
    """A strategic merge patch as kustomize applies it to these objects: maps
    merge key by key, anything else (lists included) is replaced."""
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return patch
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merge(base.get(k), v) if k in base else v
    return out


def load_kustomization(directory):
    """The objects `kubectl kustomize DIRECTORY` renders, for the subset of
    kustomize these manifests use (resources: files and directories;
    patches: path). Raises ValueError on anything else, rather than render
    something else than kubectl would."""
    path = os.path.join(directory, "kustomization.yaml")
    with open(path) as f:
        k = yaml.safe_load(f) or {}
    unsupported = set(k) - {"apiVersion", "kind", "resources", "patches"}
    if unsupported:
        raise ValueError("%s: fields this checker does not render: %s" % (path, ", ".join(sorted(unsupported))))
    docs = []
    for r in k.get("resources", []):
        full = os.path.normpath(os.path.join(directory, r))
        docs.extend(load_kustomization(full) if os.path.isdir(full) else load_file(full))
    for p in k.get("patches", []):
        if set(p) != {"path"}:
            raise ValueError("%s: only 'patches: - path: FILE' is supported, got %s" % (path, p))
        for patch in load_file(os.path.join(directory, p["path"])):
            target = [d for d in docs if (d.kind, d.name) == (patch.kind, patch.name)]
            if len(target) != 1:
                raise ValueError("%s: patch %s/%s matches %d objects" % (path, patch.kind, patch.name, len(target)))
            target[0].obj = _merge(target[0].obj, patch.obj)
    return docs


# ----------------------------------------------------------------------------
# The OpenAPI schema (python3-kubernetes models)


def model_for(api_version, kind):
    """The model class of a top-level object, or None when the API serves no
    such kind at that group/version (the client has no create_* call for it)."""
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    group, _, version = api_version.rpartition("/")
    group_part = "".join(p.capitalize() for p in group.replace(".k8s.io", "").split(".")) if group else "Core"
    api = getattr(kclient, "%s%sApi" % (group_part, version.capitalize()), None)
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()
    if api is None or not (hasattr(api, "create_namespaced_" + snake) or hasattr(api, "create_" + snake)):
        return None
    return getattr(kmodels, version.capitalize() + kind, None)


def _type_name(v):
    return {dict: "a map", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _check_value(v, typ, path, errors, quantity=False):
    if typ.startswith("list["):
        if not isinstance(v, list):
            errors.append("%s: expected a list, got %s" % (path, _type_name(v)))
            return
        for i, item in enumerate(v):
            _check_value(item, typ[5:-1], "%s[%d]" % (path, i), errors)
    elif typ.startswith("dict("):
        if not isinstance(v, dict):
            errors.append("%s: expected a map, got %s" % (path, _type_name(v)))
            return
        inner = typ[typ.index(",") + 1:-1].strip()
        for key, item in v.items():
            if quantity and isinstance(item, (int, float)) and not isinstance(item, bool):
                continue  # a Quantity may be written as a number
            _check_value(item, inner, "%s.%s" % (path, key), errors)
    elif typ == "object":
        return  # int-or-string, raw extensions: any JSON value
    elif typ in _PRIMITIVES:
        if not isinstance(v, _PRIMITIVES[typ]) or (typ != "bool" and isinstance(v, bool)):
            errors.append("%s: expected %s, got %s %r" % (path, typ, _type_name(v), v))
    else:
        check_object(v, getattr(kmodels, typ), path, errors)


def _missing_required(cls, present):
    """The required fields of cls that `present` (attribute -> value) lacks."""
    given, missing = dict(present), []
    for _ in range(len(cls.openapi_types) + 1):
        try:
            cls(local_vars_configuration=_CONFIG, **given)
            return missing
        except ValueError as e:
            m = _REQUIRED_RE.search(str(e))
            if not m or m.group(1) in given:
                return missing + ["(%s)" % e]
            missing.append(m.group(1))
            given[m.group(1)] = ""
    return missing


def check_object(obj, cls, path, errors):
    """Appends to errors what is wrong with obj as an instance of model cls."""
    if not isinstance(obj, dict):
        errors.append("%s: expected a %s map, got %s" % (path, cls.__name__, _type_name(obj)))
        return
    by_field = {field: attr for attr, field in cls.attribute_map.items()}
    present = {}
    for field, v in obj.items():
        attr = by_field.get(field)
        if attr is None:
            errors.append("%s: unknown field '%s' (%s has %s)" % (
                path, field, cls.__name__, ", ".join(sorted(by_field))))
            continue
        present[attr] = v
        _check_value(v, cls.openapi_types[attr], "%s.%s" % (path, field), errors, quantity=field in _QUANTITY_MAPS)
    for attr in _missing_required(cls, present):
        errors.append("%s: missing required field '%s'" % (path, cls.attribute_map.get(attr, attr)))


def check_schema(doc):
    """Schema errors of one top-level object."""
    obj = doc.obj
    if not isinstance(obj, dict):
        return ["%s: not a map" % doc.source]
    cls = model_for(obj.get("apiVersion"), obj.get("kind"))
    if cls is None:
        return ["%s: apiVersion %r kind %r is not served by the Kubernetes API (%s)" % (
            doc.where(), obj.get("apiVersion"), obj.get("kind"), SCHEMA_SOURCE)]
    errors = []
    check_object(obj, cls, doc.kind, errors)
    return ["%s: %s" % (doc.where(), e) for e in errors]


# ----------------------------------------------------------------------------
# What the API server refuses beyond the schema (k8s.io/apimachinery and
# pkg/apis/core/validation), for the fields these manifests use.

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_FIELD_PATHS = re.compile(r"^(metadata\.(name|namespace|uid|labels|annotations)|metadata\.(labels|annotations)\['[^']+'\]"
                          r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|podIP|podIPs))$")
_ENUMS = {  # (kind or "*", dotted path without list indices) -> allowed values
    ("*", "imagePullPolicy"): {"Always", "IfNotPresent", "Never"},
    ("*", "protocol"): {"TCP", "UDP", "SCTP"},
    ("*", "accessModes"): {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"},
    ("*", "seccompProfile.type"): {"RuntimeDefault", "Unconfined", "Localhost"},
    ("*", "emptyDir.medium"): {"", "Memory", "HugePages"},
    ("Deployment", "spec.strategy.type"): {"Recreate", "RollingUpdate"},
    ("StatefulSet", "spec.podManagementPolicy"): {"OrderedReady", "Parallel"},
    ("Job", "spec.completionMode"): {"NonIndexed", "Indexed"},
    ("Service", "spec.type"): {"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"},
}
_QUANTITY = re.compile(r"^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}


def quantity(q):
    """A Kubernetes quantity ("500m", "2Gi", 1) as a number; None if not one."""
    m = _QUANTITY.match(str(q))
    return float(m.group(1)) * _SCALE[m.group(2)] if m else None


def iana_svc_name(name):
    """A port name: at most 15 characters, lower-case letters, digits and
    single dashes inside, at least one letter."""
    return (isinstance(name, str) and 0 < len(name) <= 15 and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) is not None
            and re.search(r"[a-z]", name) is not None)


def pod_template(obj):
    """(labels of the pod template, pod spec) of a workload or a Pod; None otherwise."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return (obj.get("metadata") or {}).get("labels") or {}, spec
    if obj.get("kind") in ("Deployment", "StatefulSet", "Job", "ReplicaSet", "DaemonSet"):
        t = spec.get("template") or {}
        return (t.get("metadata") or {}).get("labels") or {}, t.get("spec") or {}
    return None


def _walk(v, path=""):
    """(dotted path without list indices, value) of every node."""
    yield path, v
    if isinstance(v, dict):
        for k, item in v.items():
            yield from _walk(item, "%s.%s" % (path, k) if path else k)
    elif isinstance(v, list):
        for item in v:
            yield from _walk(item, path)


def _check_enums(obj):
    errors = []
    for path, v in _walk(obj):
        for (kind, suffix), allowed in _ENUMS.items():
            anywhere = kind == "*" and (path == suffix or path.endswith("." + suffix))
            if anywhere or (kind == obj.get("kind") and path == suffix):
                for item in (v if isinstance(v, list) else [v]):
                    if item not in allowed:
                        errors.append("%s: %r is not one of %s" % (path, item, ", ".join(sorted(allowed))))
    return errors


def _check_names(obj):
    meta = obj.get("metadata") or {}
    name, errors = meta.get("name"), []
    rule = _DNS_1035 if obj.get("kind") == "Service" else _DNS_SUBDOMAIN
    if not isinstance(name, str) or not rule.match(name) or len(name) > (63 if rule is _DNS_1035 else 253):
        errors.append("metadata.name %r is not a valid %s name" % (name, obj.get("kind")))
    for key, value in ((meta.get("labels") or {}).items()):
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            errors.append("metadata.labels.%s: %r is not a valid label value" % (key, value))
    return errors


def _check_selector(obj, labels):
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Job" and not spec.get("manualSelector"):
        return ["spec.selector: set by the Job controller; leave it out"] if "selector" in spec else []
    want = ((spec.get("selector") or {}).get("matchLabels")) or {}
    if not want:
        return ["spec.selector.matchLabels: empty"]
    wrong = {k: v for k, v in want.items() if labels.get(k) != v}
    return ["spec.selector.matchLabels %s does not match the template's labels %s" % (wrong, labels)] if wrong else []


def _check_container(c, volume_names):
    errors, where = [], "container %s" % c.get("name")
    if not _DNS_LABEL.match(str(c.get("name"))):
        errors.append("%s: name is not a DNS label" % where)
    ports = c.get("ports") or []
    names = [p.get("name") for p in ports if "name" in p]
    errors += ["%s: port name %r is not a valid port name (15 characters, a-z 0-9 -)" % (where, n)
               for n in names if not iana_svc_name(n)]
    if len(set(names)) != len(names):
        errors.append("%s: duplicate port names %s" % (where, names))
    errors += ["%s: containerPort %r not in 1..65535" % (where, p.get("containerPort"))
               for p in ports if not 0 < p.get("containerPort", 0) < 65536]
    errors += ["%s: volumeMount %r names no volume" % (where, m.get("name"))
               for m in c.get("volumeMounts") or [] if m.get("name") not in volume_names]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        port = ((c.get(probe) or {}).get("tcpSocket") or (c.get(probe) or {}).get("httpGet") or {}).get("port")
        if isinstance(port, str) and port not in names:
            errors.append("%s: %s port %r is not one of its port names %s" % (where, probe, port, names))
    res = c.get("resources") or {}
    for r, limit in (res.get("limits") or {}).items():
        req = (res.get("requests") or {}).get(r)
        if req is not None and quantity(req) is not None and quantity(limit) is not None and quantity(req) > quantity(limit):
            errors.append("%s: requests.%s %s is over limits.%s %s" % (where, r, req, r, limit))
    for e in c.get("env") or []:
        path = (((e.get("valueFrom") or {}).get("fieldRef")) or {}).get("fieldPath")
        if path is not None and not _FIELD_PATHS.match(path):
            errors.append("%s: env %s: fieldPath %r is not one the downward API serves" % (where, e.get("name"), path))
    return errors


def _check_pod(obj, labels, spec):
    errors = _check_selector(obj, labels) if obj.get("kind") != "Pod" else []
    volumes = [v.get("name") for v in spec.get("volumes") or []]
    if len(set(volumes)) != len(volumes):
        errors.append("volumes: duplicate names %s" % volumes)
    claims = [((t.get("metadata") or {}).get("name")) for t in (obj.get("spec") or {}).get("volumeClaimTemplates") or []]
    for v in spec.get("volumes") or []:
        mode = (v.get("secret") or v.get("configMap") or {}).get("defaultMode")
        if mode is not None and not 0 <= mode <= 0o777:
            errors.append("volume %s: defaultMode %r not in 0..0777" % (v.get("name"), mode))
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    for c in containers:
        errors += _check_container(c, set(volumes) | set(claims))
    restart = spec.get("restartPolicy", "Always")
    allowed = {"Job": {"Never", "OnFailure"}, "Pod": {"Always", "Never", "OnFailure"}}.get(obj.get("kind"), {"Always"})
    if restart not in allowed:
        errors.append("spec.restartPolicy %r: a %s allows %s" % (restart, obj.get("kind"), ", ".join(sorted(allowed))))
    return errors


def _check_service(obj):
    spec, errors = obj.get("spec") or {}, []
    ports = spec.get("ports") or []
    names = [p.get("name") for p in ports]
    if len(ports) > 1 and (None in names or len(set(names)) != len(names)):
        errors.append("spec.ports: with several ports each needs its own name, got %s" % names)
    errors += ["spec.ports: targetPort %r is not a valid port name" % p["targetPort"]
               for p in ports if isinstance(p.get("targetPort"), str) and not iana_svc_name(p["targetPort"])]
    return errors


def _check_secret(obj):
    errors = []
    for key, value in (obj.get("data") or {}).items():
        try:
            base64.b64decode(str(value), validate=True)
        except binascii.Error:
            errors.append("data.%s: not base64" % key)
    return errors


def check_api_rules(doc):
    """What the API server would refuse in one object beyond the schema.
    Requires an object that check_schema() passed (it relies on the types)."""
    obj = doc.obj
    errors = _check_names(obj) + _check_enums(obj)
    tmpl = pod_template(obj)
    if tmpl is not None:
        errors += _check_pod(obj, *tmpl)
    if obj.get("kind") == "Service":
        errors += _check_service(obj)
    if obj.get("kind") == "Secret":
        errors += _check_secret(obj)
    if obj.get("kind") == "Job" and (obj.get("spec") or {}).get("completionMode") == "Indexed" \
            and "completions" not in (obj.get("spec") or {}):
        errors.append("spec.completions: an Indexed Job needs it")
    return ["%s: %s" % (doc.where(), e) for e in errors]
