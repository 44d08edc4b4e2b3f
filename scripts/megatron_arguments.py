#!/usr/bin/env python3
"""Lists the command-line arguments of Megatron-LM's pretrain_gpt.py from its sources
(megatron/training/arguments.py and the config dataclasses it turns into argument groups
through ArgumentGroupFactory), without importing Megatron (no torch needed).

  scripts/megatron_arguments.py MEGATRON_LM_CHECKOUT > /tmp/megatron_arguments.tsv

Each line: flag <TAB> nargs (0 switch, 1 value, + list, ? optional value) <TAB> dest
<TAB> the value a switch stores ("true"/"false"), for core/megatron_arguments_table.cpp."""
import ast
import sys
from pathlib import Path

root = Path(sys.argv[1])
CONFIG_FILES = [
    "megatron/core/model_parallel_config.py",
    "megatron/core/transformer/transformer_config.py",
    "megatron/training/config/common_config.py",
    "megatron/training/config/resilience_config.py",
    "megatron/training/config/training_config.py",
]


def const(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return None


classes = {}
for f in CONFIG_FILES:
    p = root / f
    if not p.exists():
        continue
    for node in ast.parse(p.read_text()).body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node


def dataclass_fields(name):
    node = classes.get(name)
    if node is None:
        return []
    out = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            out += dataclass_fields(base.id)
    for st in node.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = ast.unparse(st.annotation)
        if ann.startswith("ClassVar"):
            continue
        default, meta, init = None, None, True
        if isinstance(st.value, ast.Call) and ast.unparse(st.value.func).endswith("field"):
            for kw in st.value.keywords:
                if kw.arg == "default":
                    default = const(kw.value)
                if kw.arg == "init" and const(kw.value) is False:
                    init = False
                if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if const(k) == "argparse_meta" and isinstance(v, ast.Dict):
                            meta = {const(a): b for a, b in zip(v.keys, v.values)}
        elif st.value is not None:
            default = const(st.value)
        if init:
            out = [o for o in out if o[0] != st.target.id]
            out.append((st.target.id, ann, default, meta))
    return out


rows = {}


def add(flags, nargs, dest, stores=""):
    for f in flags:
        if f.startswith("--") and f not in rows:
            rows[f] = (nargs, dest, stores)


def factory(cls, exclude):
    for name, ann, default, meta in dataclass_fields(cls):
        if name in exclude:
            continue
        flags = ["--" + name.replace("_", "-")]
        nargs, stores = "1", ""
        if ann in ("bool", "Optional[bool]", "bool | None"):
            if default is False or default is None:
                nargs, stores = "0", "true"
            else:
                nargs, stores = "0", "false"
                flags = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
        elif ann.startswith(("list", "List", "Optional[list", "Optional[List")) or "list[" in ann:
            nargs = "+"
        if meta:
            if "arg_names" in meta and const(meta["arg_names"]):
                flags = const(meta["arg_names"])
            if "nargs" in meta:
                nargs = str(const(meta["nargs"]))
            if "action" in meta:
                act = const(meta["action"])
                if act in ("store_true", "store_false"):
                    nargs, stores = "0", "true" if act == "store_true" else "false"
                elif act is not None:
                    nargs = "1"
            if "dest" in meta and const(meta["dest"]):
                name = const(meta["dest"])
        add(flags, nargs, name, stores)


args_py = (root / "megatron/training/arguments.py").read_text()
for node in ast.walk(ast.parse(args_py)):
    if not isinstance(node, ast.Call):
        continue
    fn = ast.unparse(node.func)
    if fn.endswith(".add_argument"):
        flags = [const(a) for a in node.args if isinstance(const(a), str)]
        kw = {k.arg: k.value for k in node.keywords}
        action = const(kw["action"]) if "action" in kw else None
        nargs = "1"
        stores = ""
        if action in ("store_true", "store_false"):
            nargs, stores = "0", "true" if action == "store_true" else "false"
        elif action == "store_const":
            nargs, stores = "0", str(const(kw.get("const")))
        elif "nargs" in kw:
            n = const(kw["nargs"])
            nargs = "+" if n in ("+", "*") else ("?" if n == "?" else str(n))
        dest = const(kw["dest"]) if "dest" in kw else None
        if not dest:
            longs = [f for f in flags if f.startswith("--")]
            dest = longs[0][2:].replace("-", "_") if longs else ""
        add(flags, nargs, dest, stores)
    elif fn == "ArgumentGroupFactory":
        cls = ast.unparse(node.args[0])
        exclude = []
        for k in node.keywords:
            if k.arg == "exclude":
                v = const(k.value)
                if v is None and isinstance(k.value, ast.Name):
                    # a list assigned to a variable in the enclosing function
                    for n2 in ast.walk(ast.parse(args_py)):
                        if (isinstance(n2, ast.Assign) and len(n2.targets) == 1
                                and isinstance(n2.targets[0], ast.Name)
                                and n2.targets[0].id == k.value.id):
                            v = const(n2.value)
                exclude = v or []
        factory(cls, set(exclude))

for flag in sorted(rows):
    nargs, dest, stores = rows[flag]
    print(f"{flag}\t{nargs}\t{dest}\t{stores}")
