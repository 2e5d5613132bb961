"""The CUDA -> MUSA mapping table (``cuda_mapping.yaml``), loaded once and compiled.

The same table drives the static converter (``utils/musa_converter``, a tool)
and ``torch_musa.cuda_compat`` (a subsystem), so it sits below both, as data:
it imports nothing from torch_musa and needs only PyYAML and the standard library.
Its ``env:`` section is also the configuration's table of CUDA twins
(``torch_musa.config.variables.read_env_table`` reads that section alone).
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

import yaml

TABLE_PATH = os.path.join(os.path.dirname(__file__), "cuda_mapping.yaml")

# An identifier character: word boundaries are "not preceded/followed by one".
_W = r"A-Za-z0-9_"
_LEFT = re.compile(r"[A-Za-z0-9_]+\Z")
_RIGHT = re.compile(r"[A-Za-z0-9_]*")
_CU_SRC = re.compile(r"\.cuh?(?![A-Za-z0-9_])")
_TRITON = re.compile(r"[ \t]*(?:import|from)[ \t]+triton\b")


def _bounded(alternatives: list[str]) -> str:
    alts = "|".join(re.escape(a) for a in sorted(alternatives, key=len, reverse=True))
    return rf"(?<![{_W}])(?:{alts})(?![{_W}])"


@dataclass(frozen=True)
class ReviewItem:
    id: str
    title: str
    runtime: str
    converter: str
    kind: str
    detect: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Table:
    version: str
    raw: dict
    # python
    dotted: dict[str, str]
    calls: dict[str, dict]          # keyed by the name as it reads after `dotted` rules
    decorators: dict[str, str]      # same keying
    methods: dict[str, str]
    attributes: dict[str, str]
    imports: dict[str, dict]
    string_rules: list[tuple[str, re.Pattern, str]]
    string_token_re: re.Pattern | None
    string_tokens: dict[str, str]
    comment_token_re: re.Pattern | None
    comment_tokens: dict[str, str]
    env: dict[str, str]
    backends: dict[str, str]
    devices: dict[str, str]
    trigger_re: re.Pattern
    trigger_plain: tuple[str, ...]   # fast substring pre-check: no hit without one of these
    trigger_words: frozenset
    # c
    c_extensions: dict[str, str]
    c_sources: tuple[str, ...]
    c_headers: dict[str, str]
    c_symbols: dict[str, tuple[str, str]]   # name -> (replacement, rule id)
    c_prefix_re: re.Pattern
    c_prefixes: list[tuple[str, str, str]]  # (from, to, rule id) in regex group order
    c_symbol_re: re.Pattern
    review: list[ReviewItem]

    def find_hits(self, source: str) -> list[tuple[int, int]]:
        """Sorted (start, end) offsets of trigger words (whole identifiers)
        and patterns in ``source``: the pre-filter. Uses substring search
        for a few anchors (C speed) instead of one big regex."""
        words = self.trigger_words
        out = set()
        n = len(source)
        for a in self.trigger_plain:
            i = source.find(a)
            while i != -1:
                if a == ".cu":
                    m = _CU_SRC.match(source, i)
                    if m:
                        out.add((i, m.end()))
                    i = source.find(a, i + 3)
                    continue
                left = _LEFT.search(source, max(0, i - 80), i)
                l = left.start() if left else i
                r = _RIGHT.match(source, i + len(a)).end() if i + len(a) < n else n
                if a == "triton":
                    ls = source.rfind("\n", 0, i) + 1
                    if _TRITON.match(source, ls) and source[l:r] == "triton":
                        out.add((l, r))
                elif source[l:r] in words:
                    out.add((l, r))
                i = source.find(a, r)
        return sorted(out)

    def apply_dotted(self, name: str) -> str:
        """``name`` as it reads after the dotted rules (longest matching prefix)."""
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head in self.dotted:
                return ".".join([self.dotted[head]] + parts[i:])
        return name


@functools.lru_cache(maxsize=None)
def load_table(path: str = TABLE_PATH) -> Table:
    with open(path, encoding="utf-8") as f:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        raw = yaml.load(f, Loader=loader)
    py = raw["python"]
    dotted = dict(py["dotted"])
    pre = lambda n: _apply_prefix(dotted, n)  # noqa: E731
    calls = {pre(k): dict(v, source=k) for k, v in py["calls"].items()}
    string_rules = [(r["id"], re.compile(r["pattern"]), r["to"]) for r in py["strings"]]
    env = dict(raw["env"])
    string_tokens = {**env, **py.get("string_tokens", {})}
    comment_tokens = {**env, **py.get("comment_tokens", {})}

    c = raw["c"]
    symbols: dict[str, tuple[str, str]] = {k: (v, "c.symbol") for k, v in c["symbols"].items()}
    prefixes: list[tuple[str, str, str]] = []
    prefix_parts = []
    for fam in c["families"]:
        for n in fam["names"]:
            symbols.setdefault(fam["from"] + n, (fam["to"] + n, "c." + fam["id"]))
        prefixes.append((fam["from"], fam["to"], "c." + fam["id"] + ".prefix"))
        nxt = fam.get("next", "[A-Z]")
        prefix_parts.append(rf"(?<![{_W}]){re.escape(fam['from'])}(?={nxt})[{_W}]*")
    # One pass: explicit symbols first (namespaced ones contain `::`), then prefixes.
    sym_alts = sorted(symbols, key=len, reverse=True)
    sym_re = "|".join(
        rf"(?<![{_W}:]){re.escape(s)}(?![{_W}])" if "::" in s else rf"(?<![{_W}]){re.escape(s)}(?![{_W}])"
        for s in sym_alts
    )
    c_symbol_re = re.compile(sym_re)
    c_prefix_re = re.compile("|".join(f"({p})" for p in prefix_parts))

    review = []
    for item in raw["review"]:
        det = dict(item.get("detect") or {"kind": "none"})
        review.append(ReviewItem(item["id"], item["title"], item["runtime"], item["converter"],
                                 det.get("kind", "none"), det))

    words = set(py["trigger_words"]) | set(env)
    anchors = words | {".cu", "triton"}
    trigger_plain = tuple(sorted(w for w in anchors if not any(o != w and o in w for o in anchors)))
    trigger_re = re.compile("|".join([_bounded(sorted(words))] + list(py["trigger_patterns"])),
                            re.M)

    return Table(
        version=str(raw["version"]),
        raw=raw,
        dotted=dotted,
        calls=calls,
        decorators={pre(k): v for k, v in py.get("decorators", {}).items()},
        methods=dict(py["methods"]),
        attributes=dict(py["attributes"]),
        imports={k: dict(v) for k, v in py["imports"].items()},
        string_rules=string_rules,
        string_token_re=re.compile(_bounded(list(string_tokens))) if string_tokens else None,
        string_tokens=string_tokens,
        comment_token_re=re.compile(_comment_pattern(list(comment_tokens))) if comment_tokens else None,
        comment_tokens=comment_tokens,
        env=env,
        backends=dict(raw["backends"]),
        devices=dict(raw["devices"]),
        trigger_re=trigger_re,
        trigger_plain=trigger_plain,
        trigger_words=frozenset(words),
        c_extensions=dict(c["extensions"]),
        c_sources=tuple(c["sources"]),
        c_headers=dict(c["headers"]),
        c_symbols=symbols,
        c_prefix_re=c_prefix_re,
        c_prefixes=prefixes,
        c_symbol_re=c_symbol_re,
        review=review,
    )


def _apply_prefix(dotted: dict[str, str], name: str) -> str:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in dotted:
            return ".".join([dotted[head]] + parts[i:])
    return name


def _comment_pattern(tokens: list[str]) -> str:
    # Tokens may start/end with punctuation (".cuda()"): only bound the word ends.
    alts = []
    for t in sorted(tokens, key=len, reverse=True):
        left = rf"(?<![{_W}])" if re.match(rf"[{_W}]", t[0]) else ""
        right = rf"(?![{_W}])" if re.match(rf"[{_W}]", t[-1]) else ""
        alts.append(left + re.escape(t) + right)
    return "|".join(alts)


def review_items() -> list[ReviewItem]:
    """The shared list of what neither the converter nor cuda_compat can fix."""
    return list(load_table().review)
