"""The libcst rewriter: the mapping table's rules on a concrete syntax tree
(names, attributes, calls, strings, f-strings, comments), everything else kept
byte for byte; and the string rules it shares with the fast path."""
from __future__ import annotations

import functools
import re
from collections import Counter

import libcst as cst

from torch_musa.cuda_mapping import Table
from torch_musa.utils.musa_converter.python_rewriter.comments import comment_text


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


@functools.lru_cache(maxsize=256)
def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


_STR_PREFIX = re.compile(r"^([A-Za-z]*)('''|\"\"\"|'|\")")


# Calls whose string arguments are path parts, and the rules that still apply there: the
# converter renames .cu files but no folder, so os.path.join(src, "cuda") must keep naming
# the folder "cuda" (rewritten to "musa", a setup.py's glob found no kernel source and
# the kernels dropped out of the build without an error).
_PATH_CALLS = frozenset({"join", "joinpath", "Path", "PurePath", "PosixPath", "glob", "iglob",
                         "rglob", "listdir", "scandir", "walk", "exists", "isdir", "isfile",
                         "makedirs", "mkdir", "open", "relpath", "abspath", "realpath"})
_PATH_RULES = frozenset({"string.cu-source"})


def _is_path_call(func_name: str | None) -> bool:
    return bool(func_name) and func_name.rsplit(".", 1)[-1] in _PATH_CALLS


def _string_text(t: Table, text: str, full: bool, counts: Counter, path: bool = False) -> str:
    """The string rules on a literal's text (whole-literal rules when ``full``; only the
    file-name rules when the literal is a path part, ``path``)."""
    if full:
        for rid, pat, to in t.string_rules:
            if path and rid not in _PATH_RULES:
                continue
            m = pat.fullmatch(text)
            if m:
                counts["py." + rid] += 1
                return m.expand(to)
    if t.string_token_re is not None:
        def sub(m):
            counts["py.string-token:" + m.group(0)] += 1
            return t.string_tokens[m.group(0)]
        text = t.string_token_re.sub(sub, text)
    return text


class _Rewriter(cst.CSTTransformer):
    def __init__(self, table: Table, name_map: dict[str, str]):
        super().__init__()
        self.t = table
        self.name_map = name_map
        self.counts: Counter = Counter()
        self._no_rename: set[int] = set()
        self._path_parts: set[int] = set()   # string literals that are path parts

    # -- names that must not be renamed as bare identifiers ----------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._no_rename.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._no_rename.add(id(node.keyword))

    def visit_Call(self, node: cst.Call) -> None:
        if _is_path_call(_dotted(node.func)):
            self._path_parts.update(id(a.value) for a in node.args if isinstance(a.value, cst.SimpleString))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Divide):  # pathlib: root / "cuda"
            self._path_parts.update(id(v) for v in (node.left, node.right) if isinstance(v, cst.SimpleString))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                self._no_rename.add(id(alias.name))
                if alias.asname is not None:
                    self._no_rename.add(id(alias.asname.name))

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.name_map.get(updated.value)
        if new and id(original) not in self._no_rename:
            self.counts["py.import-name:" + updated.value] += 1
            return updated.with_changes(value=new)
        return updated

    # -- dotted names and attributes ---------------------------------------
    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        name = _dotted(updated)
        source = _dotted(original)
        if source is not None and source != name and source in self.t.dotted:
            # A longer rule (torch.cuda.CUDAGraph) over a prefix already rewritten
            # (torch.cuda): the longer one wins, the prefix's rewrite is not counted.
            self._undo_dotted(source)
            name = source
        if name is not None and name in self.t.dotted:
            self.counts["py.dotted:" + name] += 1
            new = _expr(self.t.dotted[name])
            return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        attr = updated.attr.value
        if attr in self.t.attributes and not (name or "").startswith("torch."):
            self.counts["py.attribute:" + attr] += 1
            return updated.with_changes(attr=cst.Name(self.t.attributes[attr]))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        name = _dotted(func)
        rule = self.t.calls.get(name) if name else None
        if rule is not None:
            self.counts["py.call:" + rule["source"]] += 1
            self._undo_dotted(rule["source"])
            args = list(updated.args)
            names = rule.get("keywords") or ()
            for i, a in enumerate(args):
                if i < len(names) and a.keyword is None and not a.star:
                    args[i] = a.with_changes(keyword=cst.Name(names[i]),
                                             equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                                                   cst.SimpleWhitespace("")))
            if rule.get("prepend"):
                args.insert(0, cst.Arg(value=_expr(rule["prepend"])))
            for kw, value in (rule.get("keywords_add") or {}).items():
                if not any(a.keyword is not None and a.keyword.value == kw for a in args):
                    args.append(cst.Arg(value=_expr(value), keyword=cst.Name(kw),
                                        equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                                              cst.SimpleWhitespace(""))))

            return updated.with_changes(func=_expr(rule["to"]), args=args)
        if isinstance(func, cst.Attribute) and func.attr.value in self.t.methods:
            if not (name or "").startswith("torch."):
                self.counts["py.method:" + func.attr.value] += 1
                return updated.with_changes(
                    func=func.with_changes(attr=cst.Name(self.t.methods[func.attr.value])))
        return updated

    def leave_Decorator(self, original: cst.Decorator, updated: cst.Decorator):
        name = _dotted(updated.decorator)
        new = self.t.decorators.get(name) if name else None
        if new is None:
            return updated
        src = next(k for k, v in self.t.raw["python"]["decorators"].items() if v == new)
        self.counts["py.decorator:" + src] += 1
        self._undo_dotted(src)
        return updated.with_changes(decorator=_expr(new))

    def _undo_dotted(self, source: str) -> None:
        # The callee's own dotted rewrite (torch.cuda -> torch.musa) is replaced
        # by a call/decorator rule: do not count it twice.
        parts = source.split(".")
        for i in range(1, len(parts)):
            key = "py.dotted:" + ".".join(parts[:i])
            if key[len("py.dotted:"):] in self.t.dotted and self.counts.get(key):
                self.counts[key] -= 1
                if not self.counts[key]:
                    del self.counts[key]

    # -- imports -------------------------------------------------------------
    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        if updated.relative or updated.module is None or isinstance(updated.names, cst.ImportStar):
            return updated
        module = _dotted(original.module)
        rule = self.t.imports.get(module)
        if rule is not None and all(a.name.value in rule["names"] for a in updated.names):
            names = [a.with_changes(name=cst.Name(rule["names"][a.name.value])) for a in updated.names]
            self.counts["py.import:" + module] += 1
            return updated.with_changes(module=_expr(rule["to"]), names=names)
        new_mod = _dotted(updated.module)
        names, changed = [], False
        for a in updated.names:
            full = f"{new_mod}.{a.name.value}" if isinstance(a.name, cst.Name) else None
            target = self.t.dotted.get(full) if full else None
            if target and target.rsplit(".", 1)[0] == new_mod:
                changed = True
                self.counts["py.dotted:" + full] += 1
                asname = a.asname or cst.AsName(name=cst.Name(a.name.value))
                a = a.with_changes(name=cst.Name(target.rsplit(".", 1)[1]), asname=asname)
            names.append(a)
        return updated.with_changes(names=names) if changed else updated

    # -- strings and comments ------------------------------------------------
    def _text(self, text: str, full: bool, path: bool = False) -> str:
        return _string_text(self.t, text, full, self.counts, path)

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        m = _STR_PREFIX.match(updated.value)
        if not m or "b" in m.group(1).lower():
            return updated
        pre, q = m.group(0), m.group(2)
        inner = updated.value[len(pre):len(updated.value) - len(q)]
        new = self._text(inner, full=True, path=id(original) in self._path_parts)
        return updated if new == inner else updated.with_changes(value=pre + new + q)

    def leave_FormattedString(self, original, updated: cst.FormattedString):
        parts = list(updated.parts)
        changed = False
        for i, p in enumerate(parts):
            if not isinstance(p, cst.FormattedStringText):
                continue
            # A device string built with an f-string: f"cuda:{rank}".
            lead = i == 0 and len(parts) > 1 and p.value.endswith(":")
            new = self._text(p.value, full=lead)
            if new != p.value:
                parts[i] = p.with_changes(value=new)
                changed = True
        return updated.with_changes(parts=parts) if changed else updated

    def leave_Comment(self, original: cst.Comment, updated: cst.Comment):
        new = comment_text(self.t, updated.value, self.counts)
        return updated if new == updated.value else updated.with_changes(value=new)
