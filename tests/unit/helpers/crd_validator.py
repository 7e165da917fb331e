"""The CRDs' OpenAPI schemas and CEL rules mirrored in Python, to validate objects offline as the API server would."""

from __future__ import annotations

from typing import Any, Callable, Iterator
import ipaddress
import re

from metal3_ipam import crds
from metal3_ipam.poolkinds.ippool import schema as ippool_schema


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def schema_node(kind: str, path: str) -> dict[str, Any]:
    node = crds.openapi_schema(kind)
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        else:
            node = node["properties"][part]
    return node


def cel_ip(text: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Like the Kubernetes CEL ip() parser: no zones, no IPv4-mapped IPv6, no leading zeros."""
    if not isinstance(text, str) or "%" in text:
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return None
    return addr


def net(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not isinstance(text, str) or text.count("/") != 1:
        return None
    addr, bits = text.split("/")
    if cel_ip(addr) is None or not re.fullmatch(r"0|[1-9][0-9]{0,2}", bits):
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def is_ip(text: Any) -> bool:
    return cel_ip(text) is not None


def is_cidr(text: Any) -> bool:
    return net(text) is not None


_ABSENT = object()


def _get(obj: dict[str, Any], key: str) -> Any:
    return obj.get(key, _ABSENT) if isinstance(obj, dict) else _ABSENT


def same_family(a: Any, b: Any) -> bool:
    if a is _ABSENT or b is _ABSENT or not is_ip(a) or not is_ip(b):
        return True
    return cel_ip(a).version == cel_ip(b).version


def _inside(addr: Any, subnet: Any) -> bool:
    if addr is _ABSENT or subnet is _ABSENT or not is_ip(addr) or not is_cidr(subnet):
        return True
    return cel_ip(addr) in net(subnet)


def _excluded_ok(value: str) -> bool:
    if is_ip(value) or is_cidr(value):
        return True
    parts = value.split("-")
    return len(parts) == 2 and is_ip(parts[0]) and is_ip(parts[1]) and same_family(parts[0], parts[1])


def _strategy(spec: dict[str, Any]) -> str:
    return spec.get("allocationStrategy", "sequential")


# rule text -> (self, oldSelf or None) -> bool. Transition rules return True without oldSelf.
CEL_MIRRORS: dict[str, Callable[[Any, Any], bool]] = {
    "isIP(self)": lambda s, o: is_ip(s),
    "isCIDR(self)": lambda s, o: is_cidr(s),
    "self == oldSelf": lambda s, o: o is None or s == o,
    "has(self.start) || has(self.end) || has(self.subnet)": (
        lambda s, o: any(k in s for k in ("start", "end", "subnet"))
    ),
    ippool_schema.pool_entry_schema()["x-kubernetes-validations"][1]["rule"]: (
        lambda s, o: same_family(_get(s, "start"), _get(s, "end"))
    ),
    ippool_schema.pool_entry_schema()["x-kubernetes-validations"][2]["rule"]: (
        lambda s, o: _inside(_get(s, "start"), _get(s, "subnet"))
    ),
    ippool_schema.pool_entry_schema()["x-kubernetes-validations"][3]["rule"]: (
        lambda s, o: _inside(_get(s, "end"), _get(s, "subnet"))
    ),
    ippool_schema.EXCLUDED_RULE: lambda s, o: _excluded_ok(s),
    schema_node("IPPool", "spec")["x-kubernetes-validations"][0]["rule"]: (
        lambda s, o: o is None or _strategy(s) == _strategy(o)
    ),
    schema_node("IPClaim", "spec.pool")["x-kubernetes-validations"][0]["rule"]: (
        lambda s, o: o is None or all((s.get(k) or "") == (o.get(k) or "") for k in ("name", "namespace", "kind"))
    ),
}


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def validate(schema: dict[str, Any], value: Any, old: Any = None, path: str = "") -> list[str]:
    """Errors of value (and, for transition rules, old) against a CRD schema."""
    errors: list[str] = []
    node_type = schema.get("type")
    if node_type == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{path}: expected integer, got {value!r}"]
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > {schema['maximum']}")
    elif node_type in _TYPES:
        if not isinstance(value, _TYPES[node_type]):
            return [f"{path}: expected {node_type}, got {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            errors.append(f"{path}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{path}: more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            errors += validate(schema["items"], item, None, f"{path}[{i}]")
    if isinstance(value, dict):
        if len(value) > schema.get("maxProperties", len(value)):
            errors.append(f"{path}: more than {schema['maxProperties']} properties")
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}.{key}: required")
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                old_item = old.get(key) if isinstance(old, dict) else None
                errors += validate(properties[key], item, old_item, f"{path}.{key}")
            elif isinstance(extra, dict):
                errors += validate(extra, item, None, f"{path}.{key}")
            elif node_type == "object" and path != ".metadata":
                errors.append(f"{path}.{key}: unknown field")
    if not errors:
        for rule in schema.get("x-kubernetes-validations", []):
            transition = "oldSelf" in rule["rule"]
            if transition and old is None:
                continue
            if not CEL_MIRRORS[rule["rule"]](value, old if transition else None):
                errors.append(f"{path}: {rule['message']}")
    return errors


def validate_object(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    schema = crds.openapi_schema(obj["kind"])
    return validate(schema, apply_defaults(schema, obj), old and apply_defaults(schema, old))


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict) and "properties" in schema:
        value = dict(value)
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = sub["default"]
            elif key in value:
                value[key] = apply_defaults(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [apply_defaults(schema["items"], v) for v in value]
    return value
